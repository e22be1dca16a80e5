"""The configuration examples in the docs are valid configuration.

Convention (docs/configuration.md and docs/protocols.md): a fenced block tagged
```yaml is a configuration fragment.  Laid over a minimal base (one lab remote, one
dataset) section by section, it must load with `parse_config` exactly as a file would, and
plan at least one transfer.  Anything else in YAML syntax that is not meant as
configuration goes in a block with another tag (```text).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import ConfigError, parse_config
from bigbinf.measure.plan import plan_round

DOCS = Path(__file__).resolve().parents[2] / "docs"
FILES = ("configuration.md", "protocols.md")
FENCE = re.compile(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
BASE = {
    "lab": {"name": "docs"},
    "remotes": {"lab": {"lab": True}},
    "datasets": {"f5m": {"file": "f5m.bin", "size": "5MiB"}},
    "protocols": {},
}


def yaml_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, body) of every ```yaml block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def overlay(base: dict, fragment: dict) -> dict:
    merged = dict(base)
    for key, value in fragment.items():
        merged[key] = {**base[key], **value} if isinstance(base.get(key), dict) and isinstance(value, dict) else value
    return merged


EXAMPLES = [(name, line, body) for name in FILES for line, body in yaml_blocks((DOCS / name).read_text())]


def test_the_docs_have_examples_to_check() -> None:
    # A renamed fence (```yml, ```YAML) would otherwise let every check below pass vacuously.
    counts = {name: sum(1 for n, _, _ in EXAMPLES if n == name) for name in FILES}
    assert counts["configuration.md"] >= 3 and counts["protocols.md"] >= 5, counts


def test_the_block_finder_sees_yaml_blocks_only() -> None:
    text = "a\n```yaml\nprotocols: {scp: {}}\n```\n```text\nnot: [config\n```\n```yaml\nx: 1\n```\n"
    assert yaml_blocks(text) == [(2, "protocols: {scp: {}}\n"), (8, "x: 1\n")]


def test_a_broken_example_would_be_caught() -> None:
    # The check itself can fail: an unknown option and a misspelt key are errors.
    for body in (
        "protocols:\n  gridftp-p4: {module: gridftp, options: {paralel: 4}}\n",
        'protocols:\n  http:\n    comand: [curl, "{host}"]\n',
    ):
        with pytest.raises(ConfigError):
            parse_config(yaml.safe_dump(overlay(BASE, yaml.safe_load(body))), "example")


@pytest.mark.parametrize("name,line,body", EXAMPLES, ids=[f"{n}:{line}" for n, line, _ in EXAMPLES])
def test_every_yaml_example_is_valid_configuration(name: str, line: int, body: str) -> None:
    fragment = yaml.safe_load(body)
    assert isinstance(fragment, dict), f"docs/{name}:{line}: a ```yaml block must be a mapping of config sections"
    config = parse_config(yaml.safe_dump(overlay(BASE, fragment)), f"docs/{name}:{line}")
    assert plan_round(config, lab.site(config)), f"docs/{name}:{line}: the example plans no transfer"
