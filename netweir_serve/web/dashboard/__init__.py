"""The live dashboard on the home page: its markup, and its static files.

The page is the home page (web/pages.py) with this section on top; the
script (``dashboard.js``) and style sheet (``dashboard.css``) beside this
module are served at ``/dashboard/``. The script reads the listings once,
then follows ``GET /events``; its charts are SVG it draws itself, so
nothing is built at install time and no chart library is shipped.
"""

import os

from twisted.web.resource import Resource

from ..answer import write_error

FOLDER = os.path.dirname(os.path.abspath(__file__))
FILES = ("dashboard.js", "dashboard.css")


def dashboard_section():
    """The dashboard's markup: empty tables the script fills. Without the
    script, a note says where the same facts are."""
    def table(ident, title, columns):
        head = "".join(f"<th>{c}</th>" for c in columns)
        return (f'<section id="{ident}">\n<h2>{title} <span class="count"></span></h2>\n'
                f'<table class="jobs">\n<thead><tr>{head}</tr></thead>\n'
                f'<tbody></tbody>\n</table>\n</section>\n')

    return (
        '<div id="dashboard" data-state="loading">\n'
        '<p id="live" class="live">Live dashboard: <span id="live-state">starting'
        '</span></p>\n'
        '<noscript><p>The live dashboard needs JavaScript: the same facts are on'
        ' <a href="/jobs">/jobs</a> and in listjobs.json.</p></noscript>\n'
        '<form id="run" class="run">\n<strong>Run a spider now:</strong>\n'
        '<label>project <select name="project"></select></label>\n'
        '<label>spider <select name="spider"></select></label>\n'
        '<button type="submit" disabled>Run</button>\n<span class="result"></span>\n</form>\n'
        + table("running", "Running", ("Job", "Spider", "Started", "Runtime", "Items",
                                       "Pages", "Rates now", "Chart", ""))
        + table("pending", "Queue", ("Job", "Spider", "Priority", "Waiting for", ""))
        + table("finished", "Recently finished", ("Job", "Spider", "Outcome", "Ended",
                                                  "Duration", "Items", "Chart"))
        + table("schedules", "Recurring schedules", ("Name", "Spider", "When", "Next run",
                                                     "Runs", "State"))
        + "</div>\n"
        '<script src="/dashboard/dashboard.js" defer></script>\n'
    )


TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def static_files():
    """The /dashboard/ resource: exactly this folder's script and style
    sheet, nothing else of it (no listing, no Python files)."""
    return _Folder()


class _Folder(Resource):
    def __init__(self):
        super().__init__()
        self._files = {}

    def getChild(self, path, request):
        name = path.decode("latin-1")
        if name not in FILES:
            return _Missing()
        if name not in self._files:
            self._files[name] = _file(name)
        return self._files[name]

    def render(self, request):
        return write_error(request, 404, "no such file")


def _file(name):
    # Made at its first request, not at start: twisted.web.static reads the
    # machine's MIME types as it is imported (0.5 MB of an idle daemon),
    # and a service nobody opens the dashboard of never needs it.
    from twisted.web.static import File

    resource = File(os.path.join(FOLDER, name))
    resource.type, resource.encoding = TYPES[os.path.splitext(name)[1]], None
    resource.isLeaf = True
    return resource


class _Missing(Resource):
    isLeaf = True

    def render(self, request):
        return write_error(request, 404, "no such file")
