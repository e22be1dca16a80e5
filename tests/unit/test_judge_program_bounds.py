"""The programs' bounds (judge/bounds.py program_cpu, storage, host_cpu), each number
computed by hand here: cpu, disk and busy_host are named only where the rate the program
allows meets the steady rate; a share that points at a program whose bound the rate does
not meet names nothing, and the withheld verdict lists that bound.  And the storage
limits read from a program's cgroups (measure/cgroups.py: v1 blkio.throttle.*, v2 io.max)."""

from __future__ import annotations

import dataclasses

import pytest

from bigbinf.judge import bounds
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.measure.cgroups import group_dirs, io_dirs, io_limits, printed_reader, read_io_limits
from bigbinf.measure.programs import ProgramLife

from ..support import evidence
from .test_judge import PATH, MiB, download, sender

# 64 MiB over 20 s: the transfer's rate 3.355 MB/s (no listings' fit: the average is the steady rate).
RATE = 64 * MiB / 20.0


def program(cpu: float, runnable: float, **kw: float) -> dict[str, float]:
    return {
        "seconds": 19.0,
        "cpu_share": cpu,
        "cpu_seconds": cpu * 19.0,
        "runnable_share": runnable,
        "io_wait_share": 0.0,
        "samples": 40.0,
        **kw,
    }


def judged(**kw: object) -> tuple[str, str, str]:
    r = download(**kw)
    limit = judge_limit(r, PATH)
    assert limit is not None
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    return limit.reason, limit.side, limit.evidence


def test_the_cpu_bound_is_bytes_per_cpu_second_times_one_core() -> None:
    # ssh on a core 97% of its 19 s: it moved RATE x 19 s over 18.43 CPU-seconds,
    # 3.459 MB per CPU-second; with one core it allows that.
    ssh = program(0.97, 0.99)
    i = Inputs.of(download(programs={"local ssh": ssh}), PATH)
    b = bounds.program_cpu(i, "local ssh", ssh)
    assert b is not None and b.rate == pytest.approx(RATE * 19.0 / (0.97 * 19.0))
    assert b.meets(RATE)
    reason, side, words = judged(tcp_remote=sender(busy_seconds=6.0), programs={"local ssh": ssh})
    assert (reason, side) == ("cpu", "local"), words
    assert "ssh (this host) moved 3.46 MB (3459220 B) per CPU-second" in words
    assert "with one core it allows 3.46 MB/s" in words
    assert "the transfer's steady rate was 3.36 MB/s" in words


def test_a_program_on_a_core_half_its_life_would_have_gone_faster_with_its_core() -> None:
    # Runnable 97% but on a core 55%: with a whole core it allows RATE / 0.55 = 6.10 MB/s;
    # the rate is 55% of that, so not cpu; no busy host read, so not busy_host either.
    ssh = program(0.55, 0.97)
    reason, _, words = judged(tcp_remote=sender(busy_seconds=6.0), programs={"local ssh": ssh})
    assert reason == "", words
    assert "not cpu (ssh (this host) was on a core or queued for one 97%" in words
    assert "with one core it allows 6.10 MB/s" in words and "is 55% of it" in words


def test_the_cpu_bound_under_a_quota_is_the_quota() -> None:
    # A quota of 0.10 cores, not spent (throttled 5%): the bound is bytes per CPU-second x 0.10.
    ssh = program(0.1, 0.95, cpu_quota_cores=0.1, cpu_throttled_share=0.05)
    i = Inputs.of(download(programs={"local ssh": ssh}), PATH)
    b = bounds.program_cpu(i, "local ssh", ssh)
    assert b is not None and b.rate == pytest.approx(RATE / 0.1 * 0.1) and b.meets(RATE)
    assert "its cgroup's CPU quota 0.10 cores" in b.words
    # A quota of 0.50 cores it used a tenth of, unspent: it allows five times the rate.
    loose = program(0.1, 0.95, cpu_quota_cores=0.5, cpu_throttled_share=0.0)
    b = bounds.program_cpu(Inputs.of(download(programs={"local ssh": loose}), PATH), "local ssh", loose)
    assert b is not None and b.rate == pytest.approx(RATE * 5) and not b.meets(RATE)
    # A quota of 0.20 cores spent (throttled 83%) with the group's other programs: it had
    # what the quota left it, what it used.
    spent = program(0.09, 0.79, cpu_quota_cores=0.2, cpu_throttled_share=0.83)
    b = bounds.program_cpu(Inputs.of(download(programs={"local ssh": spent}), PATH), "local ssh", spent)
    assert b is not None and b.rate == pytest.approx(RATE) and "spent (throttled 83% of the time)" in b.words


