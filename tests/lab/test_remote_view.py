"""The remote host seen as it runs (issue 34), through the real path against a plain
remote: the lab's sshd (its own, `Subsystem sftp internal-sftp`) reached as a user's site
is, by address, key and ssh_config, not `lab: true`; its stats over ssh through a
ControlMaster.  Each cause is induced by what really causes it, on the remote's sshd
listener (the sessions it forks inherit its cgroups):

- a CPU quota: a cgroup v1 cpu group with a CFS quota of 5% of a core;
- a slow disk under an upload: the upload directory a sync-mounted file system on a loop
  device whose writes reach it through a blkio v1 throttle (2 MB/s): the writer (sshd's
  internal-sftp child: OpenSSH's scp speaks SFTP) waits in state D, and holds no socket.

The kernel's own counts are the truth: the group's cpu.stat, the writer's state.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf.config import Config, parse_config
from bigbinf.lab import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import Result

from ..support import plain_site, session
from ..support.plain_causes_remote import slow_remote_disk

pytestmark = pytest.mark.lab
DATASETS = {"f8m": {"file": "f8m.bin", "size": "8MiB"}, "f64m": {"file": "f64m.bin", "size": "64MiB"}}
CPU = Path("/sys/fs/cgroup/cpu")
BLKIO = Path("/sys/fs/cgroup/blkio")
QUOTA = 0.05  # of a core, for the remote's sshd
SLOW_WRITES = 2_000_000  # bytes per second, the remote's upload disk


@pytest.fixture(scope="module")
def lab_config(make_module_lab) -> Config:
    return make_module_lab(link={"rate": "200mbit"}, datasets=DATASETS, protocols={"scp": {}}, servers=["sshd"])


@pytest.fixture(scope="module")
def control_dir() -> Iterator[Path]:
    """A short directory for the ControlMaster's socket (a socket path fits 108 bytes)."""
    path = session.scratch_dir(Path("/tmp"), "bbcm-", 0o700)
    try:
        yield path
    finally:
        for sock in path.iterdir():
            sock.unlink(missing_ok=True)
        path.rmdir()


def _ssh(layout: LabLayout, control: Path) -> list[str]:
    return [
        "ssh", "-F", str(layout.ssh_config), "-o", "ConnectTimeout=5", "-o", "ControlMaster=auto",
        "-o", f"ControlPath={control}/%C", "-o", "ControlPersist=60",
    ]  # fmt: skip


def plain_remote(
    lab_config: Config, tmp: Path, control: Path, upload_dir: Path | None = None, port: int = 22
) -> Config:
    """The lab as a user would point bigbinf at a site: address, key and ssh_config, not
    `lab: true`; the remote's stats over ssh through a ControlMaster."""
    assert lab_config.lab is not None
    layout = LabLayout(lab_config.lab)
    raw = lab_config.model_dump(mode="json", exclude_unset=True)
    raw.pop("lab")
    raw["remotes"] = {
        "site": {
            "address": lab_config.lab.remote_address,
            "port": port,
            "key": str(layout.client_key),
            "ssh_config": str(layout.ssh_config),
            "data_dir": str(layout.data_dir),
            "upload_dir": str(upload_dir or layout.upload_dir),
            "checksums": str(layout.checksums),
            "netns": layout.client_ns,
            "interface": layout.client_if,
            "probe": {"count": 3, "interval": "20ms", "method": "tcp"},
            "stats_command": [*_ssh(layout, control), "root@{host}"],
            "stats_interval": "250ms",
        }
    }
    raw["protocols"] = {"scp": {"directions": ["download", "upload"]}}
    raw["datasets"] = DATASETS
    raw["journal"] = {"path": str(tmp / "plain.jsonl")}
    return parse_config(yaml.safe_dump(raw), "plain-remote.yaml")


def run(config: Config, dataset: str, direction: str) -> Result:
    (spec,) = [s for s in plan_round(config, None) if (s.dataset, s.direction) == (dataset, direction)]
    result = run_transfer(spec, config, "remote-view")
    print(
        f"\n{direction} {dataset}: {result.outcome} {result.duration_seconds:.2f} s; remote_view {result.remote_view}; "
        f"host_busy {result.host_busy}; programs "
        + str({k: {m: round(v, 3) for m, v in p.items()} for k, p in result.programs.items()})
    )
    return result


@contextlib.contextmanager
def master(lab_config: Config, control: Path) -> Iterator[None]:
    """The stats command's ControlMaster, opened for the block and asked to exit after."""
    assert lab_config.lab is not None
    layout = LabLayout(lab_config.lab)
    ssh = ["ip", "netns", "exec", layout.client_ns, *_ssh(layout, control)]
    host = f"root@{lab_config.lab.remote_address}"
    subprocess.run([*ssh, host, "true"], check=True, timeout=60, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*ssh, "-O", "exit", host], check=False, timeout=30, capture_output=True)


DEFAULT_SFTP_PORT = plain_site.PLAIN_PORT


@pytest.fixture(scope="module")
def default_sftp_sshd(lab_config: Config) -> Iterator[int]:
    """A second sshd in the lab's remote namespace, configured as a distribution ships it:
    `Subsystem sftp /usr/lib/openssh/sftp-server` (the writer of an upload is then
    sftp-server, sshd's child through the user's shell), on DEFAULT_SFTP_PORT; its pid."""
    with plain_site.default_sshd(lab_config) as pid:
        yield pid


