"""The deadline watch (jobs/deadlines.py) on a Clock: the real job
core (launcher, poller, scheduler, an SQLite store) with fake processes,
and the watch wired to its events as makeService wires it."""

import os
from dataclasses import replace
from types import SimpleNamespace

from twisted.internet import defer, task
from twisted.trial import unittest

from netweir_serve.jobs.core import build_job_core
from netweir_serve.jobs.events import CHANGED, ENDED, STARTED
from netweir_serve.jobs.files import job_files
from netweir_serve.jobs.process import CANCEL_SIGNAL, KILL_SIGNAL, private_arguments
from netweir_serve.projects import Project, ProjectTable
from netweir_serve.jobs.deadlines import (
    EXPIRE_KIND, STALL_KIND, TIMEOUT_KIND, Deadlines, timed_settings)
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.service import _hear_deadlines
from netweir_serve.store.records import JobRecord, StoreError
from netweir_serve.store.sqlite import SQLiteJobStore

from .fakes import FakeProcessReactor, SignalLog
from .test_launcher import Rig

# The time of day the wall clock starts at: far from the reactor's
# (monotonic) clock, as in the service, so a mix-up of the two shows.
WALL_START = 1_790_000_000.0


class _Watched:
    """A watch that does nothing: adopted jobs' processes are fake."""

    def stop(self):
        pass


class DeadlineRig(Rig):
    """The launcher's test rig, with a wall clock of its own and the
    deadline watch."""

    def __init__(self, test, max_jobs=2, stats_interval=1.0):
        self.wall = task.Clock()
        self.wall.advance(WALL_START)
        self.test = test
        self.dir = os.path.abspath(test.mktemp())
        project_dir = os.path.join(self.dir, "project")
        os.makedirs(project_dir)
        self.spider_file = os.path.join(project_dir, "books.py")
        open(self.spider_file, "w").close()
        self.projects = ProjectTable([Project("shop", project_dir)])
        self.reactor = FakeProcessReactor()
        self.signals = SignalLog()
        self.store = SQLiteJobStore(":memory:", self.reactor)
        self.ended = []
        self.writes = 0
        core = build_job_core(
            self.store, self.reactor, self.projects, self.dir, max_jobs, "node-a",
            wall=self.wall, python="/usr/bin/python3", environ={"PATH": "/bin"},
            stats_interval=stats_interval,
            signal_process=self.signals,
            watch_process=lambda reactor, pid, identity, ended: _Watched())
        self.events, self.launcher, self.poller, self.scheduler = (
            core.events, core.launcher, core.poller, core.scheduler)
        self.events.subscribe(self._ended, kinds=(ENDED,))
        self.deadlines = Deadlines(self.reactor, self.wall, self.launcher,
                                   self.scheduler.expire, serves=lambda p: p == "shop",
                                   store=self.store)
        _hear_deadlines(self.events, self.deadlines)
        # When each job's cancel was asked, on the reactor's clock, and why.
        self.cancels = {}
        self.events.subscribe(self._changed, kinds=(CHANGED,))

    def _changed(self, kind, record):
        if record.cancel_requested and record.id not in self.cancels:
            self.cancels[record.id] = (self.reactor.seconds(), record.reason)

    def tick(self, seconds):
        """Time passes on both clocks alike, a second at a time (a Clock
        runs every call due within one advance at its end)."""
        for _ in range(int(seconds)):
            self.wall.advance(1)
            self.reactor.advance(1)

    def submit(self, jobid, policy, project="shop"):
        checked = SimpleNamespace(project=project, spider="books",
                                  spider_file=self.spider_file, settings=(), arguments=())
        record = self.test.successResultOf(self.scheduler.schedule(
            checked, jobid=jobid, policy=JobPolicy.parse(policy).to_json()))
        self.settle()
        return record

    def timers(self):
        """The watch's delayed calls that are still to run."""
        return [c for c in self.reactor.getDelayedCalls()
                if c.active() and c.func == self.deadlines._fire]

    def timer_at(self):
        (call,) = self.timers()
        return call.getTime()

    def grow_log(self, jobid, text="a line\n"):
        with open(job_files(self.dir, "shop", "books", jobid).log, "a") as f:
            f.write(text)