def test_the_storage_bound_is_the_cgroups_io_limit_the_way_the_data_went() -> None:
    # A download's receiver writes: its write limit 3.5 MB/s, the rate 96% of it.
    scp = program(0.01, 0.02, io_wait_share=0.4, io_write_limit_bytes_per_second=3.5e6)
    scp["io_read_limit_bytes_per_second"] = 1e6  # the other way: not what it did
    reason, side, words = judged(tcp_remote=sender(busy_seconds=4.0), programs={"local scp": scp})
    assert (reason, side) == ("disk", "local"), words
    assert "storage writes are limited by its cgroup to 3.50 MB/s" in words
    assert "the transfer's steady rate was 3.36 MB/s" in words
    # A limit far above the rate (20 MB/s) did not hold it: not disk, its bound listed.
    fast = {**scp, "io_write_limit_bytes_per_second": 20e6}
    reason, _, words = judged(tcp_remote=sender(busy_seconds=4.0), programs={"local scp": fast})
    assert reason == "", words
    assert "not disk" in words and "limited by its cgroup to 20.00 MB/s" in words and "is 17% of it" in words


def test_the_storage_bound_without_a_limit_is_the_rate_over_its_working_share() -> None:
    scp = program(0.01, 0.05, io_wait_share=0.9)
    i = Inputs.of(download(programs={"local scp": scp}), PATH)
    b = bounds.storage(i, "local scp", scp)
    assert b is not None and b.rate == pytest.approx(RATE / 0.95) and b.meets(RATE)


def test_busy_host_is_the_rate_this_hosts_cpu_allowed_the_program() -> None:
    # curl on a core 16% of its life, queued 77% (six burners on two cores): it moved
    # RATE / 0.16 per CPU-second and got 0.16 / 0.93 of a core while it wanted one, so
    # the host's CPU allowed it RATE / 0.93: met, busy_host, both numbers said.
    curl = program(0.16, 0.93, cpu_throttled_share=0.0)
    i = Inputs.of(download(programs={"local curl": curl}), PATH)
    b = bounds.host_cpu(i, "local curl", curl)
    assert b is not None and b.rate == pytest.approx(RATE / 0.93) and b.meets(RATE)
    busy = {"transfer_programs": 0.65, "capture": 0.18, "load1": 9.0}
    reason, side, words = judged(tcp_remote=sender(busy_seconds=6.0), programs={"local curl": curl}, host_busy=busy)
    assert (reason, side) == ("busy_host", "local"), words
    assert "the host's CPU allowed it 3.61 MB/s" in words and "steady rate was 3.36 MB/s" in words
    # Asleep half its life (waiting for the network): the host's CPU allowed it twice the rate.
    asleep = program(0.1, 0.5, cpu_throttled_share=0.0)
    b = bounds.host_cpu(Inputs.of(download(programs={"local curl": asleep}), PATH), "local curl", asleep)
    assert b is not None and not b.meets(RATE)


def test_the_cpu_of_the_set_up_moved_no_data() -> None:
    # scp under a 0.10-core quota beside burners (the plain matrix, 2026-12-02): ssh lived
    # 13.4 s, 6.4 s of it set-up (its key exchange: 0.25 CPU-s of its 0.40), then moved
    # 32 MiB in 7.0 s.  Over its data phase it used 0.15 CPU-s: 224 MB per CPU-second, and
    # what its spent quota left it, 2% of a core: 4.79 MB/s, the rate over its data phase.
    ssh = program(0.03, 0.73, seconds=13.4, cpu_seconds=0.40, cpu_seconds_before_data=0.25, seconds_before_data=6.4,
                  cpu_quota_cores=0.1, cpu_throttled_share=0.57)  # fmt: skip
    r = download(file_bytes=32 * MiB, duration_seconds=14.4, programs={"local ssh": ssh})
    i = Inputs.of(r, PATH)
    b = bounds.program_cpu(i, "local ssh", ssh)
    assert b is not None and b.rate == pytest.approx(min(32 * MiB, i.steady_rate * 7.0) / 7.0)
    assert b.inputs["bytes_per_cpu_second"] == pytest.approx(min(32 * MiB, i.steady_rate * 7.0) / 0.15)
    # Over its whole life (the set-up's CPU counted) it would have allowed 40% of that.
    whole = {k: v for k, v in ssh.items() if not k.endswith("_before_data")}
    assert bounds.per_cpu_second(i, whole) == pytest.approx(min(32 * MiB, i.steady_rate * 13.4) / 0.40)


