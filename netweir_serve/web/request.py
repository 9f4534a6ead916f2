"""The request class of the site: bounded bodies, scrapy-client paths."""

import re

from twisted.web import server

MAX_BODY = 1 << 20

_LEADING_SLASHES = re.compile(rb"^/{2,}")


class ServeRequest(server.Request):
    """A twisted.web Request that keeps at most MAX_BODY bytes of body and
    leaves form parsing to the endpoints (so a bad body gets a JSON error,
    not Twisted's bare 400)."""

    _parsePOSTFormSubmission = False
    body_too_large = False

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
