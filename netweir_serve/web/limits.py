"""Slow and greedy clients: a deadline per request and caps on connections.

A connection has ``deadline`` seconds from connecting to send its whole
request, and again from the moment an answer has left the service to send
the next one; otherwise it is closed: reset if it had begun a request,
closed in order if it sent nothing, so that the end of its last answer
still arrives. Producing and sending an answer is never timed, however
long it takes (the Site's own idle timeout, 60 s unless set otherwise,
still applies once an answer is finished). One client address may hold
``per_address`` connections open at once and all clients together
``total``; a connection past either cap is closed as soon as it is
accepted, before a byte is written to it. The caps are shared by every
endpoint the service listens on (one ``ConnectionCaps``); all clients of
a Unix socket count as one address. On a TLS endpoint the caps and the
clock come before TLS: a connection over a cap is closed before any
handshake, and the handshake is part of the time a client has.

A client that sends requests without reading the answers holds little:
while the transport holds more than its buffer's worth of answers unsent
(64 KiB, when it pauses its producer), the connection reads nothing more
and the next pipelined request waits, unread, until the client has taken
the answers before it. twisted.web's HTTPChannel alone stops reading only
between requests, so a client pipelining requests whose answers are
written at once (every cached JSON answer) was answered on and on, each
answer queued in memory (eight connections of that took the daemon from 39
MB to over 1 GB).

Wiring, with the reactor the service runs on::

    site = Site(root, reactor=reactor)
    reactor.listenTCP(6800, limit(site, reactor), interface="127.0.0.1")
"""

import socket
from collections import Counter

from twisted.internet.interfaces import IPushProducer
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.web.http import HTTPChannel

from ..allocator import give_back_free_memory


class RequestClock:
    """Times a client while it owes the service a request.

    The clock runs from ``start()`` until ``request_received()``, and again
    from ``answer_finished()`` (or, if the answer was still queued in the
    transport then, from ``output_drained()``) until the next
    ``request_received()``. When it runs out it calls ``expire(begun)``,
    ``begun`` saying whether any bytes arrived since the last whole request.

    A connection keeps one delayed call, moved on by each ``start()``
    (``DelayedCall.reset``, later, is an assignment) and ignored when it
    fires while the clock is stopped: cancelling it and making another for
    every request left a cancelled call per pipelined request in the
    reactor until the end of its turn, megabytes at the connection caps.
    ``close()`` cancels it, when the connection is gone.
    """

    def __init__(self, reactor, seconds, expire):
        self._reactor = reactor
        self._seconds = seconds
        self._expire = expire
        self._call = None
        self._running = False
        self._begun = False
        self._backlogged = False
        self._answer_queued = False

    def start(self):
        """Gives the client ``seconds`` from now to deliver a whole request."""
        self._answer_queued = False
        self._running = True
        if self._call is None:
            self._call = self._reactor.callLater(self._seconds, self._run_out)
        else:
            self._call.reset(self._seconds)

    def stop(self):
        """Stops the clock until the next ``start()``."""
        self._answer_queued = False
        self._running = False

    def close(self):
        """Stops the clock for good."""
        self.stop()
        if self._call is not None:
            self._call.cancel()
            self._call = None

    def data_arrived(self):
        """Notes that the client sent bytes."""
        self._begun = True

    def request_received(self):
        """The request being timed is whole: the client owes nothing now."""
        self._begun = False
        self.stop()

    def answer_finished(self):
        """The last byte of an answer went to the transport. The client owes
        the next request once that byte has left the process: until then a
        slow reader is still receiving the answer, which is not timed."""
        if self._backlogged:
            self._answer_queued = True
        else:
            self.start()

    def output_backlogged(self):
        """The transport's write buffer is full."""
        self._backlogged = True

    def output_drained(self):
        """The transport has written out everything it was given."""
        self._backlogged = False
        if self._answer_queued:
            self.start()

    def _run_out(self):
        self._call = None
        if self._running:
            self._running = False
            self._expire(self._begun)


