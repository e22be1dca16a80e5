"""What issue 43's breaker found open in the front door, through the exporter as a process:
an undecodable or mistyped config file, a chunk-size line longer than the counter reads,
a valid web file in a refused reload, a removed user on a kept-alive connection, a
lowered min_version, and the gauges of the front door in force."""

from __future__ import annotations

import http.client
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from ..support.exporter import ROOT, ExporterProcess
from ..support.prometheus import PrometheusServer
from .test_front_door_reload import AT_ONCE, _metric, _plain
from .test_web import Site, _auth_line, _basic, _config, _hash, _read_all


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with ExitStack() as stack:
        yield Site(tmp_path, stack)


def _good_tls(site: Site) -> dict:
    return yaml.safe_load(site.web.read_text())["tls_server_config"]


def _broken_web_files(site: Site) -> dict[str, tuple[bytes, str]]:
    """Each file's bytes and what its error must say (the place, or why)."""
    good = site.web.read_text()
    tls = _good_tls(site)
    users = yaml.safe_load(good)["basic_auth_users"]

    def dump(**raw: object) -> bytes:
        return yaml.safe_dump({"basic_auth_users": users, **raw}).encode()

    return {
        "a Latin-1 comment": (b"# caf\xe9\n" + good.encode(), "not UTF-8 (byte 0xe9 at offset 5)"),
        "UTF-16": (good.encode("utf-16"), "not UTF-8"),
        "a nested cipher list": (
            dump(tls_server_config={**tls, "cipher_suites": [["TLS_AES_128_GCM_SHA256"]]}),
            "tls_server_config.cipher_suites[0]: input should be a valid string",
        ),
        "a map in curve_preferences": (
            dump(tls_server_config={**tls, "curve_preferences": [{"X25519": 1}]}),
            "tls_server_config.curve_preferences[0]: input should be a valid string",
        ),
        "a string for a boolean": (
            dump(tls_server_config={**tls, "prefer_server_cipher_suites": "yes"}),
            "tls_server_config.prefer_server_cipher_suites: input should be a valid boolean",
        ),
        "a list for a header value": (
            dump(tls_server_config=tls, http_server_config={"headers": {"X-Frame-Options": ["deny"]}}),
            "http_server_config.headers.X-Frame-Options: input should be a valid string",
        ),
        "a number for a user name": (
            dump(tls_server_config=tls, basic_auth_users={**users, 7: users["prometheus"]}),
            "basic_auth_users.7: a user name must be a string",
        ),
        "nested too deeply": (b"[" * 3000 + b"]" * 3000, "YAML nested too deeply"),
    }


def test_an_undecodable_or_mistyped_web_config_is_a_counted_refusal_never_a_crash(site: Site) -> None:
    auth = _basic("prometheus", site.password)
    good = site.web.read_bytes()
    broken = _broken_web_files(site)
    for n, (case, (data, says)) in enumerate(broken.items(), start=1):
        site.web.write_bytes(data)
        status, _, body = site.request("POST", "/-/reload", auth)
        assert status == 500, (case, body)
        assert f"{site.web}: " in body.decode() and says in body.decode(), (case, body)
        assert _metric(site, auth, "bigbinf_web_config_last_reload_successful") == 0.0, case
        assert _metric(site, auth, "bigbinf_config_last_reload_successful") == 0.0, case
        assert _metric(site, auth, "bigbinf_web_config_reloads_refused_total") == n, case
        assert site.request("GET", "/metrics", {})[0] == 401, case  # the old front door stands
    # By SIGHUP: one log line, the thread alive (the next reload answers).
    site.web.write_bytes(broken["UTF-16"][0])
    before = site.exporter.log.read_text().count("reload failed")
    assert site.exporter.proc is not None
    site.exporter.proc.send_signal(signal.SIGHUP)
    PrometheusServer.wait_for(
        lambda: site.exporter.log.read_text().count("reload failed") == before + 1, timeout=20, what="the refusal"
    )
    log = site.exporter.log.read_text()
    assert "Traceback" not in log and "Exception in thread" not in log
    refused = "bigbinf_web_config_reloads_refused_total"
    PrometheusServer.wait_for(
        lambda: _metric(site, auth, refused) == len(broken) + 1, timeout=20, what="the SIGHUP's refusal counted"
    )
    # A main config that is not UTF-8: the same.
    site.web.write_bytes(good)
    config = site.exporter.argv[site.exporter.argv.index("--config.file") + 1]
    main = Path(config).read_bytes()
    Path(config).write_bytes(b"# \xff\n" + main)
    status, _, body = site.request("POST", "/-/reload", auth)
    assert status == 500 and f"{config}: cannot read the file: not UTF-8" in body.decode(), body
    assert _metric(site, auth, "bigbinf_config_last_reload_successful") == 0.0
    Path(config).write_bytes(main)
    assert site.request("POST", "/-/reload", auth)[0] == 200
    assert _metric(site, auth, "bigbinf_web_config_last_reload_successful") == 1.0
    assert _metric(site, auth, "bigbinf_config_last_reload_successful") == 1.0


