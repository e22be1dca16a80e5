"""The cached exposition: the same bytes as client_python renders for the same state, in
both formats and every negotiated variant, always a whole rendering, updated on change."""

from __future__ import annotations

import dataclasses
import gzip
import random
import threading
import time
from functools import partial

import pytest
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families

from bigbinf import metrics as M
from bigbinf.passive.watcher import PassiveCounts
from bigbinf.result import Result, SeriesKey
from bigbinf.service import exposition
from bigbinf.service.collector import ExporterState
from bigbinf.service.exposition import MetricsCache, build

from ..support.mesh import mesh_keys, mesh_result, mesh_state
from ..support.prometheus import PrometheusServer
from .test_collector import GOLDEN, PATH, _registry, _state

# What scrapers send: Prometheus 2.x (Debian 12's 2.42), Prometheus 3.x, curl, a browser,
# a text/plain 1.0.0 client, and OpenMetrics escaping variants.
ACCEPT = [
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "",
    "*/*",
    "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "text/plain;version=1.0.0;escaping=underscores",
    "application/openmetrics-text",
    "application/openmetrics-text;version=1.0.0;escaping=underscores",
    "application/openmetrics-text;version=1.0.0;escaping=values",  # not cached: rendered by client_python
    "text/plain;version=1.0.0;escaping=dots",  # not cached
]


def _passive_state(site: str = "") -> ExporterState:
    """A watcher's counts: several remotes, services, verdicts, a rate in each bucket range."""
    counts = PassiveCounts()
    for i, (remote, service, direction, verdict) in enumerate(
        [("archive", "gridftp", "upload", "receive_window"), ("archive", "ssh", "download", "none"),
         ("peer", "http", "upload", "cpu"), ("archive", "gridftp", "upload", "receive_window")]
    ):  # fmt: skip
        counts.add(
            Result(service, remote, "passive", direction, 1.0 + i, "ok", duration_seconds=2.0, file_bytes=(3 + i) << 22,
                   source="passive", limited_by="" if verdict == "none" else verdict)
        )  # fmt: skip
    counts.skipped, counts.stretched, counts.open_flows = 7, 2, 12
    counts.listing_seconds, counts.interval_seconds = 0.0021, 1.0
    state = ExporterState(site)
    state.record_passive(counts)
    return state


# 200 series: the larger families span several of the renderer's line blocks.
STATES = {
    "passive": _passive_state,
    "passive on a mesh site": lambda: _passive_state("alpha"),
    "golden": _state,
    "empty": ExporterState,
    "mesh": lambda: mesh_state(remotes=2, protocols=10, datasets=5),
    "mesh without payload histograms": lambda: mesh_state(
        remotes=2, protocols=10, datasets=5, payload_histograms=False
    ),
}


@pytest.mark.parametrize("name", STATES)
def test_both_formats_are_client_pythons_bytes(name: str) -> None:
    state = STATES[name]()
    registry = _registry(state)
    rendered = build(state.snapshot())
    text = b"".join(rendered.chunks("text"))
    assert text == generate_latest(registry)
    assert b"".join(rendered.chunks("openmetrics")) == openmetrics_latest(registry)
    assert gzip.decompress(rendered.text_gzip) == text
    assert gzip.decompress(rendered.openmetrics_gzip) == openmetrics_latest(registry)
    if name == "golden":
        assert text.decode() == GOLDEN.read_text()
    if name.startswith("mesh"):
        assert max(len(f.samples) for f in rendered.families) > 1


def test_label_values_are_escaped_as_client_python_does() -> None:
    # Names are restricted by the config, but a remote's congestion control is its sysctl's word.
    state = _state()
    state.record_path(dataclasses.replace(PATH, congestion_control={"remote": 'we"ird\\cc\nx'}))
    registry = _registry(state)
    rendered = build(state.snapshot())
    assert b"".join(rendered.chunks("text")) == generate_latest(registry)
    assert b"".join(rendered.chunks("openmetrics")) == openmetrics_latest(registry)
    assert b'algorithm="we\\"ird\\\\cc\\nx"' in b"".join(rendered.chunks("text"))


@pytest.mark.parametrize("accept", ACCEPT)
@pytest.mark.parametrize("accept_encoding", ["", "gzip", "gzip, deflate, br"])
def test_every_negotiated_variant_serves_what_client_python_would(accept: str, accept_encoding: str) -> None:
    state = _state()
    registry = _registry(state)
    cache = MetricsCache(state, registry)
    chunks, content_type, gzipped = cache.response(accept, accept_encoding)
    encoder, expected_type = choose_encoder(accept)
    assert content_type == expected_type
    assert gzipped == ("gzip" in accept_encoding)
    body = b"".join(chunks)
    assert (gzip.decompress(body) if gzipped else body) == encoder(registry)


def test_the_usual_variants_are_cached_not_rendered_per_scrape() -> None:
    state = _state()
    cache = MetricsCache(state, _registry(state))
    for accept in ACCEPT[:8]:
        encoder, _ = choose_encoder(accept)
        assert exposition.cached_format(encoder) is not None, accept
        first, _, _ = cache.response(accept, "gzip")
        again, _, _ = cache.response(accept, "gzip")
        assert first[0] is again[0]  # the same bytes object: nothing rendered for the second scrape
    encoder, _ = choose_encoder(ACCEPT[8])
    assert exposition.cached_format(encoder) is None
    assert exposition.cached_format(partial(generate_latest)) == "text"
    assert exposition.cached_format(partial(openmetrics_latest, version="2.0.0")) is None


