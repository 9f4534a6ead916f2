"""Faults from outside: a job table locked by another process, a full disk,
path settings that cannot be used.

First on a Clock: the SQLite store's waiting for a lock (held by a second
connection in this process), and the launcher with a job whose end the
table cannot take. Then the real daemon runs real crawls while a process of
its own holds the lock, while its --dir is a tmpfs filled to the last byte,
and while it is asked for paths it must refuse.
"""

import errno
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.jobs.events import RECORDED_LATE
from netweir_serve.jobs.launcher import END_RETRY_DELAY
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.store.records import JobRecord, StoreError
from netweir_serve.store.sqlite import SQLiteJobStore

from .processes import alive, kill_groups, wait_until
from .test_jobs import CrawlTestCase
from .test_launcher import Rig

# Holds the write lock of the SQLite file argv[1] for argv[2] seconds,
# saying "locked" once it has it.
HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
print("released", flush=True)
"""

# How long the outside process holds the lock, and the most any answer may
# take meanwhile (the reactor must never wait for the lock).
HOLD_SECONDS = 6.0
QUICK = 0.5


def record(jobid, project="shop"):
    return JobRecord(id=jobid, project=project, spider="echo", spider_file="/p/echo.py")


class LockedFileTests(unittest.TestCase):
    """SQLiteJobStore against a file another connection holds locked."""

    def setUp(self):
        self.clock = Clock()
        self.path = os.path.abspath(self.mktemp())
        self.store = SQLiteJobStore(self.path, self.clock, patience=30.0)
        self.addCleanup(self.store.close)
        self.other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(self.other.close)

    def lock(self):
        self.other.execute("BEGIN IMMEDIATE")

    def unlock(self):
        self.other.execute("ROLLBACK")

    def fired(self, d):
        results = []
        d.addBoth(results.append)
        return results

    def test_locked_writes_wait_in_order_and_reads_go_on(self):
        self.successResultOf(self.store.add(record("first")))
        self.successResultOf(self.store.claim_next("n", ["shop"], 0.5))
        self.lock()
        started = time.monotonic()
        writes = [self.fired(self.store.add(record(f"j{i}"))) for i in range(3)]
        claimed = self.fired(self.store.claim_next("n", ["shop"], 1.0))
        # Each try gives up after the busy timeout, not a busy wait.
        self.assertLess(time.monotonic() - started, QUICK)
        self.assertEqual(writes, [[], [], []])
        for _ in range(5):
            tried = time.monotonic()
            self.clock.advance(0.5)
            self.assertLess(time.monotonic() - tried, QUICK)
        self.assertEqual(writes + [claimed], [[], [], [], []])
        # Reads do not wait for the lock.
        pending, running, _ = self.successResultOf(self.store.jobs())
        self.assertEqual(([r.id for r in pending], [r.id for r in running]), ([], ["first"]))
        self.assertEqual(self.successResultOf(self.store.get("first")).state, "running")
        self.assertEqual(self.successResultOf(self.store.counts())["running"], 1)
        self.unlock()
        self.clock.advance(0.5)
        self.assertEqual([w[0].id for w in writes], ["j0", "j1", "j2"])
        # The claim was asked after the adds, and is made after them.
        self.assertEqual(claimed[0].id, "j0")
        pending, running, _ = self.successResultOf(self.store.jobs())
        self.assertEqual(([r.id for r in pending], [r.id for r in running]),
                         (["j1", "j2"], ["first", "j0"]))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_write_cancelled_while_it_waits_is_never_made(self):
        # schedule.json cancels its work when the client goes away; the job
        # must not be queued behind its back.
        self.lock()
        first = self.fired(self.store.add(record("kept1")))
        gone = self.store.add(record("gone"))
        last = self.fired(self.store.add(record("kept2")))
        self.clock.advance(0.1)
        gone.cancel()
        self.failureResultOf(gone, defer.CancelledError)
        self.unlock()
        self.clock.advance(0.5)
        self.assertEqual((first[0].id, last[0].id), ("kept1", "kept2"))
        self.assertIsNone(self.successResultOf(self.store.get("gone")))
        self.successResultOf(self.store.add(record("gone")))

    def test_cancelling_the_write_under_way_lets_the_next_one_through(self):
        self.lock()
        head = self.store.add(record("head"))
        behind = self.fired(self.store.add(record("behind")))
        head.cancel()
        self.failureResultOf(head, defer.CancelledError)
        self.unlock()
        self.clock.advance(1.0)
        self.assertEqual(behind[0].id, "behind")
        self.assertIsNone(self.successResultOf(self.store.get("head")))

    def test_a_write_past_its_patience_fails_and_the_store_goes_on(self):
        store = SQLiteJobStore(self.path, self.clock, patience=2.0)
        self.addCleanup(store.close)
        self.lock()
        waited = store.add(record("late"))
        self.clock.pump([0.5] * 2)
        behind = self.fired(store.add(record("behind")))
        self.clock.pump([0.5])
        self.assertNoResult(waited)
        self.clock.pump([0.5] * 2)
        failure = self.failureResultOf(waited, StoreError)
        self.assertIn("could not be written", failure.value.message)
        self.unlock()
        self.clock.advance(0.5)
        # The write behind it had waited less long: it is made.
        self.assertEqual(behind[0].id, "behind")
        self.assertEqual(self.successResultOf(store.add(record("next"))).id, "next")
        self.assertIsNone(self.successResultOf(store.get("late")))

    def test_closing_fails_the_writes_that_wait(self):
        self.lock()
        waiting = self.store.add(record("a"))
        self.clock.advance(0.1)
        self.successResultOf(self.store.close())
        self.failureResultOf(waiting, StoreError)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class UnrecordedEndTests(unittest.TestCase):
    """A job that ends while its end cannot be written (a full disk)."""

    def setUp(self):
        self.rig = Rig(self, max_jobs=1)
        self.real = self.rig.store.mark_finished
        self.tries = []

        def full(*args, **kwargs):
            self.tries.append(args[0])
            return defer.fail(StoreError("the job table could not be written:"
                                         " database or disk is full"))

        self.patch(self.rig.store, "mark_finished", full)

    def space_again(self):
        self.patch(self.rig.store, "mark_finished", self.real)

    def test_its_slot_is_freed_and_its_end_recorded_once_space_is_back(self):
        rig = self.rig
        rig.schedule("a", settings=(("max_items", "3"),))
        rig.schedule("b")
        rig.exit("a", 1)
        # The slot is free at once: b runs although a is still "running".
        self.assertEqual(rig.get("b").state, "running")
        self.assertEqual(rig.get("a").state, "running")
        self.assertEqual(self.tries, ["a"])
        # Tried again while the disk stays full...
        rig.reactor.advance(END_RETRY_DELAY)
        rig.reactor.advance(END_RETRY_DELAY)
        self.assertEqual(self.tries, ["a", "a", "a"])
        self.space_again()
        rig.reactor.advance(END_RETRY_DELAY)
        a = rig.get("a")
        self.assertEqual((a.state, a.outcome, a.exit_status), ("finished", "failed", 1))
        # ...and no more once it is recorded; nothing ran twice.
        rig.reactor.advance(END_RETRY_DELAY * 5)
        self.assertEqual(self.tries, ["a", "a", "a"])
        self.assertEqual(len(rig.reactor.processes), 2)
        self.assertEqual([r.id for r in rig.ended], ["a"])
        self.flushLoggedErrors(StoreError)

    def test_a_job_sharing_its_checkpoint_starts_once_the_end_is_recorded(self):
        rig = self.rig
        lock = ("path:shop:checkpoint:/data/ck",)
        self.patch(rig.store, "add", self._with_locks(rig.store.add, lock))
        rig.schedule("a")
        rig.exit("a", 0)
        rig.schedule("b")
        self.assertEqual(rig.get("b").state, "pending")
        self.space_again()
        rig.reactor.advance(END_RETRY_DELAY)
        self.assertEqual(rig.get("a").outcome, "finished")
        # The poller's safety net (or the next event) starts it now.
        rig.poller.poll()
        rig.settle()
        self.assertEqual(rig.get("b").state, "running")
        self.flushLoggedErrors(StoreError)

    def test_an_end_recorded_late_is_told_with_the_health_its_write_gave(self):
        rig = self.rig
        late = []
        rig.events.subscribe(lambda kind, record: late.append(record), kinds=(RECORDED_LATE,))
        rig.schedule("a", policy=JobPolicy(min_items=5))
        rig.write_stats("a", {"items": 1, "fetched": 3})
        rig.exit("a", 0)
        # Announced at once, before the table has it: no health yet.
        self.assertEqual([(r.id, r.outcome, r.health) for r in rig.ended],
                         [("a", "finished", None)])
        self.space_again()
        rig.reactor.advance(END_RETRY_DELAY)
        # Recorded: told again with its health (--notify-on degraded and the
        # degraded counter hear this), and not as a second end.
        self.assertEqual([(r.id, r.health, r.health_reasons) for r in late],
                         [("a", "degraded", ("items 1 < min_items 5",))])
        self.assertEqual(len(rig.ended), 1)
        self.flushLoggedErrors(StoreError)

    @staticmethod
    def _with_locks(add, locks):
        return lambda record: add(replace(record, locks=locks))

    def test_no_more_tries_once_the_service_stops(self):
        rig = self.rig
        rig.schedule("a")
        rig.exit("a", 0)
        stopped = []
        rig.launcher.stop().addCallback(stopped.append)
        self.assertEqual(stopped, [None])
        rig.reactor.advance(END_RETRY_DELAY * 3)
        self.assertEqual(self.tries, ["a"])
        self.assertEqual(rig.reactor.getDelayedCalls(), [])
        self.flushLoggedErrors(StoreError)


def tree(top):
    """Every folder and file under ``top`` with what each file holds."""
    found = {}
    for here, folders, files in os.walk(top):
        for name in folders:
            found[os.path.relpath(os.path.join(here, name), top) + "/"] = None
        for name in files:
            with open(os.path.join(here, name), "rb") as f:
                found[os.path.relpath(os.path.join(here, name), top)] = f.read()
    return found


class Watcher:
    """Reads listjobs.json over and over in a thread of its own, keeping
    every state each job was seen in, and how long the slowest answer took."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.states = {}
        self.duplicates = []
        self.slowest = 0.0
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            asked = time.monotonic()
            try:
                _, listing = self.daemon.get("listjobs.json", timeout=10)
            except (OSError, ValueError) as e:
                self.errors.append(repr(e))
                return
            self.slowest = max(self.slowest, time.monotonic() - asked)
            seen = []
            for state in ("pending", "running", "finished"):
                for entry in listing[state]:
                    seen.append(entry["id"])
                    history = self.states.setdefault(entry["id"], [])
                    if not history or history[-1] != state:
                        history.append(state)
            if len(seen) != len(set(seen)):
                self.duplicates.append(seen)
            self._stop.wait(0.05)

    def stop(self):
        self._stop.set()
        self._thread.join(15)


