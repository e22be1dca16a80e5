"""The HTTP front door: one event loop holds every connection; a table of routes says
what is served.

Why this shape (docs/architecture.md): a thread per connection let 256 idle clients shut
Prometheus out (issue 24).  Here one asyncio loop in one thread holds every connection
as a few kilobytes of state, HTTP/1.1 is parsed by h11 (python-hyper's state machine,
also under uvicorn and httpx), and TLS runs through the standard `ssl` module's memory
BIOs, so that this module decides every deadline and every byte it buffers:

* a TLS handshake must end within HANDSHAKE_SECONDS of the accept, a request's head
  within HEAD_SECONDS (of the handshake's end, or of the first byte of a kept-alive
  connection's next request), its body within BODY_SECONDS, and the response must be
  taken by the client within WRITE_SECONDS; a kept-alive connection may wait IDLE_SECONDS
  for its next request;
* a connection buffers at most one read (READ_BYTES), a request head of MAX_HEAD_BYTES
  (431 beyond), a body of its route's `max_body` (413 beyond, at once: from the
  Content-Length, or from the sizes a chunked body's chunk-size lines declare), and a
  response is written in WRITE_CHUNK pieces as the client takes them;
* a request that changes state (not GET or HEAD) from another site's page is refused
  with 403 (`cross_site`: Sec-Fetch-Site, Origin, a form's content type), so that a
  browser holding the basic-auth credentials cannot be made to post a reload;
* at most `capacity` connections are open (from the file descriptor limit, raised to
  its hard limit at start as Go programs do); at capacity a new connection closes the
  connection that has waited longest for its client (a handshake, a head, an idle
  kept-alive connection), never one whose request is being answered;
* HTTP/0.9, a malformed request line, a negative, non-numeric or conflicting
  Content-Length, Content-Length with Transfer-Encoding, and obsolete line folding get
  400, an HTTP version other than 1.x 505; bytes that cannot begin a request line are
  answered, as Go answers them, once a line has ended or the head's deadline
  has passed: answered at once, such a client came back at once, and fifty of them kept
  a core busy with reconnections while scrapes waited; a TLS handshake at the plain port
  (whose ClientHello always holds a line-end byte) is held unread to the deadline;
* nothing is logged per connection: every refusal is counted by reason
  (`bigbinf_http_connections_rejected_total`, REASONS) and summarised in at most one
  log line per SUMMARY_SECONDS; and no response carries a `Server` header;
* the server accepts itself (not asyncio.start_server): a connection is *parked* until
  its first request's head has ended, as a socket, a reader callback and a deadline in
  one heap swept every PARKED_SWEEP_SECONDS (the head read there, over TLS after a
  handshake done there through the TLS object's memory BIOs), and becomes a task with a
  stream and a parser only then.  Two thousand idle connections as tasks were ~115,000
  objects that the garbage collector walked in pauses of up to 0.45 s (1.4 s beside
  two CPU burners), and the slowest scrape waited for them (issue 36); the heap the
  exporter holds from its start is frozen out of those walks (gc.freeze).  An accept
  that finds no descriptor (EMFILE, ENFILE) is counted (fd_limit) and said in the
  summary line, never per accept (asyncio's own accept logged a traceback per attempt:
  39,288 in 80 s), and the connection that has waited longest for its client (at least
  EVICT_MIN_WAIT_SECONDS) makes room.

Every route is behind the same authentication (basic auth, when the web config has
users); pages are rendered elsewhere (service/routes.py) and only registered here.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import gc
import heapq
import http
import itertools
import logging
import random
import re
import resource
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import h11

from bigbinf import metrics as M
from bigbinf.service.webconfig import WebConfig, peer_sans

log = logging.getLogger(__name__)

HANDSHAKE_SECONDS = 10.0
HEAD_SECONDS = 10.0
BODY_SECONDS = 10.0
# Each connection's handshake and head deadlines are drawn up to this fraction later, so
# that connections opened together (an attacker's) are not closed together: a thousand
# closes and reconnections in one turn of the loop would hold up a scrape.
DEADLINE_SPREAD = 0.5
WRITE_SECONDS = 60.0
IDLE_SECONDS = 60.0
READ_BYTES = 16 * 1024
MAX_HEAD_BYTES = 16 * 1024
WRITE_CHUNK = 64 * 1024
# Descriptors kept for everything else the exporter opens (transfers, captures, journals).
FD_RESERVE = 256
BACKLOG = 4096  # the kernel caps it at net.core.somaxconn (4096 on Debian 12)
MAX_CAPACITY = 16384  # whatever the fd limit: bounds the memory all connections can hold
SUMMARY_SECONDS = 60.0  # at most one log line about refused connections per this
FLUSH_SECONDS = 2.0  # the counter reaches /metrics this often (never per connection)
AUTH_THREADS = 2  # bcrypt checks that missed the cache (the rest never wait for one)
# Connections taken per wake-up of the listening socket: a burst of reconnections yields
# to the connections being served (a scrape) between batches.
ACCEPT_BATCH = 64
# accept() without a descriptor for the connection (the open-files limit): retried after
# this long, doubled while it lasts, as Go's net/http backs off (5 ms to 1 s).
ACCEPT_RETRY_FIRST = 0.005
ACCEPT_RETRY_MAX = 1.0
_NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# At the descriptor limit a connection is closed to make room only once it has waited
# this long for its client: never the scrape accepted a moment ago, whose request is on its way.
EVICT_MIN_WAIT_SECONDS = 0.5
PARKED_SWEEP_SECONDS = 0.25  # how often the deadlines of connections not yet heard from are checked

REASONS = M.HTTP_REJECT_REASONS
HTTP_TO_HTTPS = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_TOKEN_START = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]")  # what a request line's method begins with
_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^\x00-\x20\x7f]+ HTTP/\d\.\d\r?")


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str
    headers: Mapping[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes | Sequence[bytes] = b""  # chunks: /metrics sends the exposition's own
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False  # close the connection after it (refusals: no body is read)


Handler = Callable[[Request], Response]


@dataclass(frozen=True)
class Route:
    """One path: the methods it answers (GET implies HEAD), its handler, and what must
    hold before its body is read.

    `blocking` handlers (a reload reads files) run in a worker thread, the rest in the
    loop: they must only read state that is ready (the cached exposition).  `precheck`
    may refuse the request before its body is read (a disabled lifecycle API)."""

    path: str
    methods: tuple[str, ...]
    handler: Handler
    blocking: bool = False
    max_body: int = 0
    precheck: Callable[[], Response | None] | None = None
    # A path ending in "/" that also answers every path below it (/transfer/ID): its
    # handler reads the rest from request.path and must validate it.
    prefix: bool = False

    def allows(self, method: str) -> bool:
        return method in self.methods or (method == "HEAD" and "GET" in self.methods)


class _Refused(Exception):
    """Ends a connection, counted under `reason`, after sending `answer` (if any)."""

    def __init__(self, reason: str, answer: bytes = b"") -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer


class _Channel(Protocol):
    async def recv(self) -> bytes: ...

    async def send(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class _Plain:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes = b"") -> None:
        self.reader, self.writer, self._first = reader, writer, first

    async def recv(self) -> bytes:
        if self._first:
            data, self._first = self._first, b""
            return data
        return await self.reader.read(READ_BYTES)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()  # waits while the client has not taken the last piece

    def close(self) -> None:
        self.writer.transport.abort()  # at once, whatever is still buffered

    async def finish(self, seconds: float) -> None:
        """Close once what is buffered has gone out (at most `seconds`, then at once)."""
        self.writer.close()
        try:
            async with asyncio.timeout(seconds):
                await self.writer.wait_closed()
        except (TimeoutError, OSError):
            self.close()


class _TlsState:
    """A connection's TLS object and its memory BIOs: made in the parked reader callback
    (the handshake and the first request's head are done there), then handed to _Tls."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.shaken = False  # the handshake has ended


class _Tls:
    """TLS over the connection's stream through memory BIOs: the handshake and every
    record pass through here, so the deadlines above cover them."""

    def __init__(self, plain: _Plain, state: _TlsState, first: bytes = b"") -> None:
        self.plain, self.state, self._first = plain, state, first
        self.incoming, self.outgoing, self.tls = state.incoming, state.outgoing, state.tls

    async def _flush(self) -> None:
        data = self.outgoing.read()
        if data:
            await self.plain.send(data)

    async def _fill(self) -> None:
        data = await self.plain.recv()
        if not data:
            raise ConnectionResetError("closed during TLS")
        self.incoming.write(data)

    async def handshake(self) -> None:
        while True:
            try:
                if not self.state.shaken:
                    self.tls.do_handshake()
                    self.state.shaken = True
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    await self._flush()  # the alert tells the client why
                raise

    async def recv(self) -> bytes:
        if self._first:  # the head decrypted while parked (_readable)
            data, self._first = self._first, b""
            return data
        while True:
            try:
                return self.tls.read(READ_BYTES)
            except ssl.SSLWantReadError:
                await self._flush()  # TLS 1.3 session tickets, key updates
                try:
                    await self._fill()
                except ConnectionResetError:
                    return b""
            except ssl.SSLZeroReturnError:
                return b""

    async def send(self, data: bytes) -> None:
        self.tls.write(data)
        await self._flush()

    def close(self) -> None:
        self.plain.close()


async def _until_line_end(channel: _Channel, deadline: float, read: int) -> None:
    """Read and drop bytes until a line ends, the client closes, MAX_HEAD_BYTES have come
    or `deadline` (the loop's clock) passes: what Go's server waits for before it judges
    a request line."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline):
            while read < MAX_HEAD_BYTES:
                data = await channel.recv()
                if not data or b"\n" in data:
                    return
                read += len(data)


def _is_tls_record(first: bytes) -> bool:
    """Whether a connection's first bytes begin a TLS handshake record (type 22, version
    3.x): no HTTP method begins with byte 0x16."""
    return len(first) >= 3 and first[0] == 0x16 and first[1] == 0x03 and first[2] <= 0x04


def _head_goes_on(head: bytes, seen: int) -> bool:
    """Whether a first request's head read while parked has not ended and may still be one
    (`seen`: how much of it was searched before)."""
    line_end = head.find(b"\n")
    return (
        _HEAD_END.search(head, max(0, seen - 3)) is None
        and len(head) <= MAX_HEAD_BYTES
        and (line_end < 0 or _REQUEST_LINE.fullmatch(head[:line_end]) is not None)
    )


def _answer_parked(conn: _Conn, answer: bytes) -> None:
    """Best effort, never waiting: drop what the client sent (unread bytes would make the
    close a reset that loses the answer), then send `answer`."""
    if conn.sock is None:
        return
    try:
        for _ in range(MAX_HEAD_BYTES // READ_BYTES + 1):
            if not conn.sock.recv(READ_BYTES):
                return  # the client has gone
    except BlockingIOError:
        pass  # all read
    except OSError:
        return
    with contextlib.suppress(OSError):
        conn.sock.send(answer)


def _spread(seconds: float) -> float:
    return seconds * (1 + DEADLINE_SPREAD * random.random())


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (as Go's runtime
    does for node_exporter); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


def capacity_for(fd_limit: int) -> int:
    return max(64, min(fd_limit - FD_RESERVE, MAX_CAPACITY))


@dataclass(eq=False)  # hashed by identity: kept in sets and the waiting order
class _Conn:
    """A connection's place in the waiting order (for eviction at capacity).

    Until its first byte comes a connection is `parked`: only its socket, a reader
    callback and its deadline (in the server's heap), no task, stream or parser.  Two
    thousand idle connections held as tasks and streams were ~115,000 objects the
    garbage collector walked, in pauses that held up scrapes on a loaded host (issue 36);
    parked they are a few each."""

    sock: socket.socket | None = None
    accepted: float = 0.0  # loop time
    web: WebConfig | None = None  # the web config in force at the accept
    # The handshake's (TLS, until it ends parked) or the first head's, loop time.
    deadline: float = 0.0
    parked: bool = True
    # A TLS handshake at the plain port: held parked, unread, to its deadline (_readable).
    held_tls: bool = False
    # The first request's head as it comes, read (over TLS: decrypted) while parked (_readable).
    head: bytes = b""
    # Over TLS: the TLS object fed while parked, and handshake bytes the socket did not take.
    tls: _TlsState | None = None
    unsent: bytes = b""
    task: asyncio.Task[None] | None = None
    channel: _Channel | None = None
    evicted: bool = False
    peer: str = field(default="", repr=False)

    def close_parked(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.parked and self.sock is not None:
            self.parked = False
            with contextlib.suppress(Exception):
                loop.remove_reader(self.sock.fileno())
            self.sock.close()


class HttpServer:
    """Listens on one address and serves `routes` with the web config `web()` returns
    when a connection is accepted (a reload changes it for the connections after)."""

    def __init__(
        self,
        host: str,
        port: int,
        routes: Iterable[Route],
        web: Callable[[], WebConfig],
        on_rejections: Callable[[Mapping[str, int]], None] = lambda counts: None,
    ) -> None:
        self.routes = {route.path: route for route in routes}
        self.prefixes = sorted((r for r in self.routes.values() if r.prefix), key=lambda r: -len(r.path))
        self.web = web
        self.on_rejections = on_rejections
        self.capacity = capacity_for(raise_fd_limit())
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Bound here, in the caller's thread: a busy port is the caller's error to report.
        self.sock = socket.create_server((host, port), family=family, backlog=BACKLOG, reuse_port=False)
        self.sock.setblocking(False)
        self.rejected: dict[str, int] = dict.fromkeys(REASONS, 0)
        self._reported = dict(self.rejected)  # what on_rejections last got
        self._summarised = dict(self.rejected)  # what the last summary line covered
        self._waiting: OrderedDict[_Conn, None] = OrderedDict()  # waiting for the client, oldest first
        self._open: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._accepting = False
        self._accept_retry = 0.0  # the current back-off while accept() finds no descriptor
        self._parked: list[tuple[float, int, _Conn]] = []  # (deadline, order, conn): a heap
        self._order = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._tick_task: asyncio.Task[None] | None = None
        self._auth_pool = ThreadPoolExecutor(AUTH_THREADS, thread_name_prefix="http-auth")
        self._loop_errors_said: dict[str, float] = {}  # message -> when last logged (_loop_error)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        # What the exporter holds from its start (modules, configuration) is never garbage:
        # kept out of the collector's walks, which run in this thread's pauses too.
        gc.collect()
        gc.freeze()
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
            loop.run_forever()
        finally:
            loop.close()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        self._start_accepting()
        self._tick_task = loop.create_task(self._tick())
        loop.call_later(PARKED_SWEEP_SECONDS, self._sweep_parked)
        self.on_rejections(dict(self.rejected))  # every reason at 0 from the start
        self._ready.set()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            self.sock.close()
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._auth_pool.shutdown(wait=False, cancel_futures=True)

    async def _shutdown(self) -> None:
        self._stop_accepting()
        self.sock.close()
        tasks = [self._tick_task] if self._tick_task is not None else []
        loop = asyncio.get_running_loop()
        for conn in list(self._open):
            conn.close_parked(loop)
            if conn.channel is not None:
                conn.channel.close()
            if conn.task is not None:
                tasks.append(conn.task)
        for task in tasks:
            task.cancel()
        if tasks:  # ended before the loop stops: none destroyed while pending
            await asyncio.wait(tasks, timeout=5)
        self._flush_counts()

    # ------------------------------------------------------------ counting

    def _reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    def _flush_counts(self) -> None:
        if self.rejected != self._reported:
            self._reported = dict(self.rejected)
            try:
                self.on_rejections(self._reported)
            except Exception:  # a bug in the metrics must not stop the server
                log.exception("http: recording refused connections failed")

    async def _tick(self) -> None:
        last_summary = time.monotonic()
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            self._flush_counts()
            if time.monotonic() - last_summary >= SUMMARY_SECONDS:
                last_summary = time.monotonic()
                new = {r: self.rejected[r] - self._summarised[r] for r in REASONS}
                if any(new.values()):
                    self._summarised = dict(self.rejected)
                    what = ", ".join(f"{n} {reason}" for reason, n in new.items() if n)
                    log.warning(
                        "http: %d connections refused in the last %.0f s (%s); %d open now, capacity %d "
                        "(bigbinf_http_connections_rejected_total)%s",
                        sum(new.values()),
                        SUMMARY_SECONDS,
                        what,
                        len(self._open),
                        self.capacity,
                        "; the open-files limit was reached: raise it (LimitNOFILE=, docs/runbook.md)"
                        if new.get("fd_limit")
                        else "",
                    )

    # ------------------------------------------------------------ connections

    def _wait_for_client(self, conn: _Conn) -> None:
        self._waiting[conn] = None
        self._waiting.move_to_end(conn)

    def _busy(self, conn: _Conn) -> None:
        self._waiting.pop(conn, None)

    def _make_room(self) -> None:
        while len(self._open) >= self.capacity and self._waiting:
            self._evict_oldest()

    def _evict_oldest(self) -> bool:
        """Close the connection that has waited longest for its client; False if none waits."""
        if not self._waiting:
            return False
        oldest, _ = self._waiting.popitem(last=False)
        oldest.evicted = True
        self._open.discard(oldest)  # gone now (its task ends later): one eviction per new connection
        if oldest.parked:
            assert self._loop is not None
            oldest.close_parked(self._loop)
            self._reject("capacity")
            return True
        if oldest.channel is not None:
            oldest.channel.close()
        if oldest.task is not None:
            oldest.task.cancel()
        return True

    def _start_accepting(self) -> None:
        assert self._loop is not None
        if not self._accepting and self.sock.fileno() >= 0:
            self._loop.add_reader(self.sock.fileno(), self._accept_ready)
            self._accepting = True

    def _stop_accepting(self) -> None:
        if self._accepting and self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._accepting = False

    def _accept_ready(self) -> None:
        """Take the connections waiting in the listen queue (at most ACCEPT_BATCH now)."""
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the client gave up while it waited
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._accept_retry = 0.0
            self._adopt(sock)

    def _accept_failed(self, exc: OSError) -> None:
        """No descriptor for the next connection (EMFILE, ENFILE) or no memory: counted
        (fd_limit), said in the minute's summary line, never per accept.  The connection
        that has waited longest for its client, if it has waited EVICT_MIN_WAIT_SECONDS,
        is closed: its descriptor is the next connection's (a scrape queued behind an
        attacker's gets in, as at capacity), and the next turn of the loop accepts again.
        With none to close, accepting pauses (5 ms, doubling to 1 s while it lasts; the
        kernel keeps the connections queued)."""
        assert self._loop is not None
        if exc.errno in _NO_DESCRIPTOR:
            self._reject("fd_limit")
            oldest = next(iter(self._waiting), None)
            if oldest is not None and self._loop.time() - oldest.accepted >= EVICT_MIN_WAIT_SECONDS:
                self._evict_oldest()
                return  # a descriptor freed: the next turn of the loop accepts again
        else:  # not a descriptor: rare (a firewall's EPERM); said once a minute at most
            self._loop_error(self._loop, {"message": f"http: accept failed: {exc}"})
        self._stop_accepting()
        self._accept_retry = min(ACCEPT_RETRY_MAX, max(ACCEPT_RETRY_FIRST, 2 * self._accept_retry))
        self._loop.call_later(self._accept_retry, self._start_accepting)

    def _adopt(self, sock: socket.socket) -> None:
        """A new connection, parked until its first byte comes (or its deadline)."""
        assert self._loop is not None
        sock.setblocking(False)
        web = self.web()  # the one in force when the connection came
        seconds = HANDSHAKE_SECONDS if web.ssl_context is not None else HEAD_SECONDS
        now = self._loop.time()
        conn = _Conn(sock=sock, accepted=now, web=web, deadline=now + _spread(seconds))
        self._make_room()
        if len(self._open) >= self.capacity:  # every connection is being answered: refuse this one
            self._reject("capacity")
            sock.close()
            return
        # Responses go out in pieces: a small last one must not wait for a delayed ACK.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._open.add(conn)
        self._wait_for_client(conn)
        self._loop.add_reader(sock.fileno(), self._readable, conn)
        heapq.heappush(self._parked, (conn.deadline, next(self._order), conn))

    def _readable(self, conn: _Conn) -> None:
        """Bytes have come on a parked connection.  The first request's head is read here,
        parked (over TLS the handshake is done and the head decrypted here too:
        _tls_parked), and a task takes the connection once the head has ended (or its first
        line cannot begin a request, or it is too long): a slowloris client, a header line
        a second, costs a read and a search per line, not a task's turn with a stream and
        a parser (300 of them held the slowest scrape at 2.2x node_exporter's beside two
        CPU burners, issue 43).  A TLS handshake at the plain port (_is_tls_record) stays
        parked, unread, until its head's deadline and is answered then: a ClientHello
        holds a line-end byte (OpenSSL's always do), answered at once a client stuck in its
        handshake came back at once, and fifty of them reconnected ~400 times a second
        (the slowest scrape 5.5-8x node_exporter's, issue 43)."""
        assert self._loop is not None and conn.sock is not None and conn.web is not None
        try:
            data = conn.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed before its head ended
            self._close_parked(conn)
            return
        if conn.web.ssl_context is not None:
            if not self._tls_parked(conn, data):
                return  # parked still (or closed there)
        else:
            if not conn.head and _is_tls_record(data):
                self._loop.remove_reader(conn.sock.fileno())
                conn.held_tls = True
                return  # in the parked heap still, with the head's deadline drawn at the accept
            seen = len(conn.head)
            conn.head += data
            if _head_goes_on(conn.head, seen):
                return  # parked, its deadline still the one drawn at the accept
        self._loop.remove_reader(conn.sock.fileno())
        conn.parked = False
        conn.task = self._loop.create_task(self._connection(conn))
        self._tasks.add(conn.task)  # the loop holds tasks weakly: an evicted one must still end
        conn.task.add_done_callback(self._tasks.discard)

    def _tls_parked(self, conn: _Conn, data: bytes) -> bool:
        """Feed a parked TLS connection's bytes to its TLS object: the handshake, then the
        first request's head, decrypted and searched as at the plain port.  True when a
        task must take the connection (the head has ended or cannot be a head, the bytes
        are plain HTTP, or the socket did not take all the handshake's bytes); False while
        it stays parked, or once it has been closed here.  Three hundred TLS slowloris
        clients as tasks from the handshake on held the slowest scrape at 3.0x
        node_exporter's beside two CPU burners (issue 43)."""
        assert self._loop is not None and conn.web is not None and conn.web.ssl_context is not None
        if conn.tls is None:
            if data[:1] != b"\x16" and data[:1].isalpha():
                conn.head = data
                return True  # plain HTTP at the TLS port: the task answers it (http_to_https)
            conn.tls = _TlsState(conn.web.ssl_context)
        state = conn.tls
        state.incoming.write(data)
        if not state.shaken:
            try:
                state.tls.do_handshake()
            except ssl.SSLWantReadError:
                return self._send_parked(conn)
            except ssl.SSLError:
                self._send_parked(conn)  # the alert tells the client why
                self._close_parked(conn)
                self._reject("tls_error")
                return False
            state.shaken = True
            allowed = conn.web.allowed_sans
            if allowed and not set(allowed) & set(peer_sans(state.tls.getpeercert())):
                self._close_parked(conn)
                self._reject("client_certificate")
                return False
            # The head's deadline, drawn from the handshake's end (the sweep skips the old entry).
            conn.deadline = self._loop.time() + _spread(HEAD_SECONDS)
            heapq.heappush(self._parked, (conn.deadline, next(self._order), conn))
        seen, closed = len(conn.head), False
        try:
            while len(conn.head) <= MAX_HEAD_BYTES:
                piece = state.tls.read(READ_BYTES)
                if not piece:
                    closed = True
                    break
                conn.head += piece
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            closed = True
        except ssl.SSLError:  # a damaged record: the client goes, as a task's read would end it
            self._close_parked(conn)
            return False
        if self._send_parked(conn):  # TLS 1.3 session tickets the socket did not take
            return True
        if closed:
            if conn.head:
                return True  # the task judges what came before the close
            self._close_parked(conn)
            return False
        return not _head_goes_on(conn.head, seen)

    def _send_parked(self, conn: _Conn) -> bool:
        """Send what the TLS object has written, never waiting; True if the socket did not
        take it all (a task sends the rest: conn.unsent)."""
        assert conn.tls is not None and conn.sock is not None
        data = conn.unsent + conn.tls.outgoing.read()
        conn.unsent = b""
        if data:
            try:
                sent = conn.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = len(data)  # the client has gone: the next read says so
            conn.unsent = data[sent:]
        return bool(conn.unsent)

    def _sweep_parked(self) -> None:
        """Close the parked connections whose deadline has passed (counted as the task's
        deadline would count them)."""
        assert self._loop is not None
        now = self._loop.time()
        while self._parked and self._parked[0][0] <= now:
            _, _, conn = heapq.heappop(self._parked)
            # (a TLS connection whose handshake ended parked is in the heap again, later)
            if conn.parked and conn in self._open and conn.deadline <= now:
                tls = conn.web is not None and conn.web.ssl_context is not None
                # Bytes that cannot begin a request line are answered at the deadline, as
                # Go answers them once it judges the line; a head still coming is not.
                # (Over TLS such a head waits for its deadline, as a task's read did.)
                garbage = conn.held_tls or (not tls and conn.head and not _TOKEN_START.match(conn.head))
                if garbage:
                    _answer_parked(conn, _raw_response(400, conn.web))
                self._close_parked(conn)
                if conn.held_tls:
                    self._reject("https_to_http")
                elif garbage:
                    self._reject("bad_request")
                else:
                    shaken = conn.tls is not None and conn.tls.shaken
                    self._reject("tls_handshake_timeout" if tls and not shaken else "request_timeout")
        if self.sock.fileno() >= 0:
            self._loop.call_later(PARKED_SWEEP_SECONDS, self._sweep_parked)

    def _close_parked(self, conn: _Conn) -> None:
        assert self._loop is not None
        conn.close_parked(self._loop)
        self._waiting.pop(conn, None)
        self._open.discard(conn)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        """The event loop's own errors: at most one line per message a minute (one per
        connection would fill the log as a full descriptor table once did: 39,288
        tracebacks in 80 s), the first with its traceback."""
        message = str(context.get("message", "event loop error"))
        now = time.monotonic()
        if now - self._loop_errors_said.get(message, -SUMMARY_SECONDS) < SUMMARY_SECONDS:
            return
        self._loop_errors_said[message] = now
        exc = context.get("exception")
        trace = exc if isinstance(exc, BaseException) else None
        log.error("http: %s (said at most once a minute)", message, exc_info=trace)

    async def _connection(self, conn: _Conn) -> None:
        assert conn.sock is not None and conn.web is not None
        try:
            reader, writer = await asyncio.open_connection(sock=conn.sock, limit=READ_BYTES)
        except OSError:
            conn.sock.close()
            self._waiting.pop(conn, None)
            self._open.discard(conn)
            return
        head, conn.head = conn.head, b""  # the head read (over TLS: decrypted) while parked (_readable)
        plain = _Plain(reader, writer, head if conn.tls is None else b"")
        conn.channel = plain
        linger = 0.0  # how long the close may wait for a last answer to go out
        web = conn.web
        try:
            channel: _Channel = plain
            head_deadline: float | None = conn.deadline
            if web.ssl_context is not None:
                shaken = conn.tls is not None and conn.tls.shaken
                channel = await self._open_tls(conn, plain, web, head if conn.tls is not None else b"")
                # The head's deadline: drawn at the handshake's end (parked, or in _read_head).
                head_deadline = conn.deadline if shaken else None
            await self._serve_requests(conn, channel, web, head_deadline)
            linger = WRITE_SECONDS
        except _Refused as refused:
            self._reject(refused.reason)
            if refused.answer:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1):
                        await (conn.channel or plain).send(refused.answer)
                        linger = 1.0
        except asyncio.CancelledError:
            if conn.evicted:
                self._reject("capacity")
        except (OSError, ssl.SSLError, EOFError):
            pass  # the client went away
        except Exception:
            log.exception("http: serving a connection failed")
        finally:
            self._waiting.pop(conn, None)
            if linger and not conn.evicted:
                with contextlib.suppress(BaseException):
                    await plain.finish(linger)
            plain.close()
            self._open.discard(conn)

    async def _open_tls(self, conn: _Conn, plain: _Plain, web: WebConfig, head: bytes) -> _Channel:
        """The connection's TLS channel: the handshake begun (or ended, its client
        certificate checked, `head` decrypted) while parked goes on here."""
        assert web.ssl_context is not None
        state = conn.tls
        shaken = state is not None and state.shaken
        try:
            # The handshake's deadline, drawn at the accept (the head's once it has ended parked).
            async with asyncio.timeout_at(conn.deadline):
                if state is None:
                    first = await plain.recv()
                    if not first:
                        raise EOFError
                    if first[:1] != b"\x16" and first[:1].isalpha():
                        raise _Refused("http_to_https", HTTP_TO_HTTPS)  # as Go's net/http answers
                    plain._first = first
                    state = _TlsState(web.ssl_context)
                if conn.unsent:  # what the socket did not take while parked
                    unsent, conn.unsent = conn.unsent, b""
                    await plain.send(unsent)
                tls = _Tls(plain, state, head)
                await tls.handshake()
        except TimeoutError:
            raise _Refused("request_timeout" if shaken else "tls_handshake_timeout") from None
        except ssl.SSLError:
            raise _Refused("tls_error") from None
        if not shaken and web.allowed_sans and not set(web.allowed_sans) & set(peer_sans(tls.tls.getpeercert())):
            raise _Refused("client_certificate")
        conn.channel = tls
        return tls

    # ------------------------------------------------------------ requests

    async def _serve_requests(
        self, conn: _Conn, channel: _Channel, web: WebConfig, head_deadline: float | None = None
    ) -> None:
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        first = True
        while True:
            self._wait_for_client(conn)
            request = await self._read_head(parser, channel, web, first, head_deadline)
            if request is None:
                return  # the client closed a kept-alive connection
            self._busy(conn)
            first = False
            response = await self._answer(parser, channel, web, request)
            await self._respond(parser, channel, web, request, response)
            if response.close or parser.our_state is not h11.DONE or parser.their_state is not h11.DONE:
                return
            parser.start_next_cycle()

    async def _read_head(
        self, parser: h11.Connection, channel: _Channel, web: WebConfig, first: bool, given: float | None = None
    ) -> h11.Request | None:
        """The next request's head, within its deadline (the first's: `given`, drawn at
        the accept, else from now); None if the client closed first."""
        # The head's bytes so far (a pipelined request's may be in h11's buffer already),
        # for the checks h11 does not make.
        seen = parser.trailing_data[0][: MAX_HEAD_BYTES + READ_BYTES]
        deadline = None
        if first:
            deadline = given if given is not None else asyncio.get_running_loop().time() + _spread(HEAD_SECONDS)
        idle = None if first else asyncio.get_running_loop().time() + IDLE_SECONDS
        try:
            while True:
                try:
                    event = parser.next_event()
                except h11.RemoteProtocolError as exc:
                    if b"\n" not in seen and deadline is not None:
                        await _until_line_end(channel, deadline, len(seen))
                    raise self._bad(web, exc.error_status_hint) from None
                if isinstance(event, h11.Request):
                    self._check_head(event, seen, web)
                    return event
                if isinstance(event, h11.ConnectionClosed) or parser.their_state is h11.CLOSED:
                    return None
                if event is not h11.NEED_DATA:
                    raise self._bad(web, 400)
                async with asyncio.timeout_at(deadline if deadline is not None else idle):
                    data = await channel.recv()
                if data and deadline is None:  # a kept-alive connection's next request begins
                    deadline = asyncio.get_running_loop().time() + _spread(HEAD_SECONDS)
                if len(seen) < MAX_HEAD_BYTES + READ_BYTES:
                    seen += data
                    line_end = seen.find(b"\n")
                    if line_end >= 0 and not _REQUEST_LINE.fullmatch(seen[:line_end]):
                        raise self._bad(web, 400)  # HTTP/0.9 or a malformed request line, at once
                parser.receive_data(data)
        except TimeoutError:
            if deadline is None:
                return None  # idle too long between requests: an ordinary close
            raise _Refused("request_timeout") from None

    def _check_head(self, event: h11.Request, seen: bytes, web: WebConfig) -> None:
        if event.http_version not in (b"1.0", b"1.1"):
            raise self._bad(web, 505)
        names = [name for name, _ in event.headers]
        if b"content-length" in names and b"transfer-encoding" in names:
            raise self._bad(web, 400)  # a request smuggler's shape: refused, as Go refuses it
        end = _HEAD_END.search(seen)
        if end is None or end.start() > MAX_HEAD_BYTES:
            raise self._bad(web, 431)  # h11 bounds only a head that is still incomplete
        if re.search(rb"\n[ \t]", seen[: end.start()]):
            raise self._bad(web, 400)  # obsolete line folding

    def _bad(self, web: WebConfig, status: int) -> _Refused:
        reason = "too_large" if status in (413, 431) else "bad_request"
        return _Refused(reason, _raw_response(status, web))

    async def _answer(self, parser: h11.Connection, channel: _Channel, web: WebConfig, event: h11.Request) -> Response:
        method = event.method.decode("ascii", "replace")
        target = event.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key = name.decode("ascii", "replace")
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        request = Request(method, path, query, headers)
        # The users of the web config in force now, not at the accept: a user a reload
        # removed is refused on a kept-alive connection too (each config has its own
        # remembered successes, so none outlives its config).
        if not await self._authorised(self.web(), headers.get("authorization", "")):
            self._reject("unauthorized")
            return Response(401, b"Unauthorized\n", headers=(("WWW-Authenticate", "Basic"),), close=True)
        route = self.route_for(path)
        if route is None:
            return Response(404, b"not found\n", close=True)
        if not route.allows(method):
            allowed = ", ".join([*route.methods, *(["HEAD"] if "GET" in route.methods else [])])
            message = "Only POST requests allowed\n" if route.methods == ("POST",) else "method not allowed\n"
            return Response(405, message.encode(), headers=(("Allow", allowed),), close=True)
        if method not in SAFE_METHODS and (why := cross_site(headers, web.scheme)) is not None:
            self._reject("cross_site")
            return Response(403, f"cross-site request refused: {why}\n".encode(), close=True)
        if route.precheck is not None and (refusal := route.precheck()) is not None:
            return refusal
        declared = int(headers.get("content-length") or 0)  # h11 checked that it is a number
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        body = None if declared > route.max_body else await self._read_body(parser, channel, route.max_body, chunked)
        if body is None:
            self._reject("too_large")
            return Response(413, b"request body too large\n", close=True)
        request = Request(method, path, query, headers, body)
        if route.blocking:
            return await asyncio.to_thread(route.handler, request)
        return route.handler(request)

    def route_for(self, path: str) -> Route | None:
        """The route of `path`: its own, else the longest prefix route above it."""
        route = self.routes.get(path)
        if route is not None:
            return route
        return next((r for r in self.prefixes if path.startswith(r.path)), None)

    async def _authorised(self, web: WebConfig, header: str) -> bool:
        """Basic auth when basic_auth_users is set.  A remembered success is answered here;
        anything else costs a bcrypt in the auth threads, never in the loop."""
        auth = web.auth
        if not auth.enabled:
            return True
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        if auth.remembered(user, password):
            return True
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._auth_pool, auth.check, user, password)

    async def _read_body(
        self, parser: h11.Connection, channel: _Channel, limit: int, chunked: bool = False
    ) -> bytes | None:
        """The request's body, within its deadline; None once it is over `limit`, or once
        a chunked body's chunk-size lines declare more (no byte of such a chunk awaited)."""
        body = b""
        sizes = _ChunkSizes() if chunked else None
        if sizes is not None and sizes.feed(parser.trailing_data[0]) > limit:
            return None
        try:
            async with asyncio.timeout(BODY_SECONDS):
                while True:
                    event = parser.next_event()
                    if isinstance(event, h11.EndOfMessage):
                        return body
                    if isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > limit:
                            return None
                        continue
                    if event is h11.NEED_DATA:
                        data = await channel.recv()
                        if sizes is not None and sizes.feed(data) > limit:
                            return None
                        parser.receive_data(data)
                        continue
                    raise _Refused("bad_request")
        except TimeoutError:
            raise _Refused("request_timeout") from None
        except h11.RemoteProtocolError as exc:
            raise _Refused("bad_request", _raw_response(exc.error_status_hint, None)) from None

    async def _respond(
        self, parser: h11.Connection, channel: _Channel, web: WebConfig, request: h11.Request, response: Response
    ) -> None:
        chunks = [response.body] if isinstance(response.body, bytes) else list(response.body)
        headers = [
            ("Content-Type", response.content_type),
            *web.headers,
            *response.headers,
            ("Content-Length", str(sum(len(c) for c in chunks))),
        ]
        if response.close:
            headers.append(("Connection", "close"))
        try:
            async with asyncio.timeout(WRITE_SECONDS):
                await channel.send(
                    parser.send(h11.Response(status_code=response.status, headers=headers, reason=_reason(response)))
                )
                if request.method != b"HEAD":
                    for chunk in chunks:
                        for start in range(0, len(chunk), WRITE_CHUNK):
                            await channel.send(parser.send(h11.Data(data=chunk[start : start + WRITE_CHUNK])) or b"")
                await channel.send(parser.send(h11.EndOfMessage()) or b"")
        except TimeoutError:
            raise _Refused("write_timeout") from None


SAFE_METHODS = ("GET", "HEAD")
# What a page of another site can make a browser send without asking the server first
# (a "simple request": an HTML form's encodings and text/plain); any other content type
# needs a CORS preflight, which this server never grants (OPTIONS is answered 405).
SIMPLE_CONTENT_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data", "text/plain")


def cross_site(headers: Mapping[str, str], scheme: str) -> str | None:
    """Why a request that changes state (not GET or HEAD) may come from another site's
    page, or None.  Browsers say so (Sec-Fetch-Site; Origin on every cross-origin POST)
    and can send a body across sites only in a form's encodings: a page that holds this
    exporter's basic-auth credentials must not be able to post a reload to it.  curl,
    Prometheus' tooling and systemd's ExecReload (SIGHUP) send none of these."""
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {site}"
    origin = headers.get("origin")
    if origin is not None:
        own = f"{scheme}://{headers.get('host', '').strip().lower()}"
        if origin.strip().lower() != own:
            return "its Origin is not this exporter's"
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type in SIMPLE_CONTENT_TYPES:
        return f"Content-Type {content_type} is a form's (send no body: curl -X POST URL)"
    return None


class _ChunkSizes:
    """What a chunked body's chunk-size lines declare, summed as its bytes arrive (h11
    hands a chunk over only as its bytes come: one that declares 2**72 bytes and sends
    none would be waited for until the body's deadline)."""

    # A longer chunk-size line (its extensions) is refused at once, as a body over every
    # bound (413): h11 would wait for up to 16 KiB of it, then 431, and meanwhile the
    # line declares nothing this counter could sum.
    MAX_LINE = 1024
    TOO_LONG = 2**63  # what feed() says once a line is over MAX_LINE

    def __init__(self) -> None:
        self.declared = 0
        self._skip = 0  # bytes of the current chunk (and its CRLF) still to come
        self._line = b""
        self._done = False  # the last chunk, or a line h11 will refuse

    def feed(self, data: bytes) -> int:
        view = memoryview(data)
        while view and not self._done:
            if self._skip:
                n = min(self._skip, len(view))
                self._skip -= n
                view = view[n:]
                continue
            end = bytes(view[: self.MAX_LINE + 1 - len(self._line)]).find(b"\n")
            if end < 0:
                self._line += bytes(view[: self.MAX_LINE + 1])
                if len(self._line) > self.MAX_LINE:
                    self.declared, self._done = self.TOO_LONG, True
                break
            line, self._line = self._line + bytes(view[:end]), b""
            view = view[end + 1 :]
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._done = True
                break
            if size == 0:
                self._done = True  # the trailer section: nothing more declared
                break
            self.declared += size
            self._skip = size + 2
        return self.declared


def _reason(response: Response) -> bytes:
    try:
        return http.HTTPStatus(response.status).phrase.encode()
    except ValueError:
        return b""


def _raw_response(status: int, web: WebConfig | None) -> bytes:
    """An error answer written by hand: after a protocol error h11 sends nothing more."""
    phrase = _reason(Response(status)).decode()
    body = f"{status} {phrase}\n".encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (web.headers if web else ()))
    return (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n{extra}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
