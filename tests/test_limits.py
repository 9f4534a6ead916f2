"""Deadlines and connection caps: first on a Clock with in-memory
transports, then over real loopback sockets."""

import resource
import socket
import time

from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, gatherResults, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock, LoopingCall, deferLater
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SkipTest, TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from netweir_serve.web import limits
from netweir_serve.web.limits import ConnectionCaps, ConnectionLimits, DeadlineChannel, limit

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
SLOW_REQUEST = b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
ANSWER = b"served"


class Root(Resource):
    """Answers ``ANSWER`` at once, except on /slow, whose requests wait in
    ``pending`` for the test to write and finish them."""

    isLeaf = True

    def __init__(self):
        super().__init__()
        self.pending = []

    def render_GET(self, request):
        if request.path == b"/slow":
            self.pending.append(request)
            return NOT_DONE_YET
        return ANSWER


class ClockTests(TestCase):
    """The deadline and the caps, driven by a Clock."""

    def setUp(self):
        self.clock = Clock()
        self.root = Root()
        self.factory = limit(Site(self.root, reactor=self.clock), self.clock)

    def connect(self, host="10.0.0.1"):
        """A connection from ``host``: (protocol, transport), or (None, None)
        if the factory refuses it."""
        address = IPv4Address("TCP", host, 40000)
        protocol = self.factory.buildProtocol(address)
        if protocol is None:
            return None, None
        transport = StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        return protocol, transport

    def close(self, protocol):
        protocol.connectionLost(ConnectionDone())

    def assertOpen(self, transport):
        self.assertFalse(transport.disconnecting)

    def assertAborted(self, transport):
        # StringTransport.abortConnection is what sets ``disconnected``.
        self.assertTrue(transport.disconnected)

    def assertClosedInOrder(self, transport):
        self.assertTrue(transport.disconnecting)
        self.assertFalse(transport.disconnected)

    def test_slow_sender_cut_at_deadline(self):
        protocol, transport = self.connect()
        for i in range(8):  # one byte at 0, 2, ..., 14 s
            protocol.dataReceived(REQUEST[i:i + 1])
            self.clock.advance(2 if i < 7 else 0.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertAborted(transport)
        self.assertEqual(transport.value(), b"")

    def test_silent_connection_closed_at_deadline(self):
        _, transport = self.connect()
        self.clock.advance(14.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertTrue(transport.disconnecting)

    def test_whole_request_answered_and_streaming_answer_not_cut(self):
        protocol, transport = self.connect()
        self.clock.advance(14)
        protocol.dataReceived(SLOW_REQUEST)
        [request] = self.root.pending
        for _ in range(10):  # 100 s of answer, long past the deadline
            request.write(b"piece")
            self.clock.advance(10)
        self.assertOpen(transport)
        request.finish()
        self.assertIn(b"HTTP/1.1 200", transport.value())
        self.assertEqual(transport.value().count(b"piece"), 10)
        self.assertTrue(transport.value().endswith(b"0\r\n\r\n"))
        # Keep-alive: the next request is owed within the deadline again.
        self.clock.advance(14.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertClosedInOrder(transport)

    def test_clock_restarts_for_each_request_on_a_connection(self):
        protocol, transport = self.connect()
        for _ in range(3):
            self.clock.advance(14)
            protocol.dataReceived(REQUEST)
        self.assertOpen(transport)
        self.assertEqual(transport.value().count(ANSWER), 3)

    def test_next_request_half_sent_is_cut(self):
        protocol, transport = self.connect()
        protocol.dataReceived(REQUEST)
        answered = transport.value()
        self.clock.advance(5)
        protocol.dataReceived(REQUEST[:10])
        self.clock.advance(9.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertAborted(transport)
        self.assertEqual(transport.value(), answered)

    def test_pipelined_requests_all_answered(self):
        protocol, transport = self.connect()
        protocol.dataReceived(REQUEST * 3)
        self.assertEqual(transport.value().count(ANSWER), 3)
        self.clock.advance(14.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertClosedInOrder(transport)

    def test_clock_waits_until_the_answer_has_left(self):
        protocol, transport = self.connect()
        protocol.dataReceived(SLOW_REQUEST)
        [request] = self.root.pending
        request.write(b"x" * 1000)
        # What the transport does when its write buffer fills.
        channel = protocol.wrappedProtocol
        channel.pauseProducing()
        request.finish()
        # Under the 60 s idle timeout of the Site's own channel, which
        # bounds a client that never reads.
        self.clock.advance(40)
        self.assertOpen(transport)
        channel.resumeProducing()
        self.clock.advance(14.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertClosedInOrder(transport)

    def test_ninth_connection_from_one_address_refused(self):
        held = [self.connect("10.0.0.1") for _ in range(8)]
        for protocol, transport in held:
            protocol.dataReceived(REQUEST)
            self.assertIn(ANSWER, transport.value())
        self.assertEqual(self.connect("10.0.0.1"), (None, None))
        protocol, transport = self.connect("10.0.0.2")
        protocol.dataReceived(REQUEST)
        self.assertIn(ANSWER, transport.value())

    def test_257th_connection_refused(self):
        for n in range(256):
            protocol, _ = self.connect(f"10.0.{n // 8}.{n % 8}")
            self.assertIsNotNone(protocol)
        self.assertEqual(self.connect("10.1.0.1"), (None, None))
        self.assertEqual(self.connect("10.0.0.0"), (None, None))

    def test_counts_restored_after_closes(self):
        held = [self.connect("10.0.0.1")[0] for _ in range(8)]
        self.close(held.pop())
        self.assertEqual(self.factory.open_connections(), {"10.0.0.1": 7})
        protocol, transport = self.connect("10.0.0.1")
        protocol.dataReceived(REQUEST)
        self.assertIn(ANSWER, transport.value())
        self.clock.advance(15)  # the deadline closes the idle one; its
        self.close(protocol)  # transport reports the close
        for protocol in held:
            self.close(protocol)
        self.assertEqual(self.factory.open_connections(), {})
        self.assertEqual(self.factory.protocols, {})
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_total_restored_after_closes(self):
        everyone = [self.connect(f"10.0.{n // 8}.{n % 8}")[0] for n in range(256)]
        self.close(everyone[100])
        self.assertIsNotNone(self.connect("10.1.0.1")[0])
        self.assertEqual(self.connect("10.1.0.2"), (None, None))

    def test_limits_need_a_deadline_channel(self):
        site = Site(Root(), reactor=self.clock)
        self.assertRaises(TypeError, ConnectionLimits, site, self.clock)

    def test_limit_keeps_a_deadline_channel_subclass(self):
        class Channel(DeadlineChannel):
            pass

        site = Site(Root(), reactor=self.clock)
        site.protocol = Channel
        limit(site, self.clock)
        self.assertIs(site.protocol, Channel)

    def test_pipelined_requests_wait_while_answers_wait_unsent(self):
        protocol, transport = self.connect()
        channel = protocol.wrappedProtocol
        # The transport's write buffer is full: an earlier answer waits.
        channel.pauseProducing()
        protocol.dataReceived(REQUEST * 3)
        self.assertEqual(transport.value().count(ANSWER), 1)
        self.assertEqual(transport.producerState, "paused")
        # Written out: the two that waited are answered, reading goes on.
        channel.resumeProducing()
        self.assertEqual(transport.value().count(ANSWER), 3)
        self.assertEqual(transport.producerState, "producing")

    def test_nothing_read_while_an_answer_in_progress_waits_unsent(self):
        protocol, transport = self.connect()
        protocol.dataReceived(SLOW_REQUEST)
        [request] = self.root.pending
        request.write(b"x" * 1000)
        channel = protocol.wrappedProtocol
        # HTTPChannel alone reads on while it handles a request, keeping
        # whatever a client that doesn't read sends meanwhile.
        channel.pauseProducing()
        self.assertEqual(transport.producerState, "paused")
        channel.resumeProducing()
        self.assertEqual(transport.producerState, "paused")
        request.finish()
        self.assertEqual(transport.producerState, "producing")

    def test_client_that_never_reads_closed_by_the_idle_timeout(self):
        protocol, transport = self.connect()
        channel = protocol.wrappedProtocol
        channel.pauseProducing()
        protocol.dataReceived(REQUEST * 3)
        self.clock.advance(59.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertTrue(transport.disconnecting)

    def test_no_delayed_call_made_per_request(self):
        protocol, transport = self.connect()
        made = []
        call_later = self.clock.callLater
        self.patch(self.clock, "callLater",
                   lambda *a, **kw: made.append(a) or call_later(*a, **kw))
        protocol.dataReceived(REQUEST * 50)
        self.assertEqual(transport.value().count(ANSWER), 50)
        self.assertEqual(made, [])
        # The calls kept still time the client.
        self.clock.advance(14.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertClosedInOrder(transport)

    def test_idle_timeout_moved_on_by_each_request_and_gone_with_the_connection(self):
        self.factory.deadline = 100.0
        protocol, transport = self.connect()
        for _ in range(3):
            self.clock.advance(50)
            protocol.dataReceived(REQUEST)
        self.clock.advance(59.99)
        self.assertOpen(transport)
        self.clock.advance(0.01)
        self.assertTrue(transport.disconnecting)
        self.close(protocol)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_answer_headers_reach_the_transport_as_one_piece(self):
        protocol, transport = self.connect()
        pieces = []
        self.patch(transport, "write", pieces.append)
        self.patch(transport, "writeSequence", lambda data: pieces.extend(data))
        protocol.dataReceived(REQUEST)
        self.assertEqual(len(pieces), 2)
        self.assertTrue(pieces[0].startswith(b"HTTP/1.1 200 OK\r\n"))
        self.assertTrue(pieces[0].endswith(b"\r\n\r\n"))
        self.assertEqual(pieces[1], ANSWER)

    def test_free_memory_given_back_when_the_last_connection_closes(self):
        given_back = []
        self.patch(limits, "GIVE_BACK_AFTER", 2000)
        self.factory = limit(Site(self.root, reactor=self.clock), self.clock,
                             caps=ConnectionCaps(give_back=lambda: given_back.append(1)))
        first, _ = self.connect()
        second, _ = self.connect("10.0.0.2")
        first.dataReceived(REQUEST * 20)
        self.close(first)
        self.assertEqual(given_back, [])
        self.close(second)
        self.assertEqual(given_back, [1])
        # Not again until as much has been written again.
        third, _ = self.connect()
        third.dataReceived(REQUEST)
        self.close(third)
        self.assertEqual(given_back, [1])


class Client(Protocol):
    """A raw HTTP client that records every byte it receives."""

    def __init__(self):
        self.received = b""
        self.reason = None
        self.closed = Deferred()
        self._waiting = []

    def dataReceived(self, data):
        self.received += data
        count = self.received.count(ANSWER)
        for wanted, answered in [w for w in self._waiting if w[0] <= count]:
            self._waiting.remove((wanted, answered))
            answered.callback(self)

    def connectionLost(self, reason):
        for _, answered in self._waiting:
            answered.errback(reason)
        self._waiting = []
        self.reason = reason
        self.closed.callback(self)

    def ask(self, request=REQUEST):
        """Sends ``request``; fires with this client once one more answer
        has arrived."""
        answered = Deferred()
        self._waiting.append((self.received.count(ANSWER) + 1, answered))
        self.transport.write(request)
        return answered.addTimeout(5, reactor)


@inlineCallbacks
def until(predicate, timeout=5.0):
    """Waits until ``predicate()`` holds: the server learns of a client's
    close a moment after the client does."""
    give_up = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError("condition not reached in time")
        yield deferLater(reactor, 0.01, lambda: None)


class SocketTestCase(TestCase):
    """A limited Site on 127.0.0.1, and clients from loopback addresses."""

    deadline = 15.0

    def setUp(self):
        self.root = Root()
        self.factory = limit(Site(self.root, reactor=reactor), reactor, deadline=self.deadline)
        # A backlog above the 257 connections opened at once, so that none
        # waits for a SYN retry.
        self.port = reactor.listenTCP(0, self.factory, backlog=512, interface="127.0.0.1")
        self.clients = []
        self.addCleanup(self.shut_down)

    @inlineCallbacks
    def shut_down(self):
        for client in self.clients:
            if client.transport.connected:
                client.transport.loseConnection()
        yield gatherResults([client.closed for client in self.clients])
        yield until(lambda: not self.factory.protocols)
        yield self.port.stopListening()

    @inlineCallbacks
    def connect(self, source="127.0.0.1"):
        endpoint = TCP4ClientEndpoint(
            reactor, "127.0.0.1", self.port.getHost().port, timeout=5, bindAddress=(source, 0)
        )
        client = yield connectProtocol(endpoint, Client())
        self.clients.append(client)
        return client

    @inlineCallbacks
    def assertRefused(self, source):
        """A connection from ``source`` is closed without a byte written."""
        client = yield self.connect(source)
        client.transport.write(REQUEST)
        yield client.closed.addTimeout(5, reactor)
        self.assertEqual(client.received, b"")

    @inlineCallbacks
    def served(self, source):
        """A new client from ``source``, once it has had an answer."""
        client = yield self.connect(source)
        yield client.ask()
        return client


class SocketCapTests(SocketTestCase):
    def setUp(self):
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.40", 0))
        except OSError:
            raise SkipTest("clients need 127.0.0.2-40, loopback addresses Linux has")
        finally:
            probe.close()
        super().setUp()

    @inlineCallbacks
    def test_ninth_from_one_address_closed_while_another_served(self):
        held = []
        for _ in range(8):
            held.append((yield self.served("127.0.0.1")))
        yield self.assertRefused("127.0.0.1")
        yield self.served("127.0.0.2")
        # Every held connection still works.
        yield gatherResults([client.ask() for client in held])
        held[0].transport.loseConnection()
        yield until(lambda: self.factory.open_connections()["127.0.0.1"] == 7)
        yield self.served("127.0.0.1")

    @inlineCallbacks
    def test_257th_across_addresses_closed(self):
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < 1024:
            raise SkipTest(f"needs ~600 file descriptors, ulimit -n is {soft}")
        sources = [f"127.0.0.{n}" for n in range(2, 41)]
        # Round robin over 39 addresses: 6 or 7 each, under the cap of 8,
        # so only the total can refuse.
        for start in range(0, 256, len(sources)):
            batch = range(start, min(start + len(sources), 256))
            yield gatherResults([self.served(sources[n % len(sources)]) for n in batch])
        self.assertEqual(len(self.factory.protocols), 256)
        last = sources[-1]
        self.assertEqual(self.factory.open_connections()[last], 6)
        yield self.assertRefused(last)
        self.clients[0].transport.loseConnection()
        yield until(lambda: len(self.factory.protocols) == 255)
        yield self.served(last)


class ClosedConnectionTests(SocketTestCase):
    """Issue 26: a connection counts against the caps only while it is
    open. A client that closes a connection and opens the next at once
    (a keep-alive pool of one request per connection) is accepted before
    the service has read the old one's end."""

    @inlineCallbacks
    def test_connections_a_client_closed_do_not_count_against_its_cap(self):
        from twisted.internet.threads import deferToThread

        def one_client(requests):
            answered = 0
            for _ in range(requests):
                conn = socket.create_connection(("127.0.0.1", self.port.getHost().port),
                                                timeout=10)
                try:
                    conn.sendall(REQUEST)
                    received = b""
                    while ANSWER not in received:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        received += chunk
                    answered += ANSWER in received
                except OSError:
                    pass
                finally:
                    conn.close()
            return answered

        # Eight clients, each at the cap's share of one connection at a
        # time, as the eight threads of the report.
        answered = yield gatherResults([deferToThread(one_client, 40) for _ in range(8)])
        self.assertEqual(sum(answered), 320)

    def test_a_connection_whose_peer_closed_is_not_counted_when_a_cap_is_reached(self):
        caps = ConnectionCaps(per_address=1, total=10)

        class Gone:
            client = "10.0.0.1"
            pool = None

            def peer_closed(self):
                return True

        gone = Gone()
        caps.opened(gone.client, gone)
        self.assertTrue(caps.admits("10.0.0.1"))
        self.assertEqual(caps.by_address(), {})
        # Its own close later changes nothing more.
        caps.closed(gone.client, gone)
        self.assertEqual((caps.open, caps.by_address()), (0, {}))


class SocketDeadlineTests(SocketTestCase):
    """Real time, with a short deadline."""

    deadline = 0.5

    @inlineCallbacks
    def test_slow_sender_cut(self):
        client = yield self.connect()
        started = time.monotonic()
        endless = iter(SLOW_REQUEST[:-4] + b"\r\nX-Slow: " + b"a" * 10_000)
        trickle = LoopingCall(lambda: client.transport.write(bytes([next(endless)])))
        trickle.start(0.05)
        try:
            yield client.closed.addTimeout(5, reactor)
        finally:
            trickle.stop()
        elapsed = time.monotonic() - started
        self.assertTrue(0.45 <= elapsed < 3, elapsed)
        self.assertEqual(client.received, b"")
        self.assertEqual(self.root.pending, [])

    @inlineCallbacks
    def test_long_answer_not_cut_and_idle_connection_closed_after(self):
        client = yield self.connect()
        answered = client.ask(SLOW_REQUEST)
        yield until(lambda: self.root.pending)
        [request] = self.root.pending
        for _ in range(4):  # 1.2 s of answer, over twice the deadline
            request.write(b"piece")
            yield deferLater(reactor, 0.3, lambda: None)
        request.write(ANSWER)
        request.finish()
        yield answered
        finished = time.monotonic()
        yield client.closed.addTimeout(5, reactor)
        elapsed = time.monotonic() - finished
        self.assertTrue(0.4 <= elapsed < 3, elapsed)
        # An orderly close, not a reset: nothing of the answer was lost.
        self.assertTrue(client.reason.check(ConnectionDone), client.reason)
        self.assertEqual(client.received.count(b"piece"), 4)
        self.assertTrue(client.received.endswith(b"0\r\n\r\n"))
