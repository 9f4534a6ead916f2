"""The schedules page (/schedules, console/schedules.js) and the spider
page (/spider/PROJECT/SPIDER, console/spider.js) in a real browser
(Debian's chromium) against a real service: a schedule added, refused
with a bad cron shown beside its field, edited, paused with a note,
resumed, run now (a real crawl) and deleted from the forms; its rule in
words and next five runs; a viewer's page without buttons; a spider's runs
charted with the degraded one marked, the medians and its policy."""

import os
import socket
import subprocess
import sys
import tempfile
import time

from twisted.internet.task import Clock

from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore

from .browser import BrowserMixin
from .processes import wait_until
from .test_console_job import seed_finished_job
from .test_jobs import CrawlTestCase


def ready(page, timeout=30000):
    page.wait_for_selector("body[data-ready='1']", timeout=timeout)


def url_of(daemon):
    return f"http://127.0.0.1:{daemon.port}"


def token(directory, name, role, *projects):
    scope = [arg for project in projects for arg in ("--project", project)]
    return subprocess.run(
        [sys.executable, "-m", "netweir_serve", "token", "add", name, "--role", role, *scope,
         "--dir", directory], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()


# The items of the seeded runs of shop/books: the last fell below half the
# median of the five before it (items_drop=50%), so it ended degraded.
SEEDED_ITEMS = (100, 110, 105, 120, 115, 20)


def seed_runs(directory):
    """Six finished shop/books runs an hour apart, judged as the service
    judges an end (store.job_table), their runtimes 60 to 85 s."""
    store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
    policy = JobPolicy(items_drop=50.0).to_json()
    now = time.time()
    for n, items in enumerate(SEEDED_ITEMS):
        start = now - 3600 * (len(SEEDED_ITEMS) - n)
        store.add(JobRecord(id=f"books-{n}", project="shop", spider="books",
                            spider_file="/nowhere/books.py", created=start - 1, policy=policy))
        store.claim_next(socket.gethostname(), ["shop"], start)
        store.mark_finished(f"books-{n}", "finished", start + 60 + 5 * n, exit_status=0,
                            reason="exit 0", stats={"items": items, "fetched": items + 10,
                                                    "failed": 0})
    store.close()


class SchedulesPageTests(BrowserMixin, CrawlTestCase):
    def card(self, page, name):
        return page.locator(f"article.schedule[data-name='{name}']")

    def test_a_schedule_added_edited_paused_run_now_and_deleted_from_the_forms(self):
        daemon = self.daemon("--max-jobs", "2")
        page = self.open(url_of(daemon) + "/schedules")
        ready(page)
        self.assertTrue(page.locator("#no-schedules").is_visible())
        page.click("#add-schedule summary")
        form = page.locator("#add-form")
        form.locator("select[name=project]").select_option("shop")
        page.wait_for_selector("#add-form select[name=spider] option[value=books]", state="attached")
        form.locator("select[name=spider]").select_option("books")
        form.locator("input[name=name]").fill("nightly")
        form.locator("input[name=cron]").fill("61 * * * *")
        form.locator("input[name=tz]").fill("Europe/Berlin")
        form.locator("button[type=submit]").click()
        # The API's refusal, beside the cron field it names.
        error = form.locator("label:has(input[name=cron]) + .field-error")
        error.wait_for()
        self.assertIn("cron '61 * * * *' is not a cron expression: bad minute '61'",
                      error.inner_text())
        self.assertEqual(form.locator("input[name=cron]").get_attribute("aria-invalid"), "true")
        self.assertEqual(daemon.get("listschedules.json")[1]["schedules"], [])

        form.locator("input[name=cron]").fill("0 3 * * *")
        form.locator("button[type=submit]").click()
        card = self.card(page, "nightly")
        card.wait_for()
        self.assertEqual(form.locator(".field-error").count(), 0)
        self.assertEqual(card.locator(".rule").inner_text(), "every day at 03:00 Europe/Berlin")
        upcoming = daemon.get("listschedules.json", {"upcoming": "5"})[1]["schedules"][0]["upcoming"]
        self.assertEqual(card.locator("ol.upcoming time").evaluate_all(
            "times => times.map(t => t.getAttribute('datetime'))"),
            [time_iso(due) for due in upcoming])

        # Edit: a new time; the words follow.
        card.get_by_role("button", name="Edit").click()
        edit = card.locator("form.edit-form")
        edit.locator("input[name=cron]").fill("30 4 * * 1-5")
        edit.locator("button[type=submit]").click()
        wait_until(lambda: card.locator(".rule").inner_text()
                   == "on Monday to Friday at 04:30 Europe/Berlin", 10, "the edit shown")
        self.assertEqual(self.entry(daemon, "nightly")["cron"], "30 4 * * 1-5")

        # Pause with a note; resume.
        card.get_by_role("button", name="Pause…").click()
        card.locator("form.pause-form input[name=note]").fill("the shop is being moved")
        card.locator("form.pause-form button[type=submit]").click()
        card.locator(".note").wait_for()
        self.assertIn("the shop is being moved", card.locator(".note").inner_text())
        self.assertIn("none while paused", card.inner_text())
        entry = self.entry(daemon, "nightly")
        self.assertEqual((entry["paused"], entry["note"]), (True, "the shop is being moved"))
        card.get_by_role("button", name="Resume").click()
        card.locator(".note").wait_for(state="detached")
        self.assertFalse(self.entry(daemon, "nightly")["paused"])

        # Run now: a real crawl, which then shows among its last runs.
        card.get_by_role("button", name="Run now").click()
        queued = card.locator(".said a")
        queued.wait_for()
        jobid = queued.inner_text()
        self.assertTrue(jobid.startswith("nightly-"), jobid)
        self.assertEqual(queued.get_attribute("href"), f"/job/shop/{jobid}")
        daemon.wait_state(jobid, "finished")
        card.locator(f".runs a[href='/job/shop/{jobid}']").wait_for(timeout=20000)
        self.assertIn("healthy", card.locator(".runs").inner_text())
        wait_until(lambda: card.locator("dl.counts dd").first.inner_text() == "1", 10,
                   "its run counted")

        # Backfill: a reversed range refused beside 'to'; then the one due
        # time of a weekday morning in the past (read in the schedule's zone).
        card.get_by_role("button", name="Backfill…").click()
        backfill = card.locator("form.backfill-form")
        backfill.locator("input[name=from]").fill("2026-11-27T05:00")
        backfill.locator("input[name=to]").fill("2026-11-27T04:00")
        backfill.locator("button[type=submit]").click()
        refusal = backfill.locator("label:has(input[name=to]) + .field-error")
        refusal.wait_for()
        self.assertIn("parameter 'to'", refusal.inner_text())
        day = past_weekday()
        backfill.locator("input[name=from]").fill(f"{day}T04:00")
        backfill.locator("input[name=to]").fill(f"{day}T05:00")
        backfill.locator("button[type=submit]").click()
        wait_until(lambda: card.locator(".said").inner_text() == "Queued 1 job(s)", 10,
                   "the backfill said")
        self.assertEqual(backfill.count(), 0)

        # Delete: asked twice.
        delete = card.get_by_role("button", name="Delete")
        delete.click()
        card.get_by_role("button", name="Delete: sure?").click()
        card.wait_for(state="detached")
        self.assertEqual(daemon.get("listschedules.json")[1]["schedules"], [])
        self.assertEqual(self.errors, [])

    def entry(self, daemon, name):
        return daemon.get("listschedules.json", {"name": name})[1]["schedules"][0]

    def test_a_viewer_sees_no_buttons_and_the_page_follows_changes_live(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        viewer = token(directory, "viewer1", "viewer", "shop")
        root = token(directory, "root", "admin")
        daemon = self.daemon("--max-jobs", "2", directory=directory, auth=("root", root))
        for params in ({"name": "nightly", "cron": "0 3 * * *", "tz": "Europe/Berlin",
                        "jitter": "10m"},
                       {"name": "quarter", "every": "15m", "overlap": "buffer_one"},
                       {"name": "details", "after": "books", "on": "healthy", "spider": "echo"},
                       {"name": "weekdays", "cron": "30 9 * * 1-5", "tz": "America/New_York"}):
            status, answer = daemon.post("addschedule.json",
                                         {"project": "shop", "spider": "books", **params})
            self.assertEqual(status, 200, answer)
        status, answer = daemon.post("runschedule.json", {"project": "shop", "name": "nightly"})
        daemon.wait_state(answer["jobid"], "finished")
        daemon.post("pauseschedule.json", {"project": "shop", "name": "weekdays",
                                           "note": "the shop's sale week: no prices to read"})
        daemon.post("addschedule.json", {"project": "news", "spider": "books", "every": "1h",
                                          "name": "news-hourly"})

        page = self.open(url_of(daemon) + "/schedules",
                         http_credentials={"username": "viewer1", "password": viewer})
        ready(page)
        page.wait_for_selector("article.schedule[data-name='weekdays'] .rule")
        # Its project's schedules alone, and no button, no form.
        self.assertEqual(page.locator("article.schedule").evaluate_all(
            "cards => cards.map(c => c.dataset.name)"), ["nightly", "quarter", "details",
                                                         "weekdays"])
        self.assertEqual(page.locator("main button").count(), 0)
        self.assertEqual(page.locator("#add-schedule").count(), 0)
        nightly = self.card(page, "nightly")
        self.assertEqual(nightly.locator("ol.upcoming li").count(), 5)
        self.assertIn("its job starting", nightly.locator("ol.upcoming li").first.inner_text())
        self.assertEqual(self.card(page, "quarter").locator(".rule").inner_text(), "every 15 min")
        self.assertEqual(self.card(page, "details").locator(".rule").inner_text(),
                         "after books when healthy")
        weekdays = self.card(page, "weekdays")
        self.assertEqual(weekdays.locator(".rule").inner_text(),
                         "on Monday to Friday at 09:30 America/New_York")
        self.assertIn("sale week", weekdays.locator(".note").inner_text())
        nightly.locator(".runs tbody tr").wait_for()

        # Live: resumed elsewhere, the card follows without a reload.
        daemon.post("resumeschedule.json", {"project": "shop", "name": "weekdays"})
        weekdays.locator(".note").wait_for(state="detached")
        self.assertEqual(weekdays.locator("ol.upcoming li").count(), 5)
        daemon.post("pauseschedule.json", {"project": "shop", "name": "weekdays",
                                           "note": "the shop's sale week: no prices to read"})
        weekdays.locator(".note").wait_for()

        # An admin's page has the buttons; its pictures for the docs (the
        # viewer's page closed: its /events stream counts against the caps;
        # its context too, whose kept-alive connections count as well).
        page.context.close()
        admin = self.open(url_of(daemon) + "/schedules",
                          http_credentials={"username": "root", "password": root})
        ready(admin)
        admin.wait_for_selector("article.schedule[data-name='nightly'] .actions button")
        self.assertEqual(self.card(admin, "nightly").locator(".actions button:visible").all_inner_texts(),
                         ["Edit", "Pause…", "Run now", "Backfill…", "Delete"])

        def drawn(shot):
            ready(shot)
            shot.wait_for_selector("article.schedule[data-name='nightly'] .runs tbody tr")
            shot.wait_for_selector("article.schedule[data-name='news-hourly'] .actions button")
            shot.wait_for_selector("#live[data-state=live]")
        self.screenshots(admin, "schedules", drawn)
        self.assertEqual(self.errors, [])


def past_weekday():
    """A Monday to Friday at least two days ago, as YYYY-MM-DD."""
    from datetime import date, timedelta
    day = date.today() - timedelta(days=2)
    while day.weekday() > 4:
        day -= timedelta(days=1)
    return day.isoformat()


def time_iso(text):
    """An ISO 8601 time with an offset as the browser's toISOString() writes it."""
    from datetime import datetime, timezone
    moment = datetime.fromisoformat(text).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


class SpiderPageTests(BrowserMixin, CrawlTestCase):
    def test_its_runs_charted_the_degraded_one_marked_with_the_medians_and_policy(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        seed_runs(directory)
        daemon = self.daemon("--max-jobs", "2", "--policy", "shop/books:items_drop=50,timeout=1h",
                             directory=directory)
        daemon.post("addschedule.json", {"project": "shop", "spider": "books",
                                         "cron": "0 3 * * *", "name": "nightly"})
        page = self.open(url_of(daemon) + "/spider/shop/books")
        ready(page)
        page.wait_for_selector("#chart-counts canvas")
        page.wait_for_selector("#chart-runtime canvas")
        runs = daemon.get("runs.json", {"project": "shop", "spider": "books"})[1]
        # The medians the checks use: of the five healthy runs before.
        self.assertEqual(runs["medians"], {"items": 110, "pages": 120, "runtime": 70})
        self.assertEqual(page.locator("#medians dd").all_inner_texts(),
                         ["110", "120", "1 min 10 s"])
        # Every run linked to its job page, the degraded one marked.
        self.assertEqual(page.locator("#runs tbody a").evaluate_all(
            "links => links.map(a => a.getAttribute('href'))"),
            [f"/job/shop/books-{n}" for n in reversed(range(len(SEEDED_ITEMS)))])
        degraded = page.locator("#runs tr.degraded")
        self.assertEqual(degraded.count(), 1)
        self.assertIn("items 20 < 50% of median 110", degraded.inner_text())
        # The chart's series: items, pages and the degraded marks.
        labels = page.locator("#chart-counts .u-legend th").all_inner_texts()
        self.assertEqual([label.strip() for label in labels][1:], ["items", "pages", "degraded"])
        policy = page.locator("#policy").inner_text()
        self.assertIn("items_drop", policy)
        self.assertIn("timeout", policy)
        self.assertIn("every day at 03:00", page.locator("main").inner_text())

        def drawn(shot):
            ready(shot)
            shot.wait_for_selector("#chart-runtime canvas")
            shot.wait_for_selector("#live[data-state=live]")
        self.screenshots(page, "spider", drawn)
        self.assertEqual(self.errors, [])

    def test_its_run_times_are_right_in_another_zone(self):
        # runs.json's start_time and end_time are the service's local time
        # without a zone: read as the browser's, they were off by the
        # difference. Its ``at`` (epoch seconds) is what the page shows.
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        seed_finished_job(directory, "zoned", ["INFO done"])
        daemon = self.daemon(directory=directory, env={"TZ": "UTC"})
        run = daemon.get("runs.json", {"project": "shop", "spider": "books"})[1]["runs"][0]
        job = daemon.get("job.json", {"job": "zoned"})[1]["job"]
        self.assertEqual(run["at"], job["at"])
        context = self.browser().new_context(timezone_id="Asia/Tokyo")
        self.addCleanup(context.close)
        page = context.new_page()
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.goto(url_of(daemon) + "/spider/shop/books")
        ready(page)
        shown = page.locator("#runs time").first.get_attribute("datetime")
        shown_epoch = page.evaluate("t => Date.parse(t) / 1000", shown)
        print("runs.json end_time", run["end_time"], "shown", shown, "ended", job["at"]["ended"])
        self.assertLess(abs(shown_epoch - job["at"]["ended"]), 1)
        # A run ending redraws the page: the old charts destroyed (their
        # resize observers let go), one canvas in each chart.
        page.wait_for_selector("#chart-counts canvas")
        daemon.wait_state(daemon.must_schedule("shop", "books", jobid="books-again"), "finished")
        page.locator('#runs a[href="/job/shop/books-again"]').wait_for(timeout=15000)
        self.assertEqual(page.locator("#chart-counts canvas").count(), 1)
        self.assertEqual(page.locator("#chart-runtime canvas").count(), 1)
        self.assertEqual(self.errors, [])


class StreamTests(BrowserMixin, CrawlTestCase):
    def test_a_fifth_console_page_is_told_it_is_not_live_and_asks_again(self):
        # The service takes 4 /events streams from one address
        # (web/limits.py); the 5th page is refused (429), and EventSource
        # does not retry an HTTP error: the page said "reconnecting…" for
        # ever. It says "not live" now, and asks again later (5 s, 10 s,
        # ... 60 s), live once a stream is free.
        daemon = self.daemon()
        context = self.browser().new_context()
        self.addCleanup(context.close)
        pages = []
        for n in range(5):
            page = context.new_page()
            page.on("pageerror", lambda e: self.errors.append(str(e)))
            page.goto(url_of(daemon) + "/schedules")
            ready(page)
            pages.append(page)
        for page in pages[:4]:
            page.wait_for_selector("#live[data-state=live]", timeout=15000)
        last = pages[-1]
        last.wait_for_selector("#live[data-state=off]", timeout=15000)
        self.assertEqual(last.locator("#live").inner_text(), "not live")
        # A change made meanwhile is read when the stream comes: a resync.
        daemon.post("addschedule.json", {"project": "shop", "spider": "books",
                                         "cron": "0 3 * * *", "name": "meanwhile"})
        pages[0].close()
        last.wait_for_selector("#live[data-state=live]", timeout=30000)
        last.locator("#schedule-meanwhile").wait_for(timeout=10000)
        self.assertEqual(self.errors, [])

    def test_a_link_to_a_schedule_scrolls_to_its_card(self):
        # /schedules#schedule-NAME: the card is drawn after the page loads,
        # too late for the browser's own scroll to it.
        daemon = self.daemon()
        for n in range(12):
            daemon.post("addschedule.json", {"project": "shop", "spider": "books",
                                             "cron": "0 3 * * *", "name": f"nightly-{n:02d}"})
        page = self.open(url_of(daemon) + "/schedules#schedule-NIGHTLY-11", size=(390, 700))
        ready(page)
        card = page.locator("#schedule-nightly-11")
        wait_until(lambda: card.evaluate(
            "card => { const box = card.getBoundingClientRect();"
            " return box.top >= -1 && box.top < innerHeight; }"), 10, "the card in view")
        self.assertGreater(page.evaluate("scrollY"), 0)
        self.assertEqual(self.errors, [])
