"""Packet capture around one transfer: tcpdump, started before and stopped after.

Choices that make the numbers right (see docs/architecture.md and the lab notes):
- --immediate-mode: without it, stopping tcpdump right after a transfer loses the tail
  of the capture (up to 24% of packets seen here) without reporting a drop;
- a small snaplen (headers only) and a large kernel buffer keep capture cost low;
- a BPF filter on the host pair: only the two hosts' traffic is recorded;
- -Z root: tcpdump otherwise drops privileges and cannot write into our private 0700
  temp dir;
- stopped with SIGINT so it flushes and prints its kernel drop count, which we record.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bigbinf.measure.process import in_netns, kill_group, track, untrack

TCPDUMP = shutil.which("tcpdump") or "/usr/bin/tcpdump"


class CaptureError(RuntimeError):
    pass


@dataclass(frozen=True)
class CaptureStats:
    captured: int
    received: int
    dropped: int


def capture_argv(interface: str, pcap: Path, client: str, remote: str, snaplen: int, buffer_bytes: int) -> list[str]:
    return [
        TCPDUMP,
        "-i",
        interface,
        "-s",
        str(snaplen),
        "-B",
        str(max(1, buffer_bytes // 1024)),
        "--immediate-mode",
        "-n",
        "-Z",
        "root",
        "-w",
        str(pcap),
        "host",
        client,
        "and",
        "host",
        remote,
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
        snaplen: int = 128,
        buffer_bytes: int = 4 << 20,
        start_timeout: float = 10.0,
    ) -> None:
        self.argv = in_netns(netns, capture_argv(interface, pcap, client, remote, snaplen, buffer_bytes))
        self.pcap = pcap
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.stats: CaptureStats | None = None
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
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise CaptureError(f"{self.argv[0]} is not installed: install tcpdump (scripts/setup.sh)") from None
        track(self.proc)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        # tcpdump prints "listening on IF" once the socket is open and the filter set:
        # only then is the first packet of the transfer sure to be recorded.
        self._listening.wait(self.start_timeout)
        if not any("listening on" in line for line in self._stderr) or self.proc.poll() is not None:
            errors = " ".join(self._stderr[-3:]) or "no output"
            self.stop()
            raise CaptureError(f"tcpdump did not start capturing within {self.start_timeout:g}s: {errors}")

    def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").strip()
            self._stderr.append(line)
            if "listening on" in line:
                self._listening.set()
        self._listening.set()  # exited: unblock start(), which then sees the failure

    def stop(self) -> CaptureStats | None:
        proc = self.proc
        if proc is None:
            return self.stats
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                kill_group(proc)
        untrack(proc)
        if self._reader:
            self._reader.join(5)
        self.proc = None
        self.stats = self._parse_stats()
        if self.stats is None and proc.returncode not in (0, -signal.SIGINT):
            raise CaptureError(f"tcpdump failed ({proc.returncode}): " + " ".join(self._stderr[-3:]))
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
    def errors(self) -> str:
        return " ".join(self._stderr[-3:])


def wait_linger(seconds: float) -> None:
    """Let the last FIN/ACKs cross the link before the capture stops."""
    if seconds > 0:
        time.sleep(seconds)
