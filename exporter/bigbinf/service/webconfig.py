"""--web.config.file: TLS, basic auth and response headers, in Prometheus' exporter-toolkit format.

The same YAML node_exporter and blackbox_exporter take (docs/deployment.md):

    tls_server_config:
      cert_file: /etc/bigbinf/tls/server.crt
      key_file: /etc/bigbinf/tls/server.key
      client_auth_type: RequireAndVerifyClientCert   # mTLS; default NoClientCert
      client_ca_file: /etc/bigbinf/tls/clients-ca.crt
      client_allowed_sans: [prometheus.example.org]
      min_version: TLS12                              # TLS10..TLS13; default TLS12
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]  # Go/IANA names; TLS <= 1.2 only
      prefer_server_cipher_suites: true
      curve_preferences: [X25519, CurveP256]
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2b$12$...                          # bcrypt hashes only

Validated as config.py validates the schedule: unknown keys rejected, every error
gathered as `FILE: path: message`.  What Python's ssl module cannot do the way Go does
is said here and in docs/deployment.md: it cannot accept a client certificate without
verifying it, so RequestClientCert (asked for, never checked: no access decision rests
on it) serves as NoClientCert does, and RequireAnyClientCert needs client_ca_file and
then verifies the certificate against it; curve_preferences sets the first curve
(OpenSSL's ECDH curve) and http2 is accepted and ignored (HTTP/1.1 is served).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import bcrypt
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from bigbinf.config import ConfigError, ConfigIssue, pydantic_issues, read_config_text, shown, yaml_mapping_or_error

ClientAuth = Literal[
    "NoClientCert", "RequestClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"
]
TlsVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's crypto/tls names (tls.CipherSuites() and tls.InsecureCipherSuites(), IANA's names)
# -> OpenSSL's.  TLS 1.3's three suites are not configurable in Go either: accepted, no effect.
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
CIPHER_SUITES: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",  # Go's older alias
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    # Go's insecure list: accepted as Go accepts them; OpenSSL may refuse them at its security level.
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
}
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

# exporter-toolkit's http_server_config.headers: only these, with these values.
HEADERS: dict[str, re.Pattern[str] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": re.compile(r"nosniff"),
    "X-Frame-Options": re.compile(r"(?i)deny|sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_BCRYPT = re.compile(r"\$2[aby]?\$\d\d\$[./A-Za-z0-9]{53}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsServerConfig(_Strict):
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: ClientAuth = "NoClientCert"
    client_ca_file: Path | None = None
    client_allowed_sans: list[StrictStr] | None = None
    min_version: TlsVersionName = "TLS12"
    max_version: TlsVersionName = "TLS13"
    cipher_suites: list[StrictStr] | None = None
    prefer_server_cipher_suites: StrictBool = True
    curve_preferences: list[StrictStr] | None = None


class HttpServerConfig(_Strict):
    http2: StrictBool = True  # accepted for compatibility; bigbinf serves HTTP/1.x
    headers: dict[StrictStr, StrictStr] = {}


class WebConfigFile(_Strict):
    tls_server_config: TlsServerConfig = TlsServerConfig()
    http_server_config: HttpServerConfig = HttpServerConfig()
    basic_auth_users: dict[StrictStr, StrictStr] = {}


class BasicAuth:
    """Checks Basic credentials against bcrypt hashes.  bcrypt is slow by design (~0.2 s
    at cost 12), so a successful check is remembered, as exporter-toolkit does: by an
    HMAC under a key drawn at start, of user, hash and password, never the password
    itself; a wrong password is never cached and always costs a full bcrypt."""

    CACHE_SIZE = 1024

    def __init__(self, users: dict[str, str]) -> None:
        self.users = {name: hashed.encode() for name, hashed in users.items()}
        self._key = os.urandom(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        # An unknown user costs a bcrypt too, at the cost of the dearest configured hash
        # ("$2b$12$..."), so that timing does not say which users exist.  No users (no
        # basic auth, the default): nothing to hide and no bcrypt, which would cost each
        # start a tenth of a second or more.
        costs = [
            int(h.split(b"$")[2]) for h in self.users.values() if h.count(b"$") >= 3 and h.split(b"$")[2].isdigit()
        ]
        rounds = min(max(costs, default=10), 16)
        self._dummy = bcrypt.hashpw(b"unknown user", bcrypt.gensalt(rounds=rounds)) if self.users else None

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def _digest(self, user: str, password: str) -> tuple[bytes | None, bytes]:
        hashed = self.users.get(user)
        digest = hmac.new(
            self._key, b"\0".join((user.encode(), hashed or b"", password.encode())), hashlib.sha256
        ).digest()
        return hashed, digest

    def remembered(self, user: str, password: str) -> bool:
        """Whether these credentials succeeded before (an HMAC: microseconds, no bcrypt)."""
        hashed, digest = self._digest(user, password)
        if hashed is None:
            return False
        with self._lock:
            if digest in self._ok:
                self._ok.move_to_end(digest)
                return True
        return False

    def check(self, user: str, password: str) -> bool:
        """remembered(), else a full bcrypt (for an unknown user too, at the dearest
        configured cost); a success is remembered."""
        if self.remembered(user, password):
            return True
        hashed, digest = self._digest(user, password)
        secret = password.encode()
        if self._dummy is None:
            return False  # no users: no credentials are right
        try:
            # bcrypt reads 72 bytes: a longer password would match its own prefix (bcrypt
            # 4 truncated silently, 5 refuses); refused here whichever is installed.
            ok = bcrypt.checkpw(secret[:72], hashed or self._dummy) and hashed is not None and len(secret) <= 72
        except ValueError:
            ok = False
        if ok:
            with self._lock:
                self._ok[digest] = None
                while len(self._ok) > self.CACHE_SIZE:
                    self._ok.popitem(last=False)
        return ok


@dataclass(frozen=True)
class WebConfig:
    """What the server applies: a TLS context (None: plain HTTP), the users, the headers."""

    source: str | None = None
    ssl_context: ssl.SSLContext | None = None
    auth: BasicAuth = field(default_factory=lambda: BasicAuth({}))
    headers: tuple[tuple[str, str], ...] = ()
    allowed_sans: tuple[str, ...] = ()

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context else "http"

    @property
    def client_verification(self) -> str:
        """How client certificates are checked: "required", "if given" or "none"."""
        mode = self.ssl_context.verify_mode if self.ssl_context else ssl.CERT_NONE
        return {ssl.CERT_REQUIRED: "required", ssl.CERT_OPTIONAL: "if given"}.get(mode, "none")


_VERIFICATION_RANK = {"none": 0, "if given": 1, "required": 2}


def weakenings(running: WebConfig, new: WebConfig) -> list[str]:
    """What of the front door `running` keeps `new` would remove: TLS, TLS versions (a
    lower min_version), basic auth, client certificate verification, client_allowed_sans.
    A reload refuses such a config (an emptied file is one: config management that
    truncates before it writes made a reload serve everything in plain HTTP without a
    password); a restart may turn them off.  Adding any of them, or changing certificates,
    the client CA (a rotation), users or names, weakens nothing."""
    lost: list[str] = []
    if running.ssl_context is not None and new.ssl_context is None:
        lost.append("TLS (tls_server_config.cert_file/key_file: it would serve plain HTTP)")
    elif running.ssl_context is not None and new.ssl_context is not None:
        was, now = running.ssl_context.minimum_version, new.ssl_context.minimum_version
        if now < was:
            lost.append(
                f"TLS versions below {_version_name(was)} (tls_server_config.min_version: {_version_name(now)} after)"
            )
    verification = running.client_verification
    if _VERIFICATION_RANK[new.client_verification] < _VERIFICATION_RANK[verification]:
        lost.append(
            f"client certificate verification (client_auth_type: {verification} now, {new.client_verification} after)"
        )
    if running.allowed_sans and not new.allowed_sans:
        lost.append("client_allowed_sans (any verified client certificate would be served)")
    if running.auth.enabled and not new.auth.enabled:
        lost.append("basic auth (basic_auth_users: it would serve every page without a password)")
    return lost


def _version_name(version: ssl.TLSVersion) -> str:
    return next((name for name, v in TLS_VERSIONS.items() if v == version), version.name)


def refuse_weakening(running: WebConfig, new: WebConfig) -> None:
    """ConfigError naming `new`'s file and what it would remove, if it weakens `running`."""
    lost = weakenings(running, new)
    if lost:
        raise ConfigError(
            new.source or "--web.config.file",
            [
                ConfigIssue(
                    "",
                    f"refused: it would remove {'; '.join(lost)}; the running web configuration stays "
                    "(turning these off takes a restart: docs/deployment.md)",
                )
            ],
        )


