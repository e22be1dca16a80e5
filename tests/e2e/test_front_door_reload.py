"""The front door against a reload that would open it, a browser's cross-site request and a
body that declares too much (issue 43), through the exporter as a process on a free
loopback port: its answers, its log, its /metrics, and real curl."""

from __future__ import annotations

import http.client
import re
import signal
import socket
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from bigbinf.service import httpd

from ..support.exporter import ExporterProcess
from ..support.prometheus import PrometheusServer
from ..support.tls import TestPKI
from .test_web import HTTP_TO_HTTPS, Site, _auth_line, _basic, _config, _hash, _read_all

# Answers that must come before the server's own deadline would end the connection: a
# socket timeout under it makes "answered at once" an outcome, not a timing figure.
AT_ONCE = httpd.BODY_SECONDS / 2


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with ExitStack() as stack:
        yield Site(tmp_path, stack)


def _metric(site: Site, auth: dict[str, str], name: str) -> float:
    status, _, body = site.request("GET", "/metrics", auth)
    assert status == 200
    found = re.search(rb"(?m)^" + re.escape(name.encode()) + rb" (\S+)$", body)
    assert found, name
    return float(found[1])


def _reads(site: Site, auth: dict[str, str], name: str, value: float) -> None:
    """/metrics reads `value` for `name` (the exposition is rendered after each change, not per scrape)."""
    PrometheusServer.wait_for(lambda: _metric(site, auth, name) == value, timeout=20, what=f"{name} {value}")


def _counted(site: Site, auth: dict[str, str], reason: str, n: int) -> None:
    """The refusal counter reaches n (it is published every few seconds)."""
    name = f'bigbinf_http_connections_rejected_total{{reason="{reason}"}}'
    PrometheusServer.wait_for(lambda: _metric(site, auth, name) == n, timeout=20, what=f"{n} {reason} counted")


def _front_door_holds(site: Site, auth: dict[str, str]) -> None:
    """TLS with a client certificate and basic auth, as the site was started."""
    assert site.request("GET", "/metrics", auth)[0] == 200
    assert site.request("GET", "/metrics", {})[0] == 401
    assert site.request("GET", "/", _basic("prometheus", "wrong"))[0] == 401
    with socket.create_connection(("127.0.0.1", site.exporter.port), timeout=30) as plain:
        plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_all(plain) == HTTP_TO_HTTPS
    with pytest.raises((ssl.SSLError, ConnectionError)):
        site.request("GET", "/metrics", auth, context=site.pki.client_context(None))


