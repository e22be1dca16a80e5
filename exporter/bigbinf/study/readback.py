"""Results read back from a Prometheus that scraped (or was backfilled with) the last-result gauges.

`report --source prometheus URL` uses this instead of the journal: each distinct value of
bigbinf_last_transfer_start_timestamp_seconds in a series is one result, and the other
last-result gauges at that step fill in its fields.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any, TextIO

from bigbinf import metrics
from bigbinf.result import OUTCOMES, Result
from bigbinf.study.common import IMPORTED, ORIGIN_LABEL, Progress
from bigbinf.usage import UsageError

DEFAULT_STEP_SECONDS = 60.0  # Prometheus source: must stay below the 5 min lookback delta
MAX_POINTS_PER_QUERY = 10_000  # Prometheus refuses query_range answers above 11,000 points per series


LAST = metrics.PREFIX + "last_transfer_"
START_METRIC = LAST + "start_timestamp_seconds"
# Gauge -> Result field, for the gauges without an extra label.
PLAIN_GAUGES = {
    LAST + "duration_seconds": "duration_seconds",
    LAST + "file_bytes": "file_bytes",
    LAST + "retransmits_wire": "retransmits_wire",
    LAST + "verified": "verified",
    LAST + "capture_dropped_packets": "capture_dropped",
    LAST + "success": "success",
}
WAY_GAUGES = {LAST + "wire_bytes": "wire_bytes", LAST + "payload_bytes": "payload_bytes", LAST + "packets": "packets"}
OUTCOME_GAUGE = LAST + "outcome"
SeriesId = tuple[tuple[str, str], ...]  # every label but __name__ (and way/outcome): one target's series


def _http_json(url: str, params: dict[str, Any], timeout: float) -> Any:
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{query}", timeout=timeout) as r:
            body = json.load(r)
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise UsageError(f"--source prometheus {url}: HTTP {exc.code}: {detail}", 1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(
            f"--source prometheus {url}: cannot query ({reason}); check the URL and that Prometheus is up", 1
        ) from None
    if body.get("status") != "success":
        raise UsageError(f"--source prometheus {url}: {body.get('error', body)}", 1)
    return body["data"]["result"]


def _series_id(metric: dict[str, str], drop: tuple[str, ...] = ()) -> SeriesId:
    return tuple(sorted((k, v) for k, v in metric.items() if k != "__name__" and k not in drop))


def _windows(start: float, end: float, step: float) -> list[tuple[float, float]]:
    """Split [start, end] so no query_range answer exceeds Prometheus' points limit."""
    span = step * MAX_POINTS_PER_QUERY
    windows, t = [], start
    while t <= end:
        windows.append((t, min(end, t + span - step)))
        t += span
    return windows


def read_prometheus(
    url: str,
    start: float,
    end: float,
    step: float = DEFAULT_STEP_SECONDS,
    timeout: float = 60.0,
    stream: TextIO | None = None,
) -> list[Result]:
    """Results back from Prometheus: one per distinct start timestamp of each series.

    query_range over the last-result gauges at `step`: a result is visible from its
    scrape (or backfilled sample) on, so each distinct value of
    bigbinf_last_transfer_start_timestamp_seconds is one result, and the other gauges
    are read at the first step that shows it (same scrape, so they belong together).
    Two results of one series less than `step` apart would be seen as one.  The query
    runs a day past `end` (not past now), since a result is published when the
    transfer ends, after its start.
    """
    query_end = min(time.time(), end + 86400.0)
    windows = _windows(start, max(start, query_end), step)
    names = [START_METRIC, OUTCOME_GAUGE, *PLAIN_GAUGES, *WAY_GAUGES]
    progress = Progress("queried", "Prometheus ranges", len(windows) * len(names), stream=stream)
    last_seen: dict[SeriesId, float] = {}  # the start value each series showed last
    found: dict[tuple[SeriesId, float], dict[str, Any]] = {}  # (series, step time) -> fields
    done = 0
    for w_start, w_end in windows:
        params = {"start": f"{w_start:.3f}", "end": f"{w_end:.3f}", "step": f"{step:g}"}
        needed: dict[tuple[SeriesId, float], dict[str, Any]] = {}
        for series in _http_json(url, {"query": START_METRIC, **params}, timeout):
            sid = _series_id(series["metric"])
            for t, value in series["values"]:
                value = float(value)
                if last_seen.get(sid) != value:
                    last_seen[sid] = value
                    needed[(sid, float(t))] = {"labels": series["metric"], "start": value}
        done += 1
        progress.update(done)
        for name in names[1:]:
            if needed:
                _collect(name, _http_json(url, {"query": name, **params}, timeout), needed)
            done += 1
            progress.update(done)
        found.update(needed)
    results = []
    for fields in found.values():
        try:
            results.append(_result_from_fields(fields))
        except ValueError as exc:  # e.g. a NaN gauge written by hand: one result, not the report
            where = ",".join(f'{k}="{v}"' for k, v in sorted(fields["labels"].items()) if k != "__name__")
            print(
                f"report: skipped the result of {{{where}}} started at {fields['start']!r} in {url}: {exc}",
                file=stream if stream is not None else sys.stderr,
            )
    return _dedupe(results)


