"""index.html of a report: Tables 1 and 2, the figures, and what was used and skipped."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from bigbinf.study.common import IMPORT_NOTE, IMPORTED, format_p, measured_by
from bigbinf.study.stats import NORMALITY_ALPHA
from bigbinf.study.tables import OUT_OF_RANGE, STUDY_SPEED_HEADING, Report, iso_utc

SKIPPED_SHOWN_IN_HTML = 500  # the full list is always in skipped.csv / report.json


def _num(value: float | int | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _html_table(headings: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def render_html(report: Report) -> str:
    opts = report.options
    e = html.escape
    t1 = _html_table(
        (
            "Protocol",
            "n peak",
            "Mean peak (B/s)",
            "SD peak",
            "Shapiro p peak",
            "n off-peak",
            "Mean off-peak (B/s)",
            "SD off-peak",
            "Shapiro p off-peak",
            "Normal",
            "Welch t",
            "df",
            "p-value",
            "Note",
        ),
        (
            [
                r.label,
                str(r.n_peak),
                _num(r.mean_peak),
                _num(r.sd_peak),
                format_p(r.shapiro_p_peak),
                str(r.n_offpeak),
                _num(r.mean_offpeak),
                _num(r.sd_offpeak),
                format_p(r.shapiro_p_offpeak),
                r.normal,
                _num(r.t_statistic, 3),
                _num(r.df, 1),
                format_p(r.p_value),
                r.note,
            ]
            for r in report.table1
        ),
    )
    t2 = _html_table(
        (
            "File size (bytes)",
            "Protocol",
            "n",
            "Bytes down",
            "Bytes up",
            "Bytes total",
            "Ratio (%)",
            "Time (s)",
            "Speed (bytes/s)",
            STUDY_SPEED_HEADING.replace(")", ", B/s)"),
            "Limited by",
        ),
        (
            [
                _num(r.file_bytes),
                r.label,
                str(r.n),
                _num(r.bytes_down),
                _num(r.bytes_up),
                _num(r.bytes_total),
                _num(r.ratio_percent),
                _num(r.time_seconds),
                _num(r.speed_bytes_per_second),
                _num(r.study_speed_bytes_per_second),
                r.limited_by,
            ]
            for r in report.table2
        ),
    )
    figures = "\n".join(
        f'<figure><img src="{e(f.file.name)}" alt="{e(f.title)}"><figcaption><b>{e(f.title)}.</b> '
        f"{e(f.caption)}</figcaption></figure>"
        for f in report.figures
    )
    counts = "".join(f"<li>{n} {e(c)}</li>" for c, n in report.skipped_counts().items())
    listed = [s for s in report.skipped if s.category != OUT_OF_RANGE][:SKIPPED_SHOWN_IN_HTML]
    skipped_table = _html_table(("Result", "Category", "Reason"), ([s.what, s.category, s.reason] for s in listed))
    more = len([s for s in report.skipped if s.category != OUT_OF_RANGE]) - len(listed)
    peak = f"{opts.peak_hours[0]:g}h00-{opts.peak_hours[1]:g}h00 at UTC{opts.tz_offset_hours:+g}"
    imports = e(IMPORT_NOTE) + " " if any(measured_by(r) == IMPORTED for r in report.used) else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>bigbinf report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 80em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }}
th {{ background: #eee; }} td:first-child, th:first-child {{ text-align: left; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; }}
</style></head>
<body>
<h1>Transfer performance report</h1>
<p>Source: {e(report.source)}. Range: {e(iso_utc(opts.start) or "beginning")} to {e(iso_utc(opts.end) or "end")} (UTC).
Peak hours: {e(peak)}. Generated {e(report.generated_utc)}.</p>
<p><b>Used {len(report.used)} results; skipped {len(report.skipped)}.</b></p>
<ul>{counts}</ul>
<p>Downloads: <a href="table1.csv">table1.csv</a>, <a href="table2.csv">table2.csv</a>,
<a href="skipped.csv">skipped.csv</a>, <a href="report.json">report.json</a>.</p>
<h2>Table 1: is the peak slower than off-peak?</h2>
<p>Mean speed (file bytes / duration) of transfers started in and outside the peak hours, the Shapiro-Wilk
normality p-value of each group (normal: p &ge; {NORMALITY_ALPHA} in both), and the two-sided p-value of Welch's
t-test with the null hypothesis that the mean speeds are the same. A small p-value (below 0.05) means the peak
does make a difference. {imports}</p>
{t1}
<h2>Table 2: per file size and protocol</h2>
<p>Means over the transfers of each file size and protocol. In rows of new measurements, bytes are link-layer
frame bytes captured on the client and time is the transfer command's wall clock. {imports}The ratio is bytes
total / file size (100% = exactly the file size); speed is file bytes / time. The last column is speed as the
2015 study computed it: payload bytes down / time from first to last packet (n/a without a capture), for
comparison with the study's tables.</p>
{t2}
<h2>Figures</h2>
{figures}
<h2>Skipped results</h2>
<p>Results outside the range are only counted; every skipped result is in skipped.csv.</p>
{skipped_table}
{f"<p>... and {more} more in skipped.csv.</p>" if more > 0 else ""}
</body></html>
"""
