"""Full disks, through the real path: a capture directory too small for the dataset, a
disk that fills while the capture runs, an upload source that cannot be written.

Independent truths: the client veth's kernel counters (what really crossed), the
tmpfs's own free space, the files left in the directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bigbinf import lab
from bigbinf.config import Config, capture_directory
from bigbinf.measure import datasets
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import capture_bytes_needed, run_transfer
from bigbinf.metrics import last_result_samples

from ..conftest import veth_counters
from ..support import session

pytestmark = pytest.mark.lab
MiB = 1024 * 1024


@pytest.fixture
def small_disk() -> Iterator[callable]:
    """small_disk(bytes) -> the mount point of a fresh tmpfs of that size; every one is
    unmounted and removed after the test, whatever happened."""
    mounts: list[Path] = []

    def make(size: int) -> Path:
        point = session.scratch_dir(Path("/var/tmp"), "bbt-disk-")
        mounts.append(point)
        session.register_mount(point)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)], check=True)
        return point

    yield make
    for point in mounts:
        subprocess.run(["umount", "-l", str(point)], check=False)
        point.rmdir()


def _with(config: Config, section: str, **values: object) -> Config:
    return config.model_copy(update={section: getattr(config, section).model_copy(update=values)})


def _only_spec(config: Config):
    (spec,) = plan_round(config, lab.site(config))
    return spec


def _published(result) -> set[str]:
    return {name for name, _, _ in last_result_samples(result)}


def test_a_capture_directory_too_small_for_the_dataset_fails_before_anything_runs(make_lab, small_disk) -> None:
    config = make_lab(link={"rate": "1gbit"}, datasets={"f64m": {"file": "f64m.bin", "size": "64MiB"}})
    disk = small_disk(4 * MiB)
    config = _with(config, "capture", directory=disk)
    before = veth_counters(config)
    result = run_transfer(_only_spec(config), config, "test")
    after = veth_counters(config)

    assert result.outcome == "failed"
    assert result.error.startswith("not enough disk space:"), result.error
    assert str(disk) in result.error and "capture.directory" in result.error
    assert after["down"] - before["down"] < 64 * 1024  # the transfer never ran
    assert not result.wire_measured and "bigbinf_last_transfer_wire_bytes" not in _published(result)
    assert list(disk.iterdir()) == []


def test_a_capture_cut_short_by_a_full_disk_is_failed_with_no_wire_numbers(make_lab, small_disk) -> None:
    size = 48 * MiB
    config = make_lab(link={"rate": "100mbit"}, datasets={"f48m": {"file": "f48m.bin", "size": "48MiB"}})
    # Room for the check (the estimate and its spare), then another writer fills the disk
    # while the transfer runs: tcpdump still reports every packet "captured" and exits 0.
    room = capture_bytes_needed(size, 1, config.capture.snaplen) + 17 * MiB
    disk = small_disk(room)
    config = _with(config, "capture", directory=disk)
    spec = _only_spec(config)
    filled = threading.Event()

    def fill_once_the_capture_starts() -> None:
        deadline = time.monotonic() + 30
        while not any(p.suffix == ".pcap" for p in disk.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # part of the transfer captured
        # Unbuffered: the write that finds the disk full raises here, not the close's flush
        # after (an exception in this thread that the test never saw).
        with open(disk / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(bytes(MiB))
            except OSError:
                filled.set()

    filler = threading.Thread(target=fill_once_the_capture_starts, daemon=True)
    filler.start()
    before = veth_counters(config)
    result = run_transfer(spec, config, "test")
    after = veth_counters(config)
    filler.join(35)

    assert filled.is_set()
    crossed = after["down"] - before["down"]
    assert crossed > size  # the transfer itself went through ...
    assert result.verified
    # ... but its capture holds only part of it: failed, with the reason, and no wire numbers.
    assert result.outcome == "failed"
    assert "the capture was cut short" in result.error, result.error
    assert not result.wire_measured
    assert result.wire_bytes_down == result.packets_down == result.payload_bytes_down == 0
    published = _published(result)
    assert "bigbinf_last_transfer_wire_bytes" not in published
    assert "bigbinf_last_transfer_byte_ratio" not in published
    assert "bigbinf_last_transfer_duration_seconds" in published
    assert [p.name for p in disk.iterdir()] == ["filler"]  # the cut capture is removed


def test_the_capture_is_written_apart_from_the_received_file_and_removed_after(make_lab) -> None:
    config = make_lab(link={"rate": "1gbit"})
    capture_dir = capture_directory(config)
    assert capture_dir == config.transfer.workdir.with_name("work-captures")
    result = run_transfer(_only_spec(config), config, "test")
    assert result.outcome == "ok" and result.wire_measured and result.wire_bytes_down > 1 * MiB
    assert capture_dir.stat().st_mode & 0o777 == 0o700
    assert list(capture_dir.iterdir()) == []


def test_an_upload_source_that_cannot_be_written_leaves_no_partial_file(make_lab, small_disk) -> None:
    config = make_lab(link={"rate": "1gbit"})
    disk = small_disk(2 * MiB)
    ds = config.datasets["f1m"].model_copy(update={"size": 4 * MiB})
    with pytest.raises(OSError) as raised:
        datasets.ensure(disk, ds)
    assert str(raised.value).startswith(f"cannot write {disk / ds.file}: No space left on device")
    assert "transfer.workdir" in str(raised.value)
    assert list(disk.iterdir()) == []
    assert os.statvfs(disk).f_bfree == os.statvfs(disk).f_blocks  # nothing left behind

    # Through a transfer the check before it names the disk and the setting.
    config = _with(config, "transfer", workdir=disk / "work")
    config = config.model_copy(
        update={
            "datasets": {"f1m": ds},
            "protocols": {"scp": config.protocols["scp"].model_copy(update={"directions": ["upload"]})},
        }
    )
    result = run_transfer(_only_spec(config), config, "test")
    assert result.outcome == "failed"
    assert result.error.startswith("not enough disk space:") and "transfer.workdir" in result.error, result.error
    assert not (disk / "work" / "sources" / "f1m.bin.partial").exists()


@pytest.mark.parametrize("direction", ["download", "upload"])
def test_iperf3_needs_no_room_for_a_file_it_never_writes(make_lab, small_disk, direction: str) -> None:
    # Memory to memory: no received copy, no upload source.  A transfer.workdir far
    # smaller than the dataset is no reason to refuse it (it was: "not enough disk space
    # ... for the received copy" / "the upload source"); only the capture needs room.
    config = make_lab(
        link={"rate": "1gbit"},
        datasets={"f64m": {"file": "f64m.bin", "size": "64MiB"}},
        protocols={"iperf3": {"directions": [direction]}},
        servers=["iperf3"],
    )
    disk = small_disk(4 * MiB)
    config = _with(config, "transfer", workdir=disk / "work")
    config = _with(config, "capture", directory=session.scratch_dir(Path("/var/tmp"), "bbt-cap-"))
    before = veth_counters(config)
    try:
        result = run_transfer(_only_spec(config), config, "test")
    finally:
        shutil.rmtree(config.capture.directory, ignore_errors=True)
    after = veth_counters(config)
    assert result.outcome == "ok", result.error
    moved = after["down"] - before["down"] if direction == "download" else after["up"] - before["up"]
    # What the receiving iperf3 read crossed the wire (the kernel's count), most of the
    # 64 MiB: an upload's client may close before its socket's queue drained (57 MiB read
    # with the CPUs busy).
    assert moved > result.reported["bytes"] > 32 * MiB
    assert result.reported["bytes_sent"] >= 64 * MiB  # as iperf3 says it wrote them
    assert not (disk / "work" / "sources").exists()  # and no upload source was written