def _sshd_pid(lab_config: Config) -> int:
    assert lab_config.lab is not None
    return int((LabLayout(lab_config.lab).run_dir / "sshd.pid").read_text().split()[0])


listener_in_group = plain_site.listener_in_group
cgroups_mounted_for = plain_site.cgroups_mounted_for


def _v1(hierarchy: Path, name: str) -> bool:
    return (hierarchy / name).exists()


@pytest.mark.skipif(not _v1(CPU, "cpu.cfs_quota_us"), reason="needs cgroup v1's cpu controller")
def test_a_remote_sshd_held_to_a_cpu_quota_is_seen_throttled(
    lab_config: Config, control_dir: Path, tmp_path: Path
) -> None:
    config = plain_remote(lab_config, tmp_path, control_dir)
    pid = _sshd_pid(lab_config)
    # The stats command's master first, outside the quota (its sessions are its own
    # sshd's children, not the listener's): the remote's programs are read unstarved.
    with (
        cgroups_mounted_for(pid),
        master(lab_config, control_dir),
        listener_in_group(CPU, pid, "cpu") as group,
    ):
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(100000 * QUOTA)))
        (group / "cgroup.procs").write_text(str(pid))
        before = _throttled_ns(group)
        result = run(config, "f64m", "download")
        after = _throttled_ns(group)
    assert result.outcome == "ok", result.error
    view = result.remote_view
    # The kernel's count: the group was throttled while the transfer ran.
    assert after > before
    assert view["programs_seen"] >= 2, view  # the session's sshd processes (monitor, child)
    assert view["cpu_quota_cores"] == pytest.approx(QUOTA)
    assert view["cpu_throttled_share"] > 0, view
    assert "cpu_throttled_share" in result.programs["remote sshd"], result.programs
    assert view["listings_received"] >= 2 and view["listings_expected"] >= view["listings_received"], view


@pytest.mark.skipif(not _v1(CPU, "cpu.cfs_quota_us"), reason="needs cgroup v1's cpu controller")
def test_a_starved_remote_answers_its_listings_late_and_says_so(
    lab_config: Config, control_dir: Path, tmp_path: Path
) -> None:
    # As on a site: the stats command's own sessions go through the starved sshd too
    # (the master opened after the quota): what the listings say of the schedule is
    # measured, whatever the remote's programs show.
    config = plain_remote(lab_config, tmp_path, control_dir)
    pid = _sshd_pid(lab_config)
    with cgroups_mounted_for(pid), listener_in_group(CPU, pid, "cpu") as group:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(100000 * QUOTA)))
        (group / "cgroup.procs").write_text(str(pid))
        with master(lab_config, control_dir):
            before = _throttled_ns(group)
            result = run(config, "f64m", "download")
            after = _throttled_ns(group)
    assert after > before
    view = result.remote_view
    assert {"listings_expected", "listings_received", "programs_seen"} <= set(view), view
    assert 0 <= view["listings_received"] <= view["listings_expected"], view
    if view["programs_seen"]:  # seen: then held by its quota, as the kernel says
        assert view["cpu_throttled_share"] > 0, view


def _throttled_ns(group: Path) -> int:
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["throttled_time"])


@pytest.mark.skipif(not _v1(BLKIO, "blkio.throttle.write_bps_device"), reason="needs cgroup v1's blkio throttle")
@pytest.mark.parametrize("subsystem", ["internal-sftp", "sftp-server"])
def test_the_remote_writer_of_an_upload_to_a_slow_disk_waits_on_it(
    lab_config: Config, control_dir: Path, tmp_path: Path, request: pytest.FixtureRequest, subsystem: str
) -> None:
    # The lab's own sshd serves sftp in-process (internal-sftp); the distribution's
    # default runs sftp-server: either way the writer holds no socket.
    if subsystem == "internal-sftp":
        pid, port = _sshd_pid(lab_config), 22
    else:
        pid, port = request.getfixturevalue("default_sftp_sshd"), DEFAULT_SFTP_PORT
    with (
        slow_remote_disk(lab_config, pid, 8 << 20) as (mount, device),
        master(lab_config, control_dir),
        listener_in_group(BLKIO, pid, "blkio") as group,
    ):
        config = plain_remote(lab_config, tmp_path, control_dir, upload_dir=mount, port=port)
        (group / "blkio.throttle.write_bps_device").write_text(f"{device} {SLOW_WRITES}")
        (group / "cgroup.procs").write_text(str(pid))
        result = run(config, "f8m", "upload")
        # The kernel's own count of what the throttle held back: the writes went through it.
        throttled = (group / "blkio.throttle.io_service_bytes").read_text()
    assert result.outcome == "ok", result.error
    assert any(line.startswith(f"{device} Write") and int(line.split()[2]) > 0 for line in throttled.splitlines())
    # The writer holds no socket: found through the tree below the socket's owners, and
    # named for what it is.
    writer = result.programs.get(f"remote {subsystem}")
    assert writer is not None, result.programs
    assert writer["io_wait_share"] > 0, writer
    assert result.remote_view["programs_seen"] >= 2, result.remote_view  # the session's sshd, its writer
