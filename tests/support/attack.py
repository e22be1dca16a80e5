"""Connections that tie up an HTTP server without credentials, held open as an attacker
holds them: whenever the server closes one, it is opened again at once.

    python -m tests.support.attack --port P [--tls] [--idle N] [--slowloris N] [--stuck N]

* idle: a TCP connection that never sends a byte;
* slowloris: a request head sent a line every `--drip` seconds, never finished (over TLS
  with --tls: the handshake completes first, as a browser's would);
* stuck: a TLS ClientHello (a real one, fresh random bytes each time: OpenSSL's through
  memory BIOs), then nothing, whatever the server answers (a handshake that never ends).

Runs in its own process (its own event loop and file descriptors: the limit is raised to
the hard limit).  Prints one JSON line a second: how many of each are open now, and how
many times the server closed one.  tests/e2e/test_web.py and
benchmarks/bench_front_door.py run it beside their scrapes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import ssl
import sys
import time


def _hello_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA store: made once, a handshake never verified
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


_HELLO_CONTEXT = _hello_context()


def client_hello() -> bytes:
    """A TLS client's first flight: its ClientHello record, as OpenSSL writes it (its
    random bytes drawn anew each time)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _HELLO_CONTEXT.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


class Tally:
    def __init__(self) -> None:
        self.open = {"idle": 0, "slowloris": 0, "stuck": 0}
        self.closed_by_server = {"idle": 0, "slowloris": 0, "stuck": 0}
        self.failed_connects = 0


async def _hold(kind: str, host: str, port: int, tls: ssl.SSLContext | None, drip: float, tally: Tally) -> None:
    while True:
        writer = None
        try:
            if kind == "slowloris" and tls is not None:
                reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname="localhost")
            else:
                reader, writer = await asyncio.open_connection(host, port)
        except (TimeoutError, OSError, ssl.SSLError):
            tally.failed_connects += 1
            await asyncio.sleep(0.05)
            continue
        tally.open[kind] += 1
        try:
            if kind == "stuck":
                writer.write(client_hello())
            elif kind == "slowloris":
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            if kind == "slowloris":
                while True:
                    try:
                        await asyncio.wait_for(reader.read(1024), drip)
                        break  # the end of the stream, or an answer: the server ended it
                    except TimeoutError:
                        writer.write(b"X-a: b\r\n")
                        await writer.drain()
            else:
                while await reader.read(1024):  # the end of the stream: the server ended it
                    pass
        except (OSError, ssl.SSLError):
            pass
        finally:
            tally.open[kind] -= 1
            tally.closed_by_server[kind] += 1
            if writer is not None:
                writer.transport.abort()


async def _main(args: argparse.Namespace) -> None:
    tls = None
    if args.tls:
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    tally = Tally()
    start = time.monotonic()
    # Reported from the start, while the connections are still being opened (on a loaded
    # host that takes a while: a report only after it said nothing for a minute).
    reports = asyncio.create_task(_report(args, tally, start))
    tasks = []
    for kind, count in (("idle", args.idle), ("slowloris", args.slowloris), ("stuck", args.stuck)):
        for _ in range(count):
            tasks.append(asyncio.create_task(_hold(kind, args.host, args.port, tls, args.drip, tally)))
            await asyncio.sleep(0)  # a burst, but not all in one loop turn
    await reports


async def _report(args: argparse.Namespace, tally: Tally, start: float) -> None:
    while args.seconds <= 0 or time.monotonic() - start < args.seconds:
        await asyncio.sleep(1)
        print(
            json.dumps({"open": tally.open, "closed": tally.closed_by_server, "failed": tally.failed_connects}),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--idle", type=int, default=0)
    parser.add_argument("--slowloris", type=int, default=0)
    parser.add_argument("--stuck", type=int, default=0)
    parser.add_argument("--drip", type=float, default=1.0, help="seconds between two header lines")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: when killed)")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))
    sys.exit(0)


if __name__ == "__main__":
    main()
