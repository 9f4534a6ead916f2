"""Job files sent by os.sendfile (web/zerocopy.py), over real sockets in
this process: a whole file, ranges, a file growing while it is sent, a
client reading slowly from a small receive buffer, a Unix socket; and the
reading producer on TLS and where sendfile is refused. ``os.sendfile`` is
wrapped to count what it sent, which shows the path each answer took."""

import errno
import os
import shutil
import socket
import tempfile
import time

from twisted.internet import reactor, threads
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Site

from netweir_serve.tls import TLSFiles
from netweir_serve.web.files import ITEMS_TYPE, JobFileTree
from netweir_serve.web.limits import limit
from netweir_serve.web.request import ServeRequest

from .test_listen import TestCA

PATH = "/items/p/s/j.jl"


def read_answer(sock, read_size=1 << 20, pause=0.0):
    """(status, headers, body) of one answer on the blocking ``sock``,
    read ``read_size`` bytes at a time, ``pause`` seconds apart."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            raise ConnectionError(f"closed after {len(data)} bytes of head")
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in
               (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    body = bytearray(body)
    while len(body) < length:
        piece = sock.recv(min(read_size, length - len(body)))
        if not piece:
            raise ConnectionError(f"closed after {len(body)} of {length} bytes")
        body += piece
        if pause:
            time.sleep(pause)
    return int(lines[0].split()[1]), headers, bytes(body)


def ask(sock, path=PATH, headers=(), method="GET"):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in headers]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())


class ZeroCopyTests(TestCase):
    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="zerocopy-")
        self.addCleanup(shutil.rmtree, self.base, True)
        items = os.path.join(self.base, "items")
        os.makedirs(os.path.join(items, "p", "s"))
        self.file = os.path.join(items, "p", "s", "j.jsonl")
        self.data = os.urandom(3 << 20)
        with open(self.file, "wb") as f:
            f.write(self.data)
        root = Resource()
        root.putChild(b"items", JobFileTree(items, (".jl", ".jsonl"), ITEMS_TYPE))
        self.site = Site(root, requestFactory=ServeRequest, reactor=reactor)
        self.sent = []      # bytes each sendfile call sent
        self.refusals = []  # errors it raised
        real = os.sendfile

        def counting(out, into, offset, count):
            try:
                sent = real(out, into, offset, count)
            except OSError as e:
                self.refusals.append(e.errno)
                raise
            self.sent.append(sent)
            return sent

        self.patch(os, "sendfile", counting)

    def grow(self, size):
        """Makes the file ``size`` bytes long (its start unchanged)."""
        while len(self.data) < size:
            self.data += self.data
        self.data = self.data[:size]
        with open(self.file, "wb") as f:
            f.write(self.data)

    @staticmethod
    def socket_buffer_max():
        """The most a TCP socket's send buffer grows to (tcp_wmem)."""
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            return int(f.read().split()[2])

    def listen_tcp(self, tls=None):
        port = reactor.listenTCP(0, limit(self.site, reactor, tls=tls), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        return port.getHost().port

    def connect(self, port, receive_buffer=None):
        sock = socket.socket()
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(20)
        sock.connect(("127.0.0.1", port))
        self.addCleanup(sock.close)
        return sock

    def fetch(self, port, headers=(), **read):
        """In a thread: one request on a new connection."""
        def run():
            sock = self.connect(port)
            ask(sock, headers=headers)
            return read_answer(sock, **read)
        return threads.deferToThread(run)

    @inlineCallbacks
    def test_whole_file_by_sendfile(self):
        port = self.listen_tcp()
        status, headers, body = yield self.fetch(port)
        self.assertEqual((status, headers["content-length"]), (200, str(len(self.data))))
        self.assertEqual(headers["content-type"], ITEMS_TYPE)
        self.assertIn("last-modified", headers)
        self.assertEqual(body, self.data)
        self.assertEqual(sum(self.sent), len(self.data))

    @inlineCallbacks
    def test_range_by_sendfile(self):
        port = self.listen_tcp()
        status, headers, body = yield self.fetch(port, [("Range", "bytes=1000-299999")])
        self.assertEqual(status, 206)
        self.assertEqual(headers["content-range"], f"bytes 1000-299999/{len(self.data)}")
        self.assertEqual(body, self.data[1000:300000])
        self.assertEqual(sum(self.sent), 299000)
        # A suffix range, and one longer than the file (the whole file).
        status, headers, body = yield self.fetch(port, [("Range", "bytes=-500")])
        self.assertEqual((status, body), (206, self.data[-500:]))
        status, _, body = yield self.fetch(port, [("Range", f"bytes=-{len(self.data) + 9}")])
        self.assertEqual((status, body), (206, self.data))

    @inlineCallbacks
    def test_ranges_of_an_empty_file(self):
        """A running job's log is empty at first. RFC 9110 14.1.3: a suffix
        range of a non-zero length is satisfiable whatever the size, and
        "the entire representation is used" when it is longer; for an empty
        one no Content-Range can name it, so the answer is the whole (empty)
        file, 200 -- as docs/watching.md promises. A first-pos at or past
        the end (0- of nothing, 5-) and a zero-length suffix are not
        satisfiable: 416, naming the size."""
        self.grow(0)
        port = self.listen_tcp()
        for asked in ("bytes=-1000", "bytes=-1"):
            status, headers, body = yield self.fetch(port, [("Range", asked)])
            self.assertEqual((status, headers["content-length"], body), (200, "0", b""), asked)
            self.assertNotIn("content-range", headers, asked)
        for asked in ("bytes=0-", "bytes=5-", "bytes=-0"):
            status, headers, body = yield self.fetch(port, [("Range", asked)])
            self.assertEqual((status, headers.get("content-range"), body),
                             (416, "bytes */0", b""), asked)
        # Once the job writes, the same suffix range gets what there is.
        self.data = b"0123456789"
        with open(self.file, "wb") as f:
            f.write(self.data)
        status, headers, body = yield self.fetch(port, [("Range", "bytes=-1000")])
        self.assertEqual((status, headers["content-range"], body),
                         (206, "bytes 0-9/10", self.data))

    @inlineCallbacks
    def test_unsatisfiable_range_and_head_send_no_body(self):
        port = self.listen_tcp()

        def run():
            sock = self.connect(port)
            ask(sock, headers=[("Range", f"bytes={len(self.data) + 1}-")])
            unsatisfiable = read_answer(sock)
            ask(sock, method="HEAD")
            head = sock.recv(4096)
            # The connection still serves: nothing stray was sent.
            ask(sock)
            return unsatisfiable, head, read_answer(sock)

        (status, headers, body), head, whole = yield threads.deferToThread(run)
        self.assertEqual((status, headers["content-range"], body),
                         (416, f"bytes */{len(self.data)}", b""))
        self.assertIn(b"Content-Length: %d" % len(self.data), head)
        self.assertTrue(head.endswith(b"\r\n\r\n"))
        self.assertEqual(whole[2], self.data)
        self.assertEqual(sum(self.sent), len(self.data))

    @inlineCallbacks
    def test_file_growing_while_sent_is_sent_up_to_its_size_when_asked(self):
        port = self.listen_tcp()
        # Longer than the kernel's socket buffers hold, with a client that
        # waits before reading: the answer is still being sent when the
        # file grows.
        self.grow(self.socket_buffer_max() + (2 << 20))

        def run():
            sock = self.connect(port, receive_buffer=8192)
            ask(sock)
            first = sock.recv(8192)
            time.sleep(0.3)
            # Part sent, the socket full, the rest waiting for it.
            self.assertLess(sum(self.sent), len(self.data))
            with open(self.file, "ab") as f:
                f.write(b"grown\n" * 100000)
            rest = read_answer_after(sock, first)
            # Nothing more than promised was sent: the next answer on the
            # connection is the next request's, with the new size.
            ask(sock)
            return rest, read_answer(sock)

        (status, headers, body), (_, again, grown) = yield threads.deferToThread(run)
        self.assertEqual((status, headers["content-length"]), (200, str(len(self.data))))
        self.assertEqual(body, self.data)
        self.assertEqual(int(again["content-length"]), len(self.data) + 600000)
        self.assertEqual(grown, self.data + b"grown\n" * 100000)
        self.assertEqual(sum(self.sent), 2 * len(self.data) + 600000)

    @inlineCallbacks
    def test_slow_reader_gets_every_byte_and_others_are_served_meanwhile(self):
        port = self.listen_tcp()
        # More than the kernel's socket buffers hold, so the producer must
        # wait for the socket (writable again, or EAGAIN) to send it all.
        self.grow(self.socket_buffer_max() + (2 << 20))

        def slow():
            sock = self.connect(port, receive_buffer=4096)
            ask(sock)
            time.sleep(0.5)
            # What was sent while the client read nothing: part of it.
            waited.append(sum(self.sent))
            return read_answer(sock, read_size=16384, pause=0.001)

        waited = []

        reading = threads.deferToThread(slow)
        # While it waits, the reactor answers another client at once.
        yield deferLater(reactor, 0.2, lambda: None)
        started = time.monotonic()
        _, _, other = yield self.fetch(port, [("Range", "bytes=0-99")])
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertEqual(other, self.data[:100])
        self.assertFalse(reading.called)
        status, _, body = yield reading
        self.assertEqual((status, body), (200, self.data))
        self.assertLess(waited[0], len(self.data))
        self.assertEqual(sum(self.sent), len(self.data) + 100)

    @inlineCallbacks
    def test_client_gone_midway_ends_the_answer_and_closes_the_file(self):
        port = self.listen_tcp()
        self.grow(self.socket_buffer_max() + (2 << 20))

        def run():
            sock = self.connect(port, receive_buffer=4096)
            ask(sock)
            sock.recv(4096)
            sock.close()

        def file_open():
            return any(os.path.realpath(os.path.join("/proc/self/fd", fd)) == self.file
                       for fd in os.listdir("/proc/self/fd"))

        yield threads.deferToThread(run)
        for _ in range(100):
            if not file_open():
                break
            yield deferLater(reactor, 0.05, lambda: None)
        self.assertFalse(file_open())
        self.assertLess(sum(self.sent), len(self.data))
        self.assertEqual(self.flushLoggedErrors(), [])

    @inlineCallbacks
    def test_unix_socket_by_sendfile(self):
        path = os.path.join(self.base, "s.sock")
        port = reactor.listenUNIX(path, limit(self.site, reactor))
        self.addCleanup(port.stopListening)

        def run():
            sock = socket.socket(socket.AF_UNIX)
            sock.settimeout(20)
            sock.connect(path)
            self.addCleanup(sock.close)
            ask(sock)
            return read_answer(sock)

        status, _, body = yield threads.deferToThread(run)
        self.assertEqual((status, body), (200, self.data))
        self.assertEqual(sum(self.sent), len(self.data))

    @inlineCallbacks
    def test_sendfile_refused_falls_back_to_reading(self):
        def refused(*args):
            self.refusals.append(errno.EINVAL)
            raise OSError(errno.EINVAL, "Invalid argument")

        self.patch(os, "sendfile", refused)
        port = self.listen_tcp()
        status, _, body = yield self.fetch(port, [("Range", "bytes=10-")])
        self.assertEqual((status, body), (206, self.data[10:]))
        self.assertEqual(self.refusals, [errno.EINVAL])

    @inlineCallbacks
    def test_tls_reads_the_file_through_twisted(self):
        ca = TestCA(self.base)
        key, cert = os.path.join(self.base, "key.pem"), os.path.join(self.base, "cert.pem")
        ca.issue(key, cert)
        port = self.listen_tcp(tls=TLSFiles({"privateKey": key, "certKey": cert}))

        def run():
            raw = socket.create_connection(("127.0.0.1", port), timeout=20)
            with ca.client_context().wrap_socket(raw, server_hostname="localhost") as sock:
                ask(sock, headers=[("Range", "bytes=5-")])
                first = read_answer(sock)
                ask(sock)
                return first, read_answer(sock)

        (status, _, body), (whole_status, _, whole) = yield threads.deferToThread(run)
        self.assertEqual((status, body), (206, self.data[5:]))
        self.assertEqual((whole_status, whole), (200, self.data))
        self.assertEqual((self.sent, self.refusals), ([], []))


def read_answer_after(sock, first):
    """read_answer for an answer whose first bytes, ``first``, were read."""
    class Replay:
        def __init__(self):
            self.pending = first

        def recv(self, size):
            if self.pending:
                piece, self.pending = self.pending[:size], self.pending[size:]
                return piece
            return sock.recv(size)

    return read_answer(Replay())

