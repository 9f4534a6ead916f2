"""Retries for real (issue 24): a real daemon, real crawls of the test site,
on SQLite and on PostgreSQL alike (each case runs on both: ``Backend``).

A failing spider with ``_retries=2&_backoff=1s`` runs three times; a
checkpointed crawl that fails halfway is resumed by its retry; a daemon
killed (SIGKILL) at the moment of a job's end, or just after, loses no
retry and queues none twice; bad policy values are a 400 naming them."""

import json
import os
import signal
from datetime import datetime

from .bothtables import LiveCases, on_both_tables
from .processes import wait_until
from .spiders import HEADER
from .test_notify import Receiver

# The first run of this spider stops itself at page 15 of the thirty, with
# items 0-15 written and its checkpoint recorded, and fails (its check);
# a run with the marker there goes on from where the checkpoint stood.
HALFWAY = '''
class Halfway(netweir.Spider):
    """The thirty linked pages; the first run stops at page 15 and fails."""
    name = "halfway"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/page/0"]
    checks = [lambda stats, spider: "it stopped halfway"
              if getattr(spider, "halted", False) else None]

    async def parse(self, page):
        n = int(page.url.rsplit("/", 1)[1])
        yield {"title": page.css("h1::text").get()}
        if n == 15 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            self.halted = True
            raise netweir.CloseSpider("halfway")
        for href in page.css("a::attr(href)").getall():
            yield page.follow(href)
'''

# Fails as "failing" does, after a page that takes two seconds: time
# enough to freeze the service while it runs.
SLOW_FAILING = '''
class SlowFailing(netweir.Spider):
    """One slow page, then a check that fails: exit 1."""
    name = "slowfailing"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/slow/0?d=2"]
    checks = [lambda stats, spider: "this check always fails"]

    async def parse(self, page):
        yield {"ok": True}
'''

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def moment(text):
    return datetime.strptime(text, TIME_FORMAT)


