"""Packet capture around one transfer: pcapdump.py (libpcap) or tcpdump, started before
and stopped after.

Choices that make the numbers right (see docs/architecture.md and the lab notes):
- started before the command and trusted only once it printed "listening on" (its
  socket is open and the filter set: the first packet of the transfer is recorded);
- the tail: libpcap reads the kernel's ring either frame by frame (TPACKET_V2,
  tcpdump --immediate-mode) or in 256 KiB blocks (TPACKET_V3), a partly filled block
  being handed over only after the block timeout.  tcpdump fixes that timeout at
  1000 ms: without --immediate-mode, stopped right after a transfer it loses the last
  block (up to 24% of the packets seen here) without reporting a drop, and waiting the
  timeout out costs a second per transfer.  pcapdump.py sets it to 10 ms and, when
  told to stop, waits two timeouts and reads the ring empty before it closes the file;
- tcpdump (immediate mode) is stopped with SIGINT only once drained: asleep in poll(2)
  waiting for the next frame, so it has read every frame the kernel put into its ring
  (at SIGINT libpcap stops without reading what is left);
- after a TCP command, wait_closed() waits until its connections have finished closing
  (the last FIN/ACKs are on the wire), at most capture.linger;
- the counts printed at the end are recorded: "dropped by kernel" (the ring was full)
  and, when tcpdump had to be stopped before it drained, the frames left unread;
- a tool that ended before the transfer did (killed, or stopped by a signal not ours)
  or had to be killed at the stop is a capture cut short (CaptureError, `cut_short`):
  what came after it is not in the file, whatever its counts say (issue 36: killed,
  it reported 0 dropped with 65% of the packets missing);
- a BPF filter on the host pair: only the two hosts' traffic is recorded;
- tcpdump -Z root: it otherwise drops privileges and cannot write into our private 0700
  temp dir (pcapdump.py never drops them).

Cost to the transfer (docs/benchmarks.md, "What capturing costs a transfer": every
setting measured against the others, interleaved, with the capture's bytes checked
against the kernel's counters in every run):
- TOOL_DEFAULT pcapdump: one wake-up per block instead of one per few frames; on an
  unshaped veth tcpdump --immediate-mode woke ~10,000 times and used 0.1-0.2 s of CPU
  per 256 MiB, pcapdump ~180 times and 0.04-0.06 s, and transfers were the least
  slowed (HTTP 1.22x against tcpdump's 1.48x, 11 runs each).  Every frame goes from the
  ring to the file inside libpcap; Python runs once per block.  capture.tool: tcpdump
  is the fallback (libpcap not loadable from Python);
- BUFFER_DEFAULT 32 MiB ring (was 4 MiB): no faster, but headroom: ~0.2 s of the reader
  not being scheduled at the ~850,000 frames/s of an unshaped veth, where 1 MiB dropped
  packets.  Kernel memory for the length of one transfer;
- SNAPLEN_DEFAULT 128: every header the analyser reads, and TCP options (below); 96
  was no cheaper;
- the reader at the transfer's own priority, on any CPU: nice 10, SCHED_IDLE and
  pinning to one CPU cut tcpdump's wake-ups but did not make the transfer faster, and
  a starved reader is what fills the ring.  A tmpfs for the file and no BPF filter
  made no difference either.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from bigbinf.process import in_netns, kill_group, owned, track, untrack

TCPDUMP = shutil.which("tcpdump") or "/usr/bin/tcpdump"
PCAPDUMP = Path(__file__).with_name("pcapdump.py")

# The analyser reads the link header (Ethernet 14 + a VLAN tag 4, or Linux cooked SLL2 20
# on "any"), IP (IPv6 40 + a hop-by-hop jumbo option 8 for BIG TCP) and the fixed TCP
# header (20): at most 88 bytes.  128 also keeps a TCP header with its full 40 bytes of
# options (MSS, window scale, SACK blocks, timestamps: 20 + 40 + 60 = 120), which tshark
# and Wireshark read in kept captures (the tests check the analyser against tshark);
# 96 cuts those options for IPv6, and measured no cheaper.
SNAPLEN_DEFAULT = 128
BUFFER_DEFAULT = 32 << 20
NICE_DEFAULT = 0  # measured: a lower priority made no transfer faster (above)
# "pcapdump" (pcapdump.py: libpcap buffered, with a 10 ms block timeout) or "tcpdump".
TOOL_DEFAULT = "pcapdump"
BLOCK_TIMEOUT_MS = 10
# tcpdump sets libpcap's timeout to 1000 ms: without immediate mode, the kernel retires
# a partly filled block of the ring only after that long.
BLOCK_TIMEOUT_SECONDS = 1.0
# How long stop() waits for tcpdump to read what is in its ring before it stops it
# anyway (the count of frames left unread then says how many were lost).
DRAIN_TIMEOUT_SECONDS = 5.0
# The numbers of poll and ppoll (libpcap waits for frames in one of them) as
# /proc/PID/syscall shows them, per machine (the kernel's syscall tables).
_POLL_SYSCALLS_BY_MACHINE = {
    "x86_64": {"7", "271"},
    "aarch64": {"73"},  # no poll on arm64: ppoll
    "riscv64": {"73"},
    "ppc64le": {"167", "281"},
    "s390x": {"168", "302"},
}
_POLL_SYSCALLS = _POLL_SYSCALLS_BY_MACHINE.get(platform.machine(), set())
# Where tcpdump's wait cannot be seen (another machine, /proc/PID/syscall unreadable):
# an immediate-mode reader keeps up within this, and its count gap is not called a loss.
_UNSEEN_DRAIN_SECONDS = 0.2


class CaptureError(RuntimeError):
    pass


# How long stop() waits for the tool to exit after SIGINT (pcapdump reads its ring for at
# most a second more) before it kills it: a capture cut short.
STOP_WAIT_SECONDS = 10.0


def _ended(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}: stopped by a signal not the exporter's, or failed"


@dataclass(frozen=True)
class CaptureStats:
    captured: int  # written to the file
    received: int  # passed the filter (the kernel's count, drops included)
    dropped: int  # the ring was full

    @property
    def unread(self) -> int:
        """Frames that passed the filter but neither reached the file nor were dropped:
        left in the ring when the reader stopped, or arrived after it stopped reading, or
        (loopback) outgoing copies libpcap discards.  Capture.unread says when it is a loss."""
        return max(0, self.received - self.dropped - self.captured)


def capture_argv(
    interface: str,
    pcap: Path,
    client: str,
    remote: str,
    snaplen: int,
    buffer_bytes: int,
    *,
    tool: str = TOOL_DEFAULT,
    immediate: bool = True,
    bpf: list[str] | None = None,
) -> list[str]:
    bpf = bpf if bpf is not None else ["host", client, "and", "host", remote]
    if tool == "pcapdump":
        # -I: the standard library only, whatever the environment says.
        return [
            sys.executable,
            "-I",
            str(PCAPDUMP),
            "-i",
            interface,
            "-s",
            str(snaplen),
            "-B",
            str(max(1, buffer_bytes // 1024)),
            "-T",
            str(BLOCK_TIMEOUT_MS),
            "-w",
            str(pcap),
            *bpf,
        ]
    return [
        TCPDUMP,
        "-i",
        interface,
        "-s",
        str(snaplen),
        "-B",
        str(max(1, buffer_bytes // 1024)),
        *(["--immediate-mode"] if immediate else []),
        "-n",
        "-Z",
        "root",
        "-w",
        str(pcap),
        *bpf,
    ]


class Capture:
    """Context manager: the capture runs for exactly the body of the `with`."""

    def __init__(
        self,
        interface: str,
        pcap: Path,
        client: str,
        remote: str,
        *,
        netns: str | None = None,
        snaplen: int = SNAPLEN_DEFAULT,
        buffer_bytes: int = BUFFER_DEFAULT,
        start_timeout: float = 10.0,
        nice: int = NICE_DEFAULT,
        tool: str = TOOL_DEFAULT,
        immediate: bool = True,
        sched_idle: bool = False,
        cpus: Collection[int] | None = None,
        bpf: list[str] | None = None,
    ) -> None:
        argv = capture_argv(
            interface, pcap, client, remote, snaplen, buffer_bytes, tool=tool, immediate=immediate, bpf=bpf
        )
        self.argv = in_netns(netns, argv)
        self.interface, self.netns = interface, netns
        self.pcap = pcap
        self.start_timeout = start_timeout
        self.nice = nice
        self.tool = tool
        self.immediate = immediate
        self.sched_idle = sched_idle
        self.cpus = set(cpus) if cpus is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.stats: CaptureStats | None = None
        self.drained = True  # False when stop() had to stop tcpdump before it read its ring
        self.cut_short = ""  # why the capture ended before the transfer (stop() raises), else ""
        self._stderr: list[str] = []
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                owned(self.argv),  # ends with the exporter, even with its guardian
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            # argv[0] is the tool, or `ip` (netns exec) in front of it: name what is missing.
            package = {"ip": "iproute2", TCPDUMP: "tcpdump"}.get(self.argv[0], Path(self.argv[0]).name)
            raise CaptureError(f"{self.argv[0]} is not installed: install {package} (scripts/setup.sh)") from None
        track(self.proc)
        self._place(self.proc.pid)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        # tcpdump prints "listening on IF" once the socket is open and the filter set:
        # only then is the first packet of the transfer sure to be recorded.
        self._listening.wait(self.start_timeout)
        if not any("listening on" in line for line in self._stderr) or self.proc.poll() is not None:
            errors = " ".join(self._stderr[-3:]) or "no output"
            with contextlib.suppress(CaptureError):  # its start's failure is the one to say
                self.stop()
            raise CaptureError(f"{self.tool} did not start capturing within {self.start_timeout:g}s: {errors}")

    def _place(self, pid: int) -> None:
        """Priority and CPUs, set by pid before tcpdump opens its socket (they survive the
        exec of `ip netns exec` into tcpdump).  A process that is already gone is left to
        start() to report."""
        with contextlib.suppress(ProcessLookupError):
            if self.sched_idle:
                os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
            if self.nice:
                os.setpriority(os.PRIO_PROCESS, pid, self.nice)
            if self.cpus is not None:
                os.sched_setaffinity(pid, self.cpus)

    def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").strip()
            self._stderr.append(line)
            if "listening on" in line:
                self._listening.set()
        self._listening.set()  # exited: unblock start(), which then sees the failure

    def wait_drained(self, timeout: float = DRAIN_TIMEOUT_SECONDS) -> bool:
        """Wait until tcpdump has read every frame the kernel gave it: it sleeps in
        poll(2) (libpcap reads the ring until it finds no frame ready, then polls), seen
        twice in a row a few ms apart.  Without immediate mode, first the block timeout,
        after which the kernel hands over the last, partly filled block.  False if it
        did not drain within `timeout`.  Where its state cannot be read (a machine whose
        poll number is not known here, /proc/PID/syscall unreadable) it is given
        _UNSEEN_DRAIN_SECONDS and taken as drained: a gap is then not called a loss."""
        proc = self.proc
        if proc is None or proc.poll() is not None or self.tool == "pcapdump":
            return True  # pcapdump waits for its last block and reads its ring empty itself
        if not self.immediate:
            time.sleep(BLOCK_TIMEOUT_SECONDS + 0.05)
        deadline = time.monotonic() + timeout
        path = Path(f"/proc/{proc.pid}/syscall")
        idle_seen = 0
        while True:
            try:
                if not _POLL_SYSCALLS:
                    raise OSError("poll's number on this machine is not known")
                idle = path.read_text().split(" ", 1)[0] in _POLL_SYSCALLS
            except OSError:
                time.sleep(_UNSEEN_DRAIN_SECONDS)
                return True
            idle_seen = idle_seen + 1 if idle else 0
            if idle_seen >= 2:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)

    def stop(self) -> CaptureStats | None:
        """Stop the tool once it has read what the transfer sent, and read its counts.
        CaptureError if it failed, or if the capture was cut short (`cut_short` says
        how): it had ended before this was called, or had to be killed here."""
        proc = self.proc
        if proc is None:
            return self.stats
        ended_early = proc.poll() is not None and self._listening.is_set()
        killed = False
        if proc.poll() is None:
            if self._listening.is_set():
                wait_queue_out(self.netns, self.interface, QUEUE_WAIT_MAX_SECONDS)
            self.drained = self.wait_drained() if self._listening.is_set() else True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                killed = True
        untrack(proc)
        if self._reader:
            self._reader.join(5)
        self.proc = None
        self.stats = self._parse_stats()
        if ended_early or killed:
            self.cut_short = (
                f"{self.tool} ended before the transfer did ({_ended(proc.returncode)})"
                if ended_early
                else f"{self.tool} did not stop within {STOP_WAIT_SECONDS:g} s and was killed before it had "
                "read its ring"
            )
            counts = f"; it had written {self.stats.captured} packets" if self.stats else ""
            raise CaptureError(
                f"cut short: {self.cut_short}{counts}; the packets after that are not in the capture, and the "
                "wire numbers are absent"
            )
        if self.stats is None and proc.returncode not in (0, -signal.SIGINT):
            raise CaptureError(f"{self.tool} failed ({proc.returncode}): " + " ".join(self._stderr[-3:]))
        return self.stats

    def _parse_stats(self) -> CaptureStats | None:
        text = "\n".join(self._stderr)
        numbers = {}
        for key in ("captured", "received by filter", "dropped by kernel"):
            match = re.search(rf"(\d+) packets? {key}", text)
            if match:
                numbers[key] = int(match.group(1))
        if "captured" not in numbers:
            return None
        return CaptureStats(
            numbers["captured"], numbers.get("received by filter", 0), numbers.get("dropped by kernel", 0)
        )

    @property
    def unread(self) -> int:
        """Frames tcpdump was stopped before reading, when it had not drained (0 when
        it had: then a gap between its counts is frames that arrived after it stopped
        reading, or on loopback the outgoing copies libpcap discards, not a loss)."""
        return self.stats.unread if self.stats and not self.drained else 0

    @property
    def errors(self) -> str:
        return " ".join(self._stderr[-3:])


# The tap sees an outgoing frame when the interface's qdisc hands it to the driver: a
# frame still queued there (a shaper's backlog, netem's delay, fq's pacing) when the
# capture stops would be sent, and counted by the kernel, but not captured.
QUEUE_WAIT_MAX_SECONDS = 1.0
_QUEUE_POLL_SECONDS = 0.005


def wait_queue_out(netns: str | None, interface: str, max_seconds: float) -> float:
    """Wait until every frame queued on `interface`'s root qdiscs when called has been
    sent (their count of packets sent has grown by the backlog seen then: qdiscs dequeue
    in order, or nearly), at most `max_seconds`, so that waiting for our frames does
    not turn into waiting for a busy host's other traffic.  Returns the seconds waited;
    where `tc` cannot say (no such tool, no statistics), nothing is waited."""
    start = time.monotonic()
    first = _root_qdisc_counts(netns, interface)
    if first is None or first[1] == 0:
        return time.monotonic() - start
    target = first[0] + first[1]
    while time.monotonic() - start < max_seconds:
        time.sleep(_QUEUE_POLL_SECONDS)
        now = _root_qdisc_counts(netns, interface)
        if now is None or now[0] >= target or now[1] == 0:
            break
    return time.monotonic() - start


def _root_qdisc_counts(netns: str | None, interface: str) -> tuple[int, int] | None:
    """(packets sent, packets queued) over the interface's root qdiscs (a multiqueue
    root, mq, reports its queues' sums)."""
    argv = in_netns(netns, ["tc", "-s", "-j", "qdisc", "show", "dev", interface])
    try:
        done = subprocess.run(argv, capture_output=True, timeout=2, check=False)
        qdiscs = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(qdiscs, list):
        return None
    roots = [q for q in qdiscs if isinstance(q, dict) and q.get("root")]
    try:
        return sum(int(q.get("packets", 0)) for q in roots), sum(int(q.get("qlen", 0)) for q in roots)
    except (TypeError, ValueError):
        return None