def _collect(name: str, answer: list[dict[str, Any]], needed: dict[tuple[SeriesId, float], dict[str, Any]]) -> None:
    extra = "way" if name in WAY_GAUGES else "outcome" if name == OUTCOME_GAUGE else None
    for series in answer:
        sid = _series_id(series["metric"], drop=(extra,) if extra else ())
        for t, value in series["values"]:
            fields = needed.get((sid, float(t)))
            if fields is None:
                continue
            if name == OUTCOME_GAUGE:
                if float(value) == 1.0:
                    fields["outcome"] = series["metric"].get("outcome", "")
            elif extra == "way":
                fields[f"{WAY_GAUGES[name]}_{series['metric'].get('way', '')}"] = float(value)
            else:
                fields[PLAIN_GAUGES[name]] = float(value)


def _result_from_fields(fields: dict[str, Any]) -> Result:
    labels = fields["labels"]
    outcome = fields.get("outcome")
    error = ""
    if outcome not in OUTCOMES:
        if "success" in fields:
            outcome = "ok" if fields["success"] == 1.0 else "failed"
        else:
            outcome, error = "failed", "outcome not recorded in Prometheus"

    def whole(name: str) -> int:
        return round(float(fields.get(name, 0.0)))

    return Result(
        protocol=labels.get("protocol", ""),
        remote=labels.get("remote", ""),
        dataset=labels.get("dataset", ""),
        direction=labels.get("direction", "download"),
        start_timestamp=fields["start"],
        outcome=outcome,
        error=error,
        duration_seconds=fields.get("duration_seconds", 0.0),
        file_bytes=whole("file_bytes"),
        verified=fields.get("verified", 0.0) == 1.0,
        # The wire gauges are left out for a capture that could not be read whole.
        wire_measured="wire_bytes_down" in fields or "wire_bytes_up" in fields,
        wire_bytes_down=whole("wire_bytes_down"),
        wire_bytes_up=whole("wire_bytes_up"),
        payload_bytes_down=whole("payload_bytes_down"),
        payload_bytes_up=whole("payload_bytes_up"),
        packets_down=whole("packets_down"),
        packets_up=whole("packets_up"),
        retransmits_wire=whole("retransmits_wire"),
        capture_dropped=whole("capture_dropped"),
        # backfill labels imported 2015 results origin="import" so they stay apart here too
        source=IMPORTED if labels.get(ORIGIN_LABEL) == IMPORTED else "prometheus",
    )


def _dedupe(results: Iterable[Result]) -> list[Result]:
    """One result per series and start time, whatever job/instance scraped it (HA pairs,
    backfilled copies of results also scraped live)."""
    unique: dict[tuple[Any, float], Result] = {}
    for result in results:
        unique.setdefault((result.key, result.start_timestamp), result)
    return sorted(unique.values(), key=lambda r: r.start_timestamp)
