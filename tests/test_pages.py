"""The HTML pages (/, /jobs) and the directory listings of logs and items.

Dashboards parse these with regular expressions, so the tests parse them
the same way: the expressions below restate what ScrapydWeb 1.6 matches
(its jobs page and monitor for /jobs, its logs and items pages for the
listings) and what scrapyd-api 0.0.4 selects (``table tbody tr``, cells
by position).
"""

import json
import re
from datetime import datetime
from html.parser import HTMLParser
from urllib.parse import urljoin

from twisted.internet import defer
from twisted.trial import unittest

from netweir_serve import __version__
from netweir_serve.store.records import FINISHED, PENDING, RUNNING, JobRecord
from netweir_serve.web.listings import file_size, listing_html
from netweir_serve.web.console import shell
from netweir_serve.web.pages import Jobs, about_sections, job_row

from .test_clients import echo_job, serve

# ScrapydWeb's reading of a /jobs row: <tr>, then up to nine <td> cells,
# each followed by optional whitespace, anything else, </tr>. No cell may
# span lines. It drops <thead> first.
JOB_ROW = re.compile(
    r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*"
    + r"(?:<td>(.*?)</td>\s*)?" * 6 + r"[\w\W]*?</tr>")
JOB_KEYS = ("project", "spider", "job", "pid", "start", "runtime", "finish", "log", "items")
THEAD = re.compile(r"<thead>.*?</thead>", re.S)
HREF = re.compile(r"""href=['"](.+?)['"]""")
SCRAPYDWEB_TIME = "%Y-%m-%d %H:%M:%S"

# ScrapydWeb's reading of a listing row: each part on a line of its own,
# an optional last-modified cell after the size.
LISTING_ROW = re.compile(
    r'<tr\sclass="(odd|even)">\n\s+<td>(.*?)</td>\n\s+<td>(.*?)</td>\n'
    r"(?:\s+<td>(.*?)</td>\n)?\s+<td>(.*?)</td>\n\s+<td>(.*?)</td>\n</tr>")
HREF_NAME = re.compile(r'href="(.+?)">(.+?)<')

VOID = {"meta", "br", "hr", "img", "input", "link"}


class Balance(HTMLParser):
    """Checks that every element is closed, in order, under a doctype."""

    def __init__(self):
        super().__init__()
        self.doctype = None
        self.stack = []
        self.problems = []

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.problems.append(f"unexpected </{tag}>")


def assert_valid_html(test, text):
    checker = Balance()
    checker.feed(text)
    checker.close()
    test.assertEqual(checker.doctype, "DOCTYPE html")
    test.assertEqual((checker.problems, checker.stack), ([], []))


def jobs_of(text):
    return [dict(zip(JOB_KEYS, row)) for row in JOB_ROW.findall(THEAD.sub("", text))]


def listing_rows(text):
    """ScrapydWeb's rows: (href, name, size, content type)."""
    rows = []
    for odd_even, name_cell, size, _modified, kind, _encoding in LISTING_ROW.findall(text):
        href, name = HREF_NAME.search(name_cell).groups()
        rows.append((href, name, size, kind))
    return rows


class TableCells(HTMLParser):
    """scrapyd-api's reading: the text of each td of each tbody row."""

    def __init__(self):
        super().__init__()
        self.rows = []
        self.where = []

    def handle_starttag(self, tag, attrs):
        self.where.append(tag)
        if tag == "tr" and "tbody" in self.where:
            self.rows.append([])
        elif tag == "td" and "tbody" in self.where:
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        while self.where and self.where.pop() != tag:
            pass

    def handle_data(self, data):
        if "td" in self.where and "tbody" in self.where:
            self.rows[-1][-1] += data


def record(state, **fields):
    base = dict(id="j1", project="shop", spider="books", spider_file="/x/books.py", state=state)
    base.update(fields)
    return JobRecord(**base)