def test_check_and_start_say_file_and_message_for_an_undecodable_or_mistyped_web_config(
    site: Site, tmp_path: Path
) -> None:
    broken = _broken_web_files(site)
    bad = tmp_path / "bad.yml"
    for case, (data, says) in broken.items():
        bad.write_bytes(data)
        check = subprocess.run(
            [sys.executable, "-m", "bigbinf", "--web.config.file", str(bad), "--web.config.check"],
            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
        assert check.returncode == 1 and f"{bad}: " in check.stderr and says in check.stderr, (case, check.stderr)
        assert "Traceback" not in check.stderr, case
    for case in ("UTF-16", "a nested cipher list"):
        bad.write_bytes(broken[case][0])
        start = subprocess.run(
            [sys.executable, "-m", "bigbinf", "--config.file", str(tmp_path / "config.yaml"),
             "--web.listen-address", "127.0.0.1:1", "--web.config.file", str(bad)],
            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
        assert start.returncode == 1 and f"{bad}: " in start.stderr, (case, start.stderr)
        assert "Traceback" not in start.stderr, case


def test_a_valid_web_file_in_a_refused_reload_is_not_reported_applied(site: Site, tmp_path: Path) -> None:
    auth = _basic("prometheus", site.password)
    stamp = "bigbinf_web_config_last_reload_success_timestamp_seconds"
    started = _metric(site, auth, stamp)
    raw = yaml.safe_load(site.web.read_text())
    raw["http_server_config"]["headers"]["X-Frame-Options"] = "DENY"
    site.web.write_text(yaml.safe_dump(raw))
    config = tmp_path / "config.yaml"
    main = config.read_text()
    config.write_text(main + "no_such_key: 1\n")
    assert site.request("POST", "/-/reload", auth)[0] == 500
    assert _metric(site, auth, stamp) == started  # no fresh success for a file not applied
    assert _metric(site, auth, "bigbinf_web_config_reloads_refused_total") == 0  # the web file was not refused
    assert "X-Frame-Options" not in site.request("GET", "/", auth)[1]
    config.write_text(main)
    assert site.request("POST", "/-/reload", auth)[0] == 200
    assert _metric(site, auth, stamp) > started
    assert site.request("GET", "/", auth)[1]["X-Frame-Options"] == "DENY"


def test_a_user_removed_by_a_reload_is_refused_on_a_kept_alive_connection(site: Site) -> None:
    auth = _basic("prometheus", site.password)
    raw = yaml.safe_load(site.web.read_text())
    raw["basic_auth_users"]["grafana"] = _hash("gpw")
    site.web.write_text(yaml.safe_dump(raw))
    assert site.request("POST", "/-/reload", auth)[0] == 200
    kept = http.client.HTTPSConnection(
        "127.0.0.1", site.exporter.port, context=site.pki.client_context(site.client), timeout=30
    )
    try:
        grafana = _basic("grafana", "gpw")
        for _ in range(2):  # the second from the remembered success
            kept.request("GET", "/metrics", headers=grafana)
            response = kept.getresponse()
            response.read()
            assert response.status == 200
        sock = kept.sock
        del raw["basic_auth_users"]["grafana"]
        site.web.write_text(yaml.safe_dump(raw))
        assert site.request("POST", "/-/reload", auth)[0] == 200
        kept.request("GET", "/metrics", headers=grafana)
        assert kept.sock is sock  # the same connection, kept alive across the reload
        response = kept.getresponse()
        response.read()
        assert response.status == 401
    finally:
        kept.close()
    assert site.request("GET", "/metrics", auth)[0] == 200


def test_a_lowered_min_version_is_refused_and_a_new_client_ca_file_is_taken(site: Site, tmp_path: Path) -> None:
    auth = _basic("prometheus", site.password)
    site.write_web(site.password, tls_extra={"min_version": "TLS13"})
    assert site.request("POST", "/-/reload", auth)[0] == 200
    site.write_web(site.password, tls_extra={"min_version": "TLS10"})
    status, _, body = site.request("POST", "/-/reload", auth)
    assert status == 500 and "refused: it would remove TLS versions below TLS13" in body.decode(), body
    assert "min_version: TLS10" in body.decode()
    assert _metric(site, auth, "bigbinf_web_config_last_reload_successful") == 0.0
    # TLS 1.2 is still refused: the TLS13 floor holds.
    tls12 = site.pki.client_context(site.client)
    tls12.maximum_version = tls12.minimum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError)):
        site.request("GET", "/metrics", auth, context=tls12)
    # A rotated client CA (here: the same CA, at another path) is taken.
    rotated = tmp_path / "rotated-ca.crt"
    rotated.write_bytes(site.pki.ca.cert.read_bytes())
    site.write_web(site.password, tls_extra={"min_version": "TLS13", "client_ca_file": str(rotated)})
    assert site.request("POST", "/-/reload", auth)[0] == 200


