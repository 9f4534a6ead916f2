"""Run health for real (issue 25): a real daemon, real crawls of the test
site, on SQLite and on PostgreSQL alike (each case runs on both).

Five runs of a spider, then a sixth with a tenth of the items: it ends
``finished`` and ``degraded``, with a reason naming the median, in
listjobs.json, jobstats.json, runs.json, --notify (--notify-on degraded),
/metrics and the /jobs page; min_items alone degrades a first run; a chain
on=degraded follows a degraded run and no healthy one; bad
thresholds and runs.json's bad parameters are a 4xx naming them."""

import json

from .bothtables import LiveCases, on_both_tables
from .processes import wait_until
from .test_notify import Receiver


class HealthLive(LiveCases):
    """The cases; on_both_tables makes them a test class per job table."""

    def crawl(self, daemon, count, **params):
        jobid = daemon.must_schedule("shop", "counted", count=str(count), **params)
        return daemon.wait_state(jobid, "finished", timeout=60)

    def test_a_sixth_run_with_a_tenth_of_the_items_is_degraded_naming_the_median(self):
        hook = Receiver()
        self.addCleanup(hook.stop)
        daemon = self.daemon("--policy", "shop/counted:items_drop=50,max_errors=50",
                             "--notify", hook.url, "--notify-on", "degraded")
        for n in range(5):
            entry = self.crawl(daemon, 40, jobid=f"run{n}")
            self.assertEqual((entry["outcome"], entry["health"], entry["health_reasons"]),
                             ("finished", "healthy", []), n)
        entry = self.crawl(daemon, 4, jobid="thin")
        reason = "items 4 < 50% of median 40 over 5 runs"
        self.assertEqual((entry["outcome"], entry["reason"], entry["health"],
                          entry["health_reasons"]),
                         ("finished", "exit 0", "degraded", [reason]))
        stats = daemon.stats("thin")
        self.assertEqual((stats["outcome"], stats["health"], stats["health_reasons"],
                          stats["stats"]["items"]), ("finished", "degraded", [reason], 4))
        # runs.json: newest first, with the medians the checks use.
        status, runs = daemon.get("runs.json", {"project": "shop", "spider": "counted"})
        self.assertEqual(status, 200, runs)
        self.assertEqual([r["id"] for r in runs["runs"]],
                         ["thin", "run4", "run3", "run2", "run1", "run0"])
        first = runs["runs"][0]
        self.assertEqual((first["health"], first["items"], first["pages"], first["errors"],
                          first["end_time"]), ("degraded", 4, 1, 0, entry["end_time"]))
        self.assertGreater(first["runtime"], 0)
        self.assertEqual(runs["history"], {"size": 5, "runs": 5})
        self.assertEqual((runs["medians"]["items"], runs["medians"]["pages"]), (40, 1))
        self.assertGreater(runs["medians"]["runtime"], 0)
        status, two = daemon.get("runs.json", {"project": "shop", "spider": "counted",
                                               "limit": "2"})
        self.assertEqual([r["id"] for r in two["runs"]], ["thin", "run4"])
        # --notify-on degraded: that end alone.
        wait_until(lambda: hook.received, 30, "the degraded run's notice")
        [(_, body)] = hook.received
        sent = json.loads(body)
        self.assertEqual((sent["job"]["id"], sent["job"]["health"], sent["job"]["health_reasons"]),
                         ("thin", "degraded", [reason]))
        self.assertIn(f"degraded: {reason}", sent["text"])
        text = daemon.call("GET", "/metrics")[2].decode()
        self.assertIn('netweir_serve_jobs_degraded_total{project="shop",spider="counted"} 1.0',
                      text)
        page = daemon.call("GET", "/jobs")[2].decode()
        self.assertIn("finished (exit 0) degraded: items 4 &lt; 50% of median 40", page)

    def test_min_items_alone_degrades_a_first_run(self):
        daemon = self.daemon()
        entry = self.crawl(daemon, 3, _min_items="50")
        self.assertEqual((entry["outcome"], entry["health"], entry["health_reasons"]),
                         ("finished", "degraded", ["items 3 < min_items 50"]))
        self.assertEqual(entry["policy"], {"min_items": 50})
        # No check: healthy.
        self.assertEqual(self.crawl(daemon, 3)["health"], "healthy")

    def test_a_schedules_runs_and_counts(self):
        daemon = self.daemon()
        status, added = daemon.post("addschedule.json", {
            "project": "shop", "spider": "counted", "every": "1d", "name": "daily",
            "items_drop": "20", "history": "3"})
        self.assertEqual(status, 200, added)
        self.assertEqual((added["policy"]), {"items_drop": "20", "history": 3})
        self.crawl(daemon, 5)   # not the schedule's: not among its runs
        status, runs = daemon.get("runs.json", {"project": "shop", "spider": "counted",
                                                "schedule": "daily"})
        self.assertEqual(status, 200, runs)
        self.assertEqual((runs["runs"], runs["history"], runs["medians"]),
                         ([], {"size": 3, "runs": 0},
                          {"items": None, "pages": None, "runtime": None}))
        self.assertEqual(runs["schedule"], {"name": "daily", "runs": 0, "skipped": 0,
                                            "buffered": 0, "caught_up": 0})

    def test_a_chain_on_degraded_follows_a_degraded_run_alone(self):
        daemon = self.daemon()
        status, added = daemon.post("addschedule.json", {
            "project": "shop", "spider": "echo", "after": "counted", "on": "degraded",
            "name": "alert"})
        self.assertEqual(status, 200, added)
        self.assertEqual(self.crawl(daemon, 9, jobid="fine", _min_items="5")["health"],
                         "healthy")
        self.assertEqual(self.crawl(daemon, 2, jobid="thin", _min_items="5")["health"],
                         "degraded")
        entry = daemon.wait_state("alert-after-thin", "finished")
        self.assertEqual(entry["schedule"], "alert")
        _, listing = daemon.get("listjobs.json")
        chained = [e["id"] for state in ("pending", "running", "finished")
                   for e in listing[state] if e.get("schedule") == "alert"]
        self.assertEqual(chained, ["alert-after-thin"])

    def test_bad_thresholds_and_runs_parameters_are_refused_naming_them(self):
        daemon = self.daemon()
        for key, value, named in (("_min_items", "-1", "not a whole number"),
                                  ("_min_items", "\u00b2", "not a whole number"),
                                  ("_history", "\u00b2", "from 3 to 100"),
                                  ("_items_drop", "-5", "not a percentage"),
                                  ("_max_errors", "101", "not a percentage"),
                                  ("_slower", "1", "not a factor"),
                                  ("_history", "2", "from 3 to 100")):
            status, answer = daemon.schedule("shop", "counted", **{key: value})
            self.assertEqual((status, answer["status"]), (400, "error"), (key, value))
            self.assertIn(key, answer["message"])
            self.assertIn(named, answer["message"])
        status, answer = daemon.post("addschedule.json", {
            "project": "shop", "spider": "counted", "every": "1h", "pages_drop": "-1"})
        self.assertEqual(status, 400, answer)
        self.assertIn("pages_drop '-1'", answer["message"])
        self.assertEqual(daemon.get("listjobs.json")[1]["pending"], [])
        self.assertEqual(daemon.get("listschedules.json")[1]["schedules"], [])
        for params, code, named in (
                ({"project": "nope", "spider": "counted"}, 404, "'nope'"),
                ({"project": "shop"}, 400, "'spider'"),
                ({"project": "shop", "spider": "nope"}, 404, "spider 'nope'"),
                ({"project": "shop", "spider": "counted", "schedule": "nope"}, 404,
                 "schedule 'nope'"),
                ({"project": "shop", "spider": "counted", "limit": "0"}, 400, "limit '0'"),
                ({"project": "shop", "spider": "counted", "limit": "\u00b2"}, 400,
                 "limit '\u00b2'")):
            status, answer = daemon.get("runs.json", params)
            self.assertEqual((status, answer["status"]), (code, "error"), params)
            self.assertIn(named, answer["message"])


SQLiteHealthTests, PostgresHealthTests = on_both_tables(HealthLive, "Health")
