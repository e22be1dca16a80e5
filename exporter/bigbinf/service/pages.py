"""The exporter's own pages, rendered as plain HTML: the front page (what runs now, what
runs next, the last transfers), a transfer's page (its settings, command, log lines, the
path baseline of its round, both ends' TCP evidence, what `advise` says, its capture),
the running configuration, and each sweep's ranking.

Pure functions of what they are given (service/routes.py gathers it): every value from a
config, a journal or a remote is escaped here (`esc`), at the one place it becomes HTML.
The pages fetch nothing (inline CSS and SVG; the Content-Security-Policy routes.py sends
forbids any fetch), so they work on an isolated network and no injected markup can load
anything.  docs/pages.md describes them.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
import shlex
import statistics
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bigbinf import DOCS_URL, __version__
from bigbinf.history.change import Change, describe
from bigbinf.history.moveplan import _t_quantile
from bigbinf.result import LIMITS, PathBaseline, Result
from bigbinf.runs import counts_in_baseline

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
HTML = "text/html; charset=utf-8"
REDACTED = "<redacted>"
# Config keys whose values are secrets wherever they appear (a protocol's options are free
# form).  password_env is not one: it names a variable, and the variable is never shown.
SECRET_KEY = re.compile(r"(?i)pass(word|wd|phrase)?|secret|token|credential|api_?key|private_?key")
# A secret given inline in a command or option string: --password=x, token:x.
SECRET_INLINE = re.compile(r"(?i)((?:pass(?:word|wd)?|secret|token|api_?key)[=:])[^\s&;,]+")
CONFIDENCE = 0.95
# Student's t two-sided 95% quantiles for 1..10 degrees of freedom (a sweep repeats each
# setting 2 to 100 times); beyond, history/moveplan.py's Cornish-Fisher expansion is within 0.1%.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
nav a{margin-right:1em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td:first-child a{white-space:nowrap}
pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap;overflow-wrap:anywhere}
.ok{color:#176117}.failed,.timeout{color:#a11}.skipped{color:#777}
.cause{background:#fee;border-left:4px solid #a11;padding:.3em .6em}
svg{vertical-align:middle}
th[scope=row]{font-weight:normal;text-align:left}
.tag{display:inline-block;padding:0 .4em;border-radius:3px;color:#fff;white-space:nowrap}
.side{color:#555;font-size:.9em}
tr.slow td:first-child{border-left:4px solid #c60}
.mark{color:#a40;font-weight:bold;white-space:nowrap}
.best{color:#176117;font-weight:bold;white-space:nowrap}
table.series td:first-child{white-space:nowrap}
.headline{background:#fde8f1;border-left:6px solid #c2185b;padding:.5em .8em;font-size:1.05em}
.legend .tag{margin-right:.3em}
th a{color:inherit}th b{font-weight:bold}
details{display:inline}details[open]{display:block}summary{cursor:pointer}
details>div{margin:.3em 0 .3em 1em;white-space:pre-wrap}
pre.log{font-size:12px}.log-WARNING{color:#850}.log-ERROR,.log-CRITICAL{color:#a11}
"""
# A verdict's colour (result.LIMITS): where to look, roughly grouped; a name not here (a
# verdict added later) is drawn in the neutral grey of VERDICT_OTHER, never left out.
VERDICT_COLOURS = {
    "receive_window": "#b45f06",
    "send_buffer": "#b45f06",
    "congestion": "#1f5fa8",
    "link_capacity": "#2e7d32",
    "application": "#7b3fa0",
    "startup": "#6d6d2a",
    "cpu": "#a1334d",
    "disk": "#5d4037",
    "busy_host": "#c2185b",
    "shared_path": "#00796b",
}
VERDICT_OTHER = "#666"
# Each colour's word, for the legend under the series (docs/pages.md names the same).
COLOUR_WORDS = {
    "#b45f06": "orange",
    "#1f5fa8": "blue",
    "#2e7d32": "green",
    "#7b3fa0": "purple",
    "#6d6d2a": "olive",
    "#a1334d": "crimson",
    "#5d4037": "brown",
    "#c2185b": "pink",
    "#00796b": "teal",
}
FAILED_COLOUR = "#a11"
UNJUDGED_COLOUR = "#999"
# A series' last ok throughput below this share of the median of its earlier ok runs (at
# least USUAL_RUNS of them on the page) is marked "below usual".
USUAL_SHARE = 0.8
USUAL_RUNS = 3
ONE_LINE = 90  # characters of a cause shown in the transfers' table
# This host's CPU held a run: its verdict is busy_host, or one of what it ran waited for a
# CPU this share of the transfer (the judge's BUSY_SHARE and parts, judge/vetoes.py).
HOST_BUSY_SHARE = 0.1
HOST_BUSY_PARTS = ("transfer_programs", "capture", "delay_line")
# The front page's orders of the series (?sort=): the first is the default.
SORTS = {
    "path": "by remote and size, then median",
    "throughput": "by median throughput",
    "series": "by name",
}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------- units


def human_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def human_rate(value: float | None) -> str:
    """Bytes per second as MB/s and Mbit/s (decimal units, as the transfers' tools say)."""
    if value is None:
        return "-"
    return f"{value / 1e6:.2f} MB/s ({value * 8 / 1e6:.1f} Mbit/s)"