def test_a_programs_values_carry_its_cpu_before_the_first_data() -> None:
    from bigbinf.measure.programs import record, summary

    lives: dict[tuple[int, int], ProgramLife] = {}
    for now, cpu in ((0.0, 1.0), (1.0, 1.5), (2.0, 1.6), (3.0, 1.7)):
        record(lives, 7, ("ssh", 7, "R", 100), (cpu, 0.0), now)
    values = summary(lives.values(), "local", data_start=1.2)["local ssh"]
    assert values["cpu_seconds"] == pytest.approx(0.7)
    assert values["cpu_seconds_before_data"] == pytest.approx(0.5)
    assert values["seconds_before_data"] == pytest.approx(1.2)


def test_a_remote_programs_cpu_bound_stands_on_its_own_numbers() -> None:
    # The remote's sshd on a core 98% of its life with one core: cpu on the remote, met.
    sshd = program(0.96, 0.98)
    r = download(tcp_remote=sender(busy_seconds=6.0), programs={"remote sshd": sshd})
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("cpu", "remote"), limit
    assert "with one core it allows" in limit.evidence
    # Half on a core, half queued (a busy remote, no quota read): it allows twice the rate.
    half = dataclasses.replace(r, programs={"remote sshd": program(0.5, 0.98)})
    limit = judge_limit(half, PATH)
    assert limit is not None and limit.reason != "cpu", limit


# ---------------------------------------------------------------- the storage limits read


def test_io_limits_of_v1_and_v2() -> None:
    files = {
        "/sys/fs/cgroup/blkio/a/blkio.throttle.write_bps_device": "7:3 2097152\n8:0 9000000\n",
        "/sys/fs/cgroup/blkio/a/blkio.throttle.read_bps_device": "",
        "/sys/fs/cgroup/b/io.max": "8:0 rbps=1048576 wbps=max riops=max wiops=max\n",
        "/sys/fs/cgroup/c/io.max": "8:0 rbps=max wbps=max riops=100 wiops=max\n",
    }
    read = printed_reader(files)
    v1 = io_limits("/sys/fs/cgroup/blkio/a", read)
    assert v1 is not None and (v1.read_bytes_per_second, v1.write_bytes_per_second) == (None, 2097152.0)
    v2 = io_limits("/sys/fs/cgroup/b", read)
    assert v2 is not None and (v2.read_bytes_per_second, v2.write_bytes_per_second) == (1048576.0, None)
    assert io_limits("/sys/fs/cgroup/c", read) is None  # an IOPS limit only: no bytes
    assert io_limits("/sys/fs/cgroup/none", read) is None
    assert set(read_io_limits(["/sys/fs/cgroup/blkio/a", "/sys/fs/cgroup/c"], read)) == {"/sys/fs/cgroup/blkio/a"}


def test_io_dirs_follow_the_blkio_hierarchy_or_the_unified_one() -> None:
    v1 = "5:blkio:/bbt-w\n4:cpu,cpuacct:/x\n0::/\n"
    assert io_dirs(v1)[:2] == ("/sys/fs/cgroup/blkio/bbt-w", "/sys/fs/cgroup/blkio")
    assert "/sys/fs/cgroup/blkio/bbt-w" in group_dirs(v1) and "/sys/fs/cgroup/cpu,cpuacct/x" in group_dirs(v1)
    assert io_dirs("0::/system.slice/ssh.service\n")[0] == "/sys/fs/cgroup/system.slice/ssh.service"
    assert io_dirs("garbage\n") == ()


def test_a_programs_values_carry_its_storage_limits() -> None:
    life = ProgramLife("scp", 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, samples=4, cgroup_dirs=("/g/a", "/g"))
    files = {"/g/a/blkio.throttle.write_bps_device": "7:3 2097152\n", "/g/io.max": "8:0 rbps=5000000 wbps=3000000\n"}
    life.record_io(read_io_limits(life.cgroup_dirs, printed_reader(files)))
    values = life.values()
    assert values["io_write_limit_bytes_per_second"] == 2097152.0  # the least over its groups
    assert values["io_read_limit_bytes_per_second"] == 5e6