class DeadlineChannel(HTTPChannel):
    """An ``HTTPChannel`` that tells its ``request_clock`` where each
    request stands. ``ConnectionLimits`` sets ``request_clock`` before the
    connection starts; ``limit()`` makes a ``Site`` build these channels.

    The hooks are public methods of ``HTTPChannel`` called once per request
    whatever its framing (no body, Content-Length, chunked):
    ``allContentReceived`` is where the channel hands a whole request on
    (and suspends its own idle timeout for the same reason), ``requestDone``
    is where it learns the answer is finished. Being public, they fall under
    Twisted's deprecation policy, unlike the ``_handlingRequest`` flag a
    wrapping protocol would otherwise have to poll after every read.
    ``pauseProducing``/``resumeProducing`` are what the transport calls, as
    an ``IPushProducer``'s consumer, when its write buffer fills up and when
    it has written everything out.

    While the transport's buffer is full the channel reads nothing, and the
    next request waits (see the module's docstring): ``setLineMode`` is
    where HTTPChannel goes back to reading requests after an answer, and
    LineReceiver's ``paused`` flag is what stops it handing on the lines it
    already read (HTTPChannel overrides the producer methods that would
    otherwise set it).
    """

    request_clock = None
    # The LimitedConnection it is served on (set with request_clock).
    connection = None
    # Whether the transport paused this channel: its write buffer is full.
    _backlogged = False
    _idle_call = None

    # HTTPChannel's idle timeout (TimeoutMixin's two methods, public), with
    # one delayed call moved on instead of a new one for every request:
    # HTTPChannel turns the timeout off when a request is whole and on again
    # after its answer (see RequestClock for what the calls cost).

    def setTimeout(self, period):
        previous, self.timeOut = self.timeOut, period
        if period is not None:
            if self._idle_call is None:
                self._idle_call = self.callLater(period, self._idle_out)
            else:
                self._idle_call.reset(period)
        return previous

    def resetTimeout(self):
        if self.timeOut is not None and self._idle_call is not None:
            self._idle_call.reset(self.timeOut)

    def _idle_out(self):
        self._idle_call = None
        if self.timeOut is not None:
            self.timeoutConnection()

    def connectionLost(self, reason):
        super().connectionLost(reason)
        if self._idle_call is not None:
            self._idle_call.cancel()
            self._idle_call = None

    def allContentReceived(self):
        # Before handing on: the answer may be finished synchronously, and
        # that must start the clock again, not be undone by this.
        self.request_clock.request_received()
        super().allContentReceived()

    def requestDone(self, request):
        # Before the channel replays pipelined bytes it buffered meanwhile:
        # a whole request among them stops the clock this starts.
        if self.persistent:
            self.request_clock.answer_finished()
        super().requestDone(request)

    def setLineMode(self, extra=b""):
        # After an answer, with the pipelined bytes kept meanwhile: while
        # the answers wait unsent, they stay in LineReceiver's buffer.
        if self._backlogged:
            self.paused = True
        return super().setLineMode(extra)

    def pauseProducing(self):
        self._backlogged = True
        self.request_clock.output_backlogged()
        super().pauseProducing()
        # HTTPChannel pauses the transport only between requests; while it
        # handles one it reads on, buffering whatever the client sends.
        network = IPushProducer(self.transport, None)
        if network is not None:
            network.pauseProducing()

    def resumeProducing(self):
        self._backlogged = False
        # Before resuming: the request's producer may fill the buffer again.
        self.request_clock.output_drained()
        super().resumeProducing()
        if self.paused:
            # The requests that waited, now that the answers before them
            # have left (HTTPChannel resumed reading the transport).
            self.paused = False
            self.dataReceived(b"")


