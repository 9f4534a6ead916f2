"""Reading another server's reply with a bound: a webhook receiver's
(--notify) or another node's. twisted.web.client's readBody keeps all of a
reply, however large: a receiver answering 300 MB took the daemon to
522 MB, and forty of them to 4.5 GB. ``read_capped`` keeps at most
``limit`` bytes and then drops the connection."""

from twisted.internet import defer
from twisted.internet.protocol import Protocol

# What a webhook's reply may hold that the service reads: it is dropped
# anyway, read only so that the connection ends in order.
NOTICE_REPLY_LIMIT = 4096


class _CappedBody(Protocol):
    def __init__(self, limit, done):
        self._limit = limit
        self._done = done
        self._parts = []
        self._size = 0
        self._cut = False

    def dataReceived(self, data):
        if self._cut:
            return
        room = self._limit - self._size
        if len(data) > room:
            self._parts.append(data[:room])
            self._size = self._limit
            self._cut = True
            # No more of it: the connection goes, and with it the reply.
            self.transport.stopProducing()
            return
        self._parts.append(data)
        self._size += len(data)

    def connectionLost(self, reason):
        from twisted.web.client import PotentialDataLoss, ResponseDone

        if self._done.called:
            return
        if self._cut or reason.check(ResponseDone, PotentialDataLoss):
            self._done.callback((b"".join(self._parts), not self._cut))
        else:
            self._done.errback(reason)


def read_capped(response, limit):
    """A Deferred of ``(body, whole)``: the first ``limit`` bytes at most
    of ``response``'s body (an IResponse), and whether that is all of it.
    A reply longer than that is cut there: its connection is dropped, and
    nothing more of it is read. Fails as readBody does when the reply
    breaks off before ``limit`` bytes."""
    done = defer.Deferred()
    response.deliverBody(_CappedBody(limit, done))
    return done
