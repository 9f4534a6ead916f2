"""Job files sent with ``os.sendfile``: from the page cache to the socket,
never through the service's memory.

``file_producer(request, file, offset, size)`` gives the producer that sends
``size`` bytes of ``file`` from ``offset`` as the body of ``request``, whose
code and headers are set (static.File's ``makeProducer`` sets them):

- on a plain TCP or Unix socket, a ``SendfileProducer``;
- on TLS, or on a transport with no socket of its own, Twisted's reading
  producer (``static.SingleRangeStaticProducer``): the bytes must go through
  the TLS layer to be encrypted. It too sends ``size`` bytes and no more,
  so a file that grows while it is sent is sent up to its size when asked.

How a ``SendfileProducer`` writes around the transport without mixing its
bytes with the transport's own. The transport (a ``FileDescriptor``) owns
the socket and buffers what it is given until the socket takes it; the
HTTP channel is registered with it as its streaming producer. The
producer writes the answer's headers through the request (so they go into
the transport's buffer, first), then takes the channel's place as the
transport's producer, as a *pull* producer, and has the transport write
its buffer at once rather than on the next turn: a ``FileDescriptor`` calls a
pull producer's ``resumeProducing`` every time it has written its whole
buffer out, so each call means the socket holds everything written before
and ``sendfile`` may add to it. When the socket is full (``EAGAIN``), or a
turn's share is sent, it asks the transport to wait for the socket to be
writable (``startWriting``); the transport, finding its buffer empty, calls
``resumeProducing`` again. Nothing is read from the file into Python and
the reactor never blocks on the socket. Once the body is sent, the channel
is registered again as it was, and the request finished. If the
connection is lost meanwhile, the transport calls ``stopProducing``.

``sendfile`` refused with ENOSYS, EINVAL or EOPNOTSUPP (a file system or
socket that can't) hands the rest to the reading producer.

How TLS is told apart: ``request.isSecure()`` (IRequest), which is true
when the channel's transport provides ``ISSLTransport``; Twisted's
``TLSMemoryBIOProtocol`` does (through ``INegotiated``). Every layer under
the channel is checked the same way on the way down to the socket, so a
TLS layer anywhere (or a reactor TLS transport) means the fallback; no
private attribute of Twisted's is read.
"""

import errno
import os

from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IPullProducer, ISSLTransport
from twisted.protocols.policies import ProtocolWrapper
from twisted.web.static import SingleRangeStaticProducer
from zope.interface import implementer

# At most this much is sent to one connection per turn of the reactor, so
# that a fast client on loopback (whose socket never fills) cannot keep
# the others waiting while its whole file goes: 8 MiB is 2 to 4 ms of
# sendfile here. Each turn a body takes costs far more than its Python:
# the socket is watched for writability again, and the peer, woken for a
# smaller piece, comes back for the rest (on loopback its wakeups are
# charged to the sender). With 64 clients of a 5 MB file (bench/files.py),
# 1 MiB a turn cost 2.3 ms of CPU a request and 8 MiB 1.6 ms, the same
# run; the bare loop (bench/bare.py) capped at 1 MiB a turn costs a third
# more than sending until the socket is full, while splitting a turn into
# several sendfile calls costs nothing.
TURN_BYTES = 8 << 20

# sendfile cannot serve this file or socket: fall back to reading it.
_REFUSED = (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)


def socket_transport(request):
    """The ``FileDescriptor`` owning ``request``'s socket, when bytes may be
    sent to that socket directly: None on TLS, or when the connection has
    no socket of its own (a test's in-memory transport)."""
    if request.isSecure():
        return None
    transport = request.transport
    while isinstance(transport, ProtocolWrapper):
        if ISSLTransport.providedBy(transport):
            return None
        transport = transport.transport
    if not isinstance(transport, FileDescriptor) or ISSLTransport.providedBy(transport):
        return None
    return transport


def file_producer(request, file, offset, size):
    """The producer to ``start()`` to send ``size`` bytes of ``file`` from
    ``offset`` as ``request``'s body; it finishes the request."""
    transport = socket_transport(request)
    if transport is None:
        return SingleRangeStaticProducer(request, file, offset, size)
    return SendfileProducer(request, file, offset, size, transport)


@implementer(IPullProducer)
class SendfileProducer:
    """Sends part of a file to ``transport``'s socket with ``os.sendfile``
    (see the module's docstring). ``sent`` counts the bytes it sent."""

    def __init__(self, request, file, offset, size, transport):
        self.request = request
        self.file = file
        self.offset = offset
        self.remaining = size
        self.sent = 0
        self._transport = transport
        self._channel = None
        self._channel_streaming = True
        self._channel_paused = False
        self._registering = False

    def start(self):
        # The headers first, into the transport's buffer.
        self.request.write(b"")
        if not self.remaining:
            self._finish()
            return
        transport = self._transport
        self._channel = transport.producer
        self._channel_streaming = transport.streamingProducer
        self._channel_paused = transport.producerPaused
        if self._channel is not None:
            transport.unregisterProducer()
        # A pull producer is asked for data at once: ignored, since the
        # headers are still in the transport's buffer. It asks again when
        # they have left.
        self._registering = True
        try:
            transport.registerProducer(self, False)
        finally:
            self._registering = False
        if self.request is None:
            return  # the connection was gone: registering stopped this
        # Rather than wait a turn of the reactor for the socket to be
        # writable, which it nearly always is (the request was just read),
        # the transport is told it is (IWriteDescriptor.doWrite): it sends
        # the headers, and, its buffer empty, asks this producer for the
        # body in this same turn. If the socket takes not all of them, it
        # waits for it as it would have. A failure it returns is what the
        # reactor would have closed the connection for: so is it here.
        if transport.doWrite():
            transport.abortConnection()

    def resumeProducing(self):
        if self._registering or self.request is None:
            return
        out, into = self._transport.fileno(), self.file.fileno()
        budget = TURN_BYTES
        while self.remaining and budget:
            try:
                count = os.sendfile(out, into, self.offset, min(self.remaining, budget))
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno in _REFUSED:
                    self._read_the_rest()
                else:
                    # The peer is gone (EPIPE, ECONNRESET): the transport
                    # learns it from the abort and stops this producer.
                    self._transport.abortConnection()
                return
            if not count:
                # The file is shorter than the Content-Length promised (it
                # was truncated): the answer can't be completed.
                self._transport.abortConnection()
                return
            self.offset += count
            self.remaining -= count
            self.sent += count
            budget -= count
        if self.remaining:
            self._transport.startWriting()
        else:
            self._give_back()
            self._finish()

    def stopProducing(self):
        # The connection is lost: the request learns it from its channel.
        self.request = None
        self.file.close()

    def _give_back(self):
        """The channel is the transport's producer again, as it was."""
        transport = self._transport
        transport.unregisterProducer()
        if self._channel is not None:
            transport.registerProducer(self._channel, self._channel_streaming)
            if self._channel_paused and self._channel_streaming:
                # Paused before this body; the transport's buffer has been
                # empty since, which is when it would have resumed it.
                self._channel.resumeProducing()

    def _finish(self):
        request, self.request = self.request, None
        self.file.close()
        request.sentLength += self.sent
        request.finish()

    def _read_the_rest(self):
        request, self.request = self.request, None
        self._give_back()
        request.sentLength += self.sent
        SingleRangeStaticProducer(request, self.file, self.offset, self.remaining).start()