class LimitedConnection(ProtocolWrapper):
    """One connection of a ``ConnectionLimits``, timed by a ``RequestClock``.
    ``protocol`` is the HTTP channel, or a wrapper of it (TLS)."""

    # The caps' pool that counts it (ConnectionCaps): until it is closed,
    # or found closed by its client; None then.
    pool = None

    def __init__(self, factory, protocol, client):
        super().__init__(factory, protocol)
        self.client = client
        self._clock = RequestClock(factory.reactor, factory.deadline, self._too_slow)
        self._channel = _channel_in(protocol)
        self._channel.request_clock = self._clock
        self._channel.connection = self

    def become_stream(self):
        """Counts this connection as an event stream from now on (see
        ConnectionCaps); False when the streams' caps are full."""
        return self.factory.caps.make_stream(self)

    def connectionMade(self):
        self._clock.start()

    def dataReceived(self, data):
        self._clock.data_arrived()
        super().dataReceived(data)

    def write(self, data):
        self.factory.caps.written += len(data)
        self.transport.write(data)

    def writeSequence(self, data):
        # One piece for the transport to keep until the socket takes it,
        # not HTTPChannel's thirty for an answer's headers (a list entry
        # each, and small objects scattered through the allocator's pools):
        # most of what a connection that doesn't read held, 150 KB of the
        # 200 KB each with its buffer full.
        data = b"".join(data)
        self.factory.caps.written += len(data)
        self.transport.write(data)

    def connectionLost(self, reason):
        self._clock.close()
        super().connectionLost(reason)

    def peer_closed(self):
        """Whether the client has closed the connection (or reset it)
        though the service has not read its end yet: a look at the socket
        that takes nothing from it. Data still unread means it is open."""
        handle = getattr(self.transport, "getHandle", lambda: None)()
        if not isinstance(handle, socket.socket):
            return False
        try:
            return handle.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # reset by the client

    def _too_slow(self, begun):
        if begun:
            # Part of a request, too late: drop it, answer nothing.
            self.transport.abortConnection()
        else:
            # Idle between requests: an orderly close, so that the kernel
            # still delivers the tail of the last answer to a slow reader.
            self._channel.loseConnection()


# Bytes written to clients since memory was last given back (answers made
# in the service's memory; job files go by sendfile and don't count) after
# which it is given back when the last connection closes.
GIVE_BACK_AFTER = 8 << 20


class _Pool:
    """Connections counted against one pair of caps: ``per_address`` for
    one client address, ``total`` for all."""

    def __init__(self, per_address, total):
        self.per_address = per_address
        self.total = total
        self.open = 0
        self.per_client = Counter()
        # {client: {connection: None}}: those counted, to look at again
        # when a cap is reached.
        self._members = {}

    def has_room(self, client):
        """Whether one more connection of ``client`` fits. At a cap,
        connections whose client has closed them but whose end the service
        has not read yet stop counting first: a client that closes a
        connection and opens the next at once is accepted in the same turn
        of the reactor, before the end of the old one is read."""
        if self._fits(client):
            return True
        among = self._members if self.open >= self.total else {
            client: self._members.get(client, {})}
        for held in list(among.values()):
            for connection in list(held):
                if connection.peer_closed():
                    self.remove(connection)
        return self._fits(client)

    def _fits(self, client):
        return self.open < self.total and self.per_client[client] < self.per_address

    def add(self, connection):
        connection.pool = self
        self.open += 1
        self.per_client[connection.client] += 1
        self._members.setdefault(connection.client, {})[connection] = None

    def remove(self, connection):
        client = connection.client
        connection.pool = None
        self.open -= 1
        self.per_client[client] -= 1
        self._members.get(client, {}).pop(connection, None)
        if not self.per_client[client]:
            # Forget the address, or every client ever seen would stay.
            del self.per_client[client]
            self._members.pop(client, None)


class ConnectionCaps:
    """How many connections each client address and all together hold open,
    against ``per_address`` and ``total``: one of these for every endpoint
    the service listens on.

    A connection that becomes an event stream (``make_stream``, /events)
    leaves those caps for caps of the streams' own, ``streams_per_address``
    and ``streams_total``: streams stay open for as long as their readers
    like, and counted with the rest, a few hundred idle ones would leave no
    room for a plain request.

    It also counts the bytes written to the connections (``written``), and
    when the last one closes after GIVE_BACK_AFTER bytes or more, calls
    ``give_back``: by default, the C allocator gives its free memory back
    to the system (allocator.py), which a burst of answers leaves in its
    heap. At the moment the service falls idle, and only after enough was
    written to matter, so a client that connects for every request doesn't
    pay for it each time."""

    def __init__(self, per_address=8, total=256, give_back=give_back_free_memory,
                 streams_per_address=4, streams_total=64):
        self.per_address = per_address
        self.total = total
        self.streams_per_address = streams_per_address
        self.streams_total = streams_total
        self.written = 0
        self._give_back = give_back
        self._plain = _Pool(per_address, total)
        self._streams = _Pool(streams_per_address, streams_total)

    @property
    def open(self):
        """Connections counted, streams included."""
        return self._plain.open + self._streams.open

    def admits(self, client):
        return self._plain.has_room(client)

    def opened(self, client, connection):
        self._plain.add(connection)

    def make_stream(self, connection):
        """Moves ``connection`` (counted) to the streams' caps; False, and
        nothing changes, when they are full for its address or in all."""
        if connection.pool is not self._plain:
            return connection.pool is self._streams
        if not self._streams.has_room(connection.client):
            return False
        self._plain.remove(connection)
        self._streams.add(connection)
        return True

    def closed(self, client, connection):
        if connection.pool is not None:
            connection.pool.remove(connection)
        if not self.open and self.written >= GIVE_BACK_AFTER:
            self.written = 0
            self._give_back()

    def by_address(self):
        """{client address: connections it holds open}, streams included."""
        found = Counter(self._plain.per_client)
        found.update(self._streams.per_client)
        return dict(found)

    def streams_by_address(self):
        return dict(self._streams.per_client)


