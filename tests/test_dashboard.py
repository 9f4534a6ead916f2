"""The live dashboard at /: its markup and files, and a real headless
browser (Debian's chromium, driven by Playwright's Python package) that
watches a running job's row and chart appear without a reload and cancels
the job with its button.

The browser is the system's: Playwright's own browser downloads are never
used (``executable_path``). Where there is none, the test installs
Debian's ``chromium`` if it runs as root with apt-get; under ``CI=true``
it fails rather than skips when no browser (or no Playwright) can be had.
Set ``DASHBOARD_SCREENSHOT=docs/dashboard.png`` to write the screenshot
the docs show.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import datetime

from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore

from netweir_serve.web.pages import PAGE_TIME

from .processes import ROOT, wait_until
from .test_cluster import AUTH, ClusterTestCase
from .test_jobs import CrawlTestCase
from .test_pages import assert_valid_html

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SCREENSHOT_VARIABLE = "DASHBOARD_SCREENSHOT"


def find_browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def install_browser():
    """Debian's chromium, where this may install packages; its path or None."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900,
                 env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
    if subprocess.run(install, **quiet).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], **quiet)
        subprocess.run(install, **quiet)
    return find_browser()


def browser_or_skip(test):
    """(sync_playwright, browser path); skips, or under CI fails, without."""
    in_ci = os.environ.get("CI", "").lower() == "true"

    def unavailable(why):
        if in_ci:
            test.fail(f"CI=true and {why}")
        raise unittest.SkipTest(why)

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright's Python package is not installed (pip install -e '.[test]')")
    path = find_browser() or install_browser()
    if path is None:
        unavailable("no chromium to drive (apt-get install chromium)")
    return sync_playwright, path


class DashboardMarkupTests(CrawlTestCase):
    def test_home_page_has_the_dashboard_and_keeps_its_links(self):
        daemon = self.daemon()
        status, headers, body = daemon.call("GET", "/")
        self.assertEqual(status, 200)
        text = body.decode()
        assert_valid_html(self, text)
        for marker in ('id="running"', 'id="pending"', 'id="finished"', 'id="schedules"',
                       'id="run"', 'src="/dashboard/dashboard.js"', 'href="/jobs"',
                       'href="/listspiders.json?project=shop"', 'href="/metrics"'):
            self.assertIn(marker, text)

    def test_the_script_and_style_sheet_and_nothing_else(self):
        daemon = self.daemon()
        for name, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
            status, headers, body = daemon.call("GET", "/dashboard/" + name)
            self.assertEqual((status, headers["Content-Type"]), (200, kind + "; charset=utf-8"))
            self.assertTrue(body)
        for path in ("/dashboard/", "/dashboard/__init__.py", "/dashboard/../service.py"):
            self.assertEqual(daemon.call("GET", path)[0], 404, path)


