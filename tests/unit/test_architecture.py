"""The package's shape, read from its source with `ast`: no import cycles, and the live
path (measure/, service/) never reaches the lab or the study, not even indirectly."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "exporter" / "bigbinf"
LIVE_PATH = ("bigbinf.measure", "bigbinf.service")
NOT_ON_THE_LIVE_PATH = ("bigbinf.lab", "bigbinf.study", "bigbinf.mixin", "bigbinf.mesh", "bigbinf.cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


@functools.cache  # parsed once: every parametrised test below reads the same package
def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the bigbinf modules it imports (anywhere in the file, also inside
    functions).  `from bigbinf.lab import network` names the submodule when there is
    one, else the package; relative imports are resolved against the importing module."""
    modules = {_module_name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name.split(".")[0] == "bigbinf")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                if base.split(".")[0] != "bigbinf":
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    edges.add(sub if sub in modules else base)
        graph[name] = {e for e in edges if e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_the_checks_find_what_they_look_for() -> None:
    # A check that cannot fail proves nothing: these graphs have what the real one must not.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert reachable({"m": {"c"}, "c": {"lab"}}, "m") == {"c", "lab"}


def test_the_graph_is_read_from_the_real_package() -> None:
    graph = import_graph()
    assert {"bigbinf.measure.transfer", "bigbinf.service.rounds", "bigbinf.lab.control", "bigbinf.study.report"} <= set(
        graph
    )
    assert "bigbinf.measure.plan" in graph["bigbinf.measure.transfer"]
    assert "bigbinf.lab.network" in graph["bigbinf.lab.control"]  # `from bigbinf.lab import network`


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("module", sorted(m for m in import_graph() if _in(m, LIVE_PATH)))
def test_the_live_path_reaches_neither_lab_nor_study(module: str) -> None:
    graph = import_graph()
    direct = sorted(m for m in graph[module] if _in(m, NOT_ON_THE_LIVE_PATH))
    assert direct == [], f"{module} imports {direct}"
    indirect = sorted(m for m in reachable(graph, module) if _in(m, NOT_ON_THE_LIVE_PATH))
    assert indirect == [], f"{module} reaches {indirect} through its imports"


def test_no_import_by_name() -> None:
    """Every import is one a reader (and mypy) can see: no importlib or __import__."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("__import__", "importlib.import_module", "import_module"):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {name}")
    assert offenders == []


def room_of(module: str) -> str:
    """The room a module is in: bigbinf.measure.wire.pcap -> bigbinf.measure (the rooms of
    the package, measure/'s own rooms counted with it); a top-level module is its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, imports in graph.items():
        rooms.setdefault(room_of(module), set()).update(room_of(m) for m in imports)
    return {room: imports - {room} for room, imports in rooms.items()}


def test_no_two_rooms_import_each_other() -> None:
    """Rooms (lab/, mesh/, measure/, ... and each top-level module) form no cycle, directly
    or through other rooms: a module-level acyclic graph can still tie two rooms together
    (mesh/config.py -> lab/mesh_layout.py while lab/mesh.py -> mesh/config.py)."""
    assert cycles(room_graph(import_graph())) == []


def test_the_room_check_finds_two_rooms_tied_through_their_modules() -> None:
    # No module cycle, yet the rooms a and b import each other (a.x -> b.y, b.z -> a.w),
    # and c reaches back through d.
    graph = {"p.a.x": {"p.b.y"}, "p.b.z": {"p.a.w"}, "p.a.w": set(), "p.b.y": set()}
    assert cycles(graph) == []
    assert cycles(room_graph(graph)) == [["p.a", "p.b"]]
    graph = {"p.c.x": {"p.d.y"}, "p.d.y": {"p.e.z"}, "p.e.q": {"p.c.w"}}
    assert cycles(room_graph(graph)) == [["p.c", "p.d", "p.e"]]


def test_protocols_run_below_the_transfer() -> None:
    """A transfer (measure/) runs a protocol; a protocol never reaches back into measure/."""
    graph = import_graph()
    offenders = sorted(
        f"{module} -> {m}"
        for module, imports in graph.items()
        if _in(module, ("bigbinf.protocols",))
        for m in imports
        if _in(m, ("bigbinf.measure", "bigbinf.service"))
    )
    assert offenders == []


def test_measure_has_rooms_and_they_do_not_import_upward() -> None:
    """measure/'s rooms (wire, tcp, path) are below the transfer that drives them: none
    imports transfer.py, and the wire never reaches the TCP judgement or the path."""
    graph = import_graph()
    rooms = {m.split(".")[2] for m in graph if m.startswith("bigbinf.measure.") and m.count(".") >= 3}
    assert {"wire", "tcp", "path"} <= rooms
    upward = sorted(
        f"{module} -> {m}"
        for module, imports in graph.items()
        if _in(module, ("bigbinf.measure.wire", "bigbinf.measure.tcp", "bigbinf.measure.path"))
        for m in imports
        if m == "bigbinf.measure.transfer"
        or (_in(module, ("bigbinf.measure.wire",)) and _in(m, ("bigbinf.measure.tcp", "bigbinf.measure.path")))
    )
    assert upward == []


def test_the_judgement_has_its_own_room_apart_from_measure() -> None:
    """judge/ (the verdict: its inputs, rules, vetoes, next steps) reads a Result and a
    path baseline and nothing of measure/; measure/ measures, and only the transfer, the
    step that hands its Result on to be judged, calls it."""
    graph = import_graph()
    assert {"bigbinf.judge.inputs", "bigbinf.judge.rules", "bigbinf.judge.steps", "bigbinf.judge.verdict"} <= set(graph)
    judged_from_measure = sorted(
        f"{module} -> {m}"
        for module, imports in graph.items()
        if _in(module, ("bigbinf.judge",))
        for m in imports
        if _in(m, ("bigbinf.measure", "bigbinf.service"))
    )
    assert judged_from_measure == []
    callers = sorted(
        m
        for m, imports in graph.items()
        if _in(m, ("bigbinf.measure",)) and any(_in(x, ("bigbinf.judge",)) for x in imports)
    )
    assert callers == ["bigbinf.measure.transfer"]


def test_the_journal_and_the_judgements_from_history_have_their_own_rooms() -> None:
    """journal/ holds the journal (store), its checkpoint and the pending store; history/
    the judgements from history (the regression test, its state, what changed, its
    command, the move model, plan-move, advise); runs.py which runs they stand on.  None
    of them is left at the top level, and journal/ never imports history/: the journal is
    below the judgements that read it."""
    graph = import_graph()
    journal = {"bigbinf.journal.store", "bigbinf.journal.checkpoint", "bigbinf.journal.pending"}
    history = {
        "bigbinf.history.regression",
        "bigbinf.history.regression_state",
        "bigbinf.history.change",
        "bigbinf.history.regression_cmd",
        "bigbinf.history.moveplan",
        "bigbinf.history.planmove",
        "bigbinf.history.advice",
    }
    assert {"bigbinf.journal", *journal, "bigbinf.history", *history, "bigbinf.runs"} <= set(graph)
    left_at_the_top = sorted(
        p.name
        for p in PACKAGE.glob("*.py")
        if p.stem.startswith("regression") or p.stem in ("moveplan", "planmove", "advice", "journal", "checkpoint")
    )
    assert left_at_the_top == []
    assert not (PACKAGE / "measure" / "pending.py").exists()
    assert not (PACKAGE / "study" / "planmove.py").exists()
    upward = sorted(
        f"{module} -> {m}"
        for module, imports in graph.items()
        if _in(module, ("bigbinf.journal",))
        for m in imports
        if _in(m, ("bigbinf.history",))
    )
    assert upward == []
    indirect = sorted(
        f"{module} reaches {m}"
        for module in graph
        if _in(module, ("bigbinf.journal",))
        for m in reachable(graph, module)
        if _in(m, ("bigbinf.history",))
    )
    assert indirect == []


# What a start imports that serving does not need: the study's, the mesh's (beyond its
# configuration, for a mesh site's errors), the mixin's and the history's commands.
NOT_IMPORTED_TO_SERVE = (
    "bigbinf.study",
    "bigbinf.mixin",
    "bigbinf.mesh.cli",
    "bigbinf.mesh.plan",
    "bigbinf.lab.mesh",
    "bigbinf.history.planmove",
    "bigbinf.history.regression_cmd",
)

_IMPORTED_TO_SERVE = """
import sys
from bigbinf import cli
words = ["--config.file", "report", "--web.listen-address", "127.0.0.1:0", "--log.level=debug"]
assert cli._serves(words)
cli.build_parser(serving=True).parse_args(words)
print("\\n".join(sorted(sys.modules)))
"""


def _modules_after(code: str) -> set[str]:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_a_command_line_that_serves_imports_only_what_serving_needs() -> None:
    """What Python really loaded (sys.modules of a fresh interpreter), not the source's
    graph: the CLI's module level and the serving parser stay off the other commands."""
    loaded = _modules_after(_IMPORTED_TO_SERVE)
    assert "bigbinf.config" in loaded  # the check sees what it looks for (the server: imported by serve itself)
    assert sorted(m for m in loaded if _in(m, NOT_IMPORTED_TO_SERVE)) == []
    # ...and the whole parser (any other command line) still registers every command.
    whole = _modules_after("import sys\nfrom bigbinf import cli\ncli.build_parser()\nprint('\\n'.join(sys.modules))")
    assert {"bigbinf.study.report", "bigbinf.mesh.cli", "bigbinf.history.planmove"} <= whole