def count_lines(text, needle):
    return sum(1 for line in text.splitlines() if needle in line)


class FaultTestCase(CrawlTestCase):
    def log_of(self, daemon, jobid):
        _, entry = daemon.find(jobid)
        return daemon.call("GET", entry["log_url"])[2].decode()

    def items_of(self, daemon, jobid):
        _, entry = daemon.find(jobid)
        status, _, body = daemon.call("GET", entry["items_url"])
        self.assertEqual(status, 200, body)
        return [json.loads(line) for line in body.splitlines()]

    def assert_ran_once(self, daemon, jobid):
        """The daemon started ``jobid`` once, and its log shows one end."""
        self.assertEqual(count_lines(daemon.output(), f"job {jobid} started:"), 1,
                         daemon.output())
        self.assertEqual(count_lines(self.log_of(daemon, jobid), "Dumping Scrapy stats"), 1)

    def wait_running_with_pid(self, daemon, jobid):
        return wait_until(lambda: (daemon.find(jobid)[1] or {}).get("pid"), 30,
                          f"job {jobid} to run")

    def assert_two_slots_free(self, daemon):
        """Two new jobs run at once (so no slot is held by a job that ended)."""
        jobs = [daemon.must_schedule("shop", "slow", jobid=f"last{i}", delay="0.1")
                for i in range(2)]
        wait_until(lambda: daemon.get("daemonstatus.json")[1]["running"] == 2, 30,
                   "both last jobs to run")
        for jobid in jobs:
            self.assertIsInstance(daemon.find(jobid)[1]["pid"], int)
            daemon.post("cancel.json", {"project": "shop", "job": jobid, "signal": "KILL"})
        for jobid in jobs:
            daemon.wait_state(jobid, "finished", timeout=30)


