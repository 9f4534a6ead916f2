"""The load generator: N concurrent HTTP connections for a fixed time.

Its own small asyncio client rather than a library, so that both services
are driven the same way and nothing else is measured along with them:

* each of ``connections`` workers sends one request, reads the whole answer
  (``Content-Length`` framed, or up to the close), and sends the next;
* the connection is kept when the answer allows it (HTTP/1.1 without
  ``Connection: close``) and opened again otherwise, so an HTTP/1.0 server
  pays for a connection per request, as its clients do;
* a request's latency runs from the moment the worker wants to send it
  (before connecting, when it has to) to the last byte of its answer;
* a request taking more than ``stall`` seconds (1 s) is *stalled*: to a
  user, that connection hung. A lost SYN (full listen backlog) costs 1 s.

The workers spread over several loopback source addresses (127.0.0.2,
127.0.0.3...), a few connections each: both services cap connections per
client address (8, as the spec says), and 64 connections from one address
would measure that cap instead of the server.
"""

import asyncio
import math
import time
from dataclasses import dataclass, field

# Connections per source address: under the spec's cap of 8 per address,
# with room for connections a server hasn't noticed are closed yet.
PER_SOURCE = 4
STALL_SECONDS = 1.0
# A request still unanswered this long after the end is counted as failed.
DRAIN_SECONDS = 5.0
# A single request (connect included) is given up after this long.
REQUEST_TIMEOUT = 30.0


def source_address(worker):
    """The loopback address worker number ``worker`` connects from."""
    return f"127.0.0.{2 + worker // PER_SOURCE}"


def build_request(host, port, path, method="GET", body=b"", keep_alive=True):
    """The bytes of one request."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}",
             "User-Agent: netweir-serve-bench",
             "Connection: " + ("keep-alive" if keep_alive else "close")]
    if method == "POST":
        lines.append("Content-Type: application/x-www-form-urlencoded")
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


class BadAnswer(Exception):
    pass


class _Connection(asyncio.Protocol):
    """One client connection; ``request()`` sends and awaits one answer."""

    def __init__(self, loop):
        self._loop = loop
        self.transport = None
        self._buffer = bytearray()
        self._waiter = None
        self._head = None  # (status, length or None, keep) once headers are in
        self._header_end = 0
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport

    def request(self, data):
        self._buffer.clear()
        self._head = None
        self._waiter = self._loop.create_future()
        self.transport.write(data)
        return self._waiter

    def data_received(self, data):
        self._buffer += data
        self._check()

    def _check(self):
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            try:
                self._head = _parse_head(bytes(self._buffer[:end]))
            except (ValueError, IndexError) as e:
                waiter.set_exception(BadAnswer(f"unreadable answer: {e}"))
                return
            self._header_end = end + 4
        status, length, keep = self._head
        if length is not None and len(self._buffer) - self._header_end >= length:
            waiter.set_result((status, keep, len(self._buffer) - self._header_end))
        elif length is None and self.closed:
            waiter.set_result((status, False, len(self._buffer) - self._header_end))

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if self._head is not None and self._head[1] is None:
                self._check()
            if not waiter.done():
                waiter.set_exception(ConnectionError(f"connection closed: {exc}"))

    def close(self):
        if self.transport is not None:
            self.transport.close()


def _parse_head(head):
    lines = head.split(b"\r\n")
    version, status = lines[0].split(b" ", 2)[:2]
    length = None
    connection = b""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection":
            connection = value.strip().lower()
    if version == b"HTTP/1.1":
        keep = connection != b"close"
    else:
        keep = connection == b"keep-alive"
    return int(status), length, keep and length is not None


@dataclass
class LoadResult:
    """What one run of ``load()`` measured."""

    duration: float = 0.0
    ok: int = 0                 # 2xx answers completed within the duration
    errors: int = 0             # failed requests, refused connections, non-2xx
    unfinished: int = 0         # still unanswered DRAIN_SECONDS after the end
    stalled: int = 0            # requests over STALL_SECONDS (unfinished ones too)
    connects: int = 0
    latencies: list = field(default_factory=list)  # seconds, every answered request
    client_cpu: float = 0.0     # this process's CPU seconds per wall second
    error_samples: list = field(default_factory=list)

    @property
    def rps(self):
        return self.ok / self.duration if self.duration else 0.0

    def percentile(self, p):
        """The ``p``-th percentile latency in seconds, unfinished requests
        counted as infinitely slow; None with no requests at all."""
        total = len(self.latencies) + self.unfinished
        if not total:
            return None
        ordered = sorted(self.latencies)
        rank = max(0, math.ceil(p / 100 * total) - 1)
        return ordered[rank] if rank < len(ordered) else math.inf


async def _worker(number, host, port, request, keep_alive, deadline, result, stats):
    loop = asyncio.get_running_loop()
    conn = None
    local = (source_address(number), 0)
    try:
        while loop.time() < deadline:
            started = loop.time()
            stats["inflight"] += 1
            try:
                if conn is None or conn.closed:
                    _, conn = await asyncio.wait_for(loop.create_connection(
                        lambda: _Connection(loop), host, port, local_addr=local),
                        REQUEST_TIMEOUT)
                    result.connects += 1
                status, keep, _ = await asyncio.wait_for(conn.request(request), REQUEST_TIMEOUT)
            except (OSError, asyncio.TimeoutError, BadAnswer) as e:
                stats["inflight"] -= 1
                result.errors += 1
                if len(result.error_samples) < 5:
                    result.error_samples.append(f"{type(e).__name__}: {e}")
                if conn is not None:
                    conn.close()
                conn = None
                elapsed = loop.time() - started
                if elapsed > STALL_SECONDS:
                    result.stalled += 1
                # A refused connection fails at once; don't spin on it.
                await asyncio.sleep(0.01)
                continue
            stats["inflight"] -= 1
            finished = loop.time()
            latency = finished - started
            result.latencies.append(latency)
            if latency > STALL_SECONDS:
                result.stalled += 1
            if 200 <= status < 300:
                if finished <= deadline:
                    result.ok += 1
            else:
                result.errors += 1
                if len(result.error_samples) < 5:
                    result.error_samples.append(f"HTTP {status}")
            if not (keep and keep_alive):
                conn.close()
                conn = None
    finally:
        if conn is not None:
            conn.close()


async def _load(host, port, path, connections, duration, method, body, keep_alive):
    loop = asyncio.get_running_loop()
    request = build_request(host, port, path, method, body, keep_alive)
    result = LoadResult()
    stats = {"inflight": 0}
    cpu0, wall0 = time.process_time(), loop.time()
    deadline = wall0 + duration
    tasks = [asyncio.ensure_future(_worker(i, host, port, request, keep_alive, deadline,
                                           result, stats))
             for i in range(connections)]
    done, pending = await asyncio.wait(tasks, timeout=duration + DRAIN_SECONDS)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    result.unfinished = stats["inflight"]
    result.stalled += result.unfinished
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    result.duration = duration
    result.client_cpu = (time.process_time() - cpu0) / max(1e-9, loop.time() - wall0)
    return result


def load(port, path, connections=64, duration=3.0, method="GET", body=b"",
         keep_alive=True, host="127.0.0.1"):
    """Drives ``host:port`` with ``connections`` workers requesting ``path``
    for ``duration`` seconds; a LoadResult."""
    return asyncio.run(_load(host, port, path, connections, duration, method, body,
                             keep_alive))
