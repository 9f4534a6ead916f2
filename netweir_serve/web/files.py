"""Logs and items of jobs: /logs/P/S/JOB.log, /items/P/S/JOB.jl (or .jsonl).

Every path segment must be a name, so no request can reach a file outside
DIR. Files are served by twisted.web.static.File (Range, HEAD, 206/416,
Last-Modified), as much of a growing file as was written when asked; the
body goes from the file to the socket by ``os.sendfile`` (web/zerocopy.py),
read through Python only on TLS or for several ranges at once.
"""

import os
import re
import stat

from twisted.web import static
from twisted.web.resource import Resource

from ..jobs.files import open_beneath
from ..names import fold, is_name
from .answer import write_error
from .zerocopy import file_producer

# Exact types: scrapyd-api reads a log as text only when it is text/plain.
LOG_TYPE = "text/plain"
ITEMS_TYPE = "text/plain"


class NotFound(Resource):
    isLeaf = True

    def __init__(self, message):
        super().__init__()
        self.message = message

    def render(self, request):
        return write_error(request, 404, self.message)


_SUFFIX_RANGE = re.compile(rb"\s*bytes\s*=\s*-\s*(\d+)\s*\Z")


def _whole_file_for_long_suffix(request, size):
    """RFC 9110: a suffix range longer than the file means the whole file
    (Gerapy asks for the last 1,000 bytes of every log); twisted.web would
    compute a negative offset and fail, so such a Range is asked as
    ``bytes=0-``, which it serves as the whole file."""
    header = request.getHeader(b"range")
    if header is None:
        return
    match = _SUFFIX_RANGE.match(header.encode("latin-1") if isinstance(header, str) else header)
    if match and int(match.group(1)) >= size:
        request.requestHeaders.setRawHeaders(b"range", [b"bytes=0-"])


class JobFile(static.File):
    """One job file; a directory or a missing file is a JSON 404."""

    # Nothing guessed from extensions: a job file's type is fixed.
    contentTypes = {}
    contentEncodings = {}

    def __init__(self, path, content_type, root):
        super().__init__(path, defaultType=content_type)
        self.root = root
        self.opened = None
        self.size = None

    def render_GET(self, request):
        try:
            # Opened here, through no link: what is served is this file.
            fd = open_beneath(self.root, self.path)
        except OSError:
            return NotFound("no such file (the job has not written it yet,"
                            " or it was forgotten)").render(request)
        self.opened = os.fdopen(fd, "rb")
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            self.opened.close()
            return NotFound("no such file").render(request)
        # The size when asked, for every header and for the body: a file
        # being written is sent up to here, whatever it grows to meanwhile.
        self.size = status.st_size
        _whole_file_for_long_suffix(request, self.getFileSize())
        return super().render_GET(request)

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


class JobFileTree(Resource):
    """/logs or /items: a project folder, a spider folder, then job files."""

    def __init__(self, root, suffixes, content_type, lister=None, owners=None):
        super().__init__()
        self.root = root
        self.suffixes = suffixes
        self.content_type = content_type
        self.lister = lister
        # web/elsewhere.Owners when the job table is shared: a job file not
        # on this node is asked of the node that ran the job.
        self.owners = owners

    def getChild(self, segment, request):
        return _Level(self, [], segment, request)

    def render(self, request):
        if self.lister is not None:
            return self.lister(request, self.root, [])
        return write_error(request, 404, "no such path")


def _on_disk(folder, name):
    """``name`` as it is spelled in ``folder``: project names and job ids
    ignore case, so /logs/SHOP/books/JOB1.log is shop/books/Job1.log."""
    if os.path.exists(os.path.join(folder, name)):
        return name
    wanted = fold(name)
    try:
        entries = os.listdir(folder)
    except OSError:
        return name
    return next((entry for entry in entries if fold(entry) == wanted), name)


def _Level(files, parts, segment, request):
    """The resource for ``segment`` after the names in ``parts``."""
    text = segment.decode("utf-8", "replace")
    folder = os.path.join(files.root, *parts)
    if len(parts) < 2:
        if text == "" and files.lister is not None:
            return _Listing(files, parts)
        if not is_name(text):
            return NotFound("no such path")
        return _Folder(files, parts + [_on_disk(folder, text)])
    for suffix in files.suffixes:
        if text.endswith(suffix) and is_name(text[: -len(suffix)]):
            stored = _on_disk(folder, text[: -len(suffix)] + files.suffixes[-1])
            here = JobFile(os.path.join(folder, stored), files.content_type, files.root)
            if files.owners is not None and not os.path.lexists(here.path):
                return files.owners.file(request, parts[0], parts[1], text[: -len(suffix)],
                                         here)
            return here
    if text == "" and files.lister is not None:
        return _Listing(files, parts)
    return NotFound("no such file")


class _Folder(Resource):
    def __init__(self, files, parts):
        super().__init__()
        self.files = files
        self.parts = parts

    def getChild(self, segment, request):
        return _Level(self.files, self.parts, segment, request)

    def render(self, request):
        # /logs/P or /logs/P/S without its slash: the lister redirects it.
        if self.files.lister is not None:
            return self.files.lister(request, self.files.root, self.parts)
        return write_error(request, 404, "no such path")


class _Listing(Resource):
    isLeaf = True

    def __init__(self, files, parts):
        super().__init__()
        self.files = files
        self.parts = parts

    def render(self, request):
        return self.files.lister(request, self.files.root, self.parts)
