"""The console: the pages a person watches and steers crawls with.

Each page is a small HTML shell made here (its title, the navigation, the
names it is about) and a script of its own beside this module, served at
``/console/``; the script asks the JSON API for everything it shows, so
every number on a page is one a client of the API could read, and the
pages need no build step and fetch nothing from elsewhere.

- ``/``: the jobs (``jobs.js``), paged through ``listjobs.json?limit=``,
  live over ``/events``; below them, the projects and the API.
- ``/job/PROJECT/JOBID``: one job (``job.js``).
- ``/schedules``: the recurring schedules (``schedules.js``).
- ``/spider/PROJECT/SPIDER``: one spider's runs (``spider.js``).
- ``/nodes``: the nodes sharing the job table (``nodes.js``).

uPlot (MIT, its licence beside it in ``uPlot.LICENSE``) draws the time
series: 50 KB that draw thousands of points on a canvas, zoom, and show a
cursor's values, which hand-written SVG did for a dozen points and would
grow into a chart library of our own to do more.
"""

import os
from html import escape

from twisted.web.resource import Resource

from ..answer import write_error
from ...names import is_name

FOLDER = os.path.dirname(os.path.abspath(__file__))

TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def served_files():
    """The names of the files /console/ serves: this folder's scripts and
    style sheets, nothing else (no listing, no Python, no licence)."""
    return frozenset(name for name in os.listdir(FOLDER)
                     if os.path.splitext(name)[1] in TYPES)


# The navigation bar: (path, label).
NAVIGATION = (("/", "Jobs"), ("/schedules", "Schedules"), ("/nodes", "Nodes"))


def shell(title, page, body="", data=None, charts=False):
    """A whole console page: ``title`` (text), the script ``page``.js,
    ``body`` (markup) inside <main>, and ``data`` ({name: text}) as
    ``data-NAME`` attributes of <body>, where the script reads what the
    page is about (a project, a job id)."""
    attributes = "".join(f' data-{name}="{escape(value)}"' for name, value in (data or {}).items())
    links = "".join(f'<a href="{path}">{label}</a>' for path, label in NAVIGATION)
    chart_parts = ('<link rel="stylesheet" href="/console/uPlot.min.css">\n',
                   '<script src="/console/uPlot.iife.min.js" defer></script>\n') if charts else ("", "")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        '<link rel="icon" href="/favicon.ico">\n'
        f"<title>{escape(title)} · netweir-serve</title>\n"
        '<link rel="stylesheet" href="/console/console.css">\n'
        f"{chart_parts[0]}"
        '<script src="/console/console.js" defer></script>\n'
        f"{chart_parts[1]}"
        f'<script src="/console/{page}.js" defer></script>\n'
        "</head>\n"
        f'<body data-page="{page}"{attributes}>\n'
        '<header class="bar">\n<a class="brand" href="/">netweir-serve</a>\n'
        f'<nav aria-label="pages">{links}</nav>\n'
        '<span id="live" class="live" aria-live="polite"></span>\n'
        '<span id="who" class="who"></span>\n</header>\n'
        f'<main id="main">\n{body}</main>\n'
        "<noscript><p>These pages need JavaScript; the same facts are in the JSON API"
        ' and on <a href="/jobs">/jobs</a>.</p></noscript>\n'
        "</body>\n</html>\n")


def names_below(request, count):
    """The ``count`` names after a page's own segment (/job/P/J: two), or
    None when the path has other than ``count`` of them or one is not a
    name."""
    parts = [part.decode("utf-8", "replace") for part in request.postpath]
    if len(parts) != count or not all(is_name(part) for part in parts):
        return None
    return parts


def static_files():
    """The /console/ resource."""
    return _Folder()


class _Folder(Resource):
    def __init__(self):
        super().__init__()
        self._names = served_files()
        self._files = {}

    def getChild(self, path, request):
        name = path.decode("latin-1")
        if name not in self._names or request.postpath:
            return _Missing()
        if name not in self._files:
            self._files[name] = _file(name)
        return self._files[name]

    def render(self, request):
        return write_error(request, 404, "no such file")


def _file(name):
    # Made at its first request, not at start: twisted.web.static reads the
    # machine's MIME types as it is imported (0.5 MB of an idle daemon),
    # and a service nobody opens the console of never needs it.
    from twisted.web.static import File

    resource = File(os.path.join(FOLDER, name))
    resource.type, resource.encoding = TYPES[os.path.splitext(name)[1]], None
    resource.isLeaf = True
    return resource


class _Missing(Resource):
    isLeaf = True

    def render(self, request):
        return write_error(request, 404, "no such file")