class RetriesLive(LiveCases):
    """The cases; on_both_tables makes them a test class per job table."""

    def setUp(self):
        super().setUp()
        for name, body in (("halfway.py", HALFWAY), ("slowfailing.py", SLOW_FAILING)):
            with open(os.path.join(self.shop, name), "w") as f:
                f.write(HEADER.format(site=self.site.base) + body)

    @staticmethod
    def restart(daemon):
        """Starts ``daemon`` again, on the same port (a cluster's node is
        known by its name and URL: the same node coming back)."""
        daemon._output.close()
        return daemon.start()

    def finished(self, daemon):
        _, listing = daemon.get("listjobs.json")
        return {e["id"]: e for e in listing["finished"]}

    def test_a_failing_spider_runs_three_times_with_growing_waits(self):
        hook = Receiver()
        self.addCleanup(hook.stop)
        daemon = self.daemon("--notify", hook.url, "--notify-on", "failed")
        jobid = daemon.must_schedule("shop", "failing", jobid="nightly", _retries="2",
                                     _backoff="1s")
        last = daemon.wait_state("nightly.r2", "finished", timeout=90)
        ended = self.finished(daemon)
        self.assertEqual(sorted(ended), ["nightly", "nightly.r1", "nightly.r2"])
        for n, attempt in enumerate(("nightly", "nightly.r1", "nightly.r2"), start=1):
            entry = ended[attempt]
            self.assertEqual((entry["outcome"], entry["reason"], entry["attempt"]),
                             ("failed", "exit 1", n))
            self.assertEqual(entry.get("retry_of"), None if n == 1 else jobid)
            self.assertEqual(entry["policy"], {"retries": 2, "backoff": "1s"})
        self.assertEqual(last["attempt"], 3)
        # Each retry started no sooner than its wait after the end before
        # it: 1 s, then 2 s (each plus its jitter).
        waits = [(moment(ended[later]["start_time"]) - moment(ended[before]["end_time"]))
                 .total_seconds()
                 for before, later in (("nightly", "nightly.r1"), ("nightly.r1", "nightly.r2"))]
        self.assertGreaterEqual(waits[0], 1.0, waits)
        self.assertGreaterEqual(waits[1], 2.0, waits)
        self.assertEqual(daemon.get("listjobs.json")[1]["pending"], [])
        # --notify: each failed end, the first two naming their retry.
        wait_until(lambda: len(hook.received) >= 3, 30, "three notices")
        bodies = {json.loads(b)["job"]["id"]: json.loads(b) for _, b in hook.received}
        self.assertEqual(bodies["nightly"]["retry"]["id"], "nightly.r1")
        self.assertEqual(bodies["nightly.r1"]["retry"]["id"], "nightly.r2")
        self.assertEqual(len(bodies["nightly"]["retry"]["not_before"]), len(TIME_FORMAT) + 6)
        self.assertNotIn("retry", bodies["nightly.r2"])
        self.assertEqual(bodies["nightly.r2"]["job"]["attempt"], 3)
        # /metrics counted the two retries.
        _, _, text = daemon.call("GET", "/metrics")
        self.assertIn('netweir_serve_retries_total{project="shop",spider="failing"} 2.0',
                      text.decode())

    def test_a_pending_retry_waits_for_its_time_and_is_listed_so(self):
        daemon = self.daemon()
        daemon.must_schedule("shop", "failing", jobid="later", _retries="1", _backoff="1h")
        entry = daemon.wait_state("later.r1", "pending", timeout=60)
        self.assertEqual((entry["attempt"], entry["retry_of"]), (2, "later"))
        self.assertEqual(len(entry["not_before"]), len(TIME_FORMAT) + 6)
        self.assertEqual(entry["waiting_for"],
                         f"its retry time, {entry['not_before']} (attempt 2 of job later)")
        ended = self.finished(daemon)["later"]
        wait = (moment(entry["not_before"]) - moment(ended["end_time"])).total_seconds()
        self.assertTrue(3600 <= wait <= 3960, wait)
        # Cancelling it ends the chain.
        self.assertEqual(daemon.post("cancel.json", {"project": "shop", "job": "later.r1"})[1]
                         ["prevstate"], "pending")
        cancelled = self.finished(daemon)["later.r1"]
        self.assertEqual((cancelled["outcome"], cancelled["reason"]),
                         ("cancelled", "cancel.json"))
        _, listing = daemon.get("listjobs.json")
        self.assertEqual((listing["pending"], listing["running"]), ([], []))

    def test_a_checkpointed_crawl_that_fails_halfway_is_resumed_by_its_retry(self):
        daemon = self.daemon()
        marker = os.path.join(self.base, "stopped-once")
        daemon.must_schedule("shop", "halfway", ["checkpoint=books"], jobid="resumed",
                             marker=marker, _retries="1", _backoff="1s")
        retry = daemon.wait_state("resumed.r1", "finished", timeout=90)
        first = self.finished(daemon)["resumed"]
        self.assertEqual((first["outcome"], first["reason"]), ("failed", "exit 1"))
        self.assertEqual((retry["outcome"], retry["attempt"]), ("finished", 2))

        def items(entry):
            body = daemon.call("GET", entry["items_url"])[2]
            return [json.loads(line) for line in body.splitlines()]

        before, after = items(first), items(retry)
        self.assertEqual([i["title"] for i in before], [f"page {n}" for n in range(16)])
        # Where the first stopped: not from the first page again.
        self.assertEqual([i["title"] for i in after], [f"page {n}" for n in range(16, 30)])
        self.assertFalse({i["_id"] for i in before} & {i["_id"] for i in after})
        self.assertEqual(daemon.stats("resumed.r1")["stats"]["items"], 14)

    def test_killed_at_the_moment_of_the_end_the_next_start_queues_the_retry_once(self):
        daemon = self.daemon()
        daemon.must_schedule("shop", "slowfailing", jobid="caught", _retries="1",
                             _backoff="1s")
        daemon.wait_state("caught", "running")
        # The service frozen while the crawl ends: its parent writes the
        # status file, and no service hears of it; then killed outright.
        os.kill(daemon.process.pid, signal.SIGSTOP)
        status = os.path.join(self.directory, "status", "shop", "slowfailing", "caught.json")
        try:
            wait_until(lambda: os.path.exists(status), 60, "the crawl's status file")
        finally:
            os.kill(daemon.process.pid, signal.SIGKILL)
            daemon.process.wait()
        again = self.restart(daemon)
        # The start settles the end from the status file, retry and all.
        retry = again.wait_state("caught.r1", "finished", timeout=60)
        first = self.finished(again)["caught"]
        self.assertEqual((first["outcome"], first["reason"], first["exit_status"]),
                         ("failed", "exit 1", 1))
        self.assertEqual((retry["attempt"], retry["retry_of"]), (2, "caught"))
        _, listing = again.get("listjobs.json")
        every = [e["id"] for state in ("pending", "running", "finished")
                 for e in listing[state]]
        self.assertEqual(sorted(every), ["caught", "caught.r1"])
        # It was the start that recorded the end (the moment was hit).
        self.assertIn("job caught ended while no service watched it", again.output())

    def test_killed_just_after_the_end_a_restart_queues_no_second_retry(self):
        daemon = self.daemon()
        daemon.must_schedule("shop", "failing", jobid="once", _retries="1", _backoff="1h")
        daemon.wait_state("once.r1", "pending", timeout=60)
        os.kill(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait()
        again = self.restart(daemon)
        _, listing = again.get("listjobs.json")
        self.assertEqual([e["id"] for e in listing["pending"]], ["once.r1"])
        self.assertEqual([e["id"] for e in listing["finished"]], ["once"])
        self.assertEqual(listing["running"], [])

    def test_bad_policy_values_are_refused_naming_them(self):
        daemon = self.daemon()
        for key, value, named in (("_retries", "11", "the most is 10"),
                                  ("_retry_on", "cancelled", "'cancelled' is not"),
                                  ("_backoff", "0", "too short"),
                                  ("_retries", "-1", "not a whole number"),
                                  ("_backof", "1m", "not a policy key")):
            status, answer = daemon.schedule("shop", "failing", **{key: value})
            self.assertEqual((status, answer["status"]), (400, "error"), (key, value))
            self.assertIn(key, answer["message"])
            self.assertIn(named, answer["message"])
        status, answer = daemon.schedule("shop", "failing", jobid="j" * 197)
        self.assertEqual(status, 400)
        self.assertIn("196", answer["message"])
        self.assertEqual(daemon.get("listjobs.json")[1]["pending"], [])


SQLiteRetriesTests, PostgresRetriesTests = on_both_tables(RetriesLive, "Retries")
