"""The jobs page (/) in a real browser (Debian's chromium, tests/browser.py)
against a real service: filters and paging over 10,000 finished jobs kept
in the address, a running job appearing and moving to finished without a
reload, Cancel and the Run form, and what a viewer token does not see.

The finished jobs are written into the SQLite job table before the
service starts, as the service that ran them would have left them
(``seed_finished``), 10,000 rows in one transaction.
"""

import os
import socket
import sqlite3
import sys
import tempfile
import time
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

from twisted.internet.task import Clock

from netweir_serve.store.sqlite import SQLiteJobStore

from .browser import PHONE, BrowserMixin
from .processes import wait_until
from .test_access_live import token_command
from .test_jobs import CrawlTestCase
from .test_pages import assert_valid_html

# What a job of the seeded table is, by its number: mostly finished, every
# 7th failed (exit 1), every 11th of the rest degraded, every 13th
# cancelled; every 3rd a films job; every 5th of a schedule; the node
# another (crawl9) for every 4th.
SEED_COLUMNS = ("key", "id", "project", "project_key", "spider", "spider_file", "settings",
                "arguments", "priority", "state", "outcome", "exit_status", "created",
                "start_time", "end_time", "reason", "node", "schedule", "health",
                "health_reasons", "items", "pages", "errors", "attempt", "locks")


def seeded_job(n, count, now, node):
    """The row of the ``n``th of ``count`` seeded jobs (0 the oldest): a
    tuple in SEED_COLUMNS's order."""
    jobid = f"done-{n:05d}"
    end = now - 60 - (count - 1 - n) * 30.0
    start = end - 20 - n % 40
    outcome, exit_status, reason, health, reasons = "finished", 0, "exit 0", "healthy", "[]"
    if n % 7 == 3:
        outcome, exit_status, reason, health = "failed", 1, "exit 1", None
    elif n % 13 == 5:
        outcome, exit_status, reason, health = "cancelled", -15, "cancel.json", None
    elif n % 11 == 2:
        health, reasons = "degraded", '["items 2 < min_items 5"]'
    spider = "films" if n % 3 == 0 else "books"
    items = (n * 37) % 500 if outcome == "finished" else n % 9
    return (jobid.lower(), jobid, "shop", "shop", spider, f"/nowhere/{spider}.py", "[]", "[]",
            0.0, "finished", outcome, exit_status, start - 5, start, end, reason,
            "crawl9" if n % 4 == 1 else node, "nightly" if n % 5 == 0 else None, health,
            reasons, items, items + 3, n % 3, 1, "[]")


def seed_finished(directory, count, now, node=None):
    """``count`` finished jobs of project shop (done-00000 the oldest, ended
    30 s apart, the newest a minute before ``now``) in DIR/jobs.db, the
    table made by the store as the service makes it. Their ids, oldest
    first."""
    node = node or socket.gethostname()
    path = os.path.join(directory, "jobs.db")
    SQLiteJobStore(path, Clock()).close()   # the schema, migrated
    rows = [seeded_job(n, count, now, node) for n in range(count)]
    with sqlite3.connect(path) as db:
        marks = ", ".join("?" for _ in SEED_COLUMNS)
        db.executemany(f"INSERT INTO jobs ({', '.join(SEED_COLUMNS)}) VALUES ({marks})", rows)
        db.execute("UPDATE store_meta SET version = version + 1")
    db.close()
    return [row[1] for row in rows]


def drawn(page):
    """When (ms from the navigation's start) the page had drawn its first
    page of finished jobs: jobs.js's mark, set once the rows are in."""
    return page.evaluate("performance.getEntriesByName('jobs:finished-drawn')[0].startTime")


class ConsoleCase(CrawlTestCase, BrowserMixin):
    """A service with ``count`` seeded finished jobs; pages of it."""

    def seeded(self, count, *args, auth=None, directory=None):
        directory = directory or tempfile.mkdtemp(prefix="dir-", dir=self.base)
        self.ids = seed_finished(directory, count, time.time())
        return self.daemon("--keep", str(count + 100), *args, directory=directory, auth=auth)

    def page(self, daemon, path="/", **kw):
        page = self.open(f"http://127.0.0.1:{daemon.port}{path}", **kw)
        page.locator("#jobs-console[data-ready]").wait_for(state="attached", timeout=15000)
        return page

    def rows(self, page, section="finished"):
        return page.locator(f"#jobs-console #{section} tbody tr").evaluate_all(
            "rows => rows.map(row => row.dataset.job)")

    def query(self, page):
        return {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}

    def live(self, page):
        page.locator('#live[data-state="live"]').wait_for(timeout=15000)