def wait_linger(seconds: float) -> None:
    """Let the last packets cross the link before the capture stops (transports whose
    end cannot be seen in the kernel's socket table: UDP)."""
    if seconds > 0:
        time.sleep(seconds)


# TCP states in which a connection still has packets to exchange after its program has
# closed it: FIN sent and not yet acknowledged, or the peer's FIN awaited, or our final
# ACK of the peer's FIN awaited.  TIME-WAIT is done (our last ACK has been sent);
# CLOSE-WAIT belongs to a process that is still running (not the transfer's command).
_CLOSING_STATES = ("fin-wait-1", "fin-wait-2", "closing", "last-ack")
# Of those, the ones where our FIN is not yet acknowledged: it was lost (or its ACK was),
# and the kernel will retransmit it after an RTO (200 ms at least, doubled after each
# loss).  That retransmission belongs to the transfer: the capture must hold it and the
# sender's count must include it (seen: a lost FIN on a 1%-loss link left the transfer's
# count one short of nstat's).  These are waited for up to FIN_RETRANSMIT_SECONDS;
# FIN-WAIT-2 (a peer that keeps its half open) only up to the linger.
_UNACKED_FIN_STATES = frozenset({"FIN-WAIT-1", "CLOSING", "LAST-ACK"})
FIN_RETRANSMIT_SECONDS = 3.0
_CLOSED_POLL_SECONDS = 0.005