def _issues(raw: dict[str, Any], base: Path) -> list[ConfigIssue]:
    """Checks across keys and on values pydantic does not know (run on the raw mapping so
    they are reported with the schema's)."""
    issues: list[ConfigIssue] = []
    tls = raw.get("tls_server_config")
    tls = tls if isinstance(tls, dict) else {}
    has_cert, has_key = bool(tls.get("cert_file")), bool(tls.get("key_file"))
    if has_cert != has_key:
        missing = "key_file" if has_cert else "cert_file"
        issues.append(
            ConfigIssue(f"tls_server_config.{missing}", "required with the other: give both cert_file and key_file")
        )
    auth = tls.get("client_auth_type", "NoClientCert")
    if tls.get("client_ca_file") and auth in ("NoClientCert", "RequestClientCert"):
        issues.append(
            ConfigIssue(
                "tls_server_config.client_ca_file",
                "client CAs are configured without a client auth policy: set client_auth_type to "
                "RequireAndVerifyClientCert (or VerifyClientCertIfGiven)",
            )
        )
    if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert", "RequireAnyClientCert") and not tls.get(
        "client_ca_file"
    ):
        issues.append(
            ConfigIssue(
                "tls_server_config.client_ca_file",
                f"required with client_auth_type {auth}: the CA that signed the clients' certificates"
                + (
                    " (Python's ssl verifies every client certificate it asks for)"
                    if auth == "RequireAnyClientCert"
                    else ""
                ),
            )
        )
    if auth != "NoClientCert" and not has_cert:
        issues.append(
            ConfigIssue(
                "tls_server_config.client_auth_type", "client certificates need TLS: give cert_file and key_file"
            )
        )
    for key in ("cert_file", "key_file", "client_ca_file"):
        value = tls.get(key)
        if isinstance(value, str) and value:
            path = base / value
            try:
                found, readable = path.is_file(), os.access(path, os.R_OK)
            except (OSError, ValueError) as exc:  # a NUL byte, a name too long
                issues.append(ConfigIssue(f"tls_server_config.{key}", f"not a usable file name: {exc}"))
                continue
            if not found:
                issues.append(ConfigIssue(f"tls_server_config.{key}", f"{path}: no such file"))
            elif not readable:
                issues.append(
                    ConfigIssue(f"tls_server_config.{key}", f"{path}: not readable by this user (uid {os.getuid()})")
                )
    versions = [TLS_VERSIONS.get(str(tls.get(k, d))) for k, d in (("min_version", "TLS12"), ("max_version", "TLS13"))]
    if versions[0] and versions[1] and versions[0] > versions[1]:
        issues.append(ConfigIssue("tls_server_config.max_version", "must not be lower than min_version"))
    # Only the strings of a list are looked up here: another type is the schema's to report
    # (a nested list is unhashable: looking it up would raise, issue 43).
    for i, name in _strings_of(tls.get("cipher_suites")):
        if name not in CIPHER_SUITES and name not in TLS13_SUITES:
            issues.append(
                ConfigIssue(
                    f"tls_server_config.cipher_suites[{i}]",
                    f"unknown cipher suite {name!r}; use Go's names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                )
            )
    for i, name in _strings_of(tls.get("curve_preferences")):
        if name not in CURVES:
            issues.append(
                ConfigIssue(
                    f"tls_server_config.curve_preferences[{i}]", f"unknown curve {name!r}; use {', '.join(CURVES)}"
                )
            )
    http = raw.get("http_server_config")
    headers = http.get("headers") if isinstance(http, dict) else None
    for name, value in headers.items() if isinstance(headers, dict) else ():
        if not isinstance(name, str) or not isinstance(value, str):
            continue  # the schema's to report
        allowed = next((h for h in HEADERS if h.lower() == name.lower()), None)
        if allowed is None:
            issues.append(
                ConfigIssue(
                    f"http_server_config.headers.{name}",
                    f"this header can not be configured; allowed: {', '.join(HEADERS)}",
                )
            )
        elif (pattern := HEADERS[allowed]) is not None and not pattern.fullmatch(value):
            issues.append(ConfigIssue(f"http_server_config.headers.{name}", f"invalid value {shown(value)}"))
        elif any(c in value for c in "\r\n\0"):
            issues.append(ConfigIssue(f"http_server_config.headers.{name}", "a header value must be one line"))
    users = raw.get("basic_auth_users")
    for user, hashed in users.items() if isinstance(users, dict) else ():
        if not isinstance(user, str):
            # The schema's message for this place is dropped (it would quote the hash).
            issues.append(ConfigIssue(f"basic_auth_users.{user}", f"a user name must be a string (got {shown(user)})"))
            continue
        if ":" in user:
            issues.append(ConfigIssue(f"basic_auth_users.{user}", "a user name must not contain ':'"))
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            issues.append(
                ConfigIssue(
                    f"basic_auth_users.{user}",
                    "not a bcrypt hash (write the hash, never the password: e.g. "
                    "python3 -c 'import bcrypt,getpass; print(bcrypt.hashpw(getpass.getpass().encode(), "
                    "bcrypt.gensalt()).decode())')",
                )
            )
    return issues


def _strings_of(value: Any) -> list[tuple[int, str]]:
    """The strings of a list, with their places (anything else is left to the schema)."""
    return [(i, v) for i, v in enumerate(value) if isinstance(v, str)] if isinstance(value, list) else []


def _context(tls: TlsServerConfig, base: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    assert tls.cert_file is not None and tls.key_file is not None
    ctx.load_cert_chain(base / tls.cert_file, base / tls.key_file)
    if tls.client_auth_type in ("RequireAnyClientCert", "RequireAndVerifyClientCert"):
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif tls.client_auth_type == "VerifyClientCertIfGiven":
        ctx.verify_mode = ssl.CERT_OPTIONAL
    else:  # NoClientCert; RequestClientCert (asked, never verified) decides nothing either
        ctx.verify_mode = ssl.CERT_NONE
    if tls.client_ca_file is not None and ctx.verify_mode != ssl.CERT_NONE:
        ctx.load_verify_locations(base / tls.client_ca_file)
    suites = [CIPHER_SUITES[s] for s in tls.cipher_suites or [] if s in CIPHER_SUITES]
    if suites:
        ctx.set_ciphers(":".join(suites))
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        ctx.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
    return ctx


def load_web_config(path: str | Path | None) -> WebConfig:
    """The web config at `path` (None: plain HTTP, no auth), or ConfigError with every problem.
    Relative file names inside are relative to the file's directory, as exporter-toolkit's.
    Whatever the file holds, the answer is one of those two: an exception of another kind
    (a case the checks missed) is a ConfigError too, so a reload is refused and counted,
    and a start or --web.config.check says `FILE: message`, never a traceback."""
    if path is None:
        return WebConfig()
    try:
        return _load_web_config(path)
    except ConfigError:
        raise
    except Exception as exc:  # belt and braces: the typed checks above should leave none
        raise ConfigError(str(path), [ConfigIssue("", f"cannot use the file: {type(exc).__name__}: {exc}")]) from None


def _load_web_config(path: str | Path) -> WebConfig:
    source = str(path)
    raw = yaml_mapping_or_error(read_config_text(path, source), source) or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            source, [ConfigIssue("", "the file must be a YAML mapping (tls_server_config, basic_auth_users, ...)")]
        )
    base = Path(path).parent
    issues = _issues(raw, base)
    parsed = None
    try:
        parsed = WebConfigFile.model_validate(raw)
    except ValidationError as exc:
        issues = _web_issues(exc) + issues
    if issues or parsed is None:
        raise ConfigError(source, issues or [ConfigIssue("", "invalid (no check said why: a bug, please report)")])
    tls = parsed.tls_server_config
    context = None
    if tls.cert_file is not None:
        try:
            context = _context(tls, base)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(
                source,
                [ConfigIssue("tls_server_config", f"cannot use the certificate, key or CA: {exc}")],
            ) from None
    headers = tuple(
        (next(h for h in HEADERS if h.lower() == name.lower()), value)
        for name, value in parsed.http_server_config.headers.items()
    )
    return WebConfig(source, context, BasicAuth(parsed.basic_auth_users), headers, tuple(tls.client_allowed_sans or ()))


def _web_issues(exc: ValidationError) -> list[ConfigIssue]:
    """config.py's messages, rooted at this file's model."""
    # _issues says a user's problem without echoing the value (it may be a password).
    users = ("basic_auth_users.", "basic_auth_users[")
    return [i for i in pydantic_issues(exc, WebConfigFile) if not i.path.startswith(users)]


def peer_sans(cert: dict[str, Any] | None) -> list[str]:
    """DNS names, IP addresses, e-mail addresses and URIs of a verified peer certificate."""
    if not cert:
        return []
    return [str(value) for _, value in cert.get("subjectAltName", ())]
