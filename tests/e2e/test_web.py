"""--web.config.file, --web.enable-lifecycle and the HTTP server's limits, against the
exporter as a process: a real Prometheus scrapes it over mTLS with basic auth (its scrape
config's tls_config and basic_auth, a CA made here), and a plain client checks every
refusal's status code and that nothing is served with it."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import bcrypt
import pytest
import yaml

from ..support.exporter import ROOT, ExporterProcess
from ..support.prometheus import PrometheusServer
from ..support.tls import TestPKI

HTTP_TO_HTTPS = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"


def _config(tmp: Path) -> Path:
    raw = {
        # No probes and a round an hour away: nothing leaves this machine.
        "remotes": {"site": {"address": "198.18.9.2", "data_dir": "/data", "probe": {"enabled": False}}},
        "datasets": {"a": {"file": "a.bin", "size": "1MiB"}},
        "protocols": {"http": {}},
        "schedule": {"interval": "1h"},
        "journal": {"path": str(tmp / "journal.jsonl")},
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=6)).decode()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class Site:
    """The exporter behind mTLS + basic auth, and everything a client needs to reach it."""

    def __init__(self, tmp: Path, stack: ExitStack, lifecycle: bool = True) -> None:
        self.pki = TestPKI(tmp / "pki")
        self.server = self.pki.issue("exporter", san="IP:127.0.0.1,DNS:localhost", server=True)
        self.client = self.pki.issue("prometheus", san="DNS:prometheus.test")
        self.rogue = TestPKI(tmp / "rogue", "another CA").issue("intruder", san="DNS:prometheus.test")
        self.password = secrets.token_urlsafe(16)
        self.web = tmp / "web.yml"
        self.write_web(self.password)
        self.exporter = ExporterProcess(
            _config(tmp),
            tmp / "exporter.log",
            extra_args=["--web.config.file", str(self.web), *(["--web.enable-lifecycle"] if lifecycle else [])],
            ssl_context=self.pki.client_context(self.client),
            auth=("prometheus", self.password),
        )
        stack.enter_context(self.exporter)

    def write_web(self, password: str, tls_extra: dict | None = None, **extra: object) -> None:
        raw = {
            "tls_server_config": {
                "cert_file": str(self.server.cert),
                "key_file": str(self.server.key),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(self.pki.ca.cert),
                "min_version": "TLS12",
                **(tls_extra or {}),
            },
            "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
            "basic_auth_users": {"prometheus": _hash(password)},
            **extra,
        }
        self.web.write_text(yaml.safe_dump(raw))

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        context: ssl.SSLContext | None = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.exporter.port, context=context or self.pki.client_context(self.client), timeout=30
        )
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with ExitStack() as stack:
        yield Site(tmp_path, stack)


@pytest.mark.prometheus
def test_prometheus_scrapes_over_mtls_with_basic_auth_and_a_wrong_password_is_refused(
    site: Site, tmp_path: Path
) -> None:
    secret_dir = tmp_path / "prom-secrets"
    secret_dir.mkdir()
    (secret_dir / "good").write_text(site.password)
    (secret_dir / "bad").write_text(site.password + "x")
    tls = {
        "ca_file": str(site.pki.ca.cert),
        "cert_file": str(site.client.cert),
        "key_file": str(site.client.key),
        "server_name": "localhost",
    }

    def job(name: str, password_file: str, tls_config: dict) -> dict:
        return {
            "job_name": name,
            "scheme": "https",
            "tls_config": tls_config,
            "basic_auth": {"username": "prometheus", "password_file": str(secret_dir / password_file)},
            "static_configs": [{"targets": [site.exporter.address]}],
        }

    no_cert = {"ca_file": str(site.pki.ca.cert), "server_name": "localhost"}
    prom_config = yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                job("bigbinf", "good", tls),
                job("wrong-password", "bad", tls),
                job("no-client-cert", "good", no_cert),
            ],
        }
    )
    with PrometheusServer(prom_config, tmp_path / "prom") as prom:

        def targets() -> dict[str, dict] | None:
            active = {t["labels"]["job"]: t for t in prom.api("targets")["activeTargets"]}
            done = len(active) == 3 and all(t["health"] != "unknown" for t in active.values())
            return active if done and prom.query('bigbinf_build_info{job="bigbinf"}') else None

        active = prom.wait_for(targets, timeout=60, what="three scraped targets")
        print({job: (t["health"], t["lastError"]) for job, t in active.items()})
        assert active["bigbinf"]["health"] == "up" and active["bigbinf"]["lastError"] == ""
        assert active["bigbinf"]["scrapeUrl"] == f"https://{site.exporter.address}/metrics"
        assert float(prom.query('bigbinf_build_info{job="bigbinf"}')[0]["value"][1]) == 1
        assert float(prom.query('up{job="bigbinf"}')[0]["value"][1]) == 1
        assert active["wrong-password"]["health"] == "down"
        assert "401" in active["wrong-password"]["lastError"], active["wrong-password"]["lastError"]
        assert active["no-client-cert"]["health"] == "down"
        assert "certificate" in active["no-client-cert"]["lastError"], active["no-client-cert"]["lastError"]
        assert prom.query('bigbinf_build_info{job!="bigbinf"}') == []  # nothing served to either


def test_refusals_have_the_right_status_and_serve_nothing(site: Site) -> None:
    ok, headers, body = site.request("GET", "/metrics", _basic("prometheus", site.password))
    assert ok == 200 and b"bigbinf_build_info" in body
    assert headers["X-Content-Type-Options"] == "nosniff"  # http_server_config.headers

    for credentials in (
        _basic("prometheus", site.password + "x"),
        _basic("nobody", site.password),
        {},
        {"Authorization": "Basic !!!"},
        {"Authorization": "Bearer " + site.password},
    ):
        for method, path in (("GET", "/metrics"), ("GET", "/"), ("POST", "/-/reload"), ("GET", "/nothing")):
            status, headers, body = site.request(method, path, credentials)
            assert status == 401, (method, path, credentials)
            assert headers["WWW-Authenticate"] == "Basic"
            assert b"bigbinf" not in body and b"reloaded" not in body
            assert headers["X-Content-Type-Options"] == "nosniff"

    # No client certificate, or one from another CA: the handshake fails, no HTTP at all.
    for context in (site.pki.client_context(None), site.pki.client_context(site.rogue)):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            site.request("GET", "/metrics", _basic("prometheus", site.password), context=context)

    # Plain HTTP to the TLS port: 400, as Go's net/http answers it, and nothing else.
    with socket.create_connection(("127.0.0.1", site.exporter.port), timeout=30) as plain:
        plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + _auth_line(site) + b"\r\n")
        assert _read_all(plain) == HTTP_TO_HTTPS

    # The routes: the landing page, /metrics, /-/reload (POST only); nothing else.
    auth = _basic("prometheus", site.password)
    status, _, page = site.request("GET", "/", auth)
    assert status == 200 and b"href='metrics'" in page and b"0.1.0" in page
    assert site.request("HEAD", "/metrics", auth)[0] == 200
    for path in ("/-/healthy", "/-/ready", "/metrics/x", "/debug"):
        assert site.request("GET", path, auth)[0] == 404, path
    status, headers, _ = site.request("GET", "/-/reload", auth)
    assert status == 405 and headers["Allow"] == "POST"
    assert site.request("POST", "/metrics", auth)[0] == 405
    # A body over the bound is refused from its Content-Length, before a byte of it is read.
    with site.pki.client_context(site.client).wrap_socket(
        socket.create_connection(("127.0.0.1", site.exporter.port), timeout=30), server_hostname="localhost"
    ) as tls:
        tls.sendall(b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n" + _auth_line(site) + b"\r\n")
        assert _read_all(tls).startswith(b"HTTP/1.1 413 ")
    # A client without credentials that announces a body and sends none of it (or drips
    # it): answered 401 and closed at once, no byte of the body awaited.
    with site.pki.client_context(site.client).wrap_socket(
        socket.create_connection(("127.0.0.1", site.exporter.port), timeout=30), server_hostname="localhost"
    ) as tls:
        tls.sendall(b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n")
        answer = _read_all(tls)  # to the end of the stream: the server closed it
        assert answer.startswith(b"HTTP/1.1 401 ") and b"Connection: close" in answer
    status, _, body = site.request("POST", "/-/reload", auth)
    assert (status, body) == (200, b"reloaded\n")


def _auth_line(site: Site) -> bytes:
    return f"Authorization: {_basic('prometheus', site.password)['Authorization']}\r\n".encode()


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_reload_needs_web_enable_lifecycle(tmp_path: Path) -> None:
    with ExitStack() as stack:
        site = Site(tmp_path, stack, lifecycle=False)
        status, _, body = site.request("POST", "/-/reload", _basic("prometheus", site.password))
        assert status == 403 and b"--web.enable-lifecycle" in body
        assert site.request("POST", "/-/reload", _basic("prometheus", "wrong"))[0] == 401  # auth first


def test_web_config_is_reloaded_with_the_rest_and_only_when_valid(site: Site) -> None:
    auth = _basic("prometheus", site.password)
    new_password = secrets.token_urlsafe(16)
    site.write_web(new_password)
    assert site.request("POST", "/-/reload", auth)[0] == 200
    assert site.request("GET", "/metrics", auth)[0] == 401  # the old password no longer works
    new_auth = _basic("prometheus", new_password)
    assert site.request("GET", "/metrics", new_auth)[0] == 200
    # client_allowed_sans: a verified certificate without one of the names is served nothing.
    site.write_web(new_password, tls_extra={"client_allowed_sans": ["other.test"]})
    assert site.request("POST", "/-/reload", new_auth)[0] == 200
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, ssl.SSLError)):
        site.request("GET", "/metrics", new_auth)
    site.write_web(new_password, tls_extra={"client_allowed_sans": ["other.test", "prometheus.test"]})
    assert site.exporter.proc is not None
    site.exporter.proc.send_signal(signal.SIGHUP)  # POST cannot reach it now: SIGHUP
    PrometheusServer.wait_for(lambda: _status_or_none(site, new_auth) == 200, timeout=20, what="the SAN reload")
    # An invalid web config: the reload fails and the one in force stays.
    site.write_web(new_password, basic_auth_users={"prometheus": "plain-text-password"})
    site.exporter.proc.send_signal(signal.SIGHUP)
    PrometheusServer.wait_for(
        lambda: b"bigbinf_config_last_reload_successful 0.0" in site.request("GET", "/metrics", new_auth)[2],
        timeout=20,
        what="the failed reload to be reported",
    )
    assert site.request("GET", "/metrics", new_auth)[0] == 200
    log = site.exporter.log.read_text()
    assert "web.yml: basic_auth_users.prometheus: not a bcrypt hash" in log
    assert "plain-text-password" not in log and site.password not in log and new_password not in log


def _status_or_none(site: Site, headers: dict[str, str]) -> int | None:
    try:
        return site.request("GET", "/metrics", headers)[0]
    except (http.client.HTTPException, OSError):  # refused, reset, timed out
        return None


def test_idle_and_slow_clients_do_not_tie_up_the_server(site: Site) -> None:
    """50 connections held open without a byte, 10 more stuck mid-handshake or mid-request:
    every scrape meanwhile is answered, and the server closes the stuck ones itself."""
    auth = _basic("prometheus", site.password)
    idle: list[socket.socket] = []
    try:
        for _ in range(50):
            idle.append(socket.create_connection(("127.0.0.1", site.exporter.port), timeout=60))
        for i in range(10):
            s = socket.create_connection(("127.0.0.1", site.exporter.port), timeout=60)
            idle.append(s)
            if i % 2:
                s.sendall(b"\x16\x03\x01\x00")  # the first bytes of a TLS record, never the rest
            else:
                tls = site.pki.client_context(site.client).wrap_socket(s, server_hostname="localhost")
                idle[-1] = tls
                tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        for _ in range(5):
            status, _, body = site.request("GET", "/metrics", auth)
            assert status == 200 and b"bigbinf_build_info" in body
        # The server ends every one of them (its request deadline), not the clients: each
        # read reaches the end of the stream (a timeout here fails the test).
        for s in idle:
            s.settimeout(60)
            try:
                data = _read_all(s)
            except (ssl.SSLError, ConnectionResetError):
                continue  # a TLS socket shut down under its reader: ended too
            assert b"bigbinf" not in data  # a stuck request was never answered
        assert site.request("GET", "/metrics", auth)[0] == 200
    finally:
        for s in idle:
            s.close()


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bigbinf", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_web_config_check(tmp_path: Path) -> None:
    pki = TestPKI(tmp_path / "pki")
    server = pki.issue("exporter", san="IP:127.0.0.1", server=True)
    good = tmp_path / "good.yml"
    good.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key)},
                "basic_auth_users": {"prometheus": _hash("pw")},
            }
        )
    )
    proc = _check("--web.config.file", str(good), "--web.config.check")
    assert proc.returncode == 0 and "web configuration is valid (https, basic auth for 1 user(s))" in proc.stdout
    bad = tmp_path / "bad.yml"
    bad.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {
                    "cert_file": str(server.cert),
                    "client_ca_file": str(pki.ca.cert),
                    "min_version": "TLS14",
                    "cipher_suites": ["TLS_RSA_WITH_NULL"],
                },
                "http_server_config": {"headers": {"Set-Cookie": "x"}},
                "basic_auth_users": {"prometheus": "secret"},
                "tls_config": {},
            }
        )
    )
    proc = _check("--web.config.file", str(bad), "--web.config.check")
    assert proc.returncode == 1
    errors = proc.stderr.splitlines()
    expected = [
        "tls_config: unknown key 'tls_config'; allowed keys: tls_server_config, http_server_config, basic_auth_users",
        "tls_server_config.min_version: 'TLS14' is not allowed",
        "tls_server_config.key_file: required with the other",
        "tls_server_config.client_ca_file: client CAs are configured without a client auth policy",
        "tls_server_config.cipher_suites[0]: unknown cipher suite 'TLS_RSA_WITH_NULL'",
        "http_server_config.headers.Set-Cookie: this header can not be configured",
        "basic_auth_users.prometheus: not a bcrypt hash",
    ]
    for message in expected:
        assert any(line.startswith(f"{bad}: {message}") for line in errors), (message, errors)
    assert "secret" not in proc.stderr.replace("tls_server_config", "")
    # --config.check checks the web config given with it too.
    config = _config(tmp_path)
    assert _check("--config.file", str(config), "--web.config.file", str(good), "--config.check").returncode == 0
    assert _check("--config.file", str(config), "--web.config.file", str(bad), "--config.check").returncode == 1
    # ... and the exporter does not start with it.
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(config), "--web.config.file", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 1 and "basic_auth_users.prometheus: not a bcrypt hash" in proc.stderr


def _rejected(metrics: str) -> dict[str, float]:
    prefix = 'bigbinf_http_connections_rejected_total{reason="'
    return {
        line[len(prefix) :].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(prefix)
    }


@contextmanager
def _attack(port: int, idle: int, slowloris: int, stuck: int, tls: bool = False) -> Iterator[dict]:
    """tests/support/attack.py against the port, in its own process; yields its last report."""
    argv = [sys.executable, "-m", "tests.support.attack", "--port", str(port), "--idle", str(idle),
            "--slowloris", str(slowloris), "--stuck", str(stuck), *(["--tls"] if tls else [])]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    report: dict = {}

    def follow() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            report.update(json.loads(line))

    threading.Thread(target=follow, daemon=True).start()
    try:
        # Until all are open (a server that cannot hold them all is the test's to judge).
        with contextlib.suppress(TimeoutError):
            PrometheusServer.wait_for(
                lambda: sum(report.get("open", {}).values()) >= idle + slowloris + stuck,
                timeout=20,
                what="the attack's connections to be open",
            )
        yield report
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_held_connections_do_not_shut_the_scraper_out(tmp_path: Path) -> None:
    """More idle and slowloris connections than the old server's 256 threads, each opened
    again as soon as the server closes it: every scrape is answered
    (a new connection each), the server closes the stuck ones itself (its deadlines,
    counted by reason), and logs no line per connection.  (The thread-per-connection
    server answered none of them.)"""
    log = tmp_path / "exporter.log"
    with ExporterProcess(_config(tmp_path), log, extra_args=["--log.level", "debug"]) as exporter:
        with _attack(exporter.port, idle=300, slowloris=40, stuck=0) as report:
            held = dict(report.get("open", {}))
            statuses = []
            for _ in range(10):
                try:
                    statuses.append(len(exporter.metrics()) > 0)
                except OSError:
                    statuses.append(False)
            assert statuses == [True] * 10, f"scrapes ok {sum(statuses)}/10 with {held} held"
            # Past the head deadline (10 s): the server has closed the first ones itself.
            rejected = PrometheusServer.wait_for(
                lambda: (r := _rejected(exporter.metrics())).get("request_timeout", 0) >= 300 and r,
                timeout=60,
                what="the server to close the held connections at their deadline",
            )
        print(f"held {held}; rejected {rejected}")
        assert held == {"idle": 300, "slowloris": 40, "stuck": 0}
        assert set(rejected) == {
            "capacity", "tls_handshake_timeout", "tls_error", "client_certificate", "http_to_https",
            "https_to_http", "request_timeout", "bad_request", "too_large", "cross_site", "unauthorized",
            "write_timeout", "fd_limit",
        }  # fmt: skip
    lines = log.read_text().splitlines()
    # No line per refused connection, even at debug level (a summary at most once a minute).
    assert not [line for line in lines if "127.0.0.1:" in line and "listening on" not in line], lines[-5:]
    assert len([line for line in lines if "connections refused" in line]) <= 1


def test_tls_handshakes_that_never_end_do_not_shut_the_scraper_out(site: Site) -> None:
    """The same over mTLS + basic auth: connections that never start or never finish
    their handshake are closed at the handshake deadline, and Prometheus' scrapes (a
    verified client certificate, a password) are answered meanwhile."""
    auth = _basic("prometheus", site.password)
    with _attack(site.exporter.port, idle=300, slowloris=0, stuck=40):
        for _ in range(10):
            status = _status_or_none(site, auth)
            assert status == 200
        rejected = PrometheusServer.wait_for(
            lambda: (
                (r := _rejected(site.request("GET", "/metrics", auth)[2].decode())).get("tls_handshake_timeout", 0)
                >= 300
                and r
            ),
            timeout=60,
            what="the server to close the stuck handshakes at their deadline",
        )
    assert rejected["unauthorized"] == 0 and rejected["capacity"] == 0
