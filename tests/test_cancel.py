"""Cancelling real crawls, the kill escalation, and stopping the daemon."""

import json
import os
import signal
import tempfile
import time

from .processes import Daemon, alive, kill_groups, wait_until
from .test_jobs import CrawlTestCase

# The daemon's grace before it kills a cancelled job, shortened for tests.
SHORT_GRACE = {"NETWEIR_SERVE_CANCEL_GRACE": "3"}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class StubbornTestCase(CrawlTestCase):
    def stubborn(self, daemon):
        """Starts a job that ignores SIGTERM and SIGINT and has a child that
        does too; returns its id and {"pid", "child"}."""
        pidfile = os.path.join(tempfile.mkdtemp(dir=self.base), "pids.json")
        jobid = daemon.must_schedule("shop", "stubborn", pidfile=pidfile)
        pids = wait_until(lambda: read_json(pidfile), 30, "the stubborn job's pids")
        self.addCleanup(kill_groups, [pids["pid"]])
        return jobid, pids


class CancelTests(StubbornTestCase):
    def test_cancelled_job_stops_cleanly(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", delay="0.1")
        entry = daemon.wait_state(jobid, "running")
        wait_until(lambda: daemon.call("GET", entry["log_url"])[2].count(b"slow page") >= 3,
                   30, "a few pages")
        status, answer = daemon.post("cancel.json", {"project": "shop", "job": jobid.upper()})
        self.assertEqual((status, answer["prevstate"]), (200, "running"))
        asked = time.monotonic()
        entry = daemon.wait_state(jobid, "finished", timeout=20)
        self.assertLess(time.monotonic() - asked, 10)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", 130))
        lines = daemon.call("GET", entry["items_url"])[2].decode().splitlines()
        self.assertTrue(lines)
        for line in lines:
            json.loads(line)
        self.assertEqual(daemon.stats(jobid)["stats"]["finish_reason"], "interrupted")
        status, answer = daemon.post("cancel.json", {"project": "shop", "job": jobid})
        self.assertEqual(answer["prevstate"], None)

    def test_cancel_waiting_job_and_unknown_job(self):
        daemon = self.daemon("--max-jobs", "1")
        blocker = daemon.must_schedule("shop", "slow", delay="0.1")
        waiting = daemon.must_schedule("shop", "echo")
        self.assertEqual(daemon.post("cancel.json", {"project": "shop", "job": waiting})[1]
                         ["prevstate"], "pending")
        state, entry = daemon.find(waiting)
        self.assertEqual((state, entry["outcome"], entry["start_time"]),
                         ("finished", "cancelled", None))
        self.assertEqual(daemon.post("cancel.json", {"project": "shop", "job": "nosuch"})[1]
                         ["prevstate"], None)
        self.assertEqual(daemon.post("cancel.json", {"project": "news", "job": blocker})[1]
                         ["prevstate"], None)
        daemon.post("cancel.json", {"project": "shop", "job": blocker})
        daemon.wait_state(blocker, "finished")

    def test_checkpointed_job_carries_on_after_a_cancel(self):
        daemon = self.daemon()
        settings = ["checkpoint=resume"]
        first = daemon.must_schedule("shop", "slow", settings, delay="0.2", pages="40")
        entry = daemon.wait_state(first, "running")
        wait_until(lambda: daemon.call("GET", entry["log_url"])[2].count(b"slow page") >= 5,
                   30, "a few pages")
        daemon.post("cancel.json", {"project": "shop", "job": first})
        entry = daemon.wait_state(first, "finished", timeout=20)
        seen = {json.loads(l)["n"] for l in daemon.call("GET", entry["items_url"])[2].splitlines()}
        self.assertTrue(seen)
        second = daemon.must_schedule("shop", "slow", settings, delay="0.01", pages="40")
        entry = daemon.wait_state(second, "finished", timeout=60)
        again = [json.loads(l)["n"] for l in daemon.call("GET", entry["items_url"])[2].splitlines()]
        self.assertTrue(again)
        self.assertFalse(seen & set(again), (sorted(seen), sorted(again)))
        self.assertEqual(seen | set(again), set(range(40)))
        self.assertTrue(os.path.exists(os.path.join(daemon.directory, "data", "shop", "resume")))

    def test_job_ignoring_the_signal_is_killed_with_its_child_after_the_grace(self):
        daemon = self.daemon(env=SHORT_GRACE)
        jobid, pids = self.stubborn(daemon)
        daemon.post("cancel.json", {"project": "shop", "job": jobid})
        time.sleep(1.5)
        self.assertEqual(daemon.find(jobid)[0], "running")
        entry = daemon.wait_state(jobid, "finished", timeout=20)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", -9))
        wait_until(lambda: not alive(pids["pid"]) and not alive(pids["child"]), 5,
                   "the job and its child to be gone")

    def test_second_cancel_kills_at_once(self):
        daemon = self.daemon()
        jobid, pids = self.stubborn(daemon)
        daemon.post("cancel.json", {"project": "shop", "job": jobid})
        asked = time.monotonic()
        self.assertEqual(daemon.post("cancel.json", {"project": "shop", "job": jobid})[1]
                         ["prevstate"], "running")
        entry = daemon.wait_state(jobid, "finished", timeout=20)
        self.assertLess(time.monotonic() - asked, 10)
        self.assertEqual(entry["outcome"], "cancelled")
        wait_until(lambda: not alive(pids["pid"]) and not alive(pids["child"]), 5,
                   "the job and its child to be gone")

    def test_child_left_behind_by_a_finished_job_is_killed(self):
        daemon = self.daemon()
        pidfile = os.path.join(tempfile.mkdtemp(dir=self.base), "pids.json")
        jobid = daemon.must_schedule("shop", "orphaning", pidfile=pidfile)
        entry = daemon.wait_state(jobid, "finished")
        pids = read_json(pidfile)
        self.addCleanup(kill_groups, [pids["pid"]])
        self.assertEqual(entry["outcome"], "finished")
        wait_until(lambda: not alive(pids["child"]), 5, "the child to be gone")


class StopTests(StubbornTestCase):
    def test_sigterm_cancels_running_jobs_and_keeps_waiting_ones(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = self.daemon("--max-jobs", "2", directory=directory)
        running = [daemon.must_schedule("shop", "slow", delay="0.1") for _ in range(2)]
        waiting = daemon.must_schedule("news", "echo", jobid="waiting")
        for jobid in running:
            daemon.wait_state(jobid, "running")
        pids = [daemon.find(j)[1]["pid"] for j in running]
        self.assertEqual(daemon.stop(signal.SIGTERM, timeout=60), 0)
        self.assertFalse(any(alive(pid) for pid in pids))
        self.assertIn("stopping", daemon.output())
        again = self.daemon("--max-jobs", "2", directory=directory)
        for jobid in running:
            state, entry = again.find(jobid)
            self.assertEqual((state, entry["outcome"]), ("finished", "cancelled"))
        self.assertEqual(again.wait_state(waiting, "finished")["outcome"], "finished")

    def test_second_sigint_while_stopping_kills_jobs_and_records_them(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = self.daemon(directory=directory)
        jobid, pids = self.stubborn(daemon)
        os.kill(daemon.process.pid, signal.SIGINT)
        time.sleep(1)
        self.assertIsNone(daemon.process.poll())
        os.kill(daemon.process.pid, signal.SIGINT)
        self.assertEqual(daemon.process.wait(20), 0)
        wait_until(lambda: not alive(pids["pid"]) and not alive(pids["child"]), 5,
                   "the job and its child to be gone")
        again = self.daemon(directory=directory)
        state, entry = again.find(jobid)
        self.assertEqual((state, entry["outcome"]), ("finished", "cancelled"))


class UnservedProjectTests(CrawlTestCase):
    def test_waiting_job_of_a_project_no_longer_served_can_be_cancelled(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = self.daemon("--max-jobs", "1", directory=directory)
        daemon.wait_state(daemon.must_schedule("shop", "slow", delay="0.2"), "running")
        first = daemon.must_schedule("shop", "slow", jobid="first", priority="5", delay="0.2")
        waiting = daemon.must_schedule("news", "echo", jobid="orphan")
        daemon.stop()
        again = Daemon(directory, [f"shop={self.shop}"], ["--max-jobs", "1"]).start()
        self.addCleanup(again.kill)
        again.wait_state(first, "running")
        answer = again.post("cancel.json", {"project": "NEWS", "job": waiting})[1]
        self.assertEqual(answer["prevstate"], "pending")
        self.assertEqual(again.find(waiting)[1]["outcome"], "cancelled")
        again.post("cancel.json", {"project": "shop", "job": first})
        again.wait_state(first, "finished")