def wait_closed(netns: str | None, peer: str, max_seconds: float) -> float:
    """After a TCP transfer's command: wait until no TCP connection to `peer` is still
    closing (the last FIN/ACK exchange has crossed the link, so the capture holds it),
    at most `max_seconds` (capture.linger), or FIN_RETRANSMIT_SECONDS while a FIN of ours
    is unacknowledged.  Replaces a fixed linger: in the lab the exchange takes well under
    a millisecond, on a long path a few round trips, and a fixed wait was either too short
    for the one or wasted on the other.  A connection that stays half-closed (a peer that
    never sends its FIN) costs the whole linger, as before.  If `ss` cannot be run, the
    linger is waited in full.  Returns the seconds waited."""
    start = time.monotonic()
    deadline = start + max_seconds
    fin_deadline = start + max(max_seconds, FIN_RETRANSMIT_SECONDS)
    # ss reads "2001:db8::1" as host:port; a prefix length says it is an address.
    target = f"{peer}/128" if ":" in peer else peer
    states = [word for state in _CLOSING_STATES for word in ("state", state)]
    argv = in_netns(netns, ["ss", "-tnH", *states, "dst", target])
    while True:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=max(0.5, max_seconds), check=False)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is None or done.returncode != 0:  # no answer from the kernel: the linger in full
            time.sleep(max(0.0, deadline - time.monotonic()))
            break
        # With more than one state asked for, ss prints each socket's state first.
        closing = {line.split()[0] for line in done.stdout.decode("ascii", "replace").splitlines() if line.strip()}
        if not closing:
            break
        now = time.monotonic()
        if now >= (fin_deadline if closing & _UNACKED_FIN_STATES else deadline):
            break
        time.sleep(_CLOSED_POLL_SECONDS)
    return time.monotonic() - start
