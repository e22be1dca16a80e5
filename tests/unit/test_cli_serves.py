"""cli._serves: a command line made only of the top-level flags is parsed by the parser
without the subcommands (the start imports none of their modules) exactly as by the
whole parser; anything else goes to the whole parser."""

from __future__ import annotations

import pytest

from bigbinf import cli

SERVES = [
    [],
    ["--config.file", "report"],  # a flag's value that is also a command's name
    ["--config.file=plan-move", "--web.listen-address", "127.0.0.1:9"],
    ["--mesh.file", "m.yaml", "--site", "mesh", "--log.level", "debug"],
    ["--config.check", "--web.config.file", "w.yaml", "--web.enable-lifecycle"],
    ["--web.config.check"],
]
NOT = [
    ["report"],
    ["once"],
    ["--help"],
    ["-h"],
    ["--version"],
    ["--config.file"],  # no value: the whole parser's error
    ["--config", "x.yaml"],  # an abbreviation: argparse's business
    ["--config.file", "x.yaml", "mesh", "plan"],
]


@pytest.mark.parametrize("words", SERVES)
def test_serving_command_lines_parse_alike(words: list[str]) -> None:
    assert cli._serves(words)
    assert vars(cli.build_parser(serving=True).parse_args(words)) == vars(cli.build_parser().parse_args(words))


@pytest.mark.parametrize("words", NOT)
def test_other_command_lines_get_the_whole_parser(words: list[str]) -> None:
    assert not cli._serves(words)


def test_main_still_runs_the_other_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "plan-move" in out and "report" in out and "mesh" in out
