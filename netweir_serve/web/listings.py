"""Directory listings of /logs/P/, /logs/P/S/ and the same under /items/.

ScrapydWeb reads them with a regular expression and scrapyd-api by
position (``table tbody tr``, then the first to fourth ``td``), both
written against the listing of Twisted's ``static.File``, which is what
scrapyd serves. So each row keeps that shape, one cell a line:

    <tr class="odd">
        <td><a href="NAME">NAME</a></td>
        <td>SIZE</td>
        <td>[TYPE]</td>
        <td>ENCODING</td>
    </tr>

and the title and heading say ``Directory listing for /logs/P/S/``.

Only what the service keeps is listed: folders whose names pass the name
rule, and job files. An items file is stored as JOB.jsonl and listed as
JOB.jl, the name listjobs.json gives as its ``items_url``: one row per job,
and the file name less its extension is the job id, as dashboards expect.

The top level (/logs/, /items/) lists the served projects, each once, by
the name its --project gives (a job scheduled as SHOP writes in the
folder of shop); a served project that has no job files yet is listed
too, and its own listing is empty rather than missing. Projects that are
no longer served are not listed (their files stay reachable by path).
"""

import os
import stat
from html import escape
from urllib.parse import quote

from twisted.web.util import redirectTo

from ..jobs.files import open_beneath
from ..names import is_name
from ..access.roles import identity_of
from .answer import write_error
from .pages import document, refuse_method, write_html


class Kind:
    """What one tree keeps: job files named JOB + ``stored``, listed as
    JOB + ``shown`` with ``content_type``."""

    def __init__(self, stored, shown, content_type):
        self.stored = stored
        self.shown = shown
        self.content_type = content_type


LOGS = Kind(".log", ".log", "text/plain")
ITEMS = Kind(".jsonl", ".jl", "text/plain")


def file_size(size):
    """A size as Twisted's listing writes it: whole B, K, M or G."""
    for unit, scale in (("B", 1), ("K", 1 << 10), ("M", 1 << 20)):
        if size < scale << 10:
            return f"{size // scale}{unit}"
    return f"{size // (1 << 30)}G"


def _opened_folder(root, parts):
    """A descriptor of the folder ``parts`` below ``root``, opened as a job
    file is (jobs.files.open_beneath): no symbolic link followed on the
    way, so a folder linked in from outside DIR is not listed. Raises
    OSError (ENOENT, ELOOP, ENOTDIR) otherwise."""
    fd = open_beneath(root, os.path.join(root, *parts))
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotADirectoryError(os.path.join(root, *parts))
    return fd


def folder_rows(directory):
    """(name, href, size, type) of each folder in ``directory`` (a path,
    or a descriptor of it)."""
    rows = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if is_name(entry.name) and entry.is_dir(follow_symlinks=False):
                rows.append((entry.name + "/", entry.name + "/", "", "[Directory]"))
    return sorted(rows)


def project_rows(projects, sees=lambda name: True):
    """(name, href, size, type) of each served project ``sees`` (a
    function of its name) says to show, as a folder."""
    return [(name + "/", name + "/", "", "[Directory]") for name in projects.names()
            if sees(name)]


def file_rows(directory, kind):
    """(name, href, size, type) of each job file in ``directory`` (a path,
    or a descriptor of it)."""
    rows = []
    with os.scandir(directory) as entries:
        for entry in entries:
            job = entry.name[: -len(kind.stored)]
            if not (entry.name.endswith(kind.stored) and is_name(job)):
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # forgotten (deleted) while listing
            shown = job + kind.shown
            rows.append((shown, shown, file_size(size), f"[{kind.content_type}]"))
    return sorted(rows)


def listing_html(path, rows):
    """The listing page of ``path`` (the URL path) with ``rows``."""
    lines = "".join(
        f'<tr class="{"odd" if n % 2 == 0 else "even"}">\n'
        f'    <td><a href="{escape(quote(href))}">{escape(name)}</a></td>\n'
        f"    <td>{escape(size)}</td>\n"
        f"    <td>{escape(kind)}</td>\n"
        "    <td></td>\n"
        "</tr>\n"
        for n, (name, href, size, kind) in enumerate(rows))
    header = f"Directory listing for {path}"
    body = (f"<h1>{escape(header)}</h1>\n<table>\n<thead>\n<tr>\n"
            "    <th>Filename</th>\n    <th>Size</th>\n    <th>Content type</th>\n"
            f"    <th>Content encoding</th>\n</tr>\n</thead>\n<tbody>\n{lines}</tbody>\n"
            "</table>\n")
    return document(header, body)


class DirectoryLister:
    """The ``lister`` of a JobFileTree of ``kind`` (LOGS or ITEMS):
    called with the request, the tree's root folder and the names in the
    path (none, project, or project and spider).

    Listing runs on the reactor thread: a spider's folder holds at most
    --keep job files, so reading it costs about as much as a stat each."""

    def __init__(self, kind, projects=None):
        self.kind = kind
        # The ProjectTable the top level lists; None: no top level (404).
        self.projects = projects

    def __call__(self, request, root, parts):
        if not parts and self.projects is None:
            return write_error(request, 404, "no such path")
        refused = refuse_method(request)
        if refused is not None:
            return refused
        served = self.projects is not None and (
            not parts or (len(parts) == 1 and self.projects.get(parts[0]) is not None))
        folder = None
        if parts:
            try:
                folder = _opened_folder(root, parts)
            except OSError:
                folder = None
        if not served and folder is None:
            return write_error(request, 404, "no such path (no job of that project or"
                               " spider has written here, or they were all forgotten)")
        try:
            return self._answer(request, parts, folder)
        finally:
            if folder is not None:
                os.close(folder)

    def _answer(self, request, parts, folder):
        path = request.path.decode("utf-8", "replace")
        if not path.endswith("/"):
            # As static.File does: the listing's links are relative to it.
            body = redirectTo(_with_slash(request), request)
            request.setHeader(b"content-length", str(len(body)).encode("ascii"))
            return b"" if request.method == b"HEAD" else body
        try:
            if not parts:
                rows = project_rows(self.projects, identity_of(request).sees)
            elif folder is None:
                rows = []  # a served project that has written nothing yet
            elif len(parts) == 2:
                rows = file_rows(folder, self.kind)
            else:
                rows = folder_rows(folder)
        except OSError:
            return write_error(request, 404, "no such path")
        return write_html(request, listing_html(path, rows))


def _with_slash(request):
    # request.path, not request.uri: it has doubled leading slashes folded.
    query = request.uri.partition(b"?")[2]
    return request.path + b"/" + (b"?" + query if query else b"")


def listers(projects=None):
    """{tree: lister} for Root's ``listers``; the top levels list
    ``projects`` (a ProjectTable), or answer 404 without it."""
    return {b"logs": DirectoryLister(LOGS, projects),
            b"items": DirectoryLister(ITEMS, projects)}