class BrowserTests(CrawlTestCase):
    def test_a_running_job_appears_live_and_is_cancelled_with_its_button(self):
        sync_playwright, executable = browser_or_skip(self)
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        # A job another node ran (here: this service under an older name).
        store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
        store.add(JobRecord(id="books-0800", project="shop", spider="books",
                            spider_file=os.path.join(self.shop, "books.py")))
        store.claim_next("crawl9", ["shop"], time.time() - 60)
        store.mark_finished("books-0800", "finished", time.time() - 30, exit_status=0)
        store.close()
        daemon = self.daemon("--max-jobs", "2", directory=directory)
        done = daemon.must_schedule("shop", "books", jobid="books-0900")
        daemon.wait_state(done, "finished")
        daemon.post("addschedule.json", {"project": "shop", "spider": "books",
                                         "cron": "0 3 * * *", "name": "nightly"})
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable)
            try:
                jobid = self.watch_and_cancel(browser, daemon, done)
            finally:
                browser.close()
        state, entry = daemon.find(jobid)
        self.assertEqual((state, entry["outcome"]), ("finished", "cancelled"))

    def watch_and_cancel(self, browser, daemon, done):
        """Opens the dashboard, starts a job, watches it, cancels it; its id."""
        base = f"http://127.0.0.1:{daemon.port}"
        page = browser.new_page(viewport={"width": 1100, "height": 760})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(base + "/")
        page.wait_for_selector('#dashboard[data-state="live"]', timeout=15000)
        page.evaluate("window.notReloaded = true")
        self.assertEqual(page.locator("#running tbody tr").count(), 0)

        jobid = daemon.must_schedule("shop", "slow", delay="0.2", jobid="slow-0915")
        row = page.locator(f'#running tr[data-job="{jobid}"]')
        row.wait_for(timeout=15000)
        row.locator("svg").wait_for(timeout=5000)
        # The first stats come within about 5 s: a line in the chart.
        row.locator("svg polyline, svg circle").first.wait_for(timeout=30000)
        page.locator(f'#finished tr[data-job="{done}"] svg').wait_for(timeout=10000)
        page.locator('#schedules tr[data-schedule="nightly"]').wait_for(timeout=10000)
        # A job of another node says which; this node's own say nothing.
        self.assertEqual(page.locator('#finished tr[data-job="books-0800"] span.node')
                         .inner_text(), "on crawl9")
        self.assertEqual(page.locator(f'#finished tr[data-job="{done}"] span.node').count(), 0)
        time.sleep(6)  # a second snapshot, so the chart has a line
        shot = os.path.join(self.base, "dashboard.png")
        page.screenshot(path=shot, full_page=False)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        target = os.environ.get(SCREENSHOT_VARIABLE)
        if target:
            shutil.copyfile(shot, os.path.join(ROOT, target))

        row.locator("button", has_text="Cancel").click()
        page.locator(f'#finished tr[data-job="{jobid}"] td.outcome.cancelled').wait_for(
            timeout=30000)
        self.assertEqual(row.count(), 0)
        self.assertTrue(page.evaluate("window.notReloaded === true"))
        self.assertEqual(errors, [])
        return jobid


# Every absolute time on the dashboard: the /jobs page's format, local time.
SHOWN_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")

# (width, height) of a phone and of a laptop, for "no horizontal scroll".
PHONE, LAPTOP = (390, 844), (1280, 800)


def seed_finished(directory, count, now):
    """``count`` finished jobs of shop/books, ended minutes to an hour before
    ``now``, as the service that ran them left them: rows of its job table
    and their stats over time (DIR/history), three points each, the last at
    the job's end. {job id: (start, end)}."""
    store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
    times = {}
    for i in range(count):
        jobid = f"done-{i:02d}"
        start = now - 3600 + i * 60
        end = start + 20
        store.add(JobRecord(id=jobid, project="shop", spider="books",
                            spider_file="/nowhere/books.py"))
        store.claim_next(socket.gethostname(), ["shop"], start)
        store.mark_finished(jobid, "finished", end, exit_status=0,
                            stats={"items": i + 1, "fetched": 2 * i + 3})
        folder = os.path.join(directory, "history", "shop", "books")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, jobid + ".jsonl"), "w") as f:
            for t, items, pages in ((start + 2, 0, 1), (start + 11, i, i + 2),
                                    (end, i + 1, 2 * i + 3)):
                f.write(json.dumps({"time": t, "stats": {"items": items, "fetched": pages}})
                        + "\n")
        times[jobid] = (start, end)
    store.close()
    return times


def polyline(svg_markup, kind):
    """The (x, y) points of a chart's ``kind`` line (items or pages)."""
    found = re.search(rf'<polyline class="{kind}" points="([^"]*)"', svg_markup)
    if found is None:
        return []
    return [tuple(float(v) for v in p.split(",")) for p in found.group(1).split()]