class OneTimerTests(unittest.TestCase):
    def test_a_thousand_running_jobs_one_timer_each_deadline_at_its_time(self):
        # The launcher's stats loop (a call per job and second) left out:
        # a Clock sorts its calls at each one, and no stall is watched here.
        rig = DeadlineRig(self, max_jobs=1000, stats_interval=3600)
        started = rig.reactor.seconds()
        expected = {}
        for n in range(1000):
            # Timeouts from 10 s to 59 s, many jobs falling due together.
            timeout = 10 + n % 50
            rig.submit(f"j{n}", {"timeout": str(timeout)})
            expected[f"j{n}"] = started + timeout
        self.assertEqual(rig.launcher.running_count(), 1000)
        self.assertEqual(rig.deadlines.watching(), 1000)
        self.assertEqual(len(rig.timers()), 1)
        self.assertEqual(rig.timer_at(), started + 10)
        most = 1
        while rig.timers():
            rig.reactor.advance(rig.timer_at() - rig.reactor.seconds())
            most = max(most, len(rig.timers()))
        self.assertEqual(most, 1)
        self.assertEqual({jobid: at for jobid, (at, _) in rig.cancels.items()}, expected)
        self.assertEqual({reason for _, reason in rig.cancels.values()}, {"timeout"})
        self.assertEqual(rig.deadlines.fired[TIMEOUT_KIND], 1000)
        self.assertEqual(rig.deadlines.watching(), 0)

    def test_adding_and_ending_jobs_move_the_one_timer(self):
        rig = DeadlineRig(self, max_jobs=10)
        now = rig.reactor.seconds()
        rig.submit("late", {"timeout": "100"})
        self.assertEqual(rig.timer_at(), now + 100)
        rig.submit("early", {"timeout": "30"})
        self.assertEqual(len(rig.timers()), 1)
        self.assertEqual(rig.timer_at(), now + 30)
        rig.submit("none", {})
        self.assertEqual(rig.timer_at(), now + 30)
        # The earliest job ends before its deadline: the timer moves on to
        # the next, and nothing is cancelled at 30 s.
        rig.exit("early", 0)
        self.assertEqual(len(rig.timers()), 1)
        self.assertEqual(rig.timer_at(), now + 100)
        rig.tick(50)
        self.assertEqual(rig.cancels, {})
        rig.exit("late", 0)
        self.assertEqual(rig.timers(), [])
        rig.tick(100)
        self.assertEqual(rig.cancels, {})

    def test_a_timeout_and_a_stall_due_in_one_firing_cancel_once(self):
        # Both fall due at 10 s: the first cancels, and its "changed" event
        # ends the other, which the same firing must then pass over (a
        # failure logged here fails the test).
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.submit("a", {"timeout": "10", "stall": "10"})
        self.assertEqual(rig.deadlines.due_at(TIMEOUT_KIND, "a"),
                         rig.deadlines.due_at(STALL_KIND, "a"))
        rig.tick(10)
        self.assertEqual(rig.cancels, {"a": (now + 10, "timeout")})
        self.assertEqual(rig.deadlines.fired, {TIMEOUT_KIND: 1, STALL_KIND: 0, EXPIRE_KIND: 0})
        self.assertEqual(rig.deadlines.watching(), 0)
        self.assertEqual(rig.timers(), [])

    def test_a_cancel_asked_first_is_left_alone_and_its_reason_stands(self):
        rig = DeadlineRig(self)
        rig.submit("a", {"timeout": "20", "stall": "10"})
        rig.cancel("a")
        self.assertEqual(rig.timers(), [])
        rig.tick(25)
        # No second cancel (which would have killed it at once).
        self.assertEqual(rig.cancels["a"][1], "cancel.json")
        self.assertEqual([s for s in rig.signals.sent if s[1] == CANCEL_SIGNAL],
                         [(rig.get("a").pid, CANCEL_SIGNAL, False)])

    def test_the_timed_out_job_ends_cancelled_with_reason_timeout(self):
        rig = DeadlineRig(self)
        rig.submit("a", {"timeout": "10"})
        rig.tick(10)
        self.assertEqual(rig.get("a").reason, "timeout")
        self.assertIn((rig.get("a").pid, CANCEL_SIGNAL, False), rig.signals.sent)
        rig.exit("a", 130)
        record = rig.get("a")
        self.assertEqual((record.outcome, record.reason), ("cancelled", "timeout"))

    def test_a_step_of_the_wall_clock_moves_no_deadline(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.submit("a", {"timeout": "60"})
        # NTP steps the machine's clock back an hour: the reactor's
        # (monotonic) clock goes on, and so does the deadline.
        rig.wall.advance(-3600)
        rig.reactor.advance(60)
        self.assertEqual(rig.cancels, {"a": (now + 60, "timeout")})


def hold_mark_started(rig):
    """The store writes each start at once, but its answer waits: returns
    the list of (answer, Deferred handed back) to release by hand."""
    write = rig.store.mark_started
    held = []

    def late(*args, **kwargs):
        d = defer.Deferred()
        held.append((write(*args, **kwargs), d))
        return d

    rig.store.mark_started = late
    return held


class StartTests(unittest.TestCase):
    def test_a_job_whose_start_was_not_recorded_is_watched_all_the_same(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        write = rig.store.mark_started
        rig.store.mark_started = lambda *a, **k: defer.fail(StoreError("disk full"))
        started = []
        rig.events.subscribe(lambda kind, record: started.append(record), kinds=(STARTED,))
        rig.submit("a", {"timeout": "30", "stall": "20"})
        rig.store.mark_started = write
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)
        # Announced with the start time of its claim (the table has no pid).
        (record,) = started
        self.assertEqual((record.id, record.start_time), ("a", WALL_START))
        self.assertEqual(rig.deadlines.due_at(TIMEOUT_KIND, "a"), now + 30)
        self.assertEqual(rig.deadlines.due_at(STALL_KIND, "a"), now + 20)
        rig.tick(20)
        self.assertEqual(rig.cancels, {"a": (now + 20, "stalled")})

    def test_a_cancel_asked_before_the_start_is_recorded_keeps_the_deadlines_off(self):
        # The start is written, then cancel.json comes before its answer:
        # the row the answer carries says no cancel. The job's own state
        # stands, so no stall is set, and nothing kills the job early.
        rig = DeadlineRig(self)
        held = hold_mark_started(rig)
        rig.submit("a", {"stall": "10", "timeout": "20"})
        rig.cancel("a")
        ((answer, d),) = held
        answer.chainDeferred(d)
        self.assertEqual(rig.deadlines.watching(), 0)
        self.assertEqual(rig.timers(), [])
        self.assertTrue(rig.launcher._running["a"].record.cancel_requested)
        rig.tick(25)
        pid = rig.get("a").pid
        self.assertEqual([s for s in rig.signals.sent if s[0] == pid],
                         [(pid, CANCEL_SIGNAL, False)])
        self.assertEqual(rig.cancels["a"][1], "cancel.json")
        self.assertEqual(rig.deadlines.fired, {TIMEOUT_KIND: 0, STALL_KIND: 0, EXPIRE_KIND: 0})

    def test_a_job_that_ended_before_its_start_was_recorded_is_not_watched(self):
        rig = DeadlineRig(self)
        held = hold_mark_started(rig)
        started = []
        rig.events.subscribe(lambda kind, record: started.append(record.id), kinds=(STARTED,))
        rig.submit("a", {"stall": "10", "timeout": "20"})
        ((answer, d),) = held
        rig.exit("a", 0)
        answer.chainDeferred(d)
        self.assertEqual(started, [])
        self.assertEqual(rig.deadlines.watching(), 0)
        self.assertEqual(rig.timers(), [])

    def test_a_deadline_never_turns_a_cancel_under_way_into_a_kill(self):
        # However a deadline finds a job being cancelled (an event missed,
        # heard late), its cancel does nothing: the first cancel's grace
        # and reason stand.
        rig = DeadlineRig(self)
        rig.submit("a", {})
        rig.cancel("a")
        self.assertFalse(rig.launcher.cancel_once("a", "timeout"))
        self.assertFalse(rig.launcher.cancel_once("gone", "timeout"))
        pid = rig.get("a").pid
        self.assertNotIn((pid, KILL_SIGNAL, False), rig.signals.sent)
        self.assertEqual(rig.get("a").reason, "cancel.json")


class AdoptionTests(unittest.TestCase):
    def running_record(self, rig, jobid, policy, started_ago, **changes):
        """A job the last service started ``started_ago`` seconds ago and
        left running, as the table holds it."""
        record = JobRecord(id=jobid, project="shop", spider="books",
                           spider_file=rig.spider_file,
                           created=rig.wall.seconds() - started_ago - 1,
                           policy=JobPolicy.parse(policy).to_json())
        self.successResultOf(rig.store.add(record))
        claimed = self.successResultOf(rig.store.claim_next(
            "node-a", ["shop"], rig.wall.seconds() - started_ago))
        started = self.successResultOf(rig.store.mark_started(jobid, 60_000_000 + len(jobid),
                                                              "boot:1"))
        self.assertEqual(claimed.id, jobid)
        return replace(started, **changes)

    def test_an_adopted_job_keeps_its_timeout_counted_from_its_start(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.launcher.adopt(self.running_record(rig, "old", {"timeout": "150"}, 100))
        self.assertEqual(rig.deadlines.due_at(TIMEOUT_KIND, "old"), now + 50)
        rig.tick(49)
        self.assertEqual(rig.cancels, {})
        rig.tick(1)
        self.assertEqual(rig.cancels, {"old": (now + 50, "timeout")})

    def test_an_adopted_job_past_its_timeout_is_cancelled_at_once(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.launcher.adopt(self.running_record(rig, "over", {"timeout": "60"}, 100))
        rig.reactor.advance(0)
        self.assertEqual(rig.cancels, {"over": (now, "timeout")})

    def test_an_adopted_jobs_stall_counts_from_its_adoption(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.launcher.adopt(self.running_record(rig, "old", {"stall": "30"}, 1000))
        self.assertEqual(rig.deadlines.due_at(STALL_KIND, "old"), now + 30)
        rig.tick(30)
        self.assertEqual(rig.cancels, {"old": (now + 30, "stalled")})

    def test_an_adopted_job_being_cancelled_gets_no_deadline(self):
        rig = DeadlineRig(self)
        record = self.running_record(rig, "old", {"timeout": "60"}, 100,
                                     cancel_requested=True, reason="cancel.json")
        rig.launcher.adopt(record)
        self.assertEqual(rig.deadlines.watching(), 0)
        self.assertEqual(rig.timers(), [])


class StallTests(unittest.TestCase):
    def test_progress_in_the_stats_puts_the_stall_off(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.submit("a", {"stall": "20"})
        for n in range(1, 7):
            # A new page every 5 s, read by the launcher within its second.
            rig.write_stats("a", {"fetched": n, "items": n, "failed": 0,
                                  "finish_reason": None})
            rig.tick(5)
        self.assertEqual(rig.cancels, {})
        # Then the same numbers, rewritten every 5 s: no progress.
        last = now + 26  # the last new stats were read a second after their write
        for _ in range(5):
            rig.write_stats("a", {"fetched": 6, "items": 6, "failed": 0,
                                  "finish_reason": None})
            rig.tick(5)
        self.assertEqual(rig.cancels, {"a": (last + 20, "stalled")})
        self.assertEqual(rig.deadlines.fired[STALL_KIND], 1)

    def test_a_growing_log_puts_the_stall_off(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.submit("a", {"stall": "20"})
        for _ in range(10):
            rig.tick(5)
            # The spider logs a line; the stats (rewritten) say nothing new.
            rig.grow_log("a")
            rig.write_stats("a", {"fetched": 1, "finish_reason": None})
        self.assertEqual(rig.cancels, {})
        # The log stops growing at 50 s; seen at the next stats (51 s).
        rig.tick(40)
        self.assertEqual(rig.cancels, {"a": (now + 51 + 20, "stalled")})

    def test_a_log_line_between_stats_is_seen_when_the_stall_falls_due(self):
        rig = DeadlineRig(self)
        now = rig.reactor.seconds()
        rig.submit("a", {"stall": "20"})
        rig.tick(19)
        rig.grow_log("a")
        rig.tick(1)
        self.assertEqual(rig.cancels, {})
        self.assertEqual(rig.deadlines.due_at(STALL_KIND, "a"), now + 40)
        rig.tick(20)
        self.assertEqual(rig.cancels, {"a": (now + 40, "stalled")})


class ExpireTests(unittest.TestCase):
    def test_a_job_still_pending_at_its_expiry_is_dropped_never_started(self):
        rig = DeadlineRig(self, max_jobs=1)
        rig.submit("blocker", {})
        queued = rig.submit("late", {"expire": "60"})
        self.assertEqual(rig.get("late").state, "pending")
        rig.tick(59)
        self.assertEqual(rig.get("late").state, "pending")
        rig.tick(1)
        record = rig.get("late")
        self.assertEqual((record.state, record.outcome, record.reason, record.pid),
                         ("finished", "cancelled", "expired", None))
        self.assertEqual(record.end_time, queued.created + 60)
        self.assertEqual([r.id for r in rig.ended], ["late"])
        self.assertEqual(rig.deadlines.fired[EXPIRE_KIND], 1)
        # The slot it would have taken goes to no one else: it never ran.
        rig.exit("blocker", 0)
        self.assertEqual(len(rig.reactor.processes), 1)

    def test_a_job_started_before_its_expiry_runs_on(self):
        rig = DeadlineRig(self, max_jobs=1)
        rig.submit("blocker", {})
        rig.submit("soon", {"expire": "60"})
        rig.tick(30)
        rig.exit("blocker", 0)
        self.assertEqual(rig.get("soon").state, "running")
        self.assertEqual(rig.timers(), [])
        rig.tick(60)
        self.assertEqual(rig.get("soon").state, "running")
        self.assertEqual(rig.deadlines.fired[EXPIRE_KIND], 0)

    def test_pending_jobs_found_at_start_and_queued_elsewhere_expire(self):
        rig = DeadlineRig(self, max_jobs=0)
        # Queued before this start (the table's alone), then by another
        # node (heard as an event from elsewhere), and of a project this
        # node does not serve (another node's business).
        policy = JobPolicy.parse({"expire": "100"}).to_json()
        before = JobRecord(id="before", project="shop", spider="books",
                           spider_file=rig.spider_file, created=rig.wall.seconds() - 40,
                           policy=policy)
        other = replace(before, id="other", project="news")
        for record in (before, other):
            self.successResultOf(rig.store.add(record))
        self.successResultOf(rig.deadlines.start())
        there = replace(before, id="there", created=rig.wall.seconds())
        self.successResultOf(rig.store.add(there))
        rig.events.publish("queued", there, elsewhere=True)
        self.assertEqual(rig.deadlines.watching(), 2)
        rig.tick(60)
        rig.tick(40)
        ended = {r.id: (r.outcome, r.reason) for r in rig.jobs()[2]}
        self.assertEqual(ended, {"before": ("cancelled", "expired"),
                                 "there": ("cancelled", "expired")})
        self.assertEqual(rig.get("other").state, "pending")

    def test_a_job_past_its_expiry_at_start_is_dropped_before_the_poller_starts(self):
        rig = DeadlineRig(self, max_jobs=1)
        self.successResultOf(rig.store.add(JobRecord(
            id="yesterday", project="shop", spider="books", spider_file=rig.spider_file,
            created=rig.wall.seconds() - 86400,
            policy=JobPolicy.parse({"expire": "2h"}).to_json())))
        # The service starts the watch, then the poller (ServeService): the
        # drop is asked within start(), before any claim can be.
        self.successResultOf(rig.deadlines.start())
        self.assertEqual(rig.get("yesterday").reason, "expired")
        rig.poller.start()
        rig.settle()
        record = rig.get("yesterday")
        self.assertEqual((record.outcome, record.reason, record.pid),
                         ("cancelled", "expired", None))
        self.assertEqual(rig.reactor.processes, [])
        rig.poller.stop()

    def test_start_fires_only_once_the_drops_it_asked_are_answered(self):
        # On PostgreSQL a drop waits for a connection of the pool, as a
        # claim does: the poller starts only once start() fires, so no
        # claim of the poller's can come before the drops.
        rig = DeadlineRig(self, max_jobs=1)
        self.successResultOf(rig.store.add(JobRecord(
            id="yesterday", project="shop", spider="books", spider_file=rig.spider_file,
            created=rig.wall.seconds() - 86400,
            policy=JobPolicy.parse({"expire": "2h"}).to_json())))
        expire = rig.deadlines._expire_pending
        held = []

        def slow(jobid):
            d = defer.Deferred()
            held.append((jobid, d))
            return d
        rig.deadlines._expire_pending = slow
        started = rig.deadlines.start()
        self.assertNoResult(started)
        ((jobid, d),) = held
        expire(jobid).chainDeferred(d)
        self.successResultOf(started)
        self.assertEqual(rig.get("yesterday").reason, "expired")

    def test_pending_jobs_unread_at_start_are_read_again_on_a_timer(self):
        # On SQLite no LISTEN comes back to read them again: without the
        # timer, no expiry would be watched all this run.
        rig = DeadlineRig(self, max_jobs=0)
        self.successResultOf(rig.store.add(JobRecord(
            id="old", project="shop", spider="books", spider_file=rig.spider_file,
            created=rig.wall.seconds() - 50,
            policy=JobPolicy.parse({"expire": "1m"}).to_json())))
        read = rig.store.unfinished_jobs
        fails = [StoreError("database is locked")] * 2
        rig.store.unfinished_jobs = lambda: defer.fail(fails.pop()) if fails else read()
        self.successResultOf(rig.deadlines.start())
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)
        self.assertEqual(rig.deadlines.watching(), 0)
        rig.tick(5)
        # The second failure is quiet (the first said it is tried again).
        self.assertEqual((rig.deadlines.watching(), self.flushLoggedErrors(StoreError)), (0, []))
        rig.tick(5)
        self.assertEqual(rig.deadlines.watching(), 0)
        self.assertEqual(rig.get("old").reason, "expired")
        self.assertEqual(rig.deadlines.fired[EXPIRE_KIND], 1)
        rig.tick(60)
        self.assertEqual(rig.reactor.getDelayedCalls(), [])

    def test_stop_ends_the_reads_again(self):
        rig = DeadlineRig(self, max_jobs=0)
        rig.store.unfinished_jobs = lambda: defer.fail(StoreError("database is locked"))
        self.successResultOf(rig.deadlines.start())
        self.flushLoggedErrors(StoreError)
        rig.deadlines.stop()
        self.assertEqual(rig.reactor.getDelayedCalls(), [])

    def test_a_job_another_node_claimed_is_left_alone(self):
        rig = DeadlineRig(self, max_jobs=0)
        rig.submit("a", {"expire": "10"})
        self.successResultOf(rig.store.claim_next("node-b", ["shop"], rig.wall.seconds()))
        rig.tick(10)
        self.assertEqual(rig.get("a").state, "running")
        self.assertEqual(rig.deadlines.fired[EXPIRE_KIND], 0)
        self.assertEqual(rig.timers(), [])


class RetryExpireTests(unittest.TestCase):
    def test_a_retrys_expire_counts_from_its_not_before(self):
        # A backoff of 2 m (126 s with the jitter) and an expire of 1 m:
        # counted from the retry's writing, every retry would be dropped.
        rig = DeadlineRig(self, max_jobs=1)
        rig.store._jitter = lambda: 0.5
        rig.submit("a", {"retries": "2", "backoff": "2m", "expire": "1m"})
        rig.exit("a", 1)
        retry = rig.get("a.r1")
        self.assertEqual(retry.not_before, retry.created + 126)
        self.assertEqual(rig.deadlines.due_at(EXPIRE_KIND, "a.r1"),
                         rig.reactor.seconds() + 126 + 60)
        rig.tick(61)
        self.assertEqual(rig.get("a.r1").state, "pending")
        rig.tick(65)
        rig.settle()
        self.assertEqual(rig.get("a.r1").state, "running")
        self.assertEqual(rig.deadlines.fired[EXPIRE_KIND], 0)

    def test_a_retry_still_waiting_for_a_slot_past_its_expire_is_dropped(self):
        rig = DeadlineRig(self, max_jobs=1)
        rig.store._jitter = lambda: 0.5
        rig.submit("a", {"retries": "1", "backoff": "2m", "expire": "1m"})
        rig.exit("a", 1)
        rig.submit("blocker", {})
        rig.tick(126 + 59)
        self.assertEqual(rig.get("a.r1").state, "pending")
        rig.tick(1)
        record = rig.get("a.r1")
        self.assertEqual((record.outcome, record.reason), ("cancelled", "expired"))
        self.assertEqual(record.end_time, record.not_before + 60)
        self.assertEqual(rig.deadlines.fired[EXPIRE_KIND], 1)


class MaxTimeTests(unittest.TestCase):
    def test_a_timeout_gives_the_crawl_max_time_at_95_percent(self):
        policy = JobPolicy.parse({"timeout": "1h"}).to_json()
        self.assertEqual(timed_settings((("max_items", "5"),), policy),
                         (("max_items", "5"), ("max_time", "3420")))
        self.assertEqual(timed_settings((), JobPolicy.parse({"timeout": "3"}).to_json()),
                         (("max_time", "2.85"),))
        # The job's own max_time, in any case, stands; no timeout, no max_time.
        self.assertEqual(timed_settings((("MAX_TIME", "5"),), policy), (("MAX_TIME", "5"),))
        self.assertEqual(timed_settings((("max_items", "5"),), None), (("max_items", "5"),))

    def test_the_crawls_private_arguments_carry_it(self):
        record = JobRecord(id="a", project="shop", spider="books", spider_file="/x.py",
                           settings=(("max_items", "5"),),
                           policy=JobPolicy.parse({"timeout": "10"}).to_json())
        self.assertEqual(private_arguments(record, "/data"),
                         ["--set=max_items=5", "--set=max_time=9.5"])
