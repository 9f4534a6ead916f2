"""The console's first paint in a real browser (``--only console``).

netweir-serve starts on a job table of N finished jobs (10,000 in the
full run), written into its jobs.db before it starts (seed_ours: one
through the store, the rest copies of its row; seconds, where the API or
the store alone would take minutes). Debian's chromium,
driven by Playwright (``executable_path``: no browser download), loads
each page several times, each in a fresh browser context (no cache, no
cookies: a first visit), and two times of each load are kept, read from
the page's own clock (``performance.now()``, 0 at the navigation):

- first paint: the first-contentful-paint entry
  (``performance.getEntriesByType("paint")``), when anything of the page
  is drawn;
- rows shown: the start of the frame that draws the first row of the
  page's jobs table. A MutationObserver, added before the page's own
  scripts (``add_init_script``), watches for the page's ROWS selector;
  once it matches, the next ``requestAnimationFrame`` gives the time.
  A page that shows no such row within ROWS_WAIT seconds of its load
  event (main's placeholder jobs.js) is not waited for longer: its load
  event end is kept instead (``rows_seen`` false in the details), said in
  a note, and its "rows shown" cell stays empty.

The selectors (ROWS) are what ties the figure to each page's markup:

- ``/`` (the console's jobs page, jobs.js): ``#jobs-console table tbody
  tr``, the finished jobs' table under ``<div id="jobs-console">``;
- ScrapydWeb 1.6.0's jobs page (``/1/jobs/``, its default "database"
  view): ``.el-table__body tbody tr``, the rows Element UI's table draws;
- the plain ``/jobs`` page (scrapyd's, served beside the console; netweir
  serve has none): ``table tr td``, the first cell of a job's row.

Beside ours: ScrapydWeb, the dashboard scrapyd's users install, pointed
at this same netweir-serve (it speaks scrapyd's API and serves scrapyd's
/jobs, which ScrapydWeb reads), so it shows the same table. It is
installed once into a venv of its own (tests/scrapydweb-requirements.txt
pins it and all it needs), kept under ~/.cache/netweir-serve-bench
(XDG_CACHE_HOME) and reused while that file is unchanged. Its first load
copies the whole table into its own database (timed, in the notes); the
loads measured come after it, like ours after a first unmeasured load.
The browser resolves no name but loopback's
(``--host-resolver-rules``): ScrapydWeb's page would ask the Internet
for its update check, and nothing here may depend on it.
"""

import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

from .projects import MAIN_FILE
from .services import (NETWEIR_SERVE, OURS, ROOT, Service, _die_with_parent,
                       clean_environment, commands, free_port, wait_until)

ROWS = {
    "console": "#jobs-console table tbody tr",
    "scrapydweb": ".el-table__body tbody tr",
    "plain": "table tr td",
}
# How long after its load event a page may take to show its rows before
# the load event stands in for them.
ROWS_WAIT = 10.0
# ScrapydWeb's jobs page, once shown, posts to itself (its jobs again,
# with their stats) and writes its database meanwhile: a next visit
# started while that runs finds the database locked, and ScrapydWeb then
# turns to its other, "classic", page for good. So each visit of it waits
# for its page to go quiet before the next, its background snapshot of
# the same is turned off (SETTINGS), and ``?style=database`` asks for the
# database view (its default) every time.

# The browser's window: a laptop's (tests/browser.py's LAPTOP).
VIEWPORT = {"width": 1280, "height": 800}
BROWSERS = ("/usr/bin/chromium", "chromium", "chromium-browser")
REQUIREMENTS = os.path.join(ROOT, "tests", "scrapydweb-requirements.txt")
SCRAPYDWEB = "ScrapydWeb 1.6.0"
# Spiders and ends of the jobs seeded: mostly crawls that ended well.
SPIDERS = ("trivial", "stamp")
ENDS = ((0, "finished", "exit 0"),) * 8 + ((1, "failed", "exit 1"), (-15, "cancelled",
                                                                    "cancel.json"))