def test_payload_histograms_switch_drops_only_that_family() -> None:
    state = mesh_state(remotes=1, protocols=2, datasets=1, payload_histograms=False)
    registry = _registry(state)
    key = {"protocol": "scp", "remote": "site00", "dataset": "f5m", "direction": "download"}
    text = b"".join(build(state.snapshot()).chunks("text")).decode()
    assert M.PAYLOAD_SIZE_HIST.name not in text
    assert registry.get_sample_value("bigbinf_transfer_payload_size_bytes_count", {**key, "way": "down"}) is None
    assert registry.get_sample_value("bigbinf_transfers_total", {**key, "outcome": "ok"}) is not None
    state.set_payload_histograms(True)
    assert registry.get_sample_value("bigbinf_transfer_payload_size_bytes_count", {**key, "way": "down"}) is not None
    assert M.PAYLOAD_SIZE_HIST.name in b"".join(build(state.snapshot()).chunks("text")).decode()


def _series_values(text: str, name: str, labels: dict[str, str]) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_a_change_is_rendered_in_the_background_and_served() -> None:
    state = _state()
    cache = MetricsCache(state, _registry(state))
    cache.start()
    try:
        before = cache.current
        labels = {"protocol": "scp", "remote": "lab", "dataset": "f64m", "direction": "download", "outcome": "ok"}
        served = b"".join(cache.response("", "")[0]).decode()
        assert _series_values(served, "bigbinf_transfers_total", labels) == 1
        state.record_journal_failure()
        state.record_round_skipped("round_running")
        PrometheusServer.wait_for(
            lambda: cache.current.generation == state.generation, timeout=30, what="the change to be rendered"
        )
        served = b"".join(cache.response("", "")[0]).decode()
        assert _series_values(served, "bigbinf_journal_write_failures_total", {}) == 1
        assert _series_values(served, "bigbinf_rounds_skipped_total", {"reason": "round_running"}) == 1
        assert _series_values(served, "bigbinf_rounds_skipped_total", {"reason": "lock_held"}) == 0
        assert cache.current.generation > before.generation
    finally:
        cache.stop()
    assert not any(t.name == "metrics-render" and t.is_alive() for t in threading.enumerate())


def test_a_scrape_sees_a_whole_state_while_results_arrive() -> None:
    """Each ok result moves transfers_total{outcome="ok"} and the duration histogram's
    _count together, and rounds_total follows each pair of results: in any whole state,
    per series ok == _count, and 2 x rounds <= all transfers <= 2 x rounds + 2."""
    keys = mesh_keys(remotes=2, protocols=10, datasets=5)  # 200 series: a rendering takes a while
    state = ExporterState()
    state.prime(keys)
    cache = MetricsCache(state, _registry(state))
    cache.SETTLE_SECONDS = 0.0  # render as often as possible: the most chances of a torn read
    cache.start()
    rng = random.Random(3)
    done = threading.Event()
    seen: set[float] = set()

    def writer() -> None:
        for i in range(600):
            for key in (keys[i % len(keys)], keys[(i + 1) % len(keys)]):
                state.record(mesh_result(key, 1000.0 + i, rng, "ok" if i % 3 else "failed"))
            state.record_round(1.0, 1000.0 + i)
            time.sleep(0.0005)  # results keep arriving while the renderer works
            if i % 100 == 99:  # however loaded the machine, let the scrapes see the state move
                watched, deadline = len(seen), time.monotonic() + 10
                while len(seen) == watched and time.monotonic() < deadline:
                    time.sleep(0.001)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while True:
            chunks, _, _ = cache.response("", "")
            families = {f.name: f for f in text_string_to_metric_families(b"".join(chunks).decode())}
            transfers = families["bigbinf_transfers"].samples
            counts = {
                tuple(sorted((k, v) for k, v in s.labels.items() if k != "outcome")): s.value
                for s in transfers
                if s.labels["outcome"] == "ok"
            }
            for s in families[M.DURATION_HIST.name].samples:
                if s.name.endswith("_count"):
                    assert counts[tuple(sorted(s.labels.items()))] == s.value
            rounds = families["bigbinf_rounds"].samples[0].value
            assert 2 * rounds <= sum(s.value for s in transfers) <= 2 * rounds + 2
            seen.add(rounds)
            if done.is_set() and cache.current.generation == state.generation:
                break
    finally:
        thread.join()
        cache.stop()
    assert len(seen) >= 3  # the scrapes did watch the state move
    final = b"".join(cache.refresh().chunks("text"))
    assert final == generate_latest(_registry(state))


def test_subscribers_hear_every_kind_of_change() -> None:
    state = ExporterState()
    heard: list[int] = []
    state.subscribe(lambda: heard.append(state.generation))
    key = SeriesKey("scp", "lab", "f", "download")
    rng = random.Random(1)
    state.prime([key], 60.0)
    state.restore([mesh_result(key, 1.0, rng)])
    state.record(mesh_result(key, 2.0, rng))
    state.record_round(1.0, 3.0)
    state.record_round_skipped("lock_held")
    state.record_round_overrun(12.5)
    state.record_config(False)
    state.record_journal_failure()
    state.forget_paths([])
    state.set_payload_histograms(False)
    assert heard == list(range(1, 11))