class LockedTableTests(FaultTestCase):
    def hold_lock(self, daemon, seconds):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, os.path.join(daemon.directory, "jobs.db"),
             str(seconds)], stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (holder.kill(), holder.wait(), holder.stdout.close()))
        self.assertEqual(holder.stdout.readline().strip(), "locked")
        return holder

    def test_a_locked_table_holds_writes_back_and_loses_nothing(self):
        daemon = self.daemon("--max-jobs", "2")
        ends = daemon.must_schedule("shop", "slow", jobid="ends", pages="10", delay="0.2")
        cancelled = daemon.must_schedule("shop", "slow", jobid="cancelled", delay="0.1")
        pids = [self.wait_running_with_pid(daemon, j) for j in (ends, cancelled)]
        self.addCleanup(kill_groups, pids)
        for jobid in (ends, cancelled):
            wait_until(lambda: "slow page 1" in self.log_of(daemon, jobid), 30,
                       f"job {jobid} to crawl")
        watcher = Watcher(daemon)
        self.addCleanup(watcher.stop)

        holder = self.hold_lock(daemon, HOLD_SECONDS)
        locked_at = time.monotonic()
        self.assertTrue(alive(pids[0]), "the job meant to end under the lock ended before it")
        answers = {}

        def schedule(jobid, timeout):
            form = [("project", "shop"), ("spider", "echo"), ("jobid", jobid),
                    ("setting", f"checkpoint={jobid}/ck")]
            try:
                answers[jobid] = daemon.post("schedule.json", form, timeout=timeout)
            except (socket.timeout, OSError) as e:
                answers[jobid] = e

        threads = [threading.Thread(target=schedule, args=(f"e{i}", 30)) for i in range(4)]
        # A client that gives up while the lock is held.
        threads.append(threading.Thread(target=schedule, args=("gone", 1)))
        for thread in threads:
            thread.start()
        self.addCleanup(lambda: [thread.join(30) for thread in threads])

        # A running job is cancelled at once; the record of it waits.
        asked = time.monotonic()
        status, answer = daemon.post("cancel.json", {"project": "shop", "job": cancelled})
        self.assertLess(time.monotonic() - asked, QUICK)
        self.assertEqual((status, answer["prevstate"]), (200, "running"))

        slowest, ended_at = 0.0, None
        while holder.poll() is None:
            asked = time.monotonic()
            status, answer = daemon.get("daemonstatus.json", timeout=5)
            slowest = max(slowest, time.monotonic() - asked)
            self.assertEqual(status, 200)
            if ended_at is None and not any(alive(pid) for pid in pids):
                ended_at = time.monotonic()
            time.sleep(0.05)
        released_at = time.monotonic()
        self.assertLess(slowest, QUICK, "daemonstatus.json waited for the lock")
        self.assertGreater(released_at - locked_at, HOLD_SECONDS - 1)
        self.assertIsNotNone(ended_at, "the running jobs did not end while the lock was held")
        self.assertLess(ended_at, released_at)

        for thread in threads:
            thread.join(30)
        self.assertIsInstance(answers["gone"], socket.timeout)
        ok = [jobid for jobid, answer in answers.items()
              if isinstance(answer, tuple) and answer[1].get("status") == "ok"]
        self.assertEqual(sorted(ok), ["e0", "e1", "e2", "e3"], answers)

        # Every end is recorded, every job answered "ok" runs once, and so
        # does the one whose client went away: a write is never cut short
        # (web/endpoint.py; on PostgreSQL a cancel could not stop its
        # transaction anyway), it is done and has its audit row.
        self.assertEqual(daemon.wait_state(ends, "finished", timeout=30)["outcome"], "finished")
        self.assertEqual(daemon.wait_state(cancelled, "finished", timeout=30)["outcome"],
                         "cancelled")
        for jobid in ok + ["gone"]:
            self.assertEqual(daemon.wait_state(jobid, "finished", timeout=30)["outcome"],
                             "finished")
        self.assert_two_slots_free(daemon)
        watcher.stop()

        self.assertEqual(watcher.errors, [])
        self.assertEqual(watcher.duplicates, [])
        self.assertLess(watcher.slowest, QUICK, "listjobs.json waited for the lock")
        order = ["pending", "running", "finished"]
        for jobid in ok:
            # Seen only moving on: never pending again once running.
            seen = [order.index(state) for state in watcher.states[jobid]]
            self.assertEqual(seen, sorted(set(seen)), (jobid, watcher.states[jobid]))
            self.assertEqual(watcher.states[jobid][-1], "finished")
        for jobid in (ends, cancelled):
            self.assertEqual(watcher.states[jobid], ["running", "finished"])
        for jobid in ok + ["gone", ends, cancelled]:
            self.assert_ran_once(daemon, jobid)
        for jobid in ok + ["gone"]:
            self.assertEqual(count_lines(self.log_of(daemon, jobid), "crawl finished"), 1)
            self.assertEqual(len(self.items_of(daemon, jobid)), 1)
        self.assertEqual(sorted(item["n"] for item in self.items_of(daemon, ends)),
                         list(range(10)))
        numbers = [item["n"] for item in self.items_of(daemon, cancelled)]
        self.assertEqual(len(numbers), len(set(numbers)))

        # The request whose client went away: its folder kept (its job
        # needed it), its row in the audit with the answer it would have had.
        data = os.path.join(daemon.directory, "data", "shop")
        for jobid in ok + ["gone"]:
            self.assertTrue(os.path.isdir(os.path.join(data, jobid)))
        self.assertEqual(daemon.get("daemonstatus.json")[1]["pending"], 0)
        self.assertEqual(daemon.get("daemonstatus.json")[1]["running"], 0)
        rows = {r["target"]: r["status"] for r in daemon.get(
            "audit.json", {"project": "shop", "limit": "100"})[1]["audit"]
            if r["endpoint"] == "schedule.json"}
        self.assertEqual({jobid: rows.get(jobid) for jobid in ok + ["gone"]},
                         {jobid: 200 for jobid in ok + ["gone"]})
        # Its id is taken: a client that asks again is told so.
        self.assertEqual(daemon.post("schedule.json", {"project": "shop", "spider": "echo",
                                                       "jobid": "gone"})[0], 409)


