"""Logs and items of jobs: /logs/P/S/JOB.log, /items/P/S/JOB.jl (or .jsonl).

Every path segment must be a name, so no request can reach a file outside
DIR. The file itself is a ``JobFile`` (web/jobfile.py).
"""

import os

from twisted.web.resource import Resource

from ..access.roles import identity_of
from ..names import fold, is_name
from .answer import NotFound, write_error

# Exact types: scrapyd-api reads a log as text only when it is text/plain.
LOG_TYPE = "text/plain"
ITEMS_TYPE = "text/plain"


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


def _spelled(root, parts):
    """``parts`` (the project and spider folders, as asked) as they are
    spelled below ``root``, folder by folder (``_on_disk``)."""
    found = []
    for name in parts:
        found.append(_on_disk(os.path.join(root, *found), name))
    return found


def _Level(files, parts, segment, request):
    """The resource for ``segment`` after the names in ``parts`` (as asked:
    how they are spelled on disk is looked up when a file or a listing
    needs it)."""
    text = segment.decode("utf-8", "replace")
    if len(parts) < 2:
        if text == "" and files.lister is not None:
            return _Listing(files, parts)
        if not is_name(text):
            return NotFound("no such path")
        if not parts and not identity_of(request).sees(text):
            # A project its identity cannot see: as one that never wrote here.
            return _Absent(files, 1)
        return _Folder(files, parts + [text])
    for suffix in files.suffixes:
        if text.endswith(suffix) and is_name(text[: -len(suffix)]):
            # Imported at the first job file asked for, not at start: it
            # brings twisted.web.static, whose File reads the machine's MIME
            # types as it is imported (0.5 MB an idle daemon does without).
            from .jobfile import JobFile

            name = text[: -len(suffix)] + files.suffixes[-1]
            path = os.path.join(files.root, *parts, name)
            if os.path.exists(path):
                # Spelled as asked: one stat rather than one a folder.
                stored = parts + [name]
            else:
                folders = _spelled(files.root, parts)
                stored = folders + [_on_disk(os.path.join(files.root, *folders), name)]
                path = os.path.join(files.root, *stored)
            here = JobFile(path, files.content_type, files.root, stored)
            if files.owners is not None and not os.path.lexists(here.path):
                return files.owners.file(request, stored[0], stored[1], text[: -len(suffix)],
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
            return self.files.lister(request, self.files.root,
                                     _spelled(self.files.root, self.parts))
        return write_error(request, 404, "no such path")


class _Absent(Resource):
    """What is beneath a project an identity cannot see, ``depth`` names
    down: the answers of a folder that does not exist."""

    def __init__(self, files, depth):
        super().__init__()
        self.files = files
        self.depth = depth

    def getChild(self, segment, request):
        # A trailing slash asks for this folder's listing.
        return _Absent(self.files, self.depth + 1) if segment else self

    def render(self, request):
        if self.depth > 2:
            return write_error(request, 404, "no such file")
        if self.files.lister is None:
            return write_error(request, 404, "no such path")
        return write_error(request, 404, "no such path (no job of that project or spider"
                           " has written here, or they were all forgotten)")


class _Listing(Resource):
    isLeaf = True

    def __init__(self, files, parts):
        super().__init__()
        self.files = files
        self.parts = parts

    def render(self, request):
        return self.files.lister(request, self.files.root, _spelled(self.files.root, self.parts))