def test_a_reload_never_weakens_the_front_door(site: Site) -> None:
    auth = _basic("prometheus", site.password)
    good = site.web.read_text()
    tls = yaml.safe_load(good)["tls_server_config"]
    no_client_certs = {k: v for k, v in tls.items() if k not in ("client_auth_type", "client_ca_file")}
    weakened = {
        "an emptied file": ("", ["TLS", "client certificate verification", "basic auth"]),
        "{}": ("{}\n", ["TLS", "basic auth"]),
        "a comment only": ("# managed by config management\n", ["TLS", "basic auth"]),
        "TLS dropped": (yaml.safe_dump({"basic_auth_users": yaml.safe_load(good)["basic_auth_users"]}), ["TLS"]),
        "auth dropped": (yaml.safe_dump({"tls_server_config": tls}), ["basic auth"]),
        "mTLS dropped": (
            yaml.safe_dump({**yaml.safe_load(good), "tls_server_config": no_client_certs}),
            ["client certificate verification"],
        ),
    }
    for case, (text, removed) in weakened.items():
        site.web.write_text(text)
        status, _, body = site.request("POST", "/-/reload", auth)
        assert status == 500, case
        answer = body.decode()
        assert f"{site.web}: refused: it would remove" in answer, (case, answer)
        for what in removed:
            assert what in answer, (case, what, answer)
        assert "the running web configuration stays" in answer
        _reads(site, auth, "bigbinf_web_config_last_reload_successful", 0.0)
        _front_door_holds(site, auth)

    # Deleted: refused the same way, by SIGHUP as systemd's ExecReload sends it.
    site.web.unlink()
    assert site.exporter.proc is not None
    site.exporter.proc.send_signal(signal.SIGHUP)
    PrometheusServer.wait_for(
        lambda: "cannot read the file" in site.exporter.log.read_text(), timeout=20, what="the refused reload"
    )
    _front_door_holds(site, auth)
    _reads(site, auth, "bigbinf_web_config_last_reload_successful", 0.0)
    log = site.exporter.log.read_text()
    assert f"{site.web}: refused: it would remove TLS" in log and "configuration reloaded" not in log
    assert site.password not in log

    # A good change (a new password) is taken, and the failure clears.
    refused_at = _metric(site, auth, "bigbinf_web_config_last_reload_success_timestamp_seconds")
    new_password = "a-new-password-for-prometheus"
    site.write_web(new_password)
    assert site.request("POST", "/-/reload", auth)[:3:2] == (200, b"reloaded\n")
    new_auth = _basic("prometheus", new_password)
    assert site.request("GET", "/metrics", auth)[0] == 401
    _reads(site, new_auth, "bigbinf_web_config_last_reload_successful", 1.0)
    PrometheusServer.wait_for(
        lambda: _metric(site, new_auth, "bigbinf_web_config_last_reload_success_timestamp_seconds") > refused_at,
        timeout=20,
        what="the success's time",
    )
    _reads(site, new_auth, "bigbinf_config_last_reload_successful", 1.0)


def test_a_reload_may_add_tls_and_auth_to_a_plain_exporter(tmp_path: Path) -> None:
    """Strengthening is taken; the plain exporter then serves TLS + auth only."""
    site_dir = tmp_path / "tls"
    web = tmp_path / "web.yml"
    web.write_text("# plain for now\n")
    with ExporterProcess(
        _config(tmp_path),
        tmp_path / "exporter.log",
        extra_args=["--web.config.file", str(web), "--web.enable-lifecycle"],
    ) as exporter:
        assert "gives neither TLS nor basic auth" in exporter.log.read_text()
        pki = TestPKI(site_dir)
        server = pki.issue("exporter", san="IP:127.0.0.1", server=True)
        web.write_text(
            yaml.safe_dump(
                {
                    "tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key)},
                    "basic_auth_users": {"prometheus": _hash("pw")},
                }
            )
        )
        status, body = _plain(exporter.port, b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert status == 200, body
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=30) as plain:
            plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_all(plain) == HTTP_TO_HTTPS
        conn = http.client.HTTPSConnection("127.0.0.1", exporter.port, context=pki.client_context(), timeout=30)
        conn.request("GET", "/metrics", headers=_basic("prometheus", "pw"))
        assert conn.getresponse().status == 200
        conn.close()