class FakeStore:
    """The two reads the page makes, answered at once as the SQLite store does."""

    shared = False

    def __init__(self, pending=(), running=(), finished=()):
        self.lists = (list(pending), list(running), list(finished))
        self.generation = 1
        self.reads = 0

    @property
    def version(self):
        return self.generation

    def jobs(self, project=None):
        self.reads += 1
        return defer.succeed(self.lists)


class RenderingTests(unittest.TestCase):
    """The markup itself, from records made up here."""

    def test_every_value_is_escaped(self):
        hostile = "<b>&\"'"
        row = job_row(record(FINISHED, project=hostile, spider=hostile, id=hostile,
                             outcome=hostile, start_time=1e9, end_time=1e9 + 5), 0)
        self.assertNotIn("<b>", row)
        self.assertIn("&lt;b&gt;&amp;&quot;&#x27;", row)
        page = shell(hostile, "jobs", about_sections([hostile], hostile))
        self.assertNotIn("<b>", page)
        self.assertIn("project=%3Cb%3E%26%22%27", page)
        listing = listing_html("/logs/<b>/", [(hostile, hostile, "1B", "[text/plain]")])
        self.assertNotIn("<b>", listing)
        assert_valid_html(self, page)
        assert_valid_html(self, listing)

    def test_cells_of_each_state_as_scrapydweb_reads_them(self):
        start = datetime(2026, 1, 2, 3, 4, 5, 678).timestamp()
        pending = record(PENDING, id="p")
        running = record(RUNNING, id="r", pid=4321, start_time=start)
        finished = record(FINISHED, id="f", pid=4321, start_time=start, end_time=start + 3725,
                          outcome="failed")
        never = record(FINISHED, id="n", end_time=start, outcome="cancelled")
        rows = {job["job"]: job for job in jobs_of(
            "".join(job_row(r, start + 61) for r in (pending, running, finished, never)))}
        self.assertEqual(rows["p"], dict(zip(JOB_KEYS, ("shop", "books", "p") + ("",) * 6)))
        self.assertEqual((rows["r"]["pid"], rows["r"]["start"], rows["r"]["runtime"],
                          rows["r"]["finish"]), ("4321", "2026-01-02 03:04:05", "0:01:01", ""))
        self.assertEqual(HREF.search(rows["r"]["log"]).group(1), "/logs/shop/books/r.log")
        self.assertEqual(HREF.search(rows["r"]["items"]).group(1), "/items/shop/books/r.jl")
        # ScrapydWeb's monitor takes a PID for running: a finished job has none.
        self.assertEqual((rows["f"]["pid"], rows["f"]["runtime"], rows["f"]["finish"]),
                         ("", "1:02:05", "2026-01-02 04:06:10"))
        # Without a start ScrapydWeb would count it pending forever.
        self.assertEqual(rows["n"]["start"], rows["n"]["finish"])
        self.assertIn("<td>failed</td>\n</tr>", job_row(finished, 0))

    def test_a_degraded_run_says_so_beside_its_outcome(self):
        thin = record(FINISHED, id="t", start_time=1.0, end_time=2.0, outcome="finished",
                      reason="exit 0", health="degraded",
                      health_reasons=("items 4 < min_items 5", "pages 1 < min_pages 2"))
        self.assertIn("<td>finished (exit 0) degraded: items 4 &lt; min_items 5; pages 1 &lt;"
                      " min_pages 2</td>", job_row(thin, 0))
        fine = record(FINISHED, id="f", start_time=1.0, end_time=2.0, outcome="finished",
                      reason="exit 0", health="healthy")
        self.assertIn("<td>finished (exit 0)</td>", job_row(fine, 0))

    def test_jobs_page_is_rebuilt_per_version_with_live_runtimes(self):
        now = [1000.0]
        store = FakeStore(running=[record(RUNNING, id="r", pid=1, start_time=990.0)],
                          finished=[record(FINISHED, id="old", start_time=1.0, end_time=2.0),
                                    record(FINISHED, id="new", start_time=3.0, end_time=4.0)])
        page = Jobs(store, clock=lambda: now[0])
        first = jobs_of(self.successResultOf(defer.maybeDeferred(page.page, None)))
        now[0] = 1100.0
        # The same version: answered from the kept rows, at once.
        second = jobs_of(page.page(None))
        self.assertEqual(store.reads, 1)
        self.assertEqual((first[0]["runtime"], second[0]["runtime"]), ("0:00:10", "0:01:50"))
        self.assertEqual([job["job"] for job in second], ["r", "new", "old"])
        store.generation += 1
        page.page(None)
        self.assertEqual(store.reads, 2)

    def test_file_sizes_as_twisted_writes_them(self):
        self.assertEqual([file_size(n) for n in (0, 1023, 1024, 5 << 20, 3 << 30)],
                         ["0B", "1023B", "1K", "5M", "3G"])


