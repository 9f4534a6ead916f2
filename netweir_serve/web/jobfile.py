"""One job file, as twisted.web.static.File serves it: Range, HEAD, 206/416,
Last-Modified, as much of a growing file as was written when asked; the
body goes from the file to the socket by ``os.sendfile`` (web/zerocopy.py),
read through Python only on TLS or for several ranges at once.

Imported by web/files.py at the first request for a job file.
"""

import os
import re
import stat

from twisted.web import static

from ..jobs.files import open_below
from .answer import NotFound
from .zerocopy import file_producer


_SUFFIX_RANGE = re.compile(rb"\s*bytes\s*=\s*-\s*(\d+)\s*\Z")


def _whole_file_for_long_suffix(request, size):
    """RFC 9110 14.1.3: a suffix range longer than the file means the whole
    file (Gerapy asks for the last 1,000 bytes of every log); twisted.web
    would compute a negative offset and fail, so such a Range is asked as
    ``bytes=0-``, which it serves as the whole file. An empty file (a
    running job's log before its first line) has no byte a Content-Range
    could name, yet a non-zero suffix range of it is still satisfiable:
    the Range is dropped, and the answer is the whole empty file, 200."""
    header = request.getHeader(b"range")
    if header is None:
        return
    match = _SUFFIX_RANGE.match(header.encode("latin-1") if isinstance(header, str) else header)
    if not match or int(match.group(1)) == 0:
        return
    if size == 0:
        request.requestHeaders.removeHeader(b"range")
    elif int(match.group(1)) >= size:
        request.requestHeaders.setRawHeaders(b"range", [b"bytes=0-"])


class JobFile(static.File):
    """One job file; a directory or a missing file is a JSON 404."""

    # Nothing guessed from extensions: a job file's type is fixed.
    contentTypes = {}
    contentEncodings = {}

    def __init__(self, path, content_type, root, parts):
        """``path`` is ``parts`` (names) joined below ``root``."""
        super().__init__(path, defaultType=content_type)
        # static.File would work the type out of the name at every
        # request, to find it in the empty contentTypes.
        self.type, self.encoding = content_type, None
        self.root = root
        self.parts = parts
        self.opened = None
        self.size = None
        self.status = None

    def render_GET(self, request):
        try:
            # Opened here, through no link: what is served is this file.
            fd = open_below(self.root, self.parts)
        except OSError:
            return NotFound("no such file (the job has not written it yet,"
                            " or it was forgotten)").render(request)
        # Unbuffered: the body goes by sendfile from the descriptor, and the
        # reading producers (TLS, several ranges) read large blocks anyway.
        self.opened = os.fdopen(fd, "rb", buffering=0)
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            self.opened.close()
            return NotFound("no such file").render(request)
        # The size when asked, for every header and for the body: a file
        # being written is sent up to here, whatever it grows to meanwhile.
        self.size = status.st_size
        self.status = status
        _whole_file_for_long_suffix(request, self.getFileSize())
        return super().render_GET(request)

    # static.File stats the path again for exists(), isdir() and
    # Last-Modified: the file opened has said all that already, and is what
    # is served, whatever the path names by now.

    def restat(self, reraise=True):
        if self.status is None:
            super().restat(reraise)

    def exists(self):
        return self.status is not None or super().exists()

    def isdir(self):
        return stat.S_ISDIR(self.status.st_mode) if self.status else super().isdir()

    def getModificationTime(self):
        return float(self.status.st_mtime) if self.status else super().getModificationTime()

    render_HEAD = render_GET

    def openForReading(self):
        # The file render_GET opened without following links; static.File
        # would open the path again, through whatever link is there by then.
        return self.opened

    def getFileSize(self):
        # Of the file opened, not of whatever the path names by now.
        return self.size

    def makeProducer(self, request, fileForReading):
        # static.File sets the code and headers; the body of one range or
        # of the whole file goes by sendfile where the connection allows.
        producer = super().makeProducer(request, fileForReading)
        if isinstance(producer, static.SingleRangeStaticProducer):
            return file_producer(request, fileForReading, producer.offset, producer.size)
        if isinstance(producer, static.NoRangeStaticProducer):
            return file_producer(request, fileForReading, 0, self.size)
        return producer

    def getChild(self, path, request):
        return NotFound("no such file")

    def directoryListing(self):
        return NotFound("no such file")
