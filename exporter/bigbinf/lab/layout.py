"""Every name and path a lab uses, derived from its config alone.

`lab up` creates what these name; a `lab: true` remote is measured through them
(bigbinf.lab.site); nothing here touches the system.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bigbinf.config import LabConfig
from bigbinf.measure import datasets as dataset_files


class LabError(RuntimeError):
    """A lab that cannot be built, served or torn down: the message says why and the fix."""


@dataclass(frozen=True)
class LabLayout:
    """Every name and path a lab uses, derived from its config alone."""

    config: LabConfig
    # Serve in the current network namespace (a container that is itself the remote
    # site: `lab serve`) instead of in <name>-remote.
    in_place: bool = False

    @property
    def client_ns(self) -> str:
        return f"{self.config.name}-client"

    @property
    def remote_ns(self) -> str:
        return f"{self.config.name}-remote"

    @property
    def client_if(self) -> str:
        return f"{self.config.name}-c"

    @property
    def remote_if(self) -> str:
        return f"{self.config.name}-r"

    # The delay line's namespace and devices (only where netem is missing and the link
    # asks for delay or loss): client <-> wan_client_if [wan] wan_remote_if <-> remote.
    @property
    def wan_ns(self) -> str:
        return f"{self.config.name}-wan"

    @property
    def wan_client_if(self) -> str:
        return f"{self.config.name}-wc"

    @property
    def wan_remote_if(self) -> str:
        return f"{self.config.name}-wr"

    @property
    def tun_to_remote(self) -> str:
        return f"{self.config.name}-da"

    @property
    def tun_to_client(self) -> str:
        return f"{self.config.name}-db"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.client_ns, self.remote_ns, self.wan_ns)

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    @property
    def serve_root(self) -> Path:
        """The tree every lab server serves: data/ (downloads) and upload/."""
        return self.state_dir / "srv"

    @property
    def data_dir(self) -> Path:
        return self.serve_root / "data"

    @property
    def upload_dir(self) -> Path:
        return self.serve_root / "upload"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    def config_file(self, name: str) -> Path:
        return self.state_dir / "etc" / name

    @property
    def checksums(self) -> Path:
        return self.data_dir / dataset_files.MANIFEST

    @property
    def client_key(self) -> Path:
        return self.state_dir / "client_ed25519"

    @property
    def host_key(self) -> Path:
        return self.state_dir / "host_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def sshd_config(self) -> Path:
        return self.config_file("sshd_config")

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    def logfile(self, server: str) -> Path:
        return self.state_dir / "log" / f"{server}.log"