# Runs in the page before its own scripts: when the ROWS selector first
# matches, the next frame's start is kept in window.__paintBench.rows.
WATCH = """
(() => {
  const selector = %s;
  const bench = window.__paintBench = {rows: null, selector: selector};
  const check = () => {
    if (bench.rows === null && document.querySelector(selector)) {
      bench.rows = -1;
      requestAnimationFrame(() => { bench.rows = performance.now(); });
    }
  };
  new MutationObserver(check).observe(document, {childList: true, subtree: true});
  check();
})();
"""
TIMES = """() => {
  const paint = performance.getEntriesByType("paint")
    .find((entry) => entry.name === "first-contentful-paint");
  const navigation = performance.getEntriesByType("navigation")[0];
  return {fcp: paint ? paint.startTime : null, rows: window.__paintBench.rows,
          load: navigation.loadEventEnd, response: navigation.responseEnd,
          count: document.querySelectorAll(window.__paintBench.selector).length};
}"""


class Unavailable(Exception):
    """What the figure needs (Playwright, a chromium) is not here."""


def find_browser():
    for name in BROWSERS:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


# -- the job table ---------------------------------------------------------------


def seed_ours(directory, count, spider_file, now=None):
    """``count`` finished jobs in netweir-serve's table in ``directory``
    (jobs.db, made if need be), one second apart, the last ending an hour
    ago. The service must not be running.

    The first job goes through the store's own interface (added, claimed,
    ended, as the service does); the others are copies of its row, every
    column as the store wrote it, with their own id, spider, times and
    end, inserted in one transaction: through the interface, three
    commits a job take minutes for 10,000 on a busy machine."""
    import sqlite3

    from twisted.internet.task import Clock

    from netweir_serve.names import fold
    from netweir_serve.store.records import JobRecord
    from netweir_serve.store.sqlite import SQLiteJobStore

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "jobs.db")
    start = (now or time.time()) - 3600 - count

    def job(n):
        exit_status, outcome, reason = ENDS[n % len(ENDS)]
        return {"id": f"seed{n:06d}", "spider": SPIDERS[n % len(SPIDERS)],
                "created": start + n - 1, "start_time": start + n, "end_time": start + n + 0.8,
                "exit_status": exit_status, "outcome": outcome, "reason": reason,
                # As the store judges a run (the first job's, "healthy"):
                # only a finished one has a health.
                "health": "healthy" if outcome == "finished" else None,
                "stats": {"item_scraped_count": n % 50, "response_received_count": n % 50 + 1}}

    first = job(0)
    store = SQLiteJobStore(path, Clock())  # its Inline runner: done when called
    failures = []
    store.add(JobRecord(id=first["id"], project="one", spider=first["spider"],
                        spider_file=spider_file, created=first["created"])
              ).addErrback(failures.append)
    store.claim_next("bench", ["one"], first["start_time"]).addErrback(failures.append)
    store.mark_finished(first["id"], first["outcome"], first["end_time"],
                        exit_status=first["exit_status"], stats=first["stats"],
                        reason=first["reason"]).addErrback(failures.append)
    store.close()
    if failures:
        raise RuntimeError(f"seeding the job table failed: {failures[0].getErrorMessage()}")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        columns = [row[1] for row in db.execute("PRAGMA table_info(jobs)") if row[1] != "seq"]
        template = db.execute(f"SELECT {', '.join(columns)} FROM jobs WHERE id = ?",
                              (first["id"],)).fetchone()
        if template is None or dict(zip(columns, template))["state"] != "finished":
            raise RuntimeError("seeding the job table failed: the first job did not finish")
        template = dict(zip(columns, template))
        rows = []
        for n in range(1, count):
            row = dict(template, **job(n))
            row["key"] = fold(row["id"])
            row["stats"] = json.dumps(row["stats"])
            rows.append([row[c] for c in columns])
        db.execute("BEGIN")
        db.executemany(f"INSERT INTO jobs ({', '.join(columns)}) VALUES"
                       f" ({', '.join('?' * len(columns))})", rows)
        db.execute("UPDATE store_meta SET version = version + 1")
        db.execute("COMMIT")
    finally:
        db.close()


