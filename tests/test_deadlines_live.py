"""Deadlines on real crawls through the real daemon, on SQLite and on a
shared PostgreSQL table: a timeout, a stall, an expiry, a crawl's own
max_time, what /metrics counts, and bad values refused at the request."""

import json
import os

from .processes import Daemon, wait_until
from .test_cluster import AUTH, AUTH_ENV, ClusterTestCase
from .test_jobs import CrawlTestCase
from .test_metrics import samples, value


def items_of(daemon, entry):
    """The job's items, each line parsed: a line cut off would raise."""
    body = daemon.call("GET", entry["items_url"])[2].decode()
    if body:
        # Closed cleanly: the last line ends as every other does.
        assert body.endswith("\n"), body[-200:]
    return [json.loads(line) for line in body.splitlines()]


def scrape(daemon):
    return samples(daemon.call("GET", "/metrics")[2].decode())


class DeadlineChecks:
    """The tests, on ``self.serve()``'s daemon (one store or the other)."""

    def test_a_timeout_cancels_a_crawl_that_would_run_forever(self):
        daemon = self.serve()
        # Its own max_time far off: only the service's timeout can stop it.
        jobid = daemon.must_schedule("shop", "slow", settings=["max_time=600"],
                                     delay="0.1", _timeout="3")
        entry = daemon.wait_state(jobid, "finished", timeout=45)
        self.assertEqual((entry["outcome"], entry["reason"]), ("cancelled", "timeout"))
        self.assertEqual(entry["policy"], {"timeout": "3s"})
        self.assertEqual(daemon.stats(jobid)["stats"]["finish_reason"], "interrupted")
        items = items_of(daemon, entry)
        self.assertTrue(items)
        self.assertEqual([item["n"] for item in items], list(range(len(items))))
        self.assertIn(f"job {jobid}: still running at its timeout (3s); cancelling it",
                      daemon.output())
        found = scrape(daemon)
        self.assertEqual(value(found, "netweir_serve_deadlines_total", kind="timeout"), 1)
        self.assertEqual(value(found, "netweir_serve_jobs_ended_total", project="shop",
                               spider="slow", outcome="cancelled", reason="timeout"), 1)

    def test_a_crawl_that_stops_itself_first_ends_finished(self):
        daemon = self.serve()
        jobid = daemon.must_schedule("shop", "slow", settings=["max_time=2"], delay="0.1",
                                     _timeout="5")
        entry = daemon.wait_state(jobid, "finished", timeout=45)
        self.assertEqual((entry["outcome"], entry["reason"]), ("finished", "exit 0"))
        self.assertEqual(daemon.stats(jobid)["stats"]["finish_reason"], "max_time")
        self.assertTrue(items_of(daemon, entry))
        self.assertEqual(value(scrape(daemon), "netweir_serve_deadlines_total",
                               kind="timeout"), 0)

    def test_a_crawl_waiting_on_a_page_that_never_answers_is_cancelled_as_stalled(self):
        daemon = self.serve()
        # The first page answers; the second in ten minutes (Netweir's own
        # timeout is 30 s): no page, item, error or log line after the first.
        jobid = daemon.must_schedule("shop", "slow", delay="600", _stall="10")
        entry = daemon.wait_state(jobid, "finished", timeout=45)
        self.assertEqual((entry["outcome"], entry["reason"]), ("cancelled", "stalled"))
        self.assertEqual([item["n"] for item in items_of(daemon, entry)], [0])
        self.assertIn(f"job {jobid}: no new page, item or error and no new log line for 10s"
                      " (its stall); cancelling it", daemon.output())
        self.assertEqual(value(scrape(daemon), "netweir_serve_deadlines_total",
                               kind="stall"), 1)

    def test_an_expired_job_never_starts(self):
        daemon = self.serve()
        blocker = daemon.must_schedule("shop", "slow", delay="0.2")
        daemon.wait_state(blocker, "running")
        jobid = daemon.must_schedule("shop", "echo", _expire="2")
        entry = daemon.wait_state(jobid, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["reason"]), ("cancelled", "expired"))
        self.assertIsNone(entry.get("start_time"))
        self.assertIsNone(entry.get("pid"))
        self.assertEqual(daemon.call("GET", entry["log_url"])[0], 404)
        self.assertEqual(daemon.find(blocker)[0], "running")
        found = scrape(daemon)
        self.assertEqual(value(found, "netweir_serve_deadlines_total", kind="expire"), 1)
        self.assertEqual(value(found, "netweir_serve_jobs_ended_total", project="shop",
                               spider="echo", outcome="cancelled", reason="expired"), 1)
        daemon.post("cancel.json", {"project": "shop", "job": blocker})
        daemon.wait_state(blocker, "finished")


class SQLiteDeadlineTests(DeadlineChecks, CrawlTestCase):
    def serve(self):
        return self.daemon("--max-jobs", "1")

    def test_bad_deadlines_are_refused_at_the_request_naming_them(self):
        daemon = self.serve()
        for params, named in (({"_timeout": "0"}, "_timeout '0' is too short"),
                              ({"_timeout": "-5"}, "_timeout '-5' is not a duration"),
                              ({"_stal": "1m"}, "'_stal' is not a policy key"),
                              ({"_expire": "soon"}, "_expire 'soon' is not a duration")):
            status, answer = daemon.schedule("shop", "echo", **params)
            self.assertEqual((status, answer["status"]), (400, "error"), params)
            self.assertIn(named, answer["message"])
        self.assertEqual(daemon.get("listjobs.json")[1]["pending"], [])


class PostgresDeadlineTests(DeadlineChecks, ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.nodes = {}

    def serve(self, name="a"):
        daemon = Daemon(os.path.join(self.base, name), [f"shop={self.shop}"],
                        ["--jobs-db", self.jobs_db, "--node-name", name, "--max-jobs", "1"],
                        env=AUTH_ENV, auth=AUTH)
        self.addCleanup(daemon.kill)
        return daemon.start()

    def test_a_job_queued_on_one_node_is_expired_by_another(self):
        a, b = self.serve("a"), self.serve("b")
        blockers = [a.must_schedule("shop", "slow", delay="0.2") for _ in range(2)]
        wait_until(lambda: all(a.find(j)[0] == "running" for j in blockers), 30,
                   "both nodes to be busy")
        jobid = a.must_schedule("shop", "echo", _expire="3")
        # a stops (its blocker cancelled, the pending job left queued): b,
        # which heard of the job only from the table, drops it.
        a.stop()
        entry = b.wait_state(jobid, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["reason"], entry.get("node")),
                         ("cancelled", "expired", None))
        self.assertEqual(value(scrape(b), "netweir_serve_deadlines_total", kind="expire"), 1)
        self.assertIn(f"job {jobid}: still pending at its expiry (3s after it was queued)",
                      b.output())