def test_the_front_door_in_force_is_published(site: Site, tmp_path: Path) -> None:
    auth = _basic("prometheus", site.password)
    names = ("bigbinf_web_tls_enabled", "bigbinf_web_basic_auth_enabled", "bigbinf_web_client_cert_required")
    assert [_metric(site, auth, n) for n in names] == [1.0, 1.0, 1.0]
    # A restart with a weakened file serves it (the alert's case): the gauges say so.
    (tmp_path / "plain").mkdir()
    web = tmp_path / "plain" / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": _hash("pw")}}))
    with ExporterProcess(
        _config(tmp_path / "plain"),
        tmp_path / "plain.log",
        extra_args=["--web.config.file", str(web)],
        auth=("prometheus", "pw"),
    ) as plain:
        text = plain.metrics()
        for name, value in zip(names, ("0.0", "1.0", "0.0"), strict=True):
            assert f"\n{name} {value}\n" in text, name


def test_a_chunk_size_line_longer_than_the_counter_reads_is_413_at_once(site: Site, tmp_path: Path) -> None:
    head = b"POST /-/reload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    long_lines = (b"FFFFFF;e=" + b"a" * 1030 + b"\r\n", b"3;e=" + b"a" * 4000 + b"\r\nabc\r\n0\r\n\r\n")
    for line in long_lines:
        with site.pki.client_context(site.client).wrap_socket(
            socket.create_connection(("127.0.0.1", site.exporter.port), timeout=AT_ONCE), server_hostname="localhost"
        ) as tls:
            tls.sendall(head + _auth_line(site) + b"\r\n" + line)
            answer = _read_all(tls)
            assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
    (tmp_path / "plain").mkdir()
    with ExporterProcess(
        _config(tmp_path / "plain"), tmp_path / "plain.log", extra_args=["--web.enable-lifecycle"]
    ) as plain:
        for line in long_lines:
            assert _plain(plain.port, head + b"\r\n" + line)[0] == 413
        # An extension within the bound: read and served.
        within = b"3;e=" + b"a" * 1000 + b"\r\nabc\r\n0\r\n\r\n"
        assert _plain(plain.port, head + b"\r\n" + within)[0] == 200
        line = 'bigbinf_http_connections_rejected_total{reason="too_large"} 2.0'
        PrometheusServer.wait_for(lambda: line in plain.metrics(), timeout=20, what="the refusals counted")