def start_seeded(bench, count):
    """netweir-serve started on a table of ``count`` finished jobs."""
    directory = os.path.join(bench.root, "console-ours")
    service = Service(OURS, commands(bench.python)[OURS], directory, bench.projects,
                      max_jobs=2, keep=count + 100)
    bench.services.append(service)
    seed_ours(directory, count, os.path.join(bench.projects["one"], MAIN_FILE))
    service.start(timeout=120)
    finished = service.counts()["finished"]
    if finished != count:
        raise RuntimeError(f"{OURS} shows {finished} finished jobs, not {count}")
    return service


# -- ScrapydWeb ------------------------------------------------------------------------


def cache_folder():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "netweir-serve-bench")


def scrapydweb_python(log, install=True):
    """The python of a venv holding ScrapydWeb (made once, kept in the
    cache under the hash of the requirements); raises Unavailable when it
    is not there and ``install`` is false, or pip cannot make it."""
    with open(REQUIREMENTS, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    venv = os.path.join(cache_folder(), f"scrapydweb-{digest}")
    python = os.path.join(venv, "bin", "python")
    made = os.path.join(venv, "installed")
    if os.path.exists(made):
        return python
    if not install:
        raise Unavailable(f"no ScrapydWeb venv in {venv} (a full or quick run makes it)")
    log(f"installing {SCRAPYDWEB} into {venv} (once; a minute or two)")
    environment = scrapydweb_environment()
    for step in ([sys.executable, "-m", "venv", "--clear", venv],
                 [python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "-r", REQUIREMENTS]):
        done = subprocess.run(step, capture_output=True, text=True, timeout=900,
                              stdin=subprocess.DEVNULL, env=environment)
        if done.returncode != 0:
            raise Unavailable(f"{SCRAPYDWEB} could not be installed ({' '.join(step[:4])}..."
                              f" exited {done.returncode}: {done.stderr.strip()[-300:]})")
    open(made, "w").close()
    return python


def scrapydweb_environment():
    """The benchmark's environment without what would point ScrapydWeb's
    Python at ours (PYTHONPATH and the like) or set its own options."""
    return {k: v for k, v in clean_environment().items()
            if not k.startswith("PYTHON") and k not in ("VIRTUAL_ENV", "DATA_PATH",
                                                        "DATABASE_URL")}


SETTINGS = '''\
# Written by bench/console.py.
SCRAPYDWEB_BIND = "127.0.0.1"
SCRAPYDWEB_PORT = {port}
ENABLE_AUTH = False
SCRAPYD_SERVERS = [{server!r}]
DATA_PATH = {data!r}
ENABLE_LOGPARSER = False
ENABLE_MONITOR = False
ENABLE_EMAIL_ALERT = False
ENABLE_SLACK_ALERT = False
ENABLE_TELEGRAM_ALERT = False
SCHEDULE_ADDITIONAL = ""
# Its background copy of the jobs page into its database, every 300 s by
# default: with 10,000 jobs it runs for a minute and more, and a visit
# meeting it found the database locked (see ScrapydWeb's visits below).
JOBS_SNAPSHOT_INTERVAL = 0
'''


class ScrapydWeb:
    """ScrapydWeb as a process of its own on a free port, its one node the
    service on ``port``; its settings and data in ``folder``."""

    def __init__(self, python, folder, port):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        os.makedirs(folder, exist_ok=True)
        # Its settings file is found in, and imported from, its working folder.
        with open(os.path.join(folder, "scrapydweb_settings_v11.py"), "w") as f:
            f.write(SETTINGS.format(port=self.port, server=f"127.0.0.1:{port}",
                                    data=os.path.join(folder, "data")))
        self.log_path = os.path.join(folder, "scrapydweb.log")
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [python, "-m", "scrapydweb.run"], cwd=folder, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            env=scrapydweb_environment(),
            # Its command line does not name the scratch directory, which
            # kill_leftovers looks for: it ends with the benchmark instead.
            preexec_fn=_die_with_parent)
        try:
            wait_until(self.answers, 60, "ScrapydWeb to answer", interval=0.2)
        except BaseException:
            self.stop()
            raise

    def answers(self):
        import urllib.request
        if self.process.poll() is not None:
            raise RuntimeError(f"ScrapydWeb exited with status {self.process.returncode}")
        try:
            with urllib.request.urlopen(self.url + "/hello", timeout=5) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._log.close()


