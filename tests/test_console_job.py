"""The job page (/job/PROJECT/JOBID, console/job.js) in a real browser
(Debian's chromium) against a real service running real crawls of the
test site: a running job's chart grows and its log tail moves without a
reload; its items as a table; Cancel, Kill and Run again; a 100 MB log
opened by reading its tail alone; the log's level filter and search; a
viewer's page without buttons; and issue 27's timed task, from the front
page to the line where a failed run raised in three clicks."""

import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

from twisted.internet.task import Clock

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore

from .browser import BrowserMixin
from .processes import wait_until
from .test_jobs import CrawlTestCase

# What job.js reads of a log at a time (its LOG_CHUNK).
LOG_CHUNK = 262144

# A spider whose callback raises (a traceback in its log) and whose check
# then fails, so its crawl exits 1: a failed run, as last night's was.
RAISING = '''
import netweir

class Raising(netweir.Spider):
    name = "raising"
    settings = netweir.Settings(throttle=False)
    start_urls = [{site!r} + "/one"]
    checks = [lambda stats, spider: "no prices were found"]

    async def parse(self, page):
        self.logger.info("reading %s", page.url)
        self.logger.warning("the page has no price list")
        raise ValueError("the page had no price")
'''


def ready(page, timeout=30000):
    try:
        page.wait_for_selector("body[data-ready='1']", timeout=timeout)
    except Exception:
        # What the page shows instead (an API's refusal, an empty <main>).
        print(page.locator("main").inner_html()[:3000])
        raise


def fact(page, term):
    """The fact ``term`` (its <dt>'s whole text) of the job page."""
    return page.locator(f'#facts .fact:has(dt:text-is("{term}"))')