def client_of(addr):
    """The address a connection from ``addr`` counts against: its IP
    address, or ``"unix"`` for every client of a Unix socket."""
    host = getattr(addr, "host", None)
    return host if host is not None else "unix"


class ConnectionLimits(WrappingFactory):
    """Wraps ``wrappedFactory``, a ``Site`` whose ``protocol`` is a
    ``DeadlineChannel`` (``limit()`` arranges that), to enforce the
    deadline and the connection caps described in this module.

    ``reactor`` provides ``IReactorTime``; it runs every timer.
    ``per_address`` and ``total`` are the largest numbers of connections
    held open at once by one client IP address and by all clients, unless
    ``caps`` (a ConnectionCaps shared with other endpoints) is given.
    ``deadline`` is in seconds. Listen with this factory, not the site.
    """

    protocol = LimitedConnection

    def __init__(self, wrappedFactory, reactor, per_address=8, total=256, deadline=15.0,
                 caps=None):
        if not _builds_deadline_channels(wrappedFactory):
            raise TypeError(
                "ConnectionLimits needs a factory building DeadlineChannel "
                "protocols: wrap a Site with limit(site, reactor)"
            )
        super().__init__(wrappedFactory)
        self.reactor = reactor
        self.caps = caps if caps is not None else ConnectionCaps(per_address, total)
        self.per_address = self.caps.per_address
        self.total = self.caps.total
        self.deadline = deadline

    def buildProtocol(self, addr):
        """A protocol for a new connection from ``addr``, or ``None`` when a
        cap is reached, which has the port close the socket at once."""
        client = client_of(addr)
        if not self.caps.admits(client):
            return None
        return self.protocol(self, self.wrappedFactory.buildProtocol(addr), client)

    def registerProtocol(self, p):
        super().registerProtocol(p)
        self.caps.opened(p.client, p)

    def unregisterProtocol(self, p):
        super().unregisterProtocol(p)
        self.caps.closed(p.client, p)

    def open_connections(self):
        """``{client address: connections it holds open}``, for every
        address that holds any, on every endpoint sharing the caps."""
        return self.caps.by_address()


def limit(site, reactor, per_address=8, total=256, deadline=15.0, caps=None, tls=None):
    """The factory to listen with to serve ``site`` under these limits.

    Makes ``site`` build ``DeadlineChannel``s unless it already builds a
    subclass of it, then wraps it in a ``ConnectionLimits`` (on ``caps``,
    when shared with other endpoints). With ``tls`` (a TLS context
    factory, tls.TLSFiles), connections speak TLS inside the limits. The
    site speaks HTTP/1.x only: Twisted's default channel would offer HTTP/2
    over TLS, which the service doesn't serve.
    """
    if not _builds_deadline_channels(site):
        site.protocol = DeadlineChannel
    wrapped = site
    if tls is not None:
        from twisted.protocols.tls import TLSMemoryBIOFactory

        # The clock given, or Twisted would pick the global reactor.
        wrapped = TLSMemoryBIOFactory(tls, False, site, clock=reactor)
    return ConnectionLimits(wrapped, reactor, per_address, total, deadline, caps)


def _builds_deadline_channels(factory):
    # Through a TLS factory (a WrappingFactory) to the site inside it.
    while getattr(factory, "wrappedFactory", None) is not None:
        factory = factory.wrappedFactory
    channel = getattr(factory, "protocol", None)
    return isinstance(channel, type) and issubclass(channel, DeadlineChannel)


def _channel_in(protocol):
    """The DeadlineChannel ``protocol`` is or wraps."""
    while not isinstance(protocol, DeadlineChannel):
        protocol = protocol.wrappedProtocol
    return protocol