# -- the browser -------------------------------------------------------------------


class Browser:
    """Debian's chromium under Playwright, headless, resolving loopback
    alone; ``load`` measures one first visit."""

    def __init__(self):
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise Unavailable("Playwright's Python package is not installed"
                              " (pip install -e '.[test]')") from None
        executable = find_browser()
        if executable is None:
            raise Unavailable("no chromium (apt-get install chromium)")
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        self.timeout_error = PlaywrightTimeout
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=executable,
                args=["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"])
        except BaseException:
            self._playwright.stop()
            raise

    def load(self, url, rows_selector, wait_rows=True, settle=False, timeout=600):
        """One visit of ``url`` in a fresh context: {"fcp", "rows", "load",
        "response" (ms from the navigation), "rows_seen", "count"}. With
        ``wait_rows`` false the rows are not waited for (a page known to
        show none); with ``settle``, the page is left open until it has
        made no request for half a second (ScrapydWeb's: see above)."""
        context = self._browser.new_context(viewport=VIEWPORT)
        try:
            page = context.new_page()
            page.add_init_script(WATCH % json.dumps(rows_selector))
            page.goto(url, wait_until="load", timeout=timeout * 1000)
            seen = False
            if wait_rows:
                try:
                    page.wait_for_function("window.__paintBench.rows > 0",
                                           timeout=ROWS_WAIT * 1000)
                    seen = True
                except self.timeout_error:
                    pass
            page.wait_for_function(
                "performance.getEntriesByType('paint').some("
                "(e) => e.name === 'first-contentful-paint')", timeout=ROWS_WAIT * 1000)
            times = page.evaluate(TIMES)  # "count": the rows matched by then
            if settle:
                page.wait_for_load_state("networkidle", timeout=timeout * 1000)
        finally:
            context.close()
        if not seen:
            times["rows"] = times["load"]
        # Nothing is seen before the first contentful paint: rows put in
        # the page before it (a page rendered by the server, or while a
        # style sheet holds the first paint back) are drawn by it.
        times["rows"] = max(times["rows"], times["fcp"])
        times["rows_seen"] = seen
        return times

    def close(self):
        try:
            self._browser.close()
        finally:
            self._playwright.stop()


def visits(browser, url, selector, loads, log, what, settle=False):
    """One unmeasured first visit, then ``loads`` measured; {"fcp", "rows"
    (medians, ms), "rows_seen", "first" (the unmeasured one), "samples"}."""
    started = time.monotonic()
    first = browser.load(url, selector, settle=settle)
    first["seconds"] = time.monotonic() - started
    seen = first["rows_seen"]
    samples = [browser.load(url, selector, wait_rows=seen, settle=settle)
               for _ in range(loads)]
    found = {"fcp": statistics.median(s["fcp"] for s in samples),
             "rows": statistics.median(s["rows"] for s in samples),
             "rows_seen": seen and all(s["rows_seen"] for s in samples),
             "first": first, "samples": samples, "url": url, "selector": selector}
    log(f"{what}: first paint {found['fcp']:.0f} ms, rows"
        f" {'shown' if found['rows_seen'] else 'not shown; load event'} {found['rows']:.0f} ms"
        f" (medians of {loads}; the first visit took {first['seconds']:.1f} s)")
    return found


