"""The HTML pages: /jobs (scrapyd's jobs page), the parts of the home page
the console shows below its jobs (web/console/), and what every page
shares.

Dashboards read these, not people alone: ScrapydWeb refuses to start
unless ``GET /`` answers 200, and reads /jobs with a regular expression
(its jobs page, monitor and alerts), so /jobs keeps the markup of
scrapyd 1.6's: an ``<h1>Jobs</h1>``, one table, a ``<th colspan>`` row
opening each section, and per job one ``<tr>`` whose ``<td>`` cells, each
on a line of its own, are Project, Spider, Job, PID, Start, Runtime,
Finish, Log, Items. The job's outcome is a tenth cell after Items, which
that regular expression skips. Every value is escaped.
"""

import os
import time
from datetime import datetime
from html import escape
from urllib.parse import quote

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.resource import Resource

from ..health.checks import DEGRADED
from ..store.records import FINISHED, PENDING, RUNNING
from ..access.roles import identity_of
from .answer import write_error
from .cache import VersionCache
from .deferred import render_result
from .views import items_url, log_url, shown_times

log = Logger()

HTML_TYPE = b"text/html; charset=utf-8"

# scrapyd's Start and Finish cells: whole seconds, local time. ScrapydWeb
# parses them with this format and fails on microseconds.
PAGE_TIME = "%Y-%m-%d %H:%M:%S"

COLUMNS = ("Project", "Spider", "Job", "PID", "Start", "Runtime", "Finish", "Log", "Items",
           "Outcome")

_STYLE = """body { font-family: system-ui, sans-serif; margin: 1rem 2rem; }
table { border-collapse: collapse; }
th, td { border: 1px solid #bbb; padding: .3rem .6rem; text-align: left; }
code { background: #f3f3f3; }
@media (max-width: 40rem) {
  body { margin: .5rem; }
  td { overflow-wrap: anywhere; }
}"""

# /jobs: a job id (up to 200 characters, often a hash with nowhere to break
# a line), wherever it stands (Job, a pending job's reason in Outcome, a
# schedule's Last job) and a schedule's error may break anywhere, or the page
# would be wider than a laptop's screen; Start and Finish stay whole. The
# cells are picked by position.
_JOBS_STYLE = """table#jobs td:nth-child(3), table#jobs td:nth-child(10),
table#schedules td:nth-child(8), table#schedules td:nth-child(11) { overflow-wrap: anywhere; }
table#jobs td:nth-child(5), table#jobs td:nth-child(7) { white-space: nowrap; }
table#jobs td:nth-child(3), table#jobs td:nth-child(10) { min-width: 10rem; }
"""


def card_style(table, columns):
    """CSS that shows ``table`` (a selector) at phone width as one card per
    row, each cell under its column's name. The names come from here, by
    position, not from attributes of the cells: /jobs's cells stay bare
    ``<td>`` for ScrapydWeb's regular expression."""
    labels = "\n".join(f'  {table} td:nth-child({n})::before {{ content: "{name}"; }}'
                        for n, name in enumerate(columns, 1))
    return (f"@media (max-width: 40rem) {{\n"
            f"  {table}, {table} tbody, {table} tr, {table} th {{ display: block; }}\n"
            f"  {table} thead {{ display: none; }}\n"
            f"  {table} tr {{ border: 1px solid #bbb; margin: .4rem 0; }}\n"
            f"  {table} th {{ border: none; }}\n"
            f"  {table} td {{ display: block; position: relative; border: none;"
            f" padding: .1rem .6rem .1rem 7rem; }}\n"
            f"  {table} td:empty {{ display: none; }}\n"
            f"  {table} td::before {{ position: absolute; left: .6rem; color: #666; }}\n"
            f"{labels}\n}}")