class PageTests(unittest.TestCase):
    """The pages of the real daemon, as ScrapydWeb and Gerapy fetch them."""

    def setUp(self):
        self.daemon = serve()

    def test_home_page_answers_200_with_projects_links_and_version(self):
        status, headers, body = self.daemon.call("GET", "/")
        self.assertEqual((status, headers["Content-Type"]), (200, "text/html; charset=utf-8"))
        text = body.decode()
        assert_valid_html(self, text)
        self.assertIn(__version__, text)
        for href in ("/jobs", "/listspiders.json?project=shop", "/listspiders.json?project=news",
                     "/daemonstatus.json"):
            self.assertIn(f'href="{href}"', text)
        status, headers, body = self.daemon.call("HEAD", "/")
        self.assertEqual((status, body), (200, b""))

    def test_jobs_page_read_as_scrapydweb_reads_it(self):
        jobid, entry = echo_job()
        status, headers, body = self.daemon.call("GET", "/jobs")
        self.assertEqual((status, headers["Content-Type"]), (200, "text/html; charset=utf-8"))
        text = body.decode()
        assert_valid_html(self, text)
        self.assertIn("<h1>Jobs</h1>", text)
        for section in ("Pending", "Running", "Finished"):
            self.assertRegex(text, rf'<th colspan="\d+">{section}</th>')
        [job] = [job for job in jobs_of(text) if job["job"] == jobid]
        self.assertEqual((job["project"], job["spider"], job["pid"]), ("shop", "echo", ""))
        start = datetime.strptime(job["start"], SCRAPYDWEB_TIME)
        finish = datetime.strptime(job["finish"], SCRAPYDWEB_TIME)
        self.assertLessEqual(start, finish)
        self.assertEqual(HREF.search(job["log"]).group(1), entry["log_url"])
        self.assertEqual(HREF.search(job["items"]).group(1), entry["items_url"])
        self.assertIn(f"<td>{entry['outcome']} ({entry['reason']})</td>", text)

    def test_the_favicon_is_served_and_linked(self):
        # Every browser asks for /favicon.ico; a 404 fills the log with noise.
        status, headers, body = self.daemon.call("GET", "/favicon.ico")
        self.assertEqual((status, headers["Content-Type"]), (200, "image/x-icon"))
        self.assertEqual(body[:4], b"\x00\x00\x01\x00")  # an ICO file's header
        self.assertIn("max-age", headers["Cache-Control"])
        for page in ("/", "/jobs"):
            self.assertIn('<link rel="icon" href="/favicon.ico">',
                          self.daemon.call("GET", page)[2].decode(), page)

    def test_pages_take_only_get_and_have_no_children(self):
        self.assertEqual(self.daemon.call("POST", "/jobs")[0], 405)
        for path in ("/jobs/", "/jobs/x", "/index.html"):
            status, headers, body = self.daemon.call("GET", path)
            self.assertEqual((status, headers["Content-Type"]), (404, "application/json"), path)