class MarkupTests(CrawlTestCase):
    def test_the_front_page_is_the_console_and_keeps_its_links(self):
        daemon = self.daemon()
        status, headers, body = daemon.call("GET", "/")
        self.assertEqual(status, 200)
        text = body.decode()
        assert_valid_html(self, text)
        for marker in ('id="jobs-console"', 'src="/console/console.js"',
                       'src="/console/jobs.js"', 'href="/jobs"',
                       'href="/listspiders.json?project=shop"', 'href="/metrics"'):
            self.assertIn(marker, text)
        # Its sparklines are SVG: uPlot is not loaded on the front page.
        self.assertNotIn("uPlot", text)

    def test_the_script_is_served_and_the_old_dashboard_is_gone(self):
        daemon = self.daemon()
        status, headers, body = daemon.call("GET", "/console/jobs.js")
        self.assertEqual((status, headers["Content-Type"]), (200, "text/javascript; charset=utf-8"))
        self.assertIn(b"listjobs.json", body)
        for path in ("/dashboard/dashboard.js", "/dashboard/dashboard.css",
                     "/console/pages.py", "/console/"):
            self.assertEqual(daemon.call("GET", path)[0], 404, path)


class ManyJobsTests(ConsoleCase):
    """10,000 finished jobs: a page at a time, filtered, in the address."""

    def test_filters_and_paging_over_ten_thousand_finished_jobs(self):
        daemon = self.seeded(10_000)
        asked = []

        def watch(page):
            page.on("request", lambda request: asked.append(request.url))

        page = self.open(f"http://127.0.0.1:{daemon.port}/", watch=watch)
        page.locator("#jobs-console table tbody tr").first.wait_for(timeout=15000)
        print(f"\nfirst paint of / with 10,000 finished jobs, a cold service:"
              f" {drawn(page):.0f} ms", file=sys.stderr)
        # Once the service has the table's paged order (made once per change
        # of the table): what the page itself costs.
        warm = self.open(f"http://127.0.0.1:{daemon.port}/")
        warm.locator("#jobs-console table tbody tr").first.wait_for(timeout=15000)
        print(f"first paint again, the table unchanged: {drawn(warm):.0f} ms", file=sys.stderr)
        # Its connections go with its context: the service takes 8 at
        # most from one address (security.md), and Chromium keeps idle ones.
        warm.context.close()
        self.live(page)
        # One page of 50, newest first, and no request per job.
        newest = list(reversed(self.ids))
        self.assertEqual(self.rows(page), newest[:50])
        listings = [url for url in asked if "/listjobs.json" in url]
        self.assertEqual(len(listings), 3, listings)
        self.assertTrue(all("limit=" in url for url in listings), listings)
        self.assertEqual([url for url in asked if "jobstats.json" in url], [])

        # Each job links to its page, its spider to the spider's.
        row = page.locator('#finished tr[data-job="done-09999"]')
        self.assertEqual(row.locator("td.id a").get_attribute("href"), "/job/shop/done-09999")
        self.assertEqual(row.locator('a[href="/spider/shop/films"]').count(), 1)
        # A job another node ran names it; a degraded run is marked, why on hover.
        self.assertEqual(page.locator('#finished tr[data-job="done-09997"] td.node')
                         .inner_text(), "crawl9")
        degraded = page.locator('#finished tr[data-job="done-09990"]')
        self.assertIn("degraded", degraded.get_attribute("class"))
        self.assertEqual(degraded.locator(".chip.degraded").get_attribute("title"),
                         "items 2 < min_items 5")
        # Times in the browser's zone, UTC on hover.
        when = row.locator("time").first
        utc = datetime.fromisoformat(when.get_attribute("datetime").replace("Z", "+00:00"))
        self.assertEqual(when.inner_text(), utc.astimezone().strftime("%Y-%m-%d %H:%M:%S"))
        self.assertEqual(when.get_attribute("title"),
                         utc.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
        # Counts right-aligned, from the listing.
        items = row.locator('td[data-label="Items"]')
        expected = seeded_job(9999, 10_000, 0, "n")[SEED_COLUMNS.index("items")]
        self.assertEqual(items.inner_text(), f"{expected:,}")
        self.assertEqual(items.evaluate("td => getComputedStyle(td).textAlign"), "right")

        # Next, Next, Previous, and Back: each page a cursor in the address.
        page.locator("#finished button.next").click()
        wait_until(lambda: self.rows(page)[:1] == [newest[50]], 10, "the second page")
        self.assertEqual(self.rows(page), newest[50:100])
        second = page.url
        self.assertIn("before", self.query(page))
        page.locator("#finished button.next").click()
        wait_until(lambda: self.rows(page)[:1] == [newest[100]], 10, "the third page")
        page.locator("#finished button.previous").click()
        wait_until(lambda: self.rows(page)[:1] == [newest[50]], 10, "back to the second")
        self.assertEqual(page.url, second)
        page.go_back()
        wait_until(lambda: self.rows(page)[:1] == [newest[100]], 10, "Back to the third")
        page.locator("#finished button.newest").click()
        wait_until(lambda: self.rows(page)[:1] == [newest[0]], 10, "the newest")

        # The failed runs: one click.
        page.locator("#jobs-console .quick a", has_text="Failed").click()
        failed = [j for j in newest if int(j[5:]) % 7 == 3]
        # The whole page, not its first row: the newest job is a failed one
        # too, so the unfiltered page's first row matches as well.
        wait_until(lambda: self.rows(page) == failed[:50], 10, "the failed filter")
        self.assertEqual(self.query(page), {"outcome": "failed"})
        self.assertTrue(page.locator("#running").is_hidden())
        self.assertEqual(set(page.locator("#finished td.outcome .chip").all_inner_texts()),
                         {"failed"})
        # Narrowed further from the form: films of the schedule nightly.
        page.locator("#filter-spider").fill("films")
        page.locator("#filter-schedule").fill("NIGHTLY")
        page.locator("#filter-schedule").press("Enter")
        wanted = [j for j in failed if int(j[5:]) % 3 == 0 and int(j[5:]) % 5 == 0]
        wait_until(lambda: self.rows(page)[:1] == wanted[:1], 10, "failed films of nightly")
        self.assertEqual(self.rows(page), wanted[:50])
        self.assertEqual(self.query(page), {"outcome": "failed", "spider": "films",
                                            "schedule": "NIGHTLY"})
        # The address is the view: opened anew, the same rows and form.
        again = self.page(daemon, urlsplit(page.url).path + "?" + urlsplit(page.url).query)
        wait_until(lambda: self.rows(again)[:1] == wanted[:1], 10, "the bookmarked view")
        self.assertEqual(again.locator("#filter-spider").input_value(), "films")
        self.assertEqual(again.locator("#filter-outcome").input_value(), "failed")
        self.assertEqual(again.locator("#filter-schedule").input_value(), "NIGHTLY")
        again.context.close()
        # Text in the job id, a node, with the others cleared.
        page.locator("#jobs-console a.clear").click()
        wait_until(lambda: self.query(page) == {}, 10, "the filters cleared")
        page.locator("#filter-q").fill("0999")
        page.locator("#filter-node").fill("crawl9")
        page.locator("#filter-node").press("Enter")
        wait_until(lambda: self.rows(page) == ["done-09997", "done-09993"], 10,
                   "done-0999x of crawl9")

        # Sorting: this page, by a column, kept in the address.
        page.locator("#jobs-console a.clear").click()
        wait_until(lambda: self.rows(page)[:1] == [newest[0]], 10, "all jobs again")
        page.locator('#finished th button[data-sort="items"]').click()
        shown = [int(t.replace(",", "")) for t in
                 page.locator('#finished td[data-label="Items"]').all_inner_texts()]
        self.assertEqual(shown, sorted(shown, reverse=True))
        self.assertEqual(set(self.rows(page)), set(newest[:50]))
        self.assertEqual(self.query(page), {"sort": "-items"})
        self.assertEqual(page.locator('#finished th[aria-sort="descending"]').count(), 1)

        # From the front page to a failed run's page: Failed, then the job.
        page.goto(f"http://127.0.0.1:{daemon.port}/")
        page.locator("#jobs-console .quick a", has_text="Failed").click()
        wait_until(lambda: self.rows(page)[:1] == failed[:1], 10, "the failed filter")
        page.locator(f'#finished tr[data-job="{failed[0]}"] td.id a').click()
        page.wait_for_url(f"**/job/shop/{failed[0]}")
        self.assertEqual(self.errors, [])


class LiveTests(ConsoleCase):
    def test_a_running_job_appears_live_moves_to_finished_and_is_cancelled_with_its_button(self):
        daemon = self.seeded(120, "--max-jobs", "2")
        page = self.page(daemon)
        self.live(page)
        page.evaluate("window.notReloaded = true")
        self.assertEqual(self.rows(page, "running"), [])

        jobid = daemon.must_schedule("shop", "slow", delay="0.2", jobid="slow-0915")
        row = page.locator(f'#running tr[data-job="{jobid}"]')
        row.wait_for(timeout=20000)
        # Its items grow on the page as its stats come (every ~5 s): a line.
        row.locator("svg.spark polyline").wait_for(timeout=30000)
        # A job that ends comes first among the finished, the page not reloaded.
        quick = daemon.must_schedule("shop", "echo", jobid="echo-0916")
        wait_until(lambda: self.rows(page)[:1] == [quick], 30, "echo-0916 first of finished")
        self.assertEqual(page.locator(f'#finished tr[data-job="{quick}"] .chip').first
                         .inner_text(), "finished")

        self.screenshots(page, "jobs", ready=lambda page: (
            page.locator(f'#running tr[data-job="{jobid}"]').wait_for(timeout=15000),
            page.locator("#finished tbody tr").first.wait_for(timeout=15000)))
        page.evaluate("window.notReloaded = true")

        row.locator("button", has_text="Cancel").click()
        finished = page.locator(f'#finished tr[data-job="{jobid}"]')
        finished.wait_for(timeout=30000)
        self.assertEqual(finished.locator(".chip").first.inner_text(), "cancelled")
        self.assertEqual(row.count(), 0)
        self.assertEqual(self.rows(page)[0], jobid)
        self.assertTrue(page.evaluate("window.notReloaded === true"))
        state, entry = daemon.find(jobid)
        self.assertEqual((state, entry["outcome"]), ("finished", "cancelled"))
        self.assertEqual(self.errors, [])

    def test_a_listing_older_than_an_event_does_not_bring_a_job_back(self):
        daemon = self.seeded(3)
        running = daemon.must_schedule("shop", "slow", delay="0.2", jobid="slow-late")
        daemon.wait_state(running, "running")
        held = []

        def watch(page):
            # The running list's answer is read now (the job runs) and
            # handed to the page only after the job has ended.
            page.route("**/listjobs.json?*state=running*",
                       lambda route: held.append((route, route.fetch())))

        page = self.open(f"http://127.0.0.1:{daemon.port}/", watch=watch)
        self.live(page)
        wait_until(lambda: held, 15, "the running list asked for")
        daemon.post("cancel.json", {"project": "shop", "job": running})
        page.locator('#finished tr[data-job="slow-late"]').wait_for(timeout=30000)
        route, answer = held[0]
        self.assertIn(b'"slow-late"', answer.body())
        route.fulfill(response=answer)
        page.locator("#running p.empty").wait_for(timeout=15000)
        self.assertEqual(self.rows(page, "running"), [])
        self.assertEqual(self.rows(page)[0], "slow-late")
        self.assertEqual(self.errors, [])

    def test_a_queued_job_is_listed_and_cancelled_from_the_queue(self):
        daemon = self.seeded(3, "--max-jobs", "1")
        busy = daemon.must_schedule("shop", "slow", delay="0.2", jobid="busy")
        daemon.wait_state(busy, "running")
        page = self.page(daemon)
        self.live(page)
        waiting = daemon.must_schedule("shop", "books", jobid="waits")
        row = page.locator('#queued tr[data-job="waits"]')
        row.wait_for(timeout=15000)
        self.assertEqual(row.locator("td.why").inner_text(), "a free slot")
        row.locator("button", has_text="Cancel").click()
        page.locator('#finished tr[data-job="waits"]').wait_for(timeout=15000)
        self.assertEqual(self.rows(page, "queued"), [])
        self.assertEqual(daemon.find(waiting)[1]["outcome"], "cancelled")
        daemon.post("cancel.json", {"project": "shop", "job": busy})
        self.assertEqual(self.errors, [])


class RunFormTests(ConsoleCase):
    def test_the_run_form_starts_a_job_once_a_spider_is_chosen(self):
        daemon = self.seeded(3)
        page = self.page(daemon)
        form = page.locator("#run")
        form.locator("select[name=spider] option[value=echo]").wait_for(state="attached",
                                                                        timeout=15000)
        form.locator("select[name=project]").select_option("shop")
        form.locator("select[name=spider] option[value=counted]").wait_for(state="attached",
                                                                           timeout=15000)
        self.assertEqual(form.locator("select[name=spider]").input_value(), "")
        self.assertTrue(form.locator("button[type=submit]").is_disabled())
        form.locator("select[name=spider]").select_option("echo")
        form.locator("button[type=submit]").click()
        form.locator(".result", has_text="queued").wait_for(timeout=15000)
        jobid = form.locator(".result a").inner_text()
        self.assertEqual(form.locator(".result a").get_attribute("href"), f"/job/shop/{jobid}")
        self.assertEqual(daemon.find(jobid)[1]["spider"], "echo")
        # It shows on the page by itself, and ends there.
        wait_until(lambda: jobid in self.rows(page), 30, "the job run from the form, finished")
        self.assertEqual(self.errors, [])


class ViewerTests(ConsoleCase):
    def test_a_viewer_sees_no_run_form_or_buttons_and_an_operator_does(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        add = ("add", "--dir", directory)
        secrets = {name: token_command(*add, name, "--role", role, "--project", "shop")
                   for name, role in (("viewer", "viewer"), ("operator", "operator"))}
        admin = token_command(*add, "root", "--role", "admin")
        daemon = self.seeded(3, "--max-jobs", "1", directory=directory, auth=("root", admin))
        running = daemon.must_schedule("shop", "slow", delay="0.2", jobid="slow-v")
        daemon.wait_state(running, "running")
        daemon.must_schedule("shop", "books", jobid="queued-v")
        looks = {}
        for name, secret in secrets.items():
            page = self.page(daemon, http_credentials={"username": name, "password": secret})
            page.locator('#running tr[data-job="slow-v"]').wait_for(timeout=15000)
            page.locator('#queued tr[data-job="queued-v"]').wait_for(timeout=15000)
            page.locator("#who", has_text=name).wait_for(timeout=15000)
            if name == "operator":
                page.locator("#run").wait_for(timeout=15000)
                page.locator('#running tr[data-job="slow-v"] button.cancel').wait_for(
                    timeout=15000)
            looks[name] = (page.locator("#run").count(),
                           page.locator("#jobs-console button.cancel").count())
            # Its connections closed: a browser keeps several open to the
            # host, and two pages' of them, with their /events streams, could
            # fill the 8 a client address may hold, which this test's own
            # requests come from too.
            page.context.close()
        self.assertEqual(looks, {"viewer": (0, 0), "operator": (1, 2)})
        daemon.post("cancel.json", {"project": "shop", "job": "queued-v"})
        daemon.post("cancel.json", {"project": "shop", "job": running})
        self.assertEqual(self.errors, [])

    def test_at_phone_width_each_job_is_a_card(self):
        daemon = self.seeded(5)
        page = self.page(daemon, size=PHONE)
        page.locator("#finished tbody tr").first.wait_for(timeout=15000)
        self.assertEqual(page.locator("#finished thead").evaluate(
            "head => getComputedStyle(head).display"), "none")
        overflow = page.evaluate("document.documentElement.scrollWidth"
                                 " - document.documentElement.clientWidth")
        self.assertLessEqual(overflow, 0)
        self.assertEqual(self.errors, [])