# (path, method, parameters, whether a plain GET link works)
ENDPOINTS = (
    ("daemonstatus.json", "GET", "", True),
    ("listprojects.json", "GET", "", True),
    ("listspiders.json", "GET", "project", False),
    ("listjobs.json", "GET", "project (optional)", True),
    ("status.json", "GET", "job, project (optional)", False),
    ("jobstats.json", "GET", "job", False),
    ("job.json", "GET", "job, project (optional)", False),
    ("runs.json", "GET", "project, spider, schedule (optional), limit (optional)", False),
    ("listversions.json", "GET", "project (always no versions)", False),
    ("schedule.json", "POST", "project, spider, setting, jobid, priority, spider arguments", False),
    ("cancel.json", "POST", "project, job, signal (optional)", False),
    ("addschedule.json", "POST", "project, spider, cron or every, tz, name, overlap, misfire,"
     " setting, priority, jitter, pause_after, spider arguments", False),
    ("editschedule.json", "POST", "project, name, any of addschedule.json's but spider", False),
    ("runschedule.json", "POST", "project, name", False),
    ("backfillschedule.json", "POST", "project, name, from, to", False),
    ("listschedules.json", "GET", "project, name, upcoming (all optional)", True),
    ("listnodes.json", "GET", "", True),
    ("pauseschedule.json", "POST", "project, name, note (optional)", False),
    ("resumeschedule.json", "POST", "project, name", False),
    ("delschedule.json", "POST", "project, name", False),
    ("events", "GET", "(a stream of server-sent events: job, schedule)", False),
    ("metrics", "GET", "(Prometheus text format)", True),
)


def write_html(request, text, code=200):
    """Sets the code and headers for the page ``text`` and returns its
    bytes, for ``render`` to return; a HEAD request gets the headers only."""
    body = text.encode("utf-8")
    request.setResponseCode(code)
    request.setHeader(b"content-type", HTML_TYPE)
    request.setHeader(b"cache-control", b"no-store")
    request.setHeader(b"content-length", str(len(body)).encode("ascii"))
    return b"" if request.method == b"HEAD" else body


def refuse_method(request):
    """The JSON 405 of a page asked with a method other than GET or HEAD,
    or None when the method is fine."""
    if request.method in (b"GET", b"HEAD"):
        return None
    request.setHeader(b"allow", b"GET, HEAD")
    return write_error(request, 405, f"{request.path.decode('latin-1')} takes GET, not "
                       f"{request.method.decode('latin-1')}")


def refuse_leaf(request):
    """The JSON answer refusing what a leaf page (one with no children,
    for GET and HEAD) does not take: a path below it (404) or another
    method (405); None when it takes the request."""
    if request.postpath:
        return write_error(request, 404, f"no such endpoint: {request.path.decode('latin-1')}")
    return refuse_method(request)


def document(title, body, style=""):
    """A whole HTML5 page; ``title`` is escaped here, ``body`` is markup,
    ``style`` is CSS of this page beside the pages' own."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<link rel="icon" href="/favicon.ico">\n'
            f"<title>{escape(title)}</title>\n<style>\n{_STYLE}\n{style}</style>\n</head>\n"
            f"<body>\n{body}</body>\n</html>\n")


def link(href, text):
    return f'<a href="{escape(href)}">{escape(text)}</a>'


class HtmlPage(Resource):
    """A page with no children, for GET and HEAD; subclasses define
    ``page(request)`` returning the text of the page."""

    isLeaf = True

    def render(self, request):
        refused = refuse_leaf(request)
        if refused is not None:
            return refused
        return render_result(request, self.page(request), lambda text: write_html(request, text),
                             lambda failure: self._failed(failure, request))

    @staticmethod
    def _failed(failure, request):
        log.failure("unexpected error answering {path}", failure, path=request.path)
        return write_error(request, 500, "internal error; see the service's log")


# -- / ---------------------------------------------------------------------------


def about_sections(projects, version):
    """The part of the home page below the console's jobs: the version,
    the project names ``projects``, and the API."""
    if projects:
        items = "".join(
            f"<li>{escape(name)}: "
            f"{link('/listspiders.json?project=' + quote(name, safe=''), 'spiders')}</li>\n"
            for name in projects)
        project_list = f"<ul>\n{items}</ul>\n"
    else:
        project_list = "<p>No projects: name them with <code>--project NAME=PATH</code>.</p>\n"
    rows = "".join(
        f"<tr><td>{link('/' + path, path) if plain else escape(path)}</td>"
        f"<td>{method}</td><td>{escape(params)}</td></tr>\n"
        for path, method, params, plain in ENDPOINTS)
    return (
        '<section id="about">\n'
        f"<p>netweir-serve {escape(version)} runs Netweir spiders as jobs. "
        f"{link('/jobs', 'Jobs')}: pending, running and finished jobs, with their"
        " logs and items, on one plain page.</p>\n"
        f'<h2>Projects</h2>\n<div id="projects">\n{project_list}</div>\n'
        '<details id="api">\n<summary>API</summary>\n<table>\n<thead>\n<tr>'
        "<th>endpoint</th><th>method</th>"
        f"<th>parameters</th></tr>\n</thead>\n<tbody>\n{rows}</tbody>\n</table>\n"
        "<p>Logs are at <code>/logs/PROJECT/SPIDER/JOB.log</code>, items at"
        " <code>/items/PROJECT/SPIDER/JOB.jl</code>.</p>\n</details>\n</section>\n"
    )


# -- /jobs -------------------------------------------------------------------------


def page_time(seconds):
    return datetime.fromtimestamp(seconds).strftime(PAGE_TIME)


def runtime(seconds):
    """scrapyd's Runtime cell: H:MM:SS, whole seconds."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# With a shared job table, a last column says which node runs or ran each