class PageTests(CrawlTestCase):
    """What the dashboard shows, read in a real browser."""

    def setUp(self):
        super().setUp()
        self.sync_playwright, self.executable = browser_or_skip(self)
        self.browser = None

    def open(self, daemon, path="/", size=LAPTOP, watch=None):
        """A page of ``daemon`` in the test's browser (closed at cleanup),
        once the dashboard is live; ``watch(page)`` is called before it loads."""
        if self.browser is None:
            playwright = self.sync_playwright().start()
            self.addCleanup(playwright.stop)
            self.browser = playwright.chromium.launch(executable_path=self.executable)
            self.addCleanup(self.browser.close)
        page = self.browser.new_page(viewport={"width": size[0], "height": size[1]})
        self.errors = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        if watch is not None:
            watch(page)
        page.goto(f"http://127.0.0.1:{daemon.port}{path}")
        if path == "/":
            page.wait_for_selector('#dashboard[data-state="live"]', timeout=15000)
        return page

    def seeded(self, count=25):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        self.times = seed_finished(directory, count, time.time())
        return self.daemon(directory=directory)

    def test_a_finished_jobs_chart_ends_at_its_end(self):
        daemon = self.seeded(3)
        page = self.open(daemon)
        chart = page.locator('#finished tr[data-job="done-02"] svg')
        chart.locator("polyline.items").wait_for(timeout=15000)
        points = polyline(chart.evaluate("svg => svg.outerHTML"), "items")
        width = float(chart.get_attribute("width"))
        # History at 2, 11 and 20 s after the start, the end: the middle
        # point halfway across, not squeezed to the left by a last point
        # at the time the page loaded (an hour later).
        self.assertEqual(len(points), 3, points)
        self.assertAlmostEqual(points[1][0] / width, 0.5, delta=0.05)
        self.assertEqual(self.errors, [])

    def test_every_finished_job_listed_gets_its_items_and_chart_a_few_requests_at_a_time(self):
        daemon = self.seeded(25)
        asked, open_now, most = [], set(), [0]

        def watch(page):
            def sent(request):
                if "/jobstats.json" in request.url:
                    asked.append(request.url)
                    open_now.add(request)
                    most[0] = max(most[0], len(open_now))

            page.on("request", sent)
            page.on("requestfinished", lambda request: open_now.discard(request))
            page.on("requestfailed", lambda request: open_now.discard(request))

        page = self.open(daemon, watch=watch)
        rows = page.locator("#finished tbody tr")
        wait_until(lambda: page.locator("#finished tbody tr svg polyline.items").count() == 20,
                   20, "a chart in each of the 20 finished rows")
        self.assertEqual(rows.count(), 20)
        for i in range(5, 25):  # the 20 most recent
            row = page.locator(f'#finished tr[data-job="done-{i:02d}"]')
            self.assertEqual(row.locator("td.items").inner_text(), str(i + 1))
        self.assertEqual(len(asked), 20)
        self.assertLessEqual(most[0], 4)
        self.assertEqual(self.errors, [])

    def test_a_degraded_run_says_so_beside_its_outcome(self):
        daemon = self.daemon()
        thin = daemon.must_schedule("shop", "counted", count="2", _min_items="5")
        fine = daemon.must_schedule("shop", "counted", count="2")
        for jobid in (thin, fine):
            daemon.wait_state(jobid, "finished")
        page = self.open(daemon)
        cell = page.locator(f'#finished tr[data-job="{thin}"] td.outcome.finished')
        cell.locator(".degraded").wait_for(timeout=15000)
        self.assertEqual(cell.inner_text(), "finished exit 0 (degraded)")
        self.assertEqual(cell.locator(".degraded").get_attribute("title"),
                         "items 2 < min_items 5")
        other = page.locator(f'#finished tr[data-job="{fine}"] td.outcome')
        self.assertEqual(other.inner_text(), "finished exit 0")
        self.assertEqual(self.errors, [])

    def test_the_run_form_has_no_spider_chosen_until_the_user_chooses_one(self):
        daemon = self.daemon()
        page = self.open(daemon)
        form = page.locator("#run")
        form.locator("select[name=spider] option[value=echo]").wait_for(state="attached",
                                                                        timeout=10000)
        self.assertEqual(form.locator("select[name=spider]").input_value(), "")
        self.assertTrue(form.locator("button[type=submit]").is_disabled())
        form.locator("select[name=spider]").select_option("echo")
        form.locator("button[type=submit]").click()
        form.locator(".result", has_text="queued").wait_for(timeout=10000)
        jobid = form.locator(".result").inner_text().split()[-1]
        self.assertEqual(daemon.find(jobid)[1]["spider"], "echo")

    def test_every_time_shown_has_one_format(self):
        daemon = self.seeded(2)
        running = daemon.must_schedule("shop", "slow", delay="0.2", jobid="slow-1")
        daemon.wait_state(running, "running")
        daemon.post("addschedule.json", {"project": "shop", "spider": "books",
                                         "cron": "0 3 * * *", "tz": "Asia/Tokyo",
                                         "name": "nightly"})
        page = self.open(daemon)
        page.locator('#schedules tr[data-schedule="nightly"]').wait_for(timeout=10000)
        page.locator('#running tr[data-job="slow-1"]').wait_for(timeout=10000)
        shown = {
            "started": page.locator('#running tr[data-job="slow-1"] td.time').inner_text(),
            "ended": page.locator('#finished tr[data-job="done-01"] td.time').inner_text(),
            "next run": page.locator('#schedules tr[data-schedule="nightly"] td.time')
            .inner_text(),
        }
        for what, text in shown.items():
            self.assertRegex(text, SHOWN_TIME, what)
        # The times are the browser's local time, as /jobs shows them.
        _, end = self.times["done-01"]
        self.assertEqual(shown["ended"], datetime.fromtimestamp(end).strftime(PAGE_TIME))
        daemon.post("cancel.json", {"project": "shop", "job": running})

    def test_no_page_scrolls_sideways_on_a_phone_or_a_laptop(self):
        daemon = self.seeded(20)
        # Long words: a job id with no place to break a line (clients make
        # such ids: a hash, a uuid's hex), a pending job's reason.
        checkpoint = ["checkpoint=a/deeply/nested/checkpoint/folder"]
        running = daemon.must_schedule("shop", "slow", checkpoint, delay="0.2",
                                       jobid="slow_" + "0123456789abcdef" * 4)
        daemon.wait_state(running, "running")
        daemon.must_schedule("shop", "books", checkpoint, jobid="queued-after-it")
        daemon.post("addschedule.json", {"project": "shop", "spider": "books",
                                         "cron": "0 3 * * *", "name": "nightly"})
        for size in (PHONE, LAPTOP):
            for path in ("/", "/jobs"):
                page = self.open(daemon, path, size)
                if path == "/":
                    page.locator('#running tr[data-job] svg').wait_for(timeout=10000)
                    page.locator('#schedules tr[data-schedule]').wait_for(timeout=10000)
                sideways = page.evaluate("document.documentElement.scrollWidth"
                                         " - document.documentElement.clientWidth")
                self.assertLessEqual(sideways, 0, f"{path} at {size[0]} px")
                page.close()  # and its stream: one address may hold 8 connections
        daemon.post("cancel.json", {"project": "shop", "job": running})


class DownNodeTests(ClusterTestCase):
    def test_a_finished_job_of_a_node_now_down_says_so(self):
        sync_playwright, executable = browser_or_skip(self)
        n0 = self.node("n0", 1)
        gone = n0.must_schedule("shop", "echo", jobid="echo-on-n0")
        self.assertEqual(n0.wait_state(gone, "finished")["node"], "n0")
        n1 = self.node("n1", 1)
        self.kill9(n0)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable)
            try:
                context = browser.new_context(http_credentials={"username": AUTH[0],
                                                                "password": AUTH[1]})
                page = context.new_page()
                page.goto(f"http://127.0.0.1:{n1.port}/")
                row = page.locator(f'#finished tr[data-job="{gone}"]')
                mark = row.locator(".unavailable")
                mark.wait_for(timeout=20000)
                self.assertEqual(mark.inner_text(), "unavailable: node n0 is down")
                # Its items are in the shared table all the same.
                self.assertEqual(row.locator("td.items").inner_text(), "1")
            finally:
                browser.close()
