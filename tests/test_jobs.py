"""Real crawls through the real daemon: running, watching, restarting, --keep."""

import json
import os
import signal
import tempfile

from twisted.trial import unittest

from .processes import Daemon, kill_groups, shared_site, wait_until
from .spiders import write_project

TIME_FORMAT_LENGTH = len("2026-01-01 00:00:00.000000")


class CrawlTestCase(unittest.TestCase):
    """A test site for the class, and helpers for one daemon per test."""

    def setUp(self):
        self.site = shared_site()
        self.base = os.path.abspath(self.mktemp())
        self.shop = write_project(os.path.join(self.base, "shop"), self.site.base)
        self.news = write_project(os.path.join(self.base, "news"), self.site.base)

    def daemon(self, *args, directory=None, env=None, auth=None):
        directory = directory or tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = Daemon(directory, [f"shop={self.shop}", f"news={self.news}"], list(args),
                        env=env, auth=auth).start()
        self.addCleanup(daemon.kill)
        return daemon


class RunningTests(CrawlTestCase):
    def test_job_finishes_with_its_items_stats_and_listing(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "books")
        self.assertEqual(len(jobid), 32)
        entry = daemon.wait_state(jobid, "finished")
        self.assertEqual(entry["outcome"], "finished")
        self.assertEqual(entry["exit_status"], 0)
        self.assertEqual(len(entry["start_time"]), TIME_FORMAT_LENGTH)
        self.assertEqual(len(entry["end_time"]), TIME_FORMAT_LENGTH)
        self.assertEqual(entry["log_url"], f"/logs/shop/books/{jobid}.log")
        self.assertEqual(entry["items_url"], f"/items/shop/books/{jobid}.jl")
        status, headers, body = daemon.call("GET", entry["items_url"])
        self.assertEqual(status, 200)
        titles = sorted(json.loads(line)["title"] for line in body.splitlines())
        self.assertEqual(titles, sorted(f"page {n}" for n in range(30)))
        self.assertEqual(daemon.call("GET", entry["items_url"][:-3] + ".jsonl")[2], body)
        status, headers, log = daemon.call("GET", entry["log_url"])
        self.assertEqual((status, headers["Content-Type"]), (200, "text/plain"))
        stats = daemon.stats(jobid)
        self.assertEqual((stats["state"], stats["outcome"]), ("finished", "finished"))
        self.assertEqual(stats["stats"]["finish_reason"], "finished")
        self.assertEqual(stats["stats"]["items"], 30)

    def test_job_runs_in_project_directory_with_its_argument_and_no_credentials(self):
        daemon = self.daemon(env={"NETWEIR_SERVE_USERNAME": "me",
                                  "NETWEIR_SERVE_PASSWORD": "pw"}, auth=("me", "pw"))
        jobid = daemon.must_schedule("shop", "echo", category="fiction")
        entry = daemon.wait_state(jobid, "finished")
        [item] = [json.loads(l) for l in daemon.call("GET", entry["items_url"])[2].splitlines()]
        self.assertEqual(item["cwd"], self.shop)
        self.assertEqual(item["category"], "fiction")
        self.assertEqual(item["environ"], [])

    def test_the_services_secrets_reach_no_job_by_name_or_by_value(self):
        # PGPASSWORD is what docs/cluster.md tells users to export; the
        # same secrets under names of a user's own choosing go too (the
        # password and the --notify secret, as the service read them).
        daemon = self.daemon(
            "--notify", "http://127.0.0.1:9/hook",
            env={"NETWEIR_SERVE_USERNAME": "me", "NETWEIR_SERVE_PASSWORD": "secret-pw",
                 "NETWEIR_SERVE_NOTIFY_SECRET": "secret-hook", "MY_PASSWORD": "secret-pw",
                 "HOOK_KEY": "secret-hook", "PGPASSWORD": "secret-pg",
                 "PGPASSFILE": "/root/.pgpass", "PGSERVICEFILE": "/root/.pg_service.conf",
                 "PGSERVICE": "table", "PGHOST": "127.0.0.1", "PGPORT": "5432"},
            auth=("me", "secret-pw"))
        jobid = daemon.must_schedule("shop", "echo")
        entry = daemon.wait_state(jobid, "finished")
        [item] = [json.loads(l) for l in daemon.call("GET", entry["items_url"])[2].splitlines()]
        self.assertEqual(item["environ"], [])
        self.assertEqual(item["libpq"], ["PGHOST", "PGPORT"])
        self.assertEqual(item["holding_a_secret"], [])

    def test_log_and_items_urls_ignore_the_case_of_project_and_job(self):
        daemon = self.daemon()
        entry = daemon.wait_state(daemon.must_schedule("shop", "echo", jobid="Job1"), "finished")
        log = daemon.call("GET", entry["log_url"])[2]
        items = daemon.call("GET", entry["items_url"])[2]
        self.assertTrue(log and items)
        for project, job in (("shop", "job1"), ("SHOP", "Job1"), ("Shop", "JOB1")):
            self.assertEqual(daemon.call("GET", f"/logs/{project}/echo/{job}.log")[2], log)
            self.assertEqual(daemon.call("GET", f"/items/{project}/echo/{job}.jl")[2], items)

    def test_failed_end_of_crawl_check_is_failed(self):
        daemon = self.daemon()
        entry = daemon.wait_state(daemon.must_schedule("shop", "failing"), "finished")
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("failed", 1))

    def test_priority_order_across_projects_with_one_slot(self):
        daemon = self.daemon("--max-jobs", "1")
        blocker = daemon.must_schedule("shop", "slow", pages="8", delay="0.2")
        daemon.wait_state(blocker, "running")
        low = daemon.must_schedule("shop", "echo", jobid="low", priority="-5")
        plain = daemon.must_schedule("news", "echo", jobid="plain")
        high = daemon.must_schedule("news", "echo", jobid="high", priority="10")
        also_high = daemon.must_schedule("shop", "echo", jobid="also-high", priority="10")
        _, listing = daemon.get("listjobs.json")
        self.assertEqual([e["id"] for e in listing["pending"]],
                         ["high", "also-high", "plain", "low"])
        self.assertEqual(listing["pending"][0]["priority"], 10.0)
        for jobid in (low, plain, high, also_high):
            daemon.wait_state(jobid, "finished")
        _, listing = daemon.get("listjobs.json")
        started = sorted((e["start_time"], e["id"]) for e in listing["finished"]
                         if e["id"] != blocker)
        self.assertEqual([jobid for _, jobid in started], ["high", "also-high", "plain", "low"])

    def test_duplicate_jobid_in_other_case_is_refused(self):
        daemon = self.daemon()
        daemon.must_schedule("shop", "echo", jobid="Job1")
        status, answer = daemon.schedule("news", "echo", jobid="JOB1")
        self.assertEqual((status, answer["status"]), (409, "error"))
        self.assertIn("JOB1", answer["message"])
        state, entry = daemon.find("job1")
        self.assertEqual(entry["project"], "shop")

    def test_logs_grow_and_items_and_stats_are_served_while_running(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", delay="0.1")
        entry = daemon.wait_state(jobid, "running")
        self.assertIsInstance(entry["pid"], int)
        self.assertIsNone(daemon.stats(jobid)["stats"])

        def log_lines():
            return daemon.call("GET", entry["log_url"])[2].count(b"slow page")

        first = wait_until(log_lines, 30, "log lines")
        wait_until(lambda: log_lines() > first, 30, "the log to grow")
        self.assertEqual(daemon.call("GET", entry["items_url"])[0], 200)
        stats = wait_until(lambda: daemon.stats(jobid)["stats"], 15, "stats while running")
        self.assertIsNone(stats["finish_reason"])
        self.assertEqual(daemon.stats(jobid)["state"], "running")
        daemon.post("cancel.json", {"project": "shop", "job": jobid})
        daemon.wait_state(jobid, "finished")
        self.assertEqual(daemon.call("GET", entry["items_url"])[0], 200)
        self.assertEqual(daemon.stats(jobid)["stats"]["finish_reason"], "interrupted")

    def test_keep_forgets_the_oldest_finished_job_and_its_files(self):
        daemon = self.daemon("--keep", "2", "--max-jobs", "1")
        jobs = [daemon.must_schedule("shop", "echo", jobid=f"k{i}") for i in range(3)]
        first_log = os.path.join(daemon.directory, "logs", "shop", "echo", "k0.log")
        wait_until(lambda: os.path.exists(first_log), 30, "the first job's log")
        for jobid in jobs:
            wait_until(lambda: daemon.find(jobid)[0] in ("finished", None), 60, jobid)
        # The prune follows the last end: the listing a moment after it.
        wait_until(lambda: len(daemon.get("listjobs.json")[1]["finished"]) == 2, 10,
                   "the prune after the last end")
        _, listing = daemon.get("listjobs.json")
        self.assertEqual(sorted(e["id"] for e in listing["finished"]), ["k1", "k2"])
        for kind, suffix in (("logs", ".log"), ("items", ".jsonl"), ("stats", ".json")):
            self.assertFalse(os.path.exists(
                os.path.join(daemon.directory, kind, "shop", "echo", "k0" + suffix)), kind)
            self.assertTrue(os.path.exists(
                os.path.join(daemon.directory, kind, "shop", "echo", "k2" + suffix)), kind)
        self.assertEqual(daemon.call("GET", "/logs/shop/echo/k0.log")[0], 404)


class RestartTests(CrawlTestCase):
    def test_killed_daemon_restarts_with_lost_running_job_and_waiting_job_run(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = self.daemon("--max-jobs", "1", directory=directory)
        done = daemon.must_schedule("shop", "echo", jobid="done")
        daemon.wait_state(done, "finished")
        running = daemon.must_schedule("shop", "slow", jobid="running", delay="0.1")
        waiting = daemon.must_schedule("shop", "echo", jobid="waiting")
        daemon.wait_state(running, "running")
        last = wait_until(lambda: daemon.stats(running)["stats"], 20, "stats of the running job")
        pid = daemon.find(running)[1]["pid"]
        self.addCleanup(kill_groups, [pid])
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait()
        kill_groups([pid])
        again = self.daemon("--max-jobs", "1", directory=directory)
        state, entry = again.find(running)
        self.assertEqual((state, entry["outcome"]), ("finished", "lost"))
        stats = again.stats(running)["stats"]
        self.assertIsNotNone(stats)
        self.assertGreaterEqual(stats["items"], last["items"])
        self.assertEqual(again.wait_state(waiting, "finished")["outcome"], "finished")
        self.assertEqual(again.find(done)[1]["outcome"], "finished")
        self.assertEqual(again.call("GET", f"/logs/shop/echo/{done}.log")[0], 200)
