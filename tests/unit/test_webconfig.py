"""service/webconfig.py (exporter-toolkit's web config) and credentials.py (secret files),
without root or a network."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import bcrypt
import pytest
import yaml

from bigbinf.config import ConfigError, parse_config
from bigbinf.credentials import secret_file_issues, secret_file_problem
from bigbinf.service import webconfig
from bigbinf.service.webconfig import CIPHER_SUITES, BasicAuth, load_web_config

from ..support.tls import TestPKI


def _write(tmp: Path, raw: dict) -> Path:
    path = tmp / "web.yml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_web_config(path)
    return info.value.lines()


def test_no_file_is_plain_http_without_auth() -> None:
    web = load_web_config(None)
    assert web.ssl_context is None and not web.auth.enabled and web.scheme == "http"


def test_client_auth_types_map_to_openssl_verification(tmp_path: Path) -> None:
    pki = TestPKI(tmp_path / "pki")
    server = pki.issue("server", san="IP:127.0.0.1", server=True)
    base = {"cert_file": str(server.cert), "key_file": str(server.key)}
    for auth, mode in (
        ("NoClientCert", ssl.CERT_NONE),
        ("RequestClientCert", ssl.CERT_NONE),
        ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
        ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED),
        ("RequireAnyClientCert", ssl.CERT_REQUIRED),
    ):
        tls = {**base, "client_auth_type": auth}
        if mode != ssl.CERT_NONE:
            tls["client_ca_file"] = str(pki.ca.cert)
        web = load_web_config(_write(tmp_path, {"tls_server_config": tls}))
        assert web.ssl_context is not None and web.ssl_context.verify_mode == mode, auth
        assert web.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2  # exporter-toolkit's default
    web = load_web_config(
        _write(tmp_path, {"tls_server_config": {**base, "min_version": "TLS13", "max_version": "TLS13"}})
    )
    assert web.ssl_context is not None and web.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3
    # Relative paths are relative to the web config's directory.
    rel = {"cert_file": os.path.relpath(server.cert, tmp_path), "key_file": os.path.relpath(server.key, tmp_path)}
    assert load_web_config(_write(tmp_path, {"tls_server_config": rel})).scheme == "https"


def test_cipher_suites_use_go_names_and_reach_openssl(tmp_path: Path) -> None:
    pki = TestPKI(tmp_path / "pki")
    server = pki.issue("server", server=True)
    secure = [name for name in CIPHER_SUITES if "ECDHE" in name and ("GCM" in name or "CHACHA" in name)]
    web = load_web_config(
        _write(
            tmp_path,
            {
                "tls_server_config": {
                    "cert_file": str(server.cert),
                    "key_file": str(server.key),
                    "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256"],
                    "curve_preferences": ["CurveP256"],
                }
            },
        )
    )
    assert web.ssl_context is not None
    tls12 = {c["name"] for c in web.ssl_context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}
    # Every secure Go suite maps to a name this OpenSSL knows.
    for name in secure:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.set_ciphers(CIPHER_SUITES[name])


def test_every_error_is_gathered_with_its_place_and_fix(tmp_path: Path) -> None:
    errors = _errors(
        _write(
            tmp_path,
            {
                "tls_server_config": {
                    "key_file": str(tmp_path / "missing.key"),
                    "client_auth_type": "RequireAndVerifyClientCert",
                    "max_version": "TLS11",
                    "curve_preferences": ["P-256"],
                    "bogus": 1,
                },
                "http_server_config": {"headers": {"X-Frame-Options": "allow-all"}},
                "basic_auth_users": {"a:b": bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode()},
            },
        )
    )
    path = tmp_path / "web.yml"
    expected = [
        f"{path}: tls_server_config.bogus: unknown key 'bogus'; allowed keys: cert_file, key_file,",
        f"{path}: tls_server_config.cert_file: required with the other",
        f"{path}: tls_server_config.client_ca_file: required with client_auth_type RequireAndVerifyClientCert",
        f"{path}: tls_server_config.client_auth_type: client certificates need TLS",
        f"{path}: tls_server_config.key_file: {tmp_path / 'missing.key'}: no such file",
        f"{path}: tls_server_config.max_version: must not be lower than min_version",
        f"{path}: tls_server_config.curve_preferences[0]: unknown curve 'P-256'",
        f"{path}: http_server_config.headers.X-Frame-Options: invalid value 'allow-all'",
        f"{path}: basic_auth_users.a:b: a user name must not contain ':'",
    ]
    for message in expected:
        assert any(e.startswith(message) for e in errors), (message, errors)
    assert len(errors) == len(expected), errors


def test_a_refused_value_is_told_the_allowed_ones_as_they_must_be_written(tmp_path: Path) -> None:
    """The message once suggested 'tls12', which is itself refused (issue 24)."""
    errors = _errors(_write(tmp_path, {"tls_server_config": {"min_version": "tls12"}}))
    message = next(e for e in errors if "min_version" in e)
    assert message.endswith("'tls12' is not allowed; input should be 'TLS10', 'TLS11', 'TLS12' or 'TLS13'"), message
    assert "'tls12'" not in message.partition(";")[2]


def test_a_password_written_instead_of_a_hash_is_never_echoed(tmp_path: Path) -> None:
    errors = _errors(_write(tmp_path, {"basic_auth_users": {"a": "Sup3rSecret!", "b": 918273645}}))
    assert len(errors) == 2 and all("not a bcrypt hash" in e for e in errors)
    assert "Sup3rSecret" not in "\n".join(errors) and "918273645" not in "\n".join(errors)


def test_basic_auth_caches_only_successes(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"prometheus": bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()})
    calls = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", counting)
    assert [auth.check("prometheus", "right") for _ in range(5)] == [True] * 5
    assert len(calls) == 1  # cached after the first success
    assert [auth.check("prometheus", "wrong") for _ in range(3)] == [False] * 3
    assert len(calls) == 4  # a failure is never cached
    assert auth.check("nobody", "right") is False and len(calls) == 5  # unknown users cost a bcrypt too
    assert all(b"right" not in key for key in auth._ok)  # the cache holds HMACs, not passwords


def test_secret_files_must_be_private_and_the_users_own(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o644)
    problem = secret_file_problem(key)
    assert problem is not None and "permissions 0644 are too open" in problem and f"chmod 600 {key}" in problem
    key.chmod(0o600)
    assert secret_file_problem(key) is None
    if os.geteuid() == 0:  # owned by someone else: only checkable where we can chown
        os.chown(key, 65534, 65534)
        problem = secret_file_problem(key)
        assert problem is not None and "owned by" in problem and "chown" in problem
        assert secret_file_problem(key, this_user=False) is None  # --config.check as another user
        os.chown(key, 0, 0)
    raw = {
        "remotes": {"site": {"address": "198.18.9.2", "data_dir": "/d", "key": str(key)}},
        "datasets": {"a": {"file": "a.bin", "size": 1}},
        "protocols": {"scp": {}},
    }
    config = parse_config(yaml.safe_dump(raw), "c.yaml")
    assert secret_file_issues(config) == []
    key.chmod(0o640)
    [issue] = secret_file_issues(config)
    assert issue.path == "remotes.site.key" and "too open" in issue.message


def test_what_a_new_web_config_would_remove_is_named_and_strengthening_is_not(tmp_path: Path) -> None:
    pki = TestPKI(tmp_path / "pki")
    server = pki.issue("server", san="IP:127.0.0.1", server=True)
    other = pki.issue("other", san="IP:127.0.0.1", server=True)
    users = {"prometheus": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()}
    tls = {"cert_file": str(server.cert), "key_file": str(server.key)}
    mtls = {**tls, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": str(pki.ca.cert)}

    def web(name: str, raw: dict | str) -> webconfig.WebConfig:
        path = tmp_path / f"{name}.yml"
        path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
        return load_web_config(path)

    full = web("full", {"tls_server_config": {**mtls, "client_allowed_sans": ["p.test"]}, "basic_auth_users": users})
    for raw, lost in (
        ("", ["TLS", "client certificate verification", "client_allowed_sans", "basic auth"]),
        ("{}", ["TLS", "client certificate verification", "client_allowed_sans", "basic auth"]),
        ("# nothing\n", ["TLS", "client certificate verification", "client_allowed_sans", "basic auth"]),
        ({"basic_auth_users": users}, ["TLS", "client certificate verification", "client_allowed_sans"]),
        ({"tls_server_config": {**mtls, "client_allowed_sans": ["p.test"]}}, ["basic auth"]),
        ({"tls_server_config": mtls, "basic_auth_users": users}, ["client_allowed_sans"]),
        (
            {"tls_server_config": {**mtls, "client_auth_type": "VerifyClientCertIfGiven"}, "basic_auth_users": users},
            ["client certificate verification", "client_allowed_sans"],
        ),
    ):
        new = web("new", raw)
        assert [what.split(" (")[0] for what in webconfig.weakenings(full, new)] == lost, raw
        with pytest.raises(ConfigError) as info:
            webconfig.refuse_weakening(full, new)
        assert info.value.lines()[0].startswith(f"{tmp_path / 'new.yml'}: refused: it would remove {lost[0]}")
    # Changing the certificate, the users or the names, or adding TLS or auth, weakens nothing.
    changed = web(
        "changed",
        {
            "tls_server_config": {**mtls, "cert_file": str(other.cert), "key_file": str(other.key),
                                  "client_allowed_sans": ["q.test"]},
            "basic_auth_users": {"grafana": users["prometheus"]},
        },
    )  # fmt: skip
    assert webconfig.weakenings(full, changed) == []
    plain = web("plain", "")
    for stronger in (web("tls", {"tls_server_config": tls}), web("auth", {"basic_auth_users": users}), full):
        assert webconfig.weakenings(plain, stronger) == []
        webconfig.refuse_weakening(plain, stronger)
    assert webconfig.weakenings(plain, plain) == []


def test_no_users_costs_no_bcrypt_and_lets_no_one_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default (no basic auth): no dummy hash made at start (a bcrypt at cost 10 took
    0.06-0.2 CPU-s of every start), and no credentials are right."""

    def refused(*_: object) -> bytes:
        raise AssertionError("bcrypt called without users")

    monkeypatch.setattr(bcrypt, "hashpw", refused)
    monkeypatch.setattr(bcrypt, "checkpw", refused)
    auth = BasicAuth({})
    assert not auth.enabled
    assert not auth.check("prometheus", "anything")
    assert not auth.check("", "")