def seed_finished_job(directory, jobid, log_lines=(), log_bytes=0, items=()):
    """A finished shop/books job as the service that ran it left it: its
    row, three points of stats history, and a log of ``log_bytes`` of
    filler followed by ``log_lines``. The log's path."""
    now = time.time()
    start, end = now - 7200, now - 7000
    store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
    store.add(JobRecord(id=jobid, project="shop", spider="books", spider_file="/nowhere/books.py",
                        settings=(("max_items", "500"),), arguments=(("category", "poetry"),),
                        created=start - 1))
    store.claim_next(socket.gethostname(), ["shop"], start)
    store.mark_finished(jobid, "finished", end, exit_status=0, reason="exit 0",
                        stats={"items": 300, "fetched": 310, "failed": 2, "bytes": 123456})
    store.close()
    folder = os.path.join(directory, "history", "shop", "books")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, jobid + ".jsonl"), "w") as f:
        for t, n in ((start + 5, 1), (start + 100, 150), (end, 300)):
            f.write(json.dumps({"time": t, "stats": {"items": n, "fetched": n + 10, "failed": 0,
                                                     "bytes": 400 * n}}) + "\n")
    logs = os.path.join(directory, "logs", "shop", "books")
    os.makedirs(logs, exist_ok=True)
    path = os.path.join(logs, jobid + ".log")
    with open(path, "wb") as f:
        filler = b"".join(b"INFO filler line %07d of the old part of the log\n" % n
                          for n in range(20000))
        for _ in range(-(-log_bytes // len(filler))):
            f.write(filler)
        f.write("".join(line + "\n" for line in log_lines).encode())
    item_folder = os.path.join(directory, "items", "shop", "books")
    os.makedirs(item_folder, exist_ok=True)
    with open(os.path.join(item_folder, jobid + ".jsonl"), "w") as f:
        f.write("".join(json.dumps(item) + "\n" for item in items))
    return path


class JobPageTests(BrowserMixin, CrawlTestCase):
    def url_of(self, daemon):
        return f"http://127.0.0.1:{daemon.port}"

    def watch_requests(self, page, fragment):
        """The list ``page``'s finished requests whose URL has ``fragment``
        are added to (see ``described``)."""
        seen = []
        page.on("requestfinished",
                lambda request: seen.append(request) if fragment in request.url else None)
        return seen

    @staticmethod
    def described(requests):
        """[(Range header, status, body length)] of ``requests``."""
        described = []
        for request in list(requests):
            response = request.response()
            length = len(response.body()) if response.status in (200, 206) else 0
            described.append((request.header_value("range"), response.status, length))
        return described

    def test_a_running_jobs_chart_grows_and_its_log_tail_moves_without_a_reload(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", jobid="slow-live", delay="0.2")
        daemon.wait_state(jobid, "running")
        holder = {}

        def watch(page):
            holder["log"] = self.watch_requests(page, f"/logs/shop/slow/{jobid}.log")

        page = self.open(self.url_of(daemon) + f"/job/shop/{jobid}", watch=watch)
        ready(page)
        page.evaluate("window.notReloaded = true")
        chart = page.locator("#chart-counts")
        lines = page.locator("#log-lines")
        first_points = int(chart.get_attribute("data-points"))
        first_end = int(lines.get_attribute("data-end"))
        # Stats come every 5 s; the page adds each from /events.
        wait_until(lambda: int(chart.get_attribute("data-points")) >= max(first_points + 1, 2),
                   30, "the chart to grow by a point")
        wait_until(lambda: int(lines.get_attribute("data-end")) > first_end, 20,
                   "the log's tail to move")
        self.assertTrue(page.evaluate("window.notReloaded === true"))
        self.assertGreaterEqual(chart.locator("canvas").count(), 1)
        self.assertIn("slow page", lines.inner_text())
        # The tail, then each read from where the last ended, never the whole file.
        ranges = [one[0] for one in self.described(holder["log"])]
        self.assertEqual(ranges[0], f"bytes=-{LOG_CHUNK}")
        for asked in ranges[1:]:
            self.assertRegex(asked, r"^bytes=\d+-$")
        self.assertEqual(page.locator("#rates tbody tr").count(), 4)
        self.screenshots(page, "job", ready=lambda p: (
            ready(p), p.wait_for_selector("#chart-counts canvas", timeout=15000)))
        self.assertEqual(self.errors, [])
        daemon.post("cancel.json", {"project": "shop", "job": jobid, "signal": "KILL"})

    def test_cancel_run_again_and_kill_from_the_page(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", ["max_items=100000"], jobid="slow-cancel",
                                     delay="0.3", priority="3")
        daemon.wait_state(jobid, "running")
        page = self.open(self.url_of(daemon) + f"/job/shop/{jobid}")
        ready(page)
        page.locator("#cancel").click()
        page.locator("#job-actions .result", has_text="cancel asked (it was running)").wait_for(
            timeout=10000)
        # The end comes over /events: the page says so without a reload.
        page.locator(".job-head .chip.cancelled").wait_for(timeout=30000)
        self.assertEqual(page.locator("#cancel").count(), 0)
        self.assertEqual(page.locator("#why").inner_text().count("cancel.json"), 1)
        page.locator("#run-again").click()
        link = page.locator("#run-again-job")
        link.wait_for(timeout=10000)
        again = link.inner_text()
        self.assertNotEqual(again.lower(), jobid)
        state, entry = daemon.find(again)
        self.assertIsNotNone(state)
        detail = daemon.get("job.json", {"job": again})[1]["job"]
        self.assertEqual((detail["spider"], detail["settings"], detail["arguments"],
                          detail["priority"]),
                         ("slow", {"max_items": "100000"}, {"delay": "0.3"}, 3.0))
        link.click()
        ready(page)
        daemon.wait_state(again, "running")
        page.locator("#kill").wait_for(timeout=15000)
        page.locator("#kill").click()
        page.locator(".job-head .chip.cancelled").wait_for(timeout=30000)
        state, entry = daemon.find(again)
        self.assertEqual((state, entry["outcome"], entry["reason"]),
                         ("finished", "cancelled", "cancel.json"))
        self.assertEqual(self.errors, [])

    def test_run_again_is_off_when_a_setting_holds_a_secret(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "echo", ["proxy=http://key:pw@127.0.0.1:9"],
                                     jobid="echo-secret")
        daemon.wait_state(jobid, "finished")
        page = self.open(self.url_of(daemon) + f"/job/shop/{jobid}")
        ready(page)
        self.assertTrue(page.locator("#run-again").is_disabled())
        self.assertIn("setting proxy", page.locator("#run-again-why").inner_text())
        self.assertIn("http://***@127.0.0.1:9", page.locator("#facts").inner_text())
        self.assertNotIn("pw", page.locator("#facts").inner_text())
        self.assertEqual(self.errors, [])

    def test_items_as_a_table_expandable_and_more_on_demand(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "counted", jobid="counted-120", count="120")
        entry = daemon.wait_state(jobid, "finished")
        holder = {}

        def watch(page):
            holder["items"] = self.watch_requests(page, f"/items/shop/counted/{jobid}.jl")

        page = self.open(self.url_of(daemon) + f"/job/shop/{jobid}", watch=watch)
        ready(page)
        rows = page.locator("#items-table tbody tr.item")
        self.assertEqual(rows.count(), 50)
        self.assertEqual(page.locator("#items-table thead th").all_inner_texts(), ["#", "n"])
        self.assertEqual(rows.nth(7).locator("td").nth(1).inner_text(), "7")
        rows.nth(0).locator("button.expand").click()
        shown = page.locator("#items-table tr.item-json pre")
        self.assertEqual(json.loads(shown.inner_text()), {"n": 0})
        self.assertEqual(rows.nth(0).locator("button.expand").get_attribute("aria-expanded"),
                         "true")
        page.locator("#items-more").click()
        wait_until(lambda: rows.count() == 100, 10, "100 rows")
        page.locator("#items-more").click()
        wait_until(lambda: rows.count() == 120, 10, "120 rows")
        self.assertTrue(page.locator("#items-more").is_hidden())
        self.assertIn("120 of 120 items", page.locator("#items-note").inner_text())
        # Read by a Range from the start, never asked whole.
        asked = self.described(holder["items"])
        self.assertTrue(asked)
        self.assertEqual(asked[0][0], "bytes=0-65535")
        self.assertTrue(all(r and r.startswith("bytes=") for r, _, _ in asked))
        self.assertEqual(page.locator("#items a[download]").get_attribute("href"),
                         entry["items_url"])
        self.assertEqual(self.errors, [])

    def test_a_100_mb_log_opens_by_reading_its_tail_alone(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        tail = ["DEBUG a debugging line", "INFO a needle in the log", "WARNING a warning",
                "ERROR error in parse for http://example/one", "Traceback (most recent call last):",
                '  File "spider.py", line 9, in parse', "ValueError: no needle here",
                "CRITICAL something critical", "INFO the very last line"]
        path = seed_finished_job(directory, "big-log", tail, log_bytes=100 * 1024 * 1024)
        size = os.path.getsize(path)
        daemon = self.daemon(directory=directory)
        holder = {}

        def watch(page):
            holder["log"] = self.watch_requests(page, "/logs/shop/books/big-log.log")

        page = self.open(self.url_of(daemon) + "/job/shop/big-log", watch=watch)
        ready(page)
        lines = page.locator("#log-lines")
        self.assertEqual(self.described(holder["log"]), [(f"bytes=-{LOG_CHUNK}", 206, LOG_CHUNK)])
        self.assertTrue(lines.inner_text().rstrip().endswith("INFO the very last line"))
        self.assertEqual(int(lines.get_attribute("data-end")), size)
        start = int(lines.get_attribute("data-start"))
        self.assertGreater(start, size - LOG_CHUNK)
        self.assertRegex(page.locator("#log-note").inner_text(), r"of 10\d MiB")
        # The chart of a finished job: its three points of history.
        self.assertEqual(page.locator("#chart-counts").get_attribute("data-points"), "3")
        # Load earlier: the chunk before, ending where the tail began.
        page.locator("#log-earlier").click()
        wait_until(lambda: page.wait_for_timeout(20) or len(holder["log"]) == 2, 10,
                   "a second read")
        self.assertEqual(self.described(holder["log"])[1][0],
                         f"bytes={start - LOG_CHUNK}-{start - 1}")
        self.assertLess(int(lines.get_attribute("data-start")), start)

        # Level filter: WARNING and up shows the warning, the error with
        # its traceback, the critical line; no INFO or DEBUG line.
        page.select_option("#log-level", "WARNING")
        shown = lines.locator(".line").all_inner_texts()
        self.assertEqual([text.rstrip("\n") for text in shown], tail[2:8])
        page.select_option("#log-level", "DEBUG")
        self.assertIn("DEBUG a debugging line", lines.inner_text())
        page.select_option("#log-level", "INFO")
        self.assertNotIn("DEBUG a debugging line", lines.inner_text())
        # Search: marks every match; with "only matching lines", filters.
        # (The search redraws once typing pauses: 150 ms.)
        page.fill("#log-search", "NEEDLE")
        wait_until(lambda: lines.locator("mark").count() == 2, 5, "the search's marks")
        self.assertEqual(lines.locator("mark").all_inner_texts(), ["needle", "needle"])
        page.check("#log-only")
        self.assertEqual([t.rstrip("\n") for t in lines.locator(".line").all_inner_texts()],
                         ["INFO a needle in the log", "ValueError: no needle here"])
        self.assertIn("2 matching", page.locator("#log-note").inner_text())
        page.uncheck("#log-only")
        page.fill("#log-search", "")
        wait_until(lambda: lines.locator("mark").count() == 0, 5, "the marks to go")
        self.assertEqual(self.errors, [])

    def test_a_retrys_page_shows_its_attempts_and_what_queued_it(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
        now = time.time() - 3600
        chain = (("night-1", 1, None, "failed", 1), ("night-1.r1", 2, "night-1", "failed", 1),
                 ("night-1.r2", 3, "night-1", "finished", 0))
        for n, (jobid, attempt, retry_of, outcome, status) in enumerate(chain):
            store.add(JobRecord(id=jobid, project="shop", spider="books",
                                spider_file="/nowhere/books.py", schedule="nightly",
                                queued_by="schedule:nightly", attempt=attempt,
                                retry_of=retry_of, created=now + 100 * n,
                                upstream="books-0200" if attempt == 1 else None))
            store.claim_next("n1", ["shop"], now + 100 * n)
            store.mark_finished(jobid, outcome, now + 100 * n + 50, exit_status=status,
                                reason=f"exit {status}")
        store.close()
        daemon = self.daemon(directory=directory)
        page = self.open(self.url_of(daemon) + "/job/shop/night-1.r1")
        ready(page)
        self.assertIn("2 of 3", fact(page, "Attempt").inner_text())
        self.assertEqual(fact(page, "Retry of").locator("a")
                         .get_attribute("href"), "/job/shop/night-1")
        self.assertEqual(fact(page, "Schedule").locator("a").inner_text(), "nightly")
        # The schedules page's card of it (id schedule-NAME).
        self.assertEqual(fact(page, "Schedule").locator("a").get_attribute("href"),
                         "/schedules#schedule-nightly")
        self.assertEqual(fact(page, "Node").locator("dd").inner_text(), "n1")
        rows = page.locator("#attempts tbody tr")
        self.assertEqual(rows.count(), 3)
        self.assertEqual([rows.nth(n).locator("td").nth(1).inner_text() for n in range(3)],
                         ["night-1", "night-1.r1", "night-1.r2"])
        self.assertEqual(page.locator("#attempts tr.current").locator("td").nth(1).inner_text(),
                         "night-1.r1")
        self.assertIn("exit 1", page.locator("#why").inner_text())
        # The first attempt names the chain job it ran after.
        page.locator('#attempts a[href="/job/shop/night-1"]').click()
        ready(page)
        self.assertEqual(fact(page, "After job").locator("a")
                         .get_attribute("href"), "/job/shop/books-0200")
        self.assertEqual(self.errors, [])

    def test_a_viewer_sees_no_buttons_and_an_operator_does(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        seed_finished_job(directory, "seen-job", ["INFO done"])
        secrets = {}
        for name, role in (("viewer1", "viewer"), ("operator1", "operator")):
            secrets[name] = subprocess.run(
                [sys.executable, "-m", "netweir_serve", "token", "add", name, "--role", role,
                 "--project", "shop", "--dir", directory],
                capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        daemon = self.daemon(directory=directory, auth=("operator1", secrets["operator1"]))
        url = self.url_of(daemon) + "/job/shop/seen-job"
        viewer = self.open(url, http_credentials={"username": "viewer1",
                                                  "password": secrets["viewer1"]})
        ready(viewer)
        self.assertIn("viewer1", viewer.locator("#who").inner_text())
        self.assertEqual(viewer.locator("#job-actions button").count(), 0)
        self.assertIn("category", viewer.locator("#facts").inner_text())
        # Its connections closed first: one address may hold 8 at once.
        viewer.context.close()
        operator = self.open(url, http_credentials={"username": "operator1",
                                                    "password": secrets["operator1"]})
        ready(operator)
        self.assertEqual(operator.locator("#job-actions button").all_inner_texts(), ["Run again"])
        self.assertEqual(self.errors, [])

    def test_from_the_front_page_to_the_failed_runs_error_in_three_clicks(self):
        with open(os.path.join(self.shop, "raising.py"), "w") as f:
            f.write(RAISING.format(site=self.site.base))
        daemon = self.daemon()
        for n in range(3):
            daemon.wait_state(daemon.must_schedule("shop", "counted", jobid=f"fine-{n}",
                                                   count="2"), "finished")
        failed = daemon.must_schedule("shop", "raising", jobid="nightly-20261202T030000Z")
        entry = daemon.wait_state(failed, "finished")
        self.assertEqual(entry["outcome"], "failed")
        daemon.wait_state(daemon.must_schedule("shop", "counted", jobid="fine-after",
                                               count="2"), "finished")

        page = self.open(self.url_of(daemon) + "/")
        page.wait_for_selector("#jobs-console table tbody tr", timeout=15000)
        began, clicks = time.monotonic(), 0
        page.get_by_role("link", name="Failed", exact=True).click()   # the jobs page's quick filter
        clicks += 1
        link = page.locator(f'#jobs-console a[href="/job/shop/{failed}"]')
        link.click()
        clicks += 1
        ready(page)
        page.locator("#go-to-error").click()
        clicks += 1
        target = page.locator("#log-lines .line.target")
        target.wait_for(timeout=10000)
        elapsed = time.monotonic() - began
        self.assertTrue(target.inner_text().startswith("ERROR error in parse for"),
                        target.inner_text())
        self.assertTrue(target.is_visible())
        in_view = target.evaluate(
            "line => { const box = line.getBoundingClientRect(),"
            " pre = line.closest('pre').getBoundingClientRect();"
            " return box.top >= pre.top && box.bottom <= pre.bottom"
            " && box.top >= 0 && box.bottom <= innerHeight; }")
        self.assertTrue(in_view)
        self.assertEqual(clicks, 3)
        self.assertIn("failed", page.locator("#why").inner_text())
        # Its one point of stats on the run's own time, not spread over
        # years as uPlot spreads a lone point's axis.
        span = page.locator("#chart-counts").evaluate(
            "chart => chart.plot.scales.x.max - chart.plot.scales.x.min")
        self.assertLessEqual(span, 120)
        print(f"\nfront page to the error line: {clicks} clicks, {elapsed:.2f} s")
        # A link ending in #error opens the page at the error: the docs'
        # pictures of a failed run are taken so.
        page.goto(self.url_of(daemon) + f"/job/shop/{failed}#error")
        self.screenshots(page, "job-error", ready=lambda p: (
            ready(p), p.locator("#log-lines .line.target").wait_for(timeout=10000)))
        self.assertEqual(self.errors, [])

    def failed_job(self, directory, jobid, lines):
        """``seed_finished_job``'s job, recorded as failed (exit 1)."""
        seed_finished_job(directory, jobid, lines)
        db = sqlite3.connect(os.path.join(directory, "jobs.db"))
        db.execute("UPDATE jobs SET outcome='failed', exit_status=1 WHERE id=?", (jobid,))
        db.commit()
        db.close()

    def test_go_to_the_error_past_a_line_longer_than_a_chunk(self):
        # A line longer than a read (LOG_CHUNK) before the tail: a read of
        # it alone finds no newline. "Load earlier" read on to the line's
        # start; it once reported success without moving, and "Go to the
        # error" (a log under 4 MiB is read whole first) asked the same
        # Range for ever (314 requests in 3 s).
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        self.failed_job(directory, "long-line",
                        ["INFO start", "ERROR error in parse for http://example/one",
                         "DEBUG Scraped " + "x" * 300000]
                        + [f"INFO tail line {n}" for n in range(20)])
        daemon = self.daemon(directory=directory)
        asked = []

        def watch(page):
            page.on("request", lambda r: asked.append(r.headers.get("range"))
                    if "/logs/" in r.url else None)

        page = self.open(self.url_of(daemon) + "/job/shop/long-line", watch=watch)
        ready(page)
        lines = page.locator("#log-lines")
        self.assertEqual(int(lines.get_attribute("data-lines")), 20)
        page.locator("#log-earlier").click()
        wait_until(lambda: int(lines.get_attribute("data-start")) < 300000, 10,
                   "Load earlier to read past the long line")
        # The long line whole, and the two before it (the log's start).
        self.assertEqual(int(lines.get_attribute("data-start")), 0)
        self.assertEqual(int(lines.get_attribute("data-lines")), 23)
        page.locator("#go-to-error").click()
        target = page.locator("#log-lines .line.target")
        target.wait_for(timeout=10000)
        self.assertTrue(target.inner_text().startswith("ERROR error in parse"))
        print("log requests:", len(asked), asked)
        self.assertLess(len(asked), 10, f"asked again and again: {sorted(set(map(str, asked)))}")
        self.assertEqual(self.errors, [])

    def test_a_line_longer_than_the_longest_read_whole_is_shown_cut(self):
        # Past LONGEST_LINE (4 MiB) a line's end alone is shown, marked, and
        # the next "Load earlier" reads on before it: every read moves.
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        self.failed_job(directory, "huge-line",
                        ["ERROR error in parse for http://example/two",
                         "DEBUG Scraped " + "y" * (5 * 1048576)] + ["INFO the last line"])
        daemon = self.daemon(directory=directory)
        page = self.open(self.url_of(daemon) + "/job/shop/huge-line")
        ready(page)
        lines = page.locator("#log-lines")
        tail_start = int(lines.get_attribute("data-start"))
        page.locator("#log-earlier").click()
        page.locator("#log-lines .line.cut").wait_for(timeout=10000)
        cut_start = int(lines.get_attribute("data-start"))
        self.assertEqual(tail_start - cut_start, 4 * 1048576)
        self.assertIn("[cut: this line starts before byte", page.locator(".line.cut").inner_text())
        # "Go to the error" reads up to 4 MiB of a log this long: no error there.
        page.locator("#go-to-error").click()
        page.locator("#error-note", has_text="No error in the last").wait_for(timeout=10000)
        # The rest, by hand: the line's start, and the error before it.
        page.locator("#log-earlier").click()
        wait_until(lambda: int(lines.get_attribute("data-start")) == 0, 10, "the log's start")
        page.locator("#go-to-error").click()
        page.locator("#log-lines .line.target").wait_for(timeout=10000)
        self.assertTrue(page.locator("#log-lines .line.target").inner_text()
                        .startswith("ERROR error in parse for http://example/two"))
        self.assertEqual(self.errors, [])

    def test_items_that_are_not_objects_are_shown_in_a_value_column(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        seed_finished_job(directory, "odd-items", ["INFO done"],
                          items=["just a string", [1, 2, 3], 7, {"a": 1}])
        daemon = self.daemon(directory=directory)
        page = self.open(self.url_of(daemon) + "/job/shop/odd-items")
        ready(page)
        rows = page.locator("#items-table tbody tr.item")
        self.assertEqual(rows.count(), 4)
        self.assertEqual(page.locator("#items-table thead th").all_inner_texts(),
                         ["#", "(value)", "a"])
        cells = [rows.nth(n).locator("td").all_inner_texts()[1:] for n in range(4)]
        self.assertEqual(cells, [["just a string", ""], ["[1,2,3]", ""], ["7", ""], ["", "1"]])
        self.assertEqual(self.errors, [])

    def test_the_error_link_of_a_job_that_ended_well(self):
        # /job/P/J#error of a healthy job: no "why" section (nor its note);
        # goToError threw, and the page never said it was ready.
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        seed_finished_job(directory, "fine-job", ["INFO done", "WARNING a warning"])
        daemon = self.daemon(directory=directory)
        page = self.open(self.url_of(daemon) + "/job/shop/fine-job#error")
        ready(page)
        self.assertTrue(page.locator("#why").is_hidden())
        self.assertEqual(page.locator("#log-error-note").inner_text(),
                         "No ERROR line: this is its first warning.")
        self.assertEqual(page.locator("#log-lines .line.target").inner_text().strip(),
                         "WARNING a warning")
        self.assertEqual(self.errors, [])

    def test_a_page_refused_the_event_stream_still_learns_its_job_ended(self):
        # The service takes 4 /events streams from one address: a 5th page
        # is refused (429), which EventSource never retries. The page says
        # "not live", asks job.json now and then, and asks /events again.
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", jobid="slow-unfollowed", delay="0.3")
        daemon.wait_state(jobid, "running")
        others = self.browser().new_context()
        self.addCleanup(others.close)
        for _ in range(4):
            holder = others.new_page()
            holder.goto(self.url_of(daemon) + "/schedules")
            holder.wait_for_selector("#live[data-state=live]", timeout=15000)
        page = self.open(self.url_of(daemon) + f"/job/shop/{jobid}")
        ready(page)
        page.wait_for_selector("#live[data-state=off]", timeout=10000)
        self.assertEqual(page.locator("#live").inner_text(), "not live")
        daemon.post("cancel.json", {"project": "shop", "job": jobid, "signal": "KILL"})
        page.locator(".job-head .chip.cancelled").wait_for(timeout=30000)
        self.assertEqual(page.locator("#live").inner_text(), "not live")
        self.assertEqual(self.errors, [])