class FullDiskTests(FaultTestCase):
    SIZE = "4m"

    def mount_tmpfs(self):
        """A small tmpfs of this test's own; skips (fails under CI=true)
        where none can be mounted."""
        mount_point = os.path.join(self.base, "small-disk")
        os.makedirs(mount_point)
        problem = None
        if os.geteuid() != 0:
            problem = "mounting a tmpfs needs root"
        else:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.SIZE}",
                                   "netweir-test", mount_point], capture_output=True, text=True)
            if done.returncode != 0:
                problem = f"cannot mount a tmpfs: {done.stderr.strip()}"
        if problem:
            if os.environ.get("CI") == "true":
                self.fail(problem)
            raise unittest.SkipTest(problem)
        self.addCleanup(self.unmount, mount_point)
        return mount_point

    @staticmethod
    def unmount(mount_point):
        if subprocess.run(["umount", mount_point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mount_point], capture_output=True)

    @staticmethod
    def fill(path):
        """Writes ``path`` until the file system has not one byte left."""
        with open(path, "wb", buffering=0) as f:
            for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise

    def test_a_full_disk_refuses_jobs_and_keeps_slots_and_runs_nothing_twice(self):
        directory = self.mount_tmpfs()
        daemon = self.daemon("--max-jobs", "1", directory=directory)
        daemon.wait_state(daemon.must_schedule("shop", "echo", jobid="before"), "finished")
        running = daemon.must_schedule("shop", "slow", ["checkpoint=shared"], jobid="running",
                                       pages="12", delay="0.2")
        pid = self.wait_running_with_pid(daemon, running)
        self.addCleanup(kill_groups, [pid])
        # Its checkpoint made before the disk fills (a warm start has a pid
        # before the crawl has opened anything), so that what is compared
        # below is what the refused job would have made, not the running one.
        checkpoint = os.path.join(directory, "data", "shop", "shared", "crawl.sqlite3")
        wait_until(lambda: os.path.exists(checkpoint), 30, "the running job's checkpoint")

        ballast = os.path.join(directory, "ballast")
        self.fill(ballast)
        self.assertEqual(os.statvfs(directory).f_bavail, 0)

        data = os.path.join(directory, "data")
        before = tree(data) if os.path.isdir(data) else None
        form = [("project", "shop"), ("spider", "echo"), ("jobid", "full"),
                ("setting", "checkpoint=made/for/it")]
        status, headers, body = daemon.call("POST", "schedule.json", form)
        self.assertIn(status, (503, 500, 400), body)
        self.assertTrue(headers["Content-Type"].startswith("application/json"), headers)
        answer = json.loads(body)
        self.assertEqual(answer["status"], "error")
        self.assertRegex(answer["message"], "full|space")
        # Nothing half-queued: no job, no folders it would have used.
        self.assertEqual(daemon.find("full"), (None, None))
        self.assertEqual(daemon.get("daemonstatus.json")[1]["pending"], 0)
        # The paths alone: the running job's checkpoint changes as it runs.
        self.assertEqual(sorted(tree(data)) if os.path.isdir(data) else None,
                         sorted(before) if before is not None else None)

        # The running job ends while the disk is full.
        wait_until(lambda: not alive(pid), 30, "the running job to end")
        wait_until(lambda: f"job {running} ended" in daemon.output(), 10,
                   "the daemon to see the end")

        os.unlink(ballast)
        self.assertEqual(daemon.must_schedule("shop", "echo", ["checkpoint=made/for/it"],
                                              jobid="full"), "full")
        entry = daemon.wait_state("full", "finished", timeout=30)
        self.assertEqual(entry["outcome"], "finished")
        self.assertTrue(os.path.isdir(os.path.join(data, "shop", "made", "for")))
        # Once space is back the end is recorded after all: the job is no
        # longer listed as running, and what it held alone is free again.
        # (The crawl itself could not write either; what matters is that
        # its own end is recorded, not "lost".)
        self.assertIn(daemon.wait_state(running, "finished", timeout=30)["outcome"],
                      ("failed", "finished"))
        shared = daemon.must_schedule("shop", "echo", ["checkpoint=shared"], jobid="shared")
        self.assertEqual(daemon.wait_state(shared, "finished", timeout=30)["outcome"],
                         "finished")
        self.assertEqual(daemon.get("daemonstatus.json")[1]["running"], 0)
        after = daemon.must_schedule("shop", "echo", jobid="after")
        self.assertEqual(daemon.wait_state(after, "finished", timeout=30)["outcome"],
                         "finished")
        for jobid in ("before", running, "full", "after", "shared"):
            self.assertEqual(count_lines(daemon.output(), f"job {jobid} started:"), 1)
        for jobid in ("full", "after", "shared"):
            self.assert_ran_once(daemon, jobid)
            self.assertEqual(len(self.items_of(daemon, jobid)), 1)

        # Nor after a restart: the job that ended unrecorded is settled, not run.
        self.assertEqual(daemon.stop(), 0)
        again = self.daemon("--max-jobs", "1", directory=directory)
        state, entry = again.find(running)
        self.assertEqual(state, "finished")
        self.assertIn(entry["outcome"], ("failed", "finished"))
        self.assertEqual(again.get("daemonstatus.json")[1]["pending"], 0)
        time.sleep(0.3)
        self.assertNotIn("started:", again.output().split("listening on")[-1])


