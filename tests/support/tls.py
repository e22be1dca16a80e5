"""A test CA and certificates made with the openssl command, for the web config's tests.

pki = TestPKI(tmp_path)                  # a CA of its own, per test
server = pki.issue("server", san="IP:127.0.0.1,DNS:localhost", server=True)
client = pki.issue("prometheus", san="DNS:prometheus.test")
rogue = TestPKI(tmp_path / "rogue").issue("intruder")   # signed by another CA
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _run(*argv: str) -> None:
    proc = subprocess.run([OPENSSL, *argv], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(argv)}: {proc.stderr}")


class TestPKI:
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "bigbinf test CA") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = Issued(self.dir / "ca.crt", self.dir / "ca.key")
        _run(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(self.ca.key), "-out", str(self.ca.cert), "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip

    def issue(self, name: str, san: str | None = None, server: bool = False) -> Issued:
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        _run(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
        )  # fmt: skip
        ext = self.dir / f"{name}.ext"
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            + f"extendedKeyUsage={'serverAuth' if server else 'clientAuth'}\n"
            + (f"subjectAltName={san}\n" if san else "")
        )
        _run(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca.cert), "-CAkey", str(self.ca.key),
            "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext),
        )  # fmt: skip
        key.chmod(0o600)
        return Issued(cert, key)

    def client_context(self, client: Issued | None = None) -> ssl.SSLContext:
        """A client trusting this CA, presenting `client` if given."""
        ctx = ssl.create_default_context(cafile=str(self.ca.cert))
        if client is not None:
            ctx.load_cert_chain(client.cert, client.key)
        return ctx