# job (after scrapyd's columns, as Outcome is, so ScrapydWeb reads on).
NODE_COLUMN = "Node"


def ended_as(record):
    """The Outcome cell of an ended job: its outcome, and why (its reason);
    for a run that finished below its checks, ``degraded`` and why."""
    shown = record.outcome or ""
    if record.reason and record.outcome:
        shown = f"{record.outcome} ({record.reason})"
    if record.health == DEGRADED:
        shown += f" degraded: {'; '.join(record.health_reasons)}"
    return shown


def job_row(record, now, columns=COLUMNS, waits_for=None):
    """The ``<tr>`` of one job; ``now`` (epoch seconds) gives a running job's
    runtime, ``waits_for`` why a pending one waits (listjobs.json's
    ``waiting_for``), in its Outcome cell. Which cells are empty says the
    job's state to ScrapydWeb: no Start is pending; a PID is running (so
    finished jobs show none); a Finish is finished."""
    cells = dict.fromkeys(columns, "")
    cells.update(Project=escape(record.project), Spider=escape(record.spider),
                 Job=escape(record.id))
    if record.state == PENDING and waits_for:
        cells.update(Outcome=escape(f"waiting for {waits_for}"))
    if record.state == RUNNING:
        start = record.start_time if record.start_time is not None else now
        cells.update(PID=escape(str(record.pid or "")), Start=page_time(start),
                     Runtime=runtime(now - start))
    elif record.state == FINISHED:
        end = record.end_time if record.end_time is not None else now
        # A job cancelled before it started (or that could not start) has
        # no start time; without one ScrapydWeb would count it as pending
        # forever, so it shows as starting when it ended.
        start = record.start_time if record.start_time is not None else end
        cells.update(Start=page_time(start), Runtime=runtime(end - start),
                     Finish=page_time(end), Outcome=escape(ended_as(record)))
    if record.state in (RUNNING, FINISHED):
        cells.update(Log=link(log_url(record), "Log"), Items=link(items_url(record), "Items"))
    if NODE_COLUMN in cells and record.node is not None:
        cells[NODE_COLUMN] = escape(record.node)
    tds = "".join(f"    <td>{cells[name]}</td>\n" for name in columns)
    return f"<tr>\n{tds}</tr>\n"


SCHEDULE_COLUMNS = ("Name", "Project", "Spider", "When", "Zone", "Next run", "Last run",
                    "Last job", "Runs", "Skipped", "State")


def schedule_row(record, zone):
    """One schedule of the /jobs page's schedules table. Its ``<tr>`` has a
    class and its cells share a line, so ScrapydWeb's reading of job rows
    (a bare ``<tr>``, one cell a line) never takes it for a job."""
    next_run, last_run = shown_times(record, zone)
    state = "paused" if record.paused else (f"error: {record.error}" if record.error else "active")
    cells = (record.name, record.project, record.spider, f"{record.kind}={record.rule}",
             record.tz, next_run or "", last_run or "", record.last_job or "",
             str(record.runs), str(record.skipped), state)
    return ('<tr class="schedule">' + "".join(f"<td>{escape(c)}</td>" for c in cells)
            + "</tr>\n")


def schedules_html(rows):
    if not rows:
        return ""
    head = "".join(f"<th>{name}</th>" for name in SCHEDULE_COLUMNS)
    return (f'<h2>Schedules</h2>\n<table id="schedules">\n<thead><tr class="head">{head}'
            f"</tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n")