class PathSettingTests(FaultTestCase):
    def assert_refused(self, daemon, settings, spider="echo", project="shop", naming=None):
        status, answer = daemon.schedule(project, spider, settings, jobid="refused")
        self.assertEqual((status, answer["status"]), (400, "error"), answer)
        if naming:
            self.assertIn(naming, answer["message"])
        self.assertEqual(daemon.find("refused"), (None, None))
        return answer["message"]

    def test_path_settings_refused_over_http_and_a_refusal_makes_nothing(self):
        daemon = self.daemon()
        data = os.path.join(daemon.directory, "data")
        message = self.assert_refused(daemon, ["checkpoint=" + "a/" * 1100 + "x"],
                                      naming="checkpoint")
        self.assertIn("deep", message)
        shop_data = os.path.join(data, "shop")
        os.makedirs(shop_data, exist_ok=True)
        with open(os.path.join(shop_data, "f"), "w") as f:
            f.write("a file\n")
        message = self.assert_refused(daemon, ["warc=f/x.warc"], naming="warc")
        self.assertIn("'f'", message)

        before = tree(data)
        self.assertEqual(before, {"shop/": None, "shop/f": b"a file\n"})
        for settings, spider in ((["cache=deep/a/b/c/d", "no_such_setting=1"], "echo"),
                                 (["cache=deep/a/b/c/d"], "no_such_spider"),
                                 (["cache=deep/a/b/c/d", "concurrency=0"], "echo"),
                                 (["cache=deep/a/b/c/d", "warc=f/x.warc"], "echo"),
                                 (["har=other/x.har", "cache=deep/a/b/c/d",
                                   "checkpoint=../out"], "echo")):
            self.assert_refused(daemon, settings, spider=spider)
            self.assertEqual(tree(data), before, (settings, spider))
        # A project with no data directory yet is left without one.
        self.assert_refused(daemon, ["cache=deep/a/b", "no_such_setting=1"], project="news")
        self.assertEqual(tree(data), before)
        self.assertFalse(os.path.exists(os.path.join(data, "news")))

        # The same folders are made for a job that is accepted.
        jobid = daemon.must_schedule("shop", "echo", ["cache=deep/a/b/c/d"], jobid="taken")
        self.assertTrue(os.path.isdir(os.path.join(shop_data, "deep", "a", "b", "c")))
        self.assertEqual(daemon.wait_state(jobid, "finished")["outcome"], "finished")
        # A duplicate id is refused before anything is made.
        status, _ = daemon.schedule("shop", "echo", ["cache=new/a/b"], jobid="TAKEN")
        self.assertEqual(status, 409)
        self.assertFalse(os.path.exists(os.path.join(shop_data, "new")))
