"""The request class of the site: bounded bodies, scrapy-client paths, and
large answers written as the client reads them."""

import re
from collections import deque

from twisted.internet.interfaces import IPushProducer
from twisted.web import server
from zope.interface import implementer

MAX_BODY = 1 << 20

# An answer body longer than this (listjobs.json of a thousand jobs, a big
# page) goes to the transport one slice at a time, each once the transport
# has sent the one before: a client that reads slowly, or not at all, holds
# one slice of it in the service, not the whole answer (the transport
# would otherwise copy all of it into its own buffer, for every such
# client). The transport's SEND_LIMIT, so a slice is one send().
SLICE = 128 * 1024

_LEADING_SLASHES = re.compile(rb"^/{2,}")


class ServeRequest(server.Request):
    """A twisted.web Request that keeps at most MAX_BODY bytes of body,
    leaves form parsing to the endpoints (so a bad body gets a JSON error,
    not Twisted's bare 400), and writes a body of more than SLICE bytes
    written at once (with no producer of its own) in slices as the
    transport takes them; ``finish()`` then takes effect after the last."""

    _parsePOSTFormSubmission = False
    body_too_large = False
    _slices = None

    def write(self, data):
        if self._slices is not None:
            self._slices.add(data)
        elif len(data) > SLICE and self.producer is None:
            self._slices = _Slices(self)
            self.registerProducer(self._slices, True)
            self._slices.add(data)
        else:
            super().write(data)

    def finish(self):
        if self._slices is not None:
            self._slices.finish_after()
        else:
            super().finish()

    def _slices_sent(self, finish):
        self._slices = None
        self.unregisterProducer()
        if finish:
            super().finish()

    def gotLength(self, length):
        if length is not None and length > MAX_BODY:
            self.body_too_large = True
            length = 0
        super().gotLength(length)

    def handleContentChunk(self, data):
        # The rest of an oversized body is read and dropped: the request
        # deadline bounds how long a client can keep sending it.
        if self.body_too_large:
            return
        if self.content.tell() + len(data) > MAX_BODY:
            self.body_too_large = True
            self.content.seek(0)
            self.content.truncate()
            return
        super().handleContentChunk(data)

    def process(self):
        # scrapyd-client joins a url ending in "/" with "/listprojects.json".
        self.path = _LEADING_SLASHES.sub(b"/", self.path)
        super().process()


@implementer(IPushProducer)
class _Slices:
    """The rest of a large body, written a SLICE at a time while the
    transport doesn't pause it; registered as the request's producer."""

    def __init__(self, request):
        self._request = request
        self._parts = deque()
        self._paused = False
        self._writing = False
        self._finish = False

    def add(self, data):
        self._parts.append(memoryview(data))
        self._write()

    def finish_after(self):
        self._finish = True
        self._write()

    def pauseProducing(self):
        self._paused = True

    def resumeProducing(self):
        self._paused = False
        self._write()

    def stopProducing(self):
        # The connection is lost: nothing more to write, nor to finish.
        self._parts.clear()
        self._request = None

    def _write(self):
        if self._writing or self._request is None:
            return
        self._writing = True
        try:
            while self._parts and not self._paused:
                part = self._parts[0]
                if len(part) <= SLICE:
                    self._parts.popleft()
                else:
                    self._parts[0] = part[SLICE:]
                    part = part[:SLICE]
                # Writing may pause this producer at once (a full buffer).
                server.Request.write(self._request, part.tobytes())
        finally:
            self._writing = False
        if not self._parts and self._request is not None:
            request, self._request = self._request, None
            request._slices_sent(self._finish)