def _plain(port: int, request: bytes) -> tuple[int, bytes]:
    """One answer, read to its Content-Length (a kept-alive one) or to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=AT_ONCE) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
            head, sep, body = answer.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            if sep and length and len(body) >= int(length[1]):
                break
    return int(answer.split(b" ", 2)[1]), answer


CROSS_SITE = {
    "another site's Origin": {"Origin": "https://evil.example"},
    "Origin null": {"Origin": "null"},
    "Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": "cross-site"},
    "Sec-Fetch-Site same-site": {"Sec-Fetch-Site": "same-site"},
    "a text/plain body": {"Content-Type": "text/plain"},
    "a form": {"Content-Type": "application/x-www-form-urlencoded"},
    "a multipart form": {"Content-Type": "multipart/form-data; boundary=x"},
}


def _reloads(log: Path) -> int:
    return log.read_text().count("configuration reloaded from")


def test_a_cross_site_reload_is_refused_and_curl_is_served_over_tls(site: Site) -> None:
    auth = _basic("prometheus", site.password)
    for case, headers in CROSS_SITE.items():
        before = _reloads(site.exporter.log)
        status, _, body = site.request("POST", "/-/reload", {**auth, **headers}, body=b"x=1")
        assert status == 403 and body.startswith(b"cross-site request refused: "), (case, body)
        assert _reloads(site.exporter.log) == before, case  # nothing reloaded
    own = f"https://127.0.0.1:{site.exporter.port}"
    for headers in ({}, {"Origin": own, "Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}):
        assert site.request("POST", "/-/reload", {**auth, **headers})[0] == 200, headers
    _counted(site, auth, "cross_site", len(CROSS_SITE))
    # curl as an operator types it, and with a cross-site page's form.
    curl = [
        "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(site.pki.ca.cert),
        "--cert", str(site.client.cert), "--key", str(site.client.key), "-u", f"prometheus:{site.password}",
    ]  # fmt: skip
    url = f"https://127.0.0.1:{site.exporter.port}/-/reload"
    assert _run(*curl, "-X", "POST", url) == "200"
    assert _run(*curl, "-H", "Origin: https://evil.example", "-d", "x=1", url) == "403"


def test_a_cross_site_reload_is_refused_and_curl_is_served_over_plain_http(tmp_path: Path) -> None:
    with ExporterProcess(_config(tmp_path), tmp_path / "exporter.log", extra_args=["--web.enable-lifecycle"]) as exp:
        head = f"POST /-/reload HTTP/1.1\r\nHost: 127.0.0.1:{exp.port}\r\nContent-Length: 3\r\n"
        for case, headers in CROSS_SITE.items():
            before = _reloads(exp.log)
            extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            status, answer = _plain(exp.port, f"{head}{extra}\r\nx=1".encode())
            assert status == 403 and b"cross-site request refused" in answer, (case, answer)
            assert _reloads(exp.log) == before, case
        own = f"Origin: http://127.0.0.1:{exp.port}\r\n"
        assert _plain(exp.port, f"{head}{own}\r\nabc".encode())[0] == 200
        url = f"http://127.0.0.1:{exp.port}/-/reload"
        assert _run("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", url) == "200"
        line = f'bigbinf_http_connections_rejected_total{{reason="cross_site"}} {len(CROSS_SITE)}.0'
        PrometheusServer.wait_for(lambda: line in exp.metrics(), timeout=20, what="the refusals counted")


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False).stdout


OVERSIZED = {
    "Content-Length": b"Content-Length: 1000000000\r\n\r\n",
    "a chunk of 2**72 bytes": b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
    "chunks that add up": b"Transfer-Encoding: chunked\r\n\r\n8000\r\n" + b"a" * 0x8000 + b"\r\n8001\r\n",
}


def test_a_body_declared_over_the_bound_is_answered_413_at_once(site: Site, tmp_path: Path) -> None:
    """Before the body's deadline (BODY_SECONDS): the socket gives up at half of it."""
    for case, rest in OVERSIZED.items():
        with site.pki.client_context(site.client).wrap_socket(
            socket.create_connection(("127.0.0.1", site.exporter.port), timeout=AT_ONCE), server_hostname="localhost"
        ) as tls:
            tls.sendall(b"POST /-/reload HTTP/1.1\r\nHost: x\r\n" + _auth_line(site) + rest)
            answer = _read_all(tls)
            assert answer.startswith(b"HTTP/1.1 413 "), (case, answer[:80])
    auth = _basic("prometheus", site.password)
    _counted(site, auth, "too_large", len(OVERSIZED))
    (tmp_path / "plain").mkdir()
    with ExporterProcess(
        _config(tmp_path / "plain"), tmp_path / "plain.log", extra_args=["--web.enable-lifecycle"]
    ) as plain:
        for case, rest in OVERSIZED.items():
            status, answer = _plain(plain.port, b"POST /-/reload HTTP/1.1\r\nHost: x\r\n" + rest)
            assert status == 413, (case, answer[:80])
        # Within the bound, chunked: read and served.
        chunked = b"POST /-/reload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        assert _plain(plain.port, chunked)[0] == 200