# -- the figure --------------------------------------------------------------------------


def measure(bench, jobs, loads, their_loads, install=True):
    """(values {key: {service: ms}}, notes, detail) of the console rows:
    ``loads`` measured visits of each of our pages, ``their_loads`` of
    ScrapydWeb's (each takes it a minute and more at 10,000 jobs: it
    reads all of /jobs and looks every job up in its own database);
    ``install``: whether its venv may be made if it is not there yet."""
    values, notes, detail = {}, [], {}
    browser = Browser()
    web = ours = None
    try:
        started = time.monotonic()
        ours = start_seeded(bench, jobs)
        bench.log(f"console: {OURS} answers on {jobs:,} finished jobs after"
                  f" {time.monotonic() - started:.1f} s (seeded through the store)")
        base = f"http://127.0.0.1:{ours.port}"
        console = visits(browser, base + "/", ROWS["console"], loads, bench.log,
                         f"{OURS} /")
        plain = visits(browser, base + "/jobs", ROWS["plain"], loads, bench.log,
                       f"{OURS} /jobs")
        detail.update(console=console, plain_ours=plain)
        values["console_fcp"] = {OURS: console["fcp"]}
        # Rows never drawn have no time in the table: the load event that
        # stood in for them is in the note below.
        values["console_rows"] = {OURS: console["rows"]} if console["rows_seen"] else {}
        values["console_plain"] = {OURS: plain["rows"]}
        notes.append(f"console: /jobs, all {jobs:,} jobs in one page drawn by the server:"
                     f" its load event (every row in) at"
                     f" {statistics.median(x['load'] for x in plain['samples']):,.0f} ms"
                     " (median).")
        if not console["rows_seen"]:
            notes.append(f"console: / showed no row of {ROWS['console']!r} within"
                         f" {ROWS_WAIT:g} s of its load (main's jobs.js was a placeholder):"
                         f" no 'rows shown' for it; its load event came at"
                         f" {console['rows']:,.0f} ms (median).")
        try:
            python = scrapydweb_python(bench.log, install)
            web = ScrapydWeb(python, os.path.join(bench.root, "scrapydweb"), ours.port)
            theirs = visits(browser, web.url + "/1/jobs/?style=database", ROWS["scrapydweb"],
                            their_loads, bench.log, f"{SCRAPYDWEB} /1/jobs/", settle=True)
        except Unavailable as e:
            notes.append(f"console: {SCRAPYDWEB} not measured: {e}.")
        except Exception as e:  # its log says more
            notes.append(f"console: {SCRAPYDWEB} could not be measured ({type(e).__name__}:"
                         f" {e}); see its log in the scratch directory.")
        else:
            detail["scrapydweb"] = theirs
            values["console_fcp"][NETWEIR_SERVE] = theirs["fcp"]
            if theirs["rows_seen"]:
                values["console_rows"][NETWEIR_SERVE] = theirs["rows"]
            else:
                missed = sum(not x["rows_seen"] for x in [theirs["first"]] + theirs["samples"])
                notes.append(f"console: {missed} of {their_loads + 1} visits of"
                             f" {SCRAPYDWEB}'s jobs page showed no row of"
                             f" {ROWS['scrapydweb']!r} (it turns to its classic page when"
                             " its database is locked; see its log): no 'rows shown' for it.")
            notes.append(f"console: {SCRAPYDWEB}'s first visit to its jobs page, which copies"
                         f" the {jobs:,} jobs into its own database, took"
                         f" {theirs['first']['seconds']:.1f} s, each visit after it the"
                         f" median of {their_loads}; it shows 100 jobs a page.")
        finally:
            if web is not None:
                web.stop()
    finally:
        if ours is not None:
            ours.stop()
        browser.close()
    return values, notes, detail
