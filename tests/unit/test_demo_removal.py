"""README.md's "Removing the demo" removes everything the demo leaves: every directory
scripts/demo.sh and schedules/demo.yaml make the exporter, the lab, Prometheus and
Alertmanager write (read from the configuration as the exporter reads it), and every
README section the demo's banner points at exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from bigbinf.config import capture_directory, kept_pcap_directory, load_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DEMO = (ROOT / "scripts" / "demo.sh").read_text()


def removal_section() -> str:
    return README.split("### Removing the demo\n", 1)[1].split("\n#", 1)[0]


def commands(section: str) -> list[list[str]]:
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_every_readme_section_the_demo_names_exists() -> None:
    named = re.findall(r'README\.md, "([^"]+)"', DEMO)
    assert named, "the banner names no README section"
    headings = {line.lstrip("#").strip() for line in README.splitlines() if line.startswith("#")}
    assert set(named) <= headings


def test_the_removal_lines_remove_every_path_the_demo_writes() -> None:
    config = load_config(ROOT / "schedules" / "demo.yaml")
    assert config.lab is not None
    state = Path(re.search(r"^STATE=\$\{STATE:-([^}]+)\}", DEMO, re.M).group(1))  # type: ignore[union-attr]
    written = {
        "the demo's state (Prometheus, Alertmanager, logs, pids, the sized schedule)": state,
        "the lab's state dir": config.lab.state_dir,
        "the journal and what lies beside it": config.journal.path.parent,
        "kept captures": kept_pcap_directory(config),
        "the transfers' work directory": config.transfer.workdir,
        "captures while a transfer runs": capture_directory(config),
        "the venv": ROOT / ".venv",
    }
    lines = commands(removal_section())
    removed = [Path(p) for line in lines if line[:2] == ["rm", "-rf"] for p in line[2:]]
    emptied = [Path(p) for line in lines if line[0] == "rmdir" for p in line[1:] if not p.startswith("-")]

    def covered(path: Path) -> bool:
        full = path if path.is_absolute() else ROOT / path
        return any(
            full == (r if r.is_absolute() else ROOT / r) or (r if r.is_absolute() else ROOT / r) in full.parents
            for r in removed
        )

    assert {what: path for what, path in written.items() if not covered(path)} == {}
    # The directories mkdir -p made above them, removed where nothing else is in them.
    outside = [path for path in written.values() if ROOT not in path.parents]  # the clone is the user's
    made_above = {p for path in outside for p in path.parents if p != Path("/")}
    made_above -= {Path("/var"), Path("/var/lib"), Path("/var/tmp")} | {p for p in made_above if covered(p)}
    assert made_above <= set(emptied), made_above