def human_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{int(value // 60)} min {value % 60:.0f} s"


def utc(timestamp: float | None) -> str:
    """The one time format of every page: UTC to the second."""
    if timestamp is None:
        return "-"
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def retransmits(r: Result) -> str:
    """Both views, named: the capture's count (both ways) and the sender's own."""
    wire = f"wire {r.retransmits_wire}" if r.wire_measured else "wire -"
    if r.retransmits_sender is None:
        return f"{wire}, sender -"
    return f"{wire}, sender {r.retransmits_sender} ({r.retransmits_sender_source or 'unknown'})"


# ---------------------------------------------------------------- secrets


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return SECRET_INLINE.sub(lambda m: m.group(1) + REDACTED, text)


def redact(value: Any, secrets: Sequence[str] = ()) -> Any:
    """A copy of a config's plain data with every secret-named value and every known or
    inline secret replaced."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if _secret_key(k) and v not in (None, "") else redact(v, secrets)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


def _secret_key(key: object) -> bool:
    return isinstance(key, str) and SECRET_KEY.search(key) is not None and not key.endswith("_env")


# ---------------------------------------------------------------- files


def inside(path: str, directory: Path) -> Path | None:
    """`path` resolved, if it is a regular file inside `directory` (after every symlink
    is followed); None otherwise: a journal line must not make the exporter serve
    /etc/shadow."""
    if not path:
        return None
    try:
        real = Path(path).resolve(strict=True)
        root = directory.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not real.is_relative_to(root) or real == root or not real.is_file():
        return None
    return real


# ---------------------------------------------------------------- layout


def document(title: str, body: str, up: str = "") -> bytes:
    """A whole page; `up` leads from the page's URL back to the root ("../" below it)."""
    nav = (
        f"<nav><a href='{up or './'}'>Transfers</a><a href='{up}config'>Configuration</a>"
        f"<a href='{up}sweeps'>Sweeps</a><a href='{up}passive'>Passive</a><a href='{up}log'>Log</a>"
        f"<a href='{up}metrics'>Metrics</a></nav>"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        # No favicon request (a 404 in the console): an empty icon from a data: URL.
        f"<link rel='icon' href='data:,'><title>{esc(title)} - bigbinf</title><style>{CSS}</style></head>"
        f"<body>{nav}<h1>{esc(title)}</h1>{body}"
        f"<footer><p>bigbinf exporter {esc(__version__)} · <a href='{DOCS_URL}/pages.md'>Documentation</a></p>"
        "</footer></body></html>"
    ).encode()


def table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """`rows` hold HTML already escaped (cells may carry links)."""
    return table_of(header, (row_html(row, numeric) for row in rows))


def table_of(header: Sequence[str], rows: Iterable[str]) -> str:
    """A table of rows made already (row_html)."""
    if not any(header):  # a table of pairs: no empty header row
        return f"<table><tbody>{''.join(rows)}</tbody></table>"
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def row_html(row: Sequence[str], numeric: Sequence[int] = ()) -> str:
    cells = "".join(f"<td class='n'>{c}</td>" if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
    return f"<tr>{cells}</tr>"


def pairs(items: Iterable[tuple[str, object]]) -> str:
    """Name and value, one per row: the name is the row's header."""
    rows = (f"<tr><th scope='row'>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    return f"<table><tbody>{''.join(rows)}</tbody></table>"


def sparkline(runs: Sequence[Result], width: int = 120, height: int = 22) -> str:
    """An inline SVG of a series' runs (oldest first): its ok runs' throughput as a line,
    scaled to its own maximum, each run a dot in its verdict's colour (a failed one a red
    dot on the floor), each dot's title its time, throughput and verdict."""
    ok = [r.throughput_bytes_per_second for r in runs if r.outcome == "ok"]
    if not runs:
        return ""
    top = max(ok, default=0.0) or 1.0
    step = (width - 6) / max(len(runs) - 1, 1)

    def y(v: float) -> float:
        return height - 3 - v / top * (height - 6)

    points, dots = [], []
    for i, r in enumerate(runs):
        x = 3 + i * step
        if r.outcome == "ok":
            points.append(f"{x:.1f},{y(r.throughput_bytes_per_second):.1f}")
            colour = verdict_colour(r.limited_by) if r.limited_by else UNJUDGED_COLOUR
            what = f"{human_rate(r.throughput_bytes_per_second)}, {r.limited_by or 'not judged'}"
            at = y(r.throughput_bytes_per_second)
        else:
            colour, what, at = FAILED_COLOUR, r.outcome, float(height - 3)
        dots.append(
            f"<circle cx='{x:.1f}' cy='{at:.1f}' r='2.5' fill='{colour}'>"
            f"<title>{esc(utc(r.start_timestamp))}: {esc(what)}</title></circle>"
        )
    line = f"<polyline fill='none' stroke='#999' stroke-width='1' points='{' '.join(points)}'/>" if points else ""
    last = human_rate(ok[-1]) if ok else "no ok run"
    return (
        f"<svg width='{width}' height='{height}' role='img' aria-label='throughput, last {esc(last)}'>"
        f"{line}{''.join(dots)}</svg>"
    )


def outcome(r: Result) -> str:
    return f"<span class='{esc(r.outcome)}'>{esc(r.outcome)}</span>"


def series(r: Result) -> str:
    return f"{r.protocol} {r.remote}/{r.dataset} {r.direction}"


def verdict_colour(name: str) -> str:
    return VERDICT_COLOURS.get(name, VERDICT_OTHER)


def tag(text: str, colour: str) -> str:
    """A coloured label; `colour` is one of this module's constants, never input."""
    return f"<span class='tag' style='background:{colour}'>{esc(text)}</span>"


def verdict_tag(r: Result) -> str:
    """What a person reads first: the verdict in its colour with its side; a failed
    transfer's outcome in red; an ok one without a verdict as "not judged"."""
    if r.outcome != "ok":
        return tag(r.outcome, FAILED_COLOUR)
    if not r.limited_by:
        return tag("not judged", UNJUDGED_COLOUR)
    side = f" <span class='side'>{esc(r.limited_side)}</span>" if r.limited_side else ""
    return tag(r.limited_by, verdict_colour(r.limited_by)) + side


def no_tcp_state(r: Result) -> bool:
    """UDP carried it (UDT) or no socket of it was read: nothing to judge TCP's limits by."""
    return r.transport == "udp" or (not r.tcp_local and not r.tcp_remote and "udt" in r.protocol.lower())


def cause_text(r: Result) -> tuple[str, str]:
    """(one line, everything): a failed transfer's error, a judged one's evidence, an
    unjudged one's evidence as seen (or why there is none)."""
    if r.outcome != "ok":
        full = r.error or "(no error journaled)"
    elif r.limited_by:
        full = r.limited_evidence or "(no evidence journaled)"
        if r.limited_next_step:
            full += f"\nnext step: {r.limited_next_step}"
    elif no_tcp_state(r):  # the tag says "not judged"; the line says why, once
        seen = unjudged_evidence(r) or f"{(r.transport or 'not TCP').upper()} on the wire"
        full = seen if "no TCP state" in seen else f"no TCP state ({seen})"
    else:
        full = unjudged_evidence(r) or "no evidence was recorded"
    full = operator_words(full)  # every branch: an error, evidence or a next step may name code
    first = full.split("\n")[0].split("; ")[0]
    if len(first) > ONE_LINE:  # at a word's end: the rest is one click away
        first = first[: first.rfind(" ", 0, ONE_LINE - 3) if " " in first[: ONE_LINE - 3] else ONE_LINE - 3] + " ..."
    return first, full


def unjudged_evidence(r: Result) -> str:
    """An unjudged run's evidence without the judge's own "not judged: " (the page's tag
    says it)."""
    text = r.limited_evidence.strip()
    return text[len("not judged:") :].strip() if text.lower().startswith("not judged:") else text


def _code_name(match: re.Match[str]) -> str:
    """A dotted name that is Python in this exporter (a module of bigbinf already loaded,
    then an attribute of it that is bigbinf's own function, class or module) is dropped
    with its parentheses; anything else (a config key such as capture.buffer, a sysctl such as
    net.ipv4.tcp_rmem) is kept."""
    parts = match.group("name").removeprefix("bigbinf.").split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get("bigbinf." + ".".join(parts[:cut]))
        if module is None:
            continue
        thing: object = module
        for attr in parts[cut:]:
            thing = getattr(thing, attr, None)
        return "" if _ours(thing) else match.group(0)
    return match.group(0)


def _ours(thing: object) -> bool:
    """A module, function or class of bigbinf (not `yaml` that config imports: config.yaml
    is a file's name)."""
    if isinstance(thing, type(sys)):
        return thing.__name__.startswith("bigbinf.")
    return callable(thing) and str(getattr(thing, "__module__", "")).startswith("bigbinf.")


CODE_NAME = re.compile(r"\s*\((?P<name>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+)(?:\(\))?\)")


def operator_words(text: str) -> str:
    """`text` without the code names a journaled line may carry ("(judge.verdict.
    leaves_out_of_baselines)"): a page speaks an operator's words (what to do, where to
    look), not the exporter's module names."""
    return CODE_NAME.sub(_code_name, text) if "." in text else text


def cause(r: Result, secrets: Sequence[str] = ()) -> str:
    """The verdict's tag and one line, the whole evidence one click away (<details>: no
    script needed)."""
    first, full = (redact_text(t, secrets) for t in cause_text(r))
    head = f"{verdict_tag(r)} {esc(first)}"
    if full == first:
        return head
    return f"<details><summary>{head}</summary><div>{esc(full)}</div></details>"


def verdict(r: Result) -> str:
    """A judged transfer's verdict, side and evidence in one line (the transfer's page)."""
    if not r.limited_by:
        return ""
    side = f" ({r.limited_side})" if r.limited_side else ""
    return f"<b>{esc(r.limited_by)}</b>{esc(side)}: {esc(operator_words(r.limited_evidence))}"


def share_of_path(r: Result, bandwidth: float | None) -> str:
    if r.outcome != "ok" or not bandwidth or not r.throughput_bytes_per_second:
        return "-"
    return f"{r.throughput_bytes_per_second / bandwidth:.0%}"


def regression_open(state: object | None) -> bool:
    """Whether a series has an open regression (bigbinf/history/regression.py's Verdict: `regressed`
    holds while the regression lasts, until it recovers or is accepted): the one place the
    front page reads the regression state."""
    return bool(getattr(state, "regressed", False))


def open_regression_row(name: str, state: object) -> str:
    """An open regression's row (Verdict: its start, the level before, the ratio now
    against that level with its interval, and what changed between the runs before the
    start and since, history/change.py's describe); every value escaped."""
    test = getattr(state, "test", None)
    ratio = getattr(test, "ratio", None)
    now = (
        f"{ratio:.0%} [{getattr(test, 'ratio_lower', math.nan):.0%}, {getattr(test, 'ratio_upper', math.nan):.0%}]"
        if ratio is not None
        else "the test cannot decide now"
    )
    change = getattr(state, "change", None)
    cells = (
        esc(name),
        esc(utc(getattr(state, "since", None))),
        esc(human_rate(getattr(state, "level_before", None))),
        esc(now),
        esc(describe(change) if isinstance(change, Change) else "not read from the journal yet"),
    )
    return row_html(cells, numeric=(2, 3))


def open_regressions(regressions: Mapping[str, object]) -> str:
    """The section "Open regressions" of the front page (nothing when none is open): every
    series whose regression is open, whether or not its runs are among the last shown."""
    rows = [open_regression_row(name, v) for name, v in sorted(regressions.items()) if regression_open(v)]
    if not rows:
        return ""
    return (
        f"<h2>Open regressions ({len(rows)})</h2>"
        + "<p>Open until the series recovers or someone accepts the new level "
        + "(<code>bigbinf-exporter regression accept</code>); now: the recent runs' median over the "
        + "level before, with its interval (<code>regression.confidence</code>).</p>"
        + table_of(("series", "since", "level before", "now", "what changed (before -> since)"), rows)
    )


def below_usual(runs: Sequence[Result]) -> float | None:
    """The last ok run's throughput over the median of the series' earlier ok runs shown,
    when below USUAL_SHARE of it (at least USUAL_RUNS earlier runs); else None."""
    ok = [r.throughput_bytes_per_second for r in runs if r.outcome == "ok"]
    if len(ok) <= USUAL_RUNS:
        return None
    usual = statistics.median(ok[:-1])
    share = ok[-1] / usual if usual > 0 else 1.0
    return share if share < USUAL_SHARE else None


# ---------------------------------------------------------------- the front page


@dataclass(frozen=True)
class Front:
    site: str  # a mesh site's name, "" for a single-site exporter
    running: str  # what runs now ("" nothing), and since when
    next_round: str
    config_loaded: float | None
    transfers: Sequence[tuple[str, Result]]  # (id, result), newest first
    capacity: int  # pages.recent_transfers
    # The path baseline's bandwidth estimate of each transfer's round, by transfer id.
    bandwidths: Mapping[str, float] = field(default_factory=dict)
    # Each series' regression state (regression_open reads it), by series(r).
    regressions: Mapping[str, object] = field(default_factory=dict)
    secrets: Sequence[str] = ()
    sort: str = "path"  # SORTS' key (?sort=); anything else is the default


def counts_for_fastest(r: Result) -> bool:
    """A run the fastest mark is measured on: a round's (not a sweep's setting, not an
    import) that counts in its series' baselines (the regression test's predicate: ok,
    a throughput, not held by this host's CPU)."""
    return r.source == "exporter" and counts_in_baseline(r)


@dataclass(frozen=True)
class Standing:
    """A series' median throughput over its counted runs on the page, and their number."""

    median: float | None
    runs: int


def standings(by_series: Mapping[str, Sequence[tuple[str, Result]]]) -> dict[str, Standing]:
    out = {}
    for name, runs in by_series.items():
        v = [r.throughput_bytes_per_second for _, r in runs if counts_for_fastest(r)]
        out[name] = Standing(statistics.median(v) if v else None, len(v))
    return out


def path_of(r: Result) -> str:
    """A series' remote and size (its dataset) and direction: what protocols compete on."""
    return f"{r.remote}/{r.dataset} {r.direction}"


def memory_to_memory(r: Result) -> bool:
    """A test that moves no file (iperf3: the tool's own report of bytes over its own
    time, `reported`): the path's ceiling beside the copy tools, not one of them."""
    return "bytes" in r.reported


def fastest(by_series: Mapping[str, Sequence[tuple[str, Result]]], standing: Mapping[str, Standing]) -> dict[str, str]:
    """By path_of, the series with the highest median among those with counted runs, where
    at least two protocols that move files have some (one protocol alone is no one's
    fastest; a memory-to-memory test is the ceiling, not a contender)."""
    by_path: dict[str, list[str]] = {}
    for name, runs in by_series.items():
        if standing[name].median is not None and not memory_to_memory(runs[-1][1]):
            by_path.setdefault(path_of(runs[-1][1]), []).append(name)
    return {
        path: max(names, key=lambda n: (standing[n].median or 0.0, n))
        for path, names in by_path.items()
        if len(names) >= 2
    }


def held_by_this_host(r: Result) -> bool:
    """Whether this host's CPU held the run: the judge said busy_host, or its programs,
    capture or delay line waited for a CPU HOST_BUSY_SHARE of it or more."""
    return r.limited_by == "busy_host" or any(r.host_busy.get(k, 0.0) >= HOST_BUSY_SHARE for k in HOST_BUSY_PARTS)


def busy_headline(transfers: Sequence[tuple[str, Result]]) -> str:
    """A headline when this host's CPU held most of the last ok runs: their numbers are
    the host's, not the path's ("" otherwise)."""
    ok = [r for _, r in transfers if r.outcome == "ok"]
    held = [r for r in ok if held_by_this_host(r)]
    if not ok or 2 * len(held) <= len(ok):
        return ""
    verdicts = sum(r.limited_by == "busy_host" for r in held)
    waited = f"with their programs, capture or delay line waiting for a CPU {HOST_BUSY_SHARE:.0%} of the time or more"
    how = "all judged busy_host" if verdicts == len(held) else f"{verdicts} judged busy_host, the others {waited}"
    loads = [r.host_busy["load1"] for r in held if "load1" in r.host_busy]
    load = f"; load average up to {max(loads):.1f}" if loads else ""
    return (
        f"<p class='headline'><b>This host is busy: these numbers are this host's, not the path's.</b> "
        f"This host's CPU held {len(held)} of the last {len(ok)} ok transfers ({esc(how)}{esc(load)}). "
        "What to do: run the transfers on a less busy host or at quieter hours, or stop what else runs "
        "here; until then compare protocols only on runs that count (the fastest mark leaves the "
        "busy_host runs out, as the regression test does).</p>"
    )


def fastest_section(
    by_series: Mapping[str, Sequence[tuple[str, Result]]], standing: Mapping[str, Standing], best: Mapping[str, str]
) -> str:
    """Per remote and size (and direction), the fastest protocol, its median and the next."""
    if not best:
        return ""
    rows = []
    for path, name in sorted(best.items()):
        measured = [n for n, rs in by_series.items() if path_of(rs[-1][1]) == path and standing[n].median is not None]
        ceilings = [n for n in measured if memory_to_memory(by_series[n][-1][1])]
        rivals = sorted((n for n in measured if n not in ceilings), key=lambda n: -(standing[n].median or 0.0))
        ceiling = max(ceilings, key=lambda n: standing[n].median or 0.0, default="")
        top = (
            f"{by_series[ceiling][-1][1].protocol} {human_rate(standing[ceiling].median)}, {standing[ceiling].runs} "
            + ("run" if standing[ceiling].runs == 1 else "runs")
            if ceiling
            else "-"
        )
        first = standing[name]
        nxt = next((n for n in rivals if n != name), "")
        then = ""
        if nxt:
            ratio = (first.median or 0.0) / (standing[nxt].median or 1.0)
            rival = by_series[nxt][-1][1].protocol
            then = f"{rival} {human_rate(standing[nxt].median)}: the fastest is {ratio:.2f}x it"
        rows.append(
            row_html(
                (
                    esc(path),
                    f"<span class='best'>&#9733; {esc(by_series[name][-1][1].protocol)}</span>",
                    esc(human_rate(first.median)),
                    esc(first.runs),
                    esc(len(rivals)),
                    esc(then),
                    esc(top),
                ),
                numeric=(2, 3, 4),
            )
        )
    return (
        "<h2>Fastest per remote and size</h2>"
        "<p>Fastest: the highest <b>median throughput</b> of a series' counted runs among the last transfers "
        "on this page: its scheduled rounds' ok runs that count in its baselines (as the regression test "
        "counts them: not a sweep's, not one this host's CPU held, busy_host); n is how many. A remote and size "
        "with one protocol measured has no fastest.  A memory-to-memory test (iperf3) moves no file: it is "
        "the path's ceiling, shown beside, not a contender.</p>"
        + table_of(
            ("remote/size direction", "fastest", "median", "n runs", "protocols", "next", "memory to memory"), rows
        )
    )


def legend() -> str:
    """Every verdict's tag in its colour, and the two that are not verdicts."""
    tags = " ".join(tag(name, verdict_colour(name)) for name in LIMITS)
    return (
        f"<p class='legend'>Verdicts: {tags} {tag('not judged', UNJUDGED_COLOUR)} "
        f"{tag('failed', FAILED_COLOUR)} (a failed or timed-out transfer)</p>"
    )


def sort_links(sort: str) -> str:
    said = " · ".join(
        f"<b>{esc(words)}</b>" if key == sort else f"<a href='?sort={key}'>{esc(words)}</a>"
        for key, words in SORTS.items()
    )
    return f"<p class='sort'>Sort: {said}</p>"


def sorted_series(
    by_series: Mapping[str, Sequence[tuple[str, Result]]], standing: Mapping[str, Standing], sort: str
) -> list[str]:
    def median_first(name: str) -> tuple[bool, float]:
        m = standing[name].median
        return (m is None, -(m or 0.0))

    if sort == "throughput":
        return sorted(by_series, key=lambda n: (*median_first(n), n))
    if sort == "series":
        return sorted(by_series)
    return sorted(by_series, key=lambda n: (path_of(by_series[n][-1][1]), *median_first(n), n))


@dataclass
class Glance:
    """What the front page reads off its transfers as a whole (the series, their medians,
    the fastest, the busy headline, the orders): made once per window of the ring, as
    the rows are, so that a page view costs joins."""

    by_series: dict[str, list[tuple[str, Result]]]
    standing: dict[str, Standing]
    best_series: set[str]
    headline: str
    fastest: str
    orders: dict[str, list[str]] = field(default_factory=dict)

    def order(self, sort: str) -> list[str]:
        if sort not in self.orders:
            self.orders[sort] = sorted_series(self.by_series, self.standing, sort)
        return self.orders[sort]


_GLANCE: dict[tuple[object, ...], Glance] = {}


def at_a_glance(transfers: Sequence[tuple[str, Result]]) -> Glance:
    # The window by its ends' ids and results (two exporters in one process, as the tests
    # run them, may hold the same ids) and its length.
    ends = (transfers[0], transfers[-1]) if transfers else ()
    key = (*(k for k, _ in ends), *(id(r) for _, r in ends), len(transfers))
    glance = _GLANCE.get(key)
    if glance is not None:
        return glance
    by_series: dict[str, list[tuple[str, Result]]] = {}
    for k, r in reversed(transfers):  # oldest first
        by_series.setdefault(series(r), []).append((k, r))
    standing = standings(by_series)
    best = fastest(by_series, standing)
    glance = Glance(
        by_series, standing, set(best.values()), busy_headline(transfers), fastest_section(by_series, standing, best)
    )
    with _rows_lock:
        _GLANCE.clear()  # the last window only: the ring moves on
        _GLANCE[key] = glance
    return glance


def front_page(front: Front) -> bytes:
    now = f"{esc(front.running)}" if front.running else "nothing (waiting for the next round)"
    where = f" of mesh site {esc(front.site)}" if front.site else ""
    head = f"<p>Scheduled, packet-captured bulk-transfer measurements{where}.</p>" + pairs(
        (
            ("Running now", now if front.running else "nothing"),
            ("Next", front.next_round),
            ("Configuration loaded", utc(front.config_loaded)),
        )
    )
    glance = at_a_glance(front.transfers)
    sort = front.sort if front.sort in SORTS else next(iter(SORTS))
    series_rows = [
        series_row(name, glance.by_series[name], front, glance.standing[name], name in glance.best_series)
        for name in glance.order(sort)
    ]
    marked = sum(row.startswith("<tr class='slow'>") for row in series_rows)
    summary = (
        f"<p>{marked} of {len(series_rows)} series marked: below their usual level or in an open regression.</p>"
        if marked
        else ""
    )
    rows = (transfer_row(key, r, front.bandwidths.get(key), front.secrets) for key, r in front.transfers)
    series_head = (
        "<thead><tr>"
        + "<th><a href='?sort=series'>series</a></th><th>runs (dots: verdicts)</th><th>last</th><th>% of path</th>"
        + "<th>verdict</th><th>ok</th>"
        + "<th><a href='?sort=throughput'>median (counted runs)</a></th><th></th></tr></thead>"
    )
    body = (
        glance.headline
        + head
        + glance.fastest
        + "<h2>Series in the last transfers</h2>"
        + summary
        + sort_links(sort)
        + f"<table class='series'>{series_head}<tbody>{''.join(series_rows)}</tbody></table>"
        + legend()
        + open_regressions(front.regressions)
        + f"<h2>Last transfers ({len(front.transfers)}, at most {front.capacity})</h2>"
        + "<p>The cause in one line; click it for the whole evidence and the next step.</p>"
        + table_of(
            (
                "started",
                "series",
                "duration",
                "throughput",
                "% of path",
                "byte ratio",
                "retransmits",
                "cause",
            ),
            rows,
        )
    )
    return document("bigbinf exporter", body)


# A transfer's row never changes (its id names one result): made once, kept while it may
# be on the page (at most pages.recent_transfers' upper bound of them, the oldest made
# first dropped), so the front page costs joins, not formatting, per row.  A series' row
# likewise, per window of its runs.
_ROWS: dict[str, str] = {}
_SERIES_ROWS: dict[tuple[str, str, str, int, bool, float | None, bool], str] = {}
_ROWS_KEPT = 10_000
_rows_lock = threading.Lock()


def series_row(name: str, runs: Sequence[tuple[str, Result]], front: Front, standing: Standing, best: bool) -> str:
    """A series' row, kept while its runs on the page (the first and the last, by id,
    and their count: a window of the ring), its regression, its path and its fastest
    mark are the same (its median is its runs')."""
    last_key = runs[-1][0]
    regressed = regression_open(front.regressions.get(name))
    key = (name, runs[0][0], last_key, len(runs), regressed, front.bandwidths.get(last_key), best)
    row = _SERIES_ROWS.get(key)
    if row is None:
        row = _series_row(name, runs, front, regressed, standing, best)
        with _rows_lock:
            _SERIES_ROWS[key] = row
            while len(_SERIES_ROWS) > _ROWS_KEPT:
                del _SERIES_ROWS[next(iter(_SERIES_ROWS))]
    return row


def _series_row(
    name: str, runs: Sequence[tuple[str, Result]], front: Front, regressed: bool, standing: Standing, best: bool
) -> str:
    results = [r for _, r in runs]
    last_key, last = runs[-1]
    marks = []
    share = below_usual(results)
    if share is not None:
        marks.append(f"below usual ({share:.0%} of its median)")
    if regressed:
        marks.append("regression open")
    runs_said = f"{standing.runs} run" + ("s" if standing.runs != 1 else "")
    median = f"{human_rate(standing.median)}, {runs_said}" if standing.median is not None else "none counted"
    fast = f"<div class='best'>&#9733; fastest of {esc(path_of(last))}</div>" if best else ""
    cells = (
        esc(name),
        sparkline(results),
        esc(human_rate(last.throughput_bytes_per_second)) if last.outcome == "ok" else outcome(last),
        esc(share_of_path(last, front.bandwidths.get(last_key))),
        verdict_tag(last),
        esc(sum(r.outcome == "ok" for r in results)) + " of " + esc(len(results)),
        esc(median) + fast,
        "".join(f"<div class='mark'>&#9660; {esc(m)}</div>" for m in marks),
    )
    row = row_html(cells, numeric=(2, 3, 5, 6))
    return row.replace("<tr>", "<tr class='slow'>", 1) if marks else row


def transfer_row(key: str, r: Result, bandwidth: float | None = None, secrets: Sequence[str] = ()) -> str:
    row = _ROWS.get(key)
    if row is not None:
        return row
    row = row_html(
        (
            f"<a href='transfer/{key}'>{esc(utc(r.start_timestamp))}</a>",
            esc(series(r)) + (f" <small>(sweep {esc(r.sweep_label)})</small>" if r.source == "sweep" else ""),
            esc(human_seconds(r.duration_seconds)),
            esc(human_rate(r.throughput_bytes_per_second) if r.outcome == "ok" else "-"),
            esc(share_of_path(r, bandwidth)),
            esc(f"{r.byte_ratio:.4f}" if r.wire_measured and r.byte_ratio else "-"),
            esc(retransmits(r)),
            cause(r, secrets),
        ),
        numeric=(2, 3, 4, 5),
    )
    with _rows_lock:
        _ROWS[key] = row
        while len(_ROWS) > _ROWS_KEPT:
            del _ROWS[next(iter(_ROWS))]
    return row


# ---------------------------------------------------------------- a transfer's page


@dataclass(frozen=True)
class TransferView:
    key: str
    result: Result
    baseline: PathBaseline | None
    advice: str
    pcap: Path | None  # the kept capture, if it may be served
    secrets: Sequence[str] = ()


def log_lines(r: Result) -> list[tuple[str, str]]:
    """(kind, line): the error's parts (a failed command's stderr tail among them: one
    line per diagnostic, joined by "; " in the journal), and every note."""
    lines = [("error" if r.outcome != "ok" else "warning", part) for part in r.error.split("; ") if part.strip()]
    for kind, text in (("note", r.tcp_remote_note), ("note", r.import_note)):
        if text:
            lines.append((kind, text))
    return lines


def transfer_page(view: TransferView) -> bytes:
    r = view.result
    parts = []
    if r.outcome != "ok":
        parts.append(f"<p class='cause'><b>{esc(r.outcome)}</b>: {esc(redact_text(r.error, view.secrets))}</p>")
    parts.append(
        pairs(
            (
                ("started", utc(r.start_timestamp)),
                ("outcome", r.outcome),
                ("duration", human_seconds(r.duration_seconds)),
                ("throughput", human_rate(r.throughput_bytes_per_second) if r.outcome == "ok" else "-"),
                ("file bytes", f"{human_bytes(r.file_bytes)} in {r.files} file(s), verified: {r.verified}"),
                ("byte ratio (wire / file)", f"{r.byte_ratio:.4f}" if r.wire_measured else "-"),
                ("retransmits", retransmits(r)),
            )
        )
    )
    if r.limited_by:
        parts.append("<h2>What limited it</h2>")
        parts.append(
            pairs(
                (
                    ("limited by", r.limited_by),
                    ("where", r.limited_side or "-"),
                    ("evidence", operator_words(r.limited_evidence)),
                    ("next step", operator_words(r.limited_next_step) or "-"),
                )
            )
        )
    elif r.outcome == "ok":
        parts.append("<h2>What limited it</h2>")
        parts.append(f"<p>{tag('not judged', UNJUDGED_COLOUR)} {esc(redact_text(cause_text(r)[1], view.secrets))}</p>")
    settings: list[tuple[str, object]] = [
        ("protocol", r.protocol),
        ("remote", f"{r.remote} ({r.remote_address or 'address unknown'}), from {r.client_address or '?'}"),
        ("dataset", r.dataset),
        ("direction", r.direction),
        ("source", r.source),
        ("round", r.round_id or "-"),
        ("congestion control", f"asked {r.congestion_requested or 'host default'}, used {r.congestion_control or '?'}"),
        ("tcp_buffer_max", "host's own" if r.tcp_buffer_max_bytes is None else human_bytes(r.tcp_buffer_max_bytes)),
    ]
    if r.site:
        settings.append(("mesh site", r.site))
        settings.append(("slot", f"{utc(r.slot_start_timestamp)} - {utc(r.slot_end_timestamp)}"))
        settings.append(("slot overrun", human_seconds(r.slot_overrun_seconds)))
    if r.source == "sweep":
        settings.append(("sweep", f"{r.sweep_name} run {r.sweep}, setting {r.sweep_label}, rep {r.sweep_repetition}"))
    parts.append("<h2>Settings</h2>" + pairs(settings))
    command = shlex.join(redact_text(a, view.secrets) for a in r.argv) if r.argv else "(not journaled with this result)"
    parts.append(f"<h2>Command</h2><pre>{esc(command)}</pre>")
    lines = log_lines(r)
    parts.append("<h2>Log</h2>")
    parts.append(
        table(("kind", "line"), ((esc(k), esc(redact_text(t, view.secrets))) for k, t in lines))
        if lines
        else "<p>Nothing said: no error, warning or note.</p>"
    )
    parts.append("<h2>Path baseline of its round</h2>" + baseline_table(view.baseline))
    parts.append("<h2>TCP evidence</h2>" + tcp_table(r))
    if r.programs:
        keys = sorted({k for values in r.programs.values() for k in values})
        parts.append(
            "<h2>Programs</h2>"
            + table(
                ("program", *keys),
                (
                    (esc(name), *(esc(_number(values.get(k))) for k in keys))
                    for name, values in sorted(r.programs.items())
                ),
            )
        )
    advice = operator_words(view.advice)  # it quotes the journaled next steps
    parts.append(f"<h2>What <code>advise</code> says for its path</h2><pre>{esc(advice)}</pre>")
    parts.append("<h2>Capture</h2>" + capture_table(r, view.pcap is not None, view.key))
    return document(f"{series(r)} at {utc(r.start_timestamp)}", "".join(parts), up="../")


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.4g}"


def baseline_table(b: PathBaseline | None) -> str:
    if b is None:
        return "<p>No baseline of this path from before this transfer is held (probes disabled, or rotated out).</p>"
    rtt = "/".join(human_seconds(v) for v in (b.rtt_min_seconds, b.rtt_avg_seconds, b.rtt_max_seconds))
    return pairs(
        (
            ("probed", f"{utc(b.start_timestamp)}, {b.probes_sent} {b.method} probes to {b.address}"),
            ("RTT min/avg/max", rtt),
            ("loss", f"{b.loss_ratio:.1%}"),
            ("MTU", b.mtu_bytes or "unknown"),
            ("bandwidth", f"{human_rate(b.bandwidth_bytes_per_second)} ({b.bandwidth_source or 'none'})"),
            ("BDP", human_bytes(b.bdp_bytes)),
            ("congestion control", ", ".join(f"{k} {v}" for k, v in sorted(b.congestion_control.items())) or "-"),
            ("probe error", b.error or "-"),
            ("remote note", b.remote_note or "-"),
        )
    )


def tcp_table(r: Result) -> str:
    keys = sorted(set(r.tcp_local) | set(r.tcp_remote))
    note = f"<p>Remote: {esc(r.tcp_remote_note)}</p>" if r.tcp_remote_note else ""
    if not keys:
        return note + "<p>No TCP state was read (not TCP, or the sockets were not seen).</p>"
    sender = "remote" if r.direction == "download" else "this host"
    return (
        f"<p>The sender is {esc(sender)}.</p>"
        + note
        + table(
            ("value", "this host", "remote"),
            ((esc(k), esc(_number(r.tcp_local.get(k))), esc(_number(r.tcp_remote.get(k)))) for k in keys),
            numeric=(1, 2),
        )
    )


def capture_table(r: Result, downloadable: bool, key: str) -> str:
    if r.pcap_path and downloadable:
        kept = f"<a href='{esc(key)}/pcap' download>download the pcap</a>"
    elif r.pcap_path:
        kept = "kept, but not where this exporter keeps captures now (or removed): not served"
    else:
        kept = "not kept (capture.keep: false)"
    rows = [
        ("wire numbers", esc("measured" if r.wire_measured else "absent (no capture, or one not read whole)")),
        ("transport", esc(f"{r.transport or '-'}, {r.data_flows} data flow(s); expected {r.expected or '-'}")),
        ("packets down/up", esc(f"{r.packets_down} / {r.packets_up}")),
        ("wire bytes down/up", esc(f"{human_bytes(r.wire_bytes_down)} / {human_bytes(r.wire_bytes_up)}")),
        ("payload bytes down/up", esc(f"{human_bytes(r.payload_bytes_down)} / {human_bytes(r.payload_bytes_up)}")),
        (
            "as captured",
            esc(f"{r.captured_packets_down} / {r.captured_packets_up} frames, {r.superframes} super-frames"),
        ),
        ("dropped by the kernel", esc(r.capture_dropped)),
        ("packet span", esc(f"{utc(r.first_packet_timestamp)} - {utc(r.last_packet_timestamp)}")),
        ("pcap", kept),
    ]
    return table(("", ""), rows)


# ---------------------------------------------------------------- configuration


def config_page(data: Mapping[str, Any], source: str, loaded: float | None, web: str, secrets: Sequence[str]) -> bytes:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: ~20x faster on a mesh's config
    shown = yaml.dump(redact(data, secrets), Dumper=dumper, sort_keys=False, allow_unicode=True)
    body = (
        pairs((("file", source), ("loaded", utc(loaded)), ("web config", web)))
        + "<p>Secrets are shown as &lt;redacted&gt;; the web config's password hashes are never shown.</p>"
        + f"<pre>{esc(shown)}</pre>"
    )
    return document("Configuration", body)


# ---------------------------------------------------------------- sweeps


@dataclass(frozen=True)
class Ranked:
    setting: str
    runs: int  # all of them
    ok: int
    mean: float | None
    low: float | None
    high: float | None
    baseline: bool


def t95(df: int) -> float:
    return T95[df - 1] if df <= len(T95) else _t_quantile((1 + CONFIDENCE) / 2, df)


def ranking(runs: Sequence[Result]) -> list[Ranked]:
    """One dataset's settings by mean throughput of their ok runs, with the mean's 95%
    interval (Student's t, as sweep-report gives it); settings without an ok run last."""
    by_setting: dict[str, list[Result]] = {}
    for r in runs:
        by_setting.setdefault(r.sweep_label, []).append(r)
    out = []
    for label, rs in by_setting.items():
        v = [r.throughput_bytes_per_second for r in rs if r.outcome == "ok"]
        mean = statistics.fmean(v) if v else None
        low = high = None
        if len(v) >= 2 and mean is not None:
            half = t95(len(v) - 1) * statistics.stdev(v) / math.sqrt(len(v))
            low, high = mean - half, mean + half
        base = any(r.sweep_setting.get("baseline") == label for r in rs)
        out.append(Ranked(label, len(rs), len(v), mean, low, high, base))
    return sorted(out, key=lambda x: (x.mean is None, -(x.mean or 0.0), x.setting))


SWEEP_EXAMPLE = """sweeps:
  streams:                    # the sweep's name
    protocol: gridftp         # a configured protocol
    remote: site              # a configured remote
    datasets: [f32m]          # configured datasets
    options: {parallel: [1, 4, 8]}   # each value is a setting, run in turn
    repetitions: 3
    schedule: ["0 3 * * 0"]   # when it runs (cron, schedule.timezone); empty: on demand"""


PASSIVE_EXAMPLE = """passive:
  enabled: true
  remotes:
    archive: {networks: [198.51.100.0/24]}
"""


def passive_page(results: Sequence[Result], enabled: bool) -> bytes:
    """The last passive transfers (this host's own, bigbinf/passive/), newest first, each
    with its verdict and evidence (docs/passive.md)."""
    if not results:
        if enabled:
            said = (
                "<p>The passive watcher runs; no transfer to a watched remote and service has moved "
                "<code>passive.min_bytes</code> since the exporter started.</p>"
            )
        else:
            said = (
                "<p>The passive watcher is off. It judges this host's own transfers (a user's scp, rsync, "
                "GridFTP, HTTP) from the kernel, with no extra traffic. Turn it on in the configuration, e.g.</p>"
                f"<pre>{esc(PASSIVE_EXAMPLE)}</pre><p>then reload; "
                f"<a href='{DOCS_URL}/passive.md'>docs/passive.md</a> says what it publishes.</p>"
            )
        return document("Passive transfers", said)
    rows = []
    for r in reversed(results):
        rate = r.tcp_local.get("steady_rate_bytes_per_second") or r.throughput_bytes_per_second
        retrans = str(r.retransmits_sender) if r.retransmits_sender is not None else "-"
        rows.append(
            [
                esc(utc(r.start_timestamp)),
                esc(r.remote),
                esc(r.protocol),
                esc(r.direction),
                esc(r.program or "?"),
                esc(human_bytes(r.file_bytes)),
                esc(human_seconds(r.duration_seconds)),
                esc(human_rate(rate)),
                esc(r.data_flows),
                esc(retrans),
                cause(r) + (f"<br><small>{esc(r.passive_note)}</small>" if r.passive_note else ""),
            ]
        )
    header = ["start", "remote", "service", "direction", "program", "bytes", "duration", "steady rate"]
    body = (
        "<p>This host's own transfers to the watched remotes and services, judged from its kernel as a scheduled "
        "transfer is (only this host's side is read: a download's sender is the remote, so it is often not "
        "judged). They count in no series' baseline.</p>"
        + table([*header, "streams", "retransmits (sent)", "verdict"], rows, numeric=(5, 6, 7, 8, 9))
    )
    return document("Passive transfers", body)


def sweeps_page(sweeps: Mapping[str, Sequence[Result]], configured: Sequence[str] = ()) -> bytes:
    if not sweeps:
        if configured:
            said = (
                f"<p>Configured: {esc(', '.join(configured))}; none has run yet. "
                "A sweep runs at its schedule, or now with <code>bigbinf-exporter sweep --sweep NAME</code>.</p>"
            )
        else:
            said = (
                "<p>No sweep is configured. A sweep runs one protocol with each value of its options in "
                "turn, repeated, and ranks the settings here. Add one to the configuration, e.g.</p>"
                f"<pre>{esc(SWEEP_EXAMPLE)}</pre>"
                "<p>then reload the exporter (<code>POST /-/reload</code>, or restart it), and run it now with "
                "<code>bigbinf-exporter sweep --sweep streams</code> or wait for its schedule; "
                f"<a href='{DOCS_URL}/configuration.md'>docs/configuration.md</a>, sweeps, has every field.</p>"
            )
        return document("Sweeps", said)
    parts = []
    for name in sorted(sweeps):
        runs = sweeps[name]
        first = runs[0]
        parts.append(
            f"<h2>{esc(name)}</h2><p>run {esc(first.sweep)}: {esc(first.protocol)} to {esc(first.remote)}, "
            f"{esc(first.direction)}, {len(runs)} runs, {esc(utc(first.start_timestamp))} - "
            f"{esc(utc(runs[-1].start_timestamp))}</p>"
        )
        for dataset in sorted({r.dataset for r in runs}):
            ranked = ranking([r for r in runs if r.dataset == dataset])
            top = max((x.high or x.mean or 0.0 for x in ranked), default=0.0) or 1.0
            parts.append(f"<h3>{esc(dataset)}</h3>")
            parts.append(
                table(
                    ("rank", "setting", "ok runs", "mean", "95% interval", ""),
                    (
                        (
                            str(i),
                            esc(x.setting) + (" <small>(baseline)</small>" if x.baseline else ""),
                            f"{x.ok} of {x.runs}",
                            esc(human_rate(x.mean)),
                            esc(f"{human_rate(x.low)} - {human_rate(x.high)}" if x.low is not None else "-"),
                            interval_bar(x, top),
                        )
                        for i, x in enumerate(ranked, start=1)
                    ),
                    numeric=(0, 3),
                )
            )
    return document("Sweeps", "".join(parts))


def interval_bar(x: Ranked, top: float, width: int = 120, height: int = 12) -> str:
    """The mean as a bar and its interval as a line, on a scale shared by the dataset's settings."""
    if x.mean is None:
        return ""

    def at(v: float) -> float:
        return max(0.0, min(width, v / top * width))

    line = ""
    if x.low is not None and x.high is not None:
        line = (
            f"<line x1='{at(x.low):.1f}' x2='{at(x.high):.1f}' y1='{height / 2}' y2='{height / 2}' "
            "stroke='#222' stroke-width='1.5'/>"
        )
    return (
        f"<svg width='{width}' height='{height}' role='img' aria-label='mean and interval'>"
        f"<rect x='0' y='2' width='{at(x.mean):.1f}' height='{height - 4}' fill='#9cd'/>{line}</svg>"
    )


# ---------------------------------------------------------------- the exporter's log


def log_page(lines: Sequence[tuple[str, str]], secrets: Sequence[str] = (), shown: int = 200) -> bytes:
    """The last `shown` lines of the exporter's own log (service/logtail.py), newest last,
    redacted as a transfer's log lines are."""
    last = lines[-shown:]
    if not last:
        return document("Log", "<p>Nothing logged yet.</p>")
    text = "".join(f"<span class='log-{esc(level)}'>{esc(redact_text(line, secrets))}</span>\n" for level, line in last)
    body = (
        f"<p>The last {len(last)} lines of this exporter's log (of {len(lines)} kept), newest last, in UTC; "
        "secrets redacted.</p>"
        f"<pre class='log'>{text}</pre>"
    )
    return document("Log", body)