def jobs_html(pending_rows, running_rows, finished_rows, schedule_rows="", columns=COLUMNS):
    """The /jobs page from the rows of each section (markup)."""
    head = "".join(f"<th>{name}</th>" for name in columns)
    sections = "".join(
        f'<tbody>\n<tr>\n    <th colspan="{len(columns)}">{title}</th>\n</tr>\n{rows}</tbody>\n'
        for title, rows in (("Pending", pending_rows), ("Running", running_rows),
                            ("Finished", finished_rows)))
    body = (f"<h1>Jobs</h1>\n<p>{link('/', 'Go up')}</p>\n"
            f'<table id="jobs">\n<thead>\n<tr>{head}</tr>\n</thead>\n{sections}</table>\n'
            f"{schedules_html(schedule_rows)}")
    return document("Jobs - netweir-serve", body,
                    _JOBS_STYLE + card_style("table#jobs", columns) + "\n"
                    + card_style("table#schedules", SCHEDULE_COLUMNS) + "\n")


class Jobs(HtmlPage):
    """/jobs. Pending and finished rows don't change between changes of the
    job table, so they are kept per version of it; running rows carry a
    runtime and are made on each request. Schedules follow the jobs."""

    def __init__(self, store, timetable=None, clock=time.time, built=None, reasons=None):
        super().__init__()
        self.store = store
        self.timetable = timetable
        self.clock = clock
        self._cache = VersionCache(lambda: self.store, built=built)
        # Api.reasons: why each pending job waits, as listjobs.json says.
        self.reasons = reasons
        self.columns = COLUMNS + (NODE_COLUMN,) if store.shared else COLUMNS

    def page(self, request):
        identity = identity_of(request)
        if identity.every_project:
            cached = self._cache.answer(None, self._build)
        else:
            # Its projects' jobs and schedules alone, kept for the projects it sees.
            cached = self._cache.answer(("seen",) + tuple(sorted(identity.projects)),
                                        lambda: self._build(identity.sees))
        if isinstance(cached, defer.Deferred):
            return cached.addCallback(self._html)
        return self._html(cached)

    def _build(self, sees=None):
        rows = self.store.jobs()
        if sees is not None:
            rows.addCallback(lambda lists: tuple(
                [r for r in records if sees(r.project)] for records in lists))
        if self.reasons is not None:
            rows.addCallback(lambda jobs: self.reasons(jobs[1]).addCallback(
                lambda waits_for: self._rows(jobs, waits_for)))
        else:
            rows.addCallback(self._rows)
        if self.timetable is not None:
            rows.addCallback(self._with_schedules, sees)
        return rows

    def _rows(self, jobs, waits_for=lambda record: None):
        pending, running, finished = jobs
        now = self.clock()
        return ("".join(job_row(r, now, self.columns, waits_for(r)) for r in pending), running,
                "".join(job_row(r, now, self.columns) for r in reversed(finished)), "")

    def _with_schedules(self, cached, sees=None):
        def rows(records):
            if sees is not None:
                records = [r for r in records if sees(r.project)]
            zone_of = self.timetable.zone_of
            return cached[:3] + ("".join(schedule_row(r, zone_of(r)) for r in records),)

        return self.timetable.schedules().addCallback(rows)

    def _html(self, cached):
        pending_rows, running, finished_rows, schedule_rows = cached
        now = self.clock()
        return jobs_html(pending_rows, "".join(job_row(r, now, self.columns) for r in running),
                         finished_rows, schedule_rows, self.columns)


# -- /favicon.ico -------------------------------------------------------------------

FAVICON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "favicon.ico")


class Favicon(Resource):
    """/favicon.ico, which every browser asks for: a 16-pixel icon (a white
    n on green, 135 bytes), read once, at the first request."""

    isLeaf = True
    _icon = None

    def render(self, request):
        refused = refuse_leaf(request)
        if refused is not None:
            return refused
        if Favicon._icon is None:
            with open(FAVICON, "rb") as f:
                Favicon._icon = f.read()
        request.setHeader(b"content-type", b"image/x-icon")
        request.setHeader(b"cache-control", b"max-age=86400")
        request.setHeader(b"content-length", str(len(self._icon)).encode("ascii"))
        return b"" if request.method == b"HEAD" else self._icon


def site_pages(api):
    """{path segment: resource} of the pages, for Root's ``pages``."""
    # Here, not at the top: the console's pages are made of this module's.
    from .console.pages import console_pages

    jobs = Jobs(api.store, api.timetable, built=api.listing_builds.counter("/jobs"),
                reasons=api.reasons)
    return {**console_pages(api), b"jobs": jobs, b"favicon.ico": Favicon()}