class ListingTests(unittest.TestCase):
    def setUp(self):
        self.daemon = serve()
        self.jobid, self.entry = echo_job()

    def listing(self, path):
        status, headers, body = self.daemon.call("GET", path)
        self.assertEqual((status, headers["Content-Type"]), (200, "text/html; charset=utf-8"),
                         path)
        text = body.decode()
        assert_valid_html(self, text)
        self.assertIn(f"<title>Directory listing for {path}</title>", text)
        return text

    def test_top_level_lists_each_served_project_once(self):
        # A job scheduled as SHOP writes in shop's folders: shop is listed once.
        jobid = self.daemon.must_schedule("SHOP", "echo", jobid="upper-case-project")
        self.daemon.wait_state(jobid, "finished")
        for tree in ("logs", "items"):
            text = self.listing(f"/{tree}/")
            self.assertIn(f"Directory listing for /{tree}/", text)
            rows = listing_rows(text)
            self.assertEqual(rows, [("news/", "news/", "", "[Directory]"),
                                    ("shop/", "shop/", "", "[Directory]")])
            cells = TableCells()
            cells.feed(text)
            self.assertEqual(cells.rows, [["news/", "", "[Directory]", ""],
                                          ["shop/", "", "[Directory]", ""]])
            for href, *_ in rows:
                self.listing(urljoin(f"/{tree}/", href))

    def test_a_served_project_without_jobs_lists_empty(self):
        # news has no job of its own in these tests, but is listed at the top.
        for path in ("/logs/news/", "/items/NEWS/"):
            self.assertEqual(listing_rows(self.listing(path)), [])

    def test_top_levels_without_the_slash_redirect(self):
        for path in ("/logs", "/items"):
            status, headers, _ = self.daemon.call("GET", path)
            self.assertIn(status, (301, 302), path)
            self.assertEqual(headers["Location"], path + "/")

    def test_project_level_lists_spider_folders(self):
        for tree in ("logs", "items"):
            rows = listing_rows(self.listing(f"/{tree}/shop/"))
            self.assertIn(("echo/", "echo/", "", "[Directory]"), rows)

    def test_spider_level_lists_the_job_files_a_client_fetches(self):
        for tree, suffix, url in (("logs", ".log", self.entry["log_url"]),
                                  ("items", ".jl", self.entry["items_url"])):
            path = f"/{tree}/shop/echo/"
            text = self.listing(path)
            self.assertRegex(text, f"Directory listing for /{tree}/")
            rows = {name: (href, size, kind) for href, name, size, kind in listing_rows(text)}
            href, size, kind = rows[self.jobid + suffix]
            self.assertEqual(kind, "[text/plain]")
            self.assertRegex(size, r"^\d+[BKMG]$")
            self.assertEqual(urljoin(path, href), url)
            self.assertEqual(self.daemon.call("GET", urljoin(path, href))[0], 200)
            # scrapyd-api's reading of the same page.
            cells = TableCells()
            cells.feed(text)
            self.assertIn([self.jobid + suffix, size, "[text/plain]", ""], cells.rows)

    def test_folders_without_the_slash_redirect(self):
        for path in ("/logs/shop", "/items/shop", "/logs/shop/echo", "/items/shop/echo"):
            status, headers, _ = self.daemon.call("GET", path)
            self.assertIn(status, (301, 302), path)
            self.assertEqual(headers["Location"], path + "/")

    def test_what_is_not_kept_is_not_found(self):
        for path in ("/logs/nosuch/", "/logs/nosuch", "/items/nosuch/",
                     "/logs/shop/nosuch/", "/logs/.hidden/", "/items/shop/echo/x.txt"):
            status, headers, body = self.daemon.call("GET", path)
            self.assertEqual((status, headers["Content-Type"]), (404, "application/json"), path)
            self.assertEqual(json.loads(body)["status"], "error")

    def test_head_and_methods(self):
        status, headers, body = self.daemon.call("HEAD", "/logs/shop/echo/")
        self.assertEqual((status, body), (200, b""))
        status, headers, body = self.daemon.call("POST", "/logs/shop/echo/")
        self.assertEqual(status, 405)
        self.assertIn("GET", headers["Allow"])
