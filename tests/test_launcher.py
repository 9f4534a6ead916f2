"""The launcher, poller and scheduler driven by a Clock and fake processes."""

import json
import os
import signal
from dataclasses import replace
from types import SimpleNamespace

from twisted.internet import defer
from twisted.trial import unittest
from zope.interface.verify import verifyClass

from netweir_serve.reliability.cgroups import JobGroups
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.jobs.events import CHANGED, ENDED
from netweir_serve.jobs.files import job_files
from netweir_serve.jobs.interfaces import ILauncher, IPoller, IScheduler, ISpiderReader
from netweir_serve.store.interfaces import IJobStore, IScheduleStore
from netweir_serve.jobs import launcher as launcher_module
from netweir_serve.jobs.launcher import KILL_FALLBACK_SECONDS, Launcher
from netweir_serve.jobs.process import (
    KILL_SIGNAL, RUN_MARK_VARIABLE, job_environment, run_mark)
from netweir_serve.jobs.core import build_job_core
from netweir_serve.jobs.poller import Poller
from netweir_serve.store.records import JobRecord, StoreError
from netweir_serve.jobs.scheduler import Scheduler
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.projects import Project, ProjectTable
from netweir_serve.spiders.reader import SpiderReader

from .fakes import FakeProcessReactor, SignalLog

NODE = "node-a"


class InterfaceTests(unittest.TestCase):
    def test_parts_provide_their_interfaces(self):
        self.assertTrue(verifyClass(IJobStore, SQLiteJobStore))
        self.assertTrue(verifyClass(IScheduler, Scheduler))
        self.assertTrue(verifyClass(IPoller, Poller))
        self.assertTrue(verifyClass(ILauncher, Launcher))
        self.assertTrue(verifyClass(IScheduleStore, SQLiteJobStore))
        self.assertTrue(verifyClass(ISpiderReader, SpiderReader))


class Rig:
    """A store and the job core (launcher, poller, scheduler), built by
    jobs.core.build_job_core as makeService builds them, with synchronous
    shortcuts for the tests (the SQLite store answers at once; a poll runs
    on the next turn, ``advance(0)``)."""

    def __init__(self, test, max_jobs=2, grace=30.0, fail_with=None, wall=None, groups=None):
        self.test = test
        self.dir = os.path.abspath(test.mktemp())
        project_dir = os.path.join(self.dir, "project")
        os.makedirs(project_dir)
        self.spider_file = os.path.join(project_dir, "books.py")
        open(self.spider_file, "w").close()
        self.projects = ProjectTable([Project("shop", project_dir)])
        self.reactor = FakeProcessReactor(fail_with=fail_with)
        self.signals = SignalLog()
        self.store = SQLiteJobStore(":memory:", self.reactor)
        self.ended = []
        self.writes = 0
        core = build_job_core(
            self.store, self.reactor, self.projects, self.dir, max_jobs, NODE, wall=wall,
            python="/usr/bin/python3", grace=grace,
            # "removed" is claimed too, as a project taken off since it was queued.
            claims_projects=["shop", "removed"],
            environ={"PATH": "/bin", "NETWEIR_SERVE_PASSWORD": "secret",
                     "NETWEIR_SERVE_USERNAME": "me"},
            signal_process=self.signals, groups=groups)
        self.events, self.launcher, self.poller, self.scheduler = (
            core.events, core.launcher, core.poller, core.scheduler)
        self.events.subscribe(self._ended, kinds=(ENDED,))

    def _ended(self, kind, record):
        self.ended.append(record)

    def settle(self):
        """Runs what is due now (the coalesced poll)."""
        self.reactor.advance(0)

    def schedule(self, jobid, priority=0, settings=(), spider_file=None, project="shop",
                 policy=None):
        checked = SimpleNamespace(project=project, spider="books",
                                  spider_file=spider_file or self.spider_file,
                                  settings=settings, arguments=(("category", "fiction"),))
        record = self.test.successResultOf(
            self.scheduler.schedule(checked, jobid=jobid, priority=priority,
                                    policy=policy and policy.to_json()))
        self.settle()
        return record

    def get(self, jobid):
        return self.test.successResultOf(self.store.get(jobid))

    def jobs(self):
        return self.test.successResultOf(self.store.jobs())

    def cancel(self, jobid, now=False):
        prevstate = self.test.successResultOf(self.scheduler.cancel(jobid, now=now))
        self.settle()
        return prevstate

    def exit(self, jobid, status=0, signal=None):
        self.process_of(jobid).exit(status, signal=signal)
        self.settle()

    def process_of(self, jobid):
        pid = self.get(jobid).pid
        return next(p for p in self.reactor.processes if p.pid == pid)

    def write_stats(self, jobid, stats):
        path = job_files(self.dir, "shop", "books", jobid).stats
        with open(path + ".tmp", "w") as f:
            json.dump(stats, f)
        # A distinct time for each write, as five seconds apart would give.
        self.writes += 1
        os.utime(path + ".tmp", ns=(self.writes * 5_000_000_000,) * 2)
        os.replace(path + ".tmp", path)


class LaunchingTests(unittest.TestCase):
    def test_job_starts_at_once_when_a_slot_is_free(self):
        rig = Rig(self)
        rig.schedule("a")
        self.assertEqual(rig.get("a").state, "running")
        self.assertEqual(len(rig.reactor.processes), 1)

    def test_crawl_command_environment_and_directory(self):
        rig = Rig(self)
        private = []
        write = launcher_module.write_private_file
        self.patch(launcher_module, "write_private_file",
                   lambda path, arguments: private.append(arguments) or write(path, arguments))
        rig.schedule("a", settings=(("max_items", "5"), ("checkpoint", "books"),
                                    ("proxy", "http://me:secret@proxy:3128")))
        process = rig.process_of("a")
        argv = process.argv
        # One process: the crawl's parent, which forks the crawl; the
        # settings and arguments are in a private file, never a command line.
        files = job_files(rig.dir, "shop", "books", "a")
        self.assertEqual(argv[:2], ["/usr/bin/python3", "-c"])
        self.assertEqual(argv[4:6], [files.status, os.path.join(rig.dir, "run", "a.json")])
        crawl = argv[6:]
        self.assertEqual(crawl[:2], ["crawl", rig.spider_file])
        self.assertIn("--spider=books", crawl)
        self.assertIn(f"--output={files.items}", crawl)
        self.assertIn(f"--stats={files.stats}", crawl)
        self.assertFalse([a for a in argv if "secret" in a or "max_items" in a])
        data = os.path.join(rig.dir, "data", "shop", "books")
        self.assertEqual(private, [["--set=max_items=5", f"--set=checkpoint={data}",
                                    "--set=proxy=http://me:secret@proxy:3128",
                                    "-acategory=fiction"]])
        private_file = argv[5]
        self.assertEqual(os.stat(private_file).st_mode & 0o777, 0o600)
        env = process.kwargs["env"]
        self.assertNotIn("NETWEIR_SERVE_PASSWORD", env)
        self.assertNotIn("NETWEIR_SERVE_USERNAME", env)
        self.assertEqual(env["PYTHONUNBUFFERED"], "1")
        # The run's mark: in the status file its parent writes, and in the
        # environment of all it starts (jobs.adoption finds them by it).
        self.assertEqual(env[RUN_MARK_VARIABLE], run_mark(rig.dir, rig.get("a")))
        self.assertEqual(process.kwargs["path"], os.path.join(rig.dir, "project"))
        self.assertTrue(os.path.exists(files.log))
        rig.exit("a", 0)
        # Removed at the end in case the crawl never read it.
        self.assertFalse(os.path.exists(private_file))

    def test_the_crawls_own_status_is_the_outcome(self):
        rig = Rig(self)
        rig.schedule("a")
        files = job_files(rig.dir, "shop", "books", "a")
        with open(files.status, "w") as f:
            json.dump({"exit_status": 3, "end_time": 12.5, "crawl_pid": 1}, f)
        rig.exit("a", 0)  # the parent itself exits 0
        record = rig.get("a")
        self.assertEqual((record.outcome, record.exit_status, record.end_time),
                         ("failed", 3, 12.5))

    def test_at_most_max_jobs_run_and_a_freed_slot_starts_the_next(self):
        rig = Rig(self, max_jobs=2)
        for jobid in "abc":
            rig.schedule(jobid)
        self.assertEqual([rig.get(j).state for j in "abc"],
                         ["running", "running", "pending"])
        rig.exit("a", 0)
        self.assertEqual(rig.get("a").outcome, "finished")
        self.assertEqual(rig.get("c").state, "running")

    def test_priority_then_age_decide_who_runs_next(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("first")
        rig.schedule("low", priority=-1)
        rig.schedule("old", priority=3)
        rig.schedule("high", priority=10)
        rig.schedule("new", priority=3)
        order = []
        for _ in range(4):
            running = rig.jobs()[1][0]
            rig.exit(running.id, 0)
            order.append(rig.jobs()[1][0].id if rig.jobs()[1] else None)
        self.assertEqual(order, ["high", "old", "new", "low"])

    def test_outcomes_keep_exit_status(self):
        rig = Rig(self, max_jobs=3)
        for jobid in ("ok", "bad", "killed"):
            rig.schedule(jobid)
        rig.exit("ok", 0)
        rig.exit("bad", 1)
        rig.exit("killed", signal=9)
        got = {j: (rig.get(j).outcome, rig.get(j).exit_status)
               for j in ("ok", "bad", "killed")}
        self.assertEqual(got, {"ok": ("finished", 0), "bad": ("failed", 1),
                               "killed": ("failed", -9)})

    def test_leftover_processes_in_the_group_are_killed_at_the_end(self):
        rig = Rig(self)
        rig.schedule("a")
        pid = rig.get("a").pid
        rig.exit("a", 0)
        self.assertIn((pid, signal.SIGKILL, True), rig.signals.sent)

    def test_spider_file_gone_fails_the_job_and_frees_the_slot(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("gone", spider_file="/nonexistent/books.py")
        rig.schedule("next")
        gone = rig.get("gone")
        self.assertEqual((gone.state, gone.outcome), ("finished", "failed"))
        with open(job_files(rig.dir, "shop", "books", "gone").log) as f:
            self.assertIn("is gone", f.read())
        self.assertEqual(rig.get("next").state, "running")
        self.assertEqual(rig.launcher.slots_free(), 0)

    def test_project_no_longer_served_fails_the_job(self):
        rig = Rig(self)
        rig.schedule("orphan", project="removed")
        self.assertEqual(rig.get("orphan").outcome, "failed")
        self.assertEqual(rig.get("orphan").reason, "not started")
        self.assertIn("no longer served", rig.get("orphan").detail)

    def test_os_refusing_to_spawn_fails_the_job_without_leaking_a_slot(self):
        rig = Rig(self, max_jobs=1, fail_with=OSError(24, "Too many open files"))
        rig.schedule("a")
        rig.schedule("b")
        self.assertEqual([rig.get(j).outcome for j in "ab"], ["failed", "failed"])
        self.assertEqual(rig.launcher.slots_free(), 1)

    def test_path_setting_escaping_at_start_fails_the_job(self):
        rig = Rig(self)
        data = os.path.join(rig.dir, "data", "shop")
        os.makedirs(data)
        os.symlink("/tmp", os.path.join(data, "out"))
        rig.schedule("a", settings=(("checkpoint", "out/ck"),))
        self.assertEqual(rig.get("a").outcome, "failed")
        self.assertEqual(rig.reactor.processes, [])


class StatsPollingTests(unittest.TestCase):
    def test_stats_are_picked_up_within_a_second_of_the_file(self):
        rig = Rig(self)
        rig.schedule("a")
        self.assertIsNone(rig.launcher.running_stats("a"))
        rig.write_stats("a", {"items": 1, "finish_reason": None})
        rig.reactor.advance(0.9)
        self.assertIsNone(rig.launcher.running_stats("A"))
        rig.reactor.advance(0.1)
        self.assertEqual(rig.launcher.running_stats("a"), {"items": 1, "finish_reason": None})
        rig.write_stats("a", {"items": 7, "finish_reason": None})
        rig.reactor.advance(1)
        self.assertEqual(rig.launcher.running_stats("a")["items"], 7)

    def test_an_unchanged_file_is_not_read_again(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.write_stats("a", {"items": 1, "finish_reason": None})
        path = job_files(rig.dir, "shop", "books", "a").stats
        rig.reactor.advance(1)
        changed = os.stat(path).st_mtime_ns
        with open(path, "w") as f:
            f.write("{torn")
        os.utime(path, ns=(changed, changed))
        rig.reactor.advance(3)
        self.assertEqual(rig.launcher.running_stats("a")["items"], 1)

    def test_final_stats_are_kept_and_polling_stops(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.write_stats("a", {"items": 9, "finish_reason": "finished"})
        rig.exit("a", 0)
        self.assertEqual(rig.get("a").stats["finish_reason"], "finished")
        self.assertEqual(rig.reactor.getDelayedCalls(), [])

    def test_killed_job_keeps_the_last_stats_it_wrote(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.write_stats("a", {"items": 4, "finish_reason": None})
        rig.reactor.advance(1)
        os.unlink(job_files(rig.dir, "shop", "books", "a").stats)
        rig.exit("a", signal=9)
        self.assertEqual(rig.get("a").stats, {"items": 4, "finish_reason": None})

    def test_a_broken_stats_file_is_ignored(self):
        rig = Rig(self)
        rig.schedule("a")
        path = job_files(rig.dir, "shop", "books", "a").stats
        with open(path, "w") as f:
            f.write("{not json")
        rig.reactor.advance(1)
        self.assertIsNone(rig.launcher.running_stats("a"))


class EnvironmentTests(unittest.TestCase):
    def test_credentials_never_reach_a_job(self):
        env = job_environment({"NETWEIR_SERVE_USERNAME": "u", "NETWEIR_SERVE_PASSWORD": "p",
                               "HOME": "/root"})
        self.assertEqual(env, {"HOME": "/root", "PYTHONUNBUFFERED": "1"})

    def test_libpq_passwords_and_any_variable_holding_a_secret_stay_out(self):
        env = job_environment({"PGPASSWORD": "x", "PGPASSFILE": "/p", "PGSERVICE": "s",
                               "PGSERVICEFILE": "/s", "PGSSLPASSWORD": "y", "PGSSLKEY": "/k",
                               "PGHOST": "db", "MINE": "hunter2", "HOME": "/root"},
                              secrets=("hunter2", None))
        self.assertEqual(env, {"PGHOST": "db", "HOME": "/root", "PYTHONUNBUFFERED": "1"})


class CancellingTests(unittest.TestCase):
    def test_cancel_pending_takes_it_out_of_the_queue(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("running")
        rig.schedule("waiting")
        self.assertEqual(rig.cancel("WAITING"), "pending")
        waiting = rig.get("waiting")
        self.assertEqual((waiting.state, waiting.outcome, waiting.start_time),
                         ("finished", "cancelled", None))
        self.assertEqual(rig.cancel("waiting"), None)
        self.assertEqual(rig.cancel("nosuch"), None)

    def test_cancel_running_sends_sigterm_then_kills_the_group_after_grace(self):
        rig = Rig(self, grace=30.0)
        rig.schedule("a")
        pid = rig.get("a").pid
        self.assertEqual(rig.cancel("a"), "running")
        self.assertEqual(rig.signals.sent, [(pid, signal.SIGTERM, False)])
        rig.reactor.advance(29.9)
        self.assertEqual(len(rig.signals.sent), 1)
        rig.reactor.advance(0.1)
        # The crawl's parent kills the crawl and all it started...
        self.assertEqual(rig.signals.sent[-1], (pid, KILL_SIGNAL, False))
        # ...and if it has not ended a few seconds later, its group goes.
        rig.reactor.advance(KILL_FALLBACK_SECONDS)
        self.assertEqual(rig.signals.sent[-1], (pid, signal.SIGKILL, True))
        rig.exit("a", signal=9)
        self.assertEqual(rig.get("a").outcome, "cancelled")
        self.assertEqual(rig.reactor.getDelayedCalls(), [])

    def test_timer_is_cancelled_when_the_job_ends_in_time(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.cancel("a")
        rig.exit("a", 130)
        record = rig.get("a")
        self.assertEqual((record.outcome, record.exit_status), ("cancelled", 130))
        self.assertEqual(rig.reactor.getDelayedCalls(), [])

    def test_what_the_table_asks_is_carried_out_once_each(self):
        rig = Rig(self, grace=30.0)
        rig.schedule("a")
        pid = rig.get("a").pid
        asked = replace(rig.get("a"), cancel_requested=True)
        self.assertEqual(rig.launcher.carry_out(asked), "cancel")
        self.assertEqual(rig.launcher.carry_out(asked), None)  # a second look: no kill
        self.assertEqual(rig.signals.sent, [(pid, signal.SIGTERM, False)])
        killed = replace(asked, kill_requested=True)
        self.assertEqual(rig.launcher.carry_out(killed), "kill")
        self.assertEqual(rig.launcher.carry_out(killed), None)
        self.assertEqual(rig.signals.sent[1:], [(pid, KILL_SIGNAL, False)])
        self.assertTrue(rig.get("a").kill_requested)
        self.assertEqual(rig.launcher.carry_out(replace(killed, id="nosuch")), None)

    def test_a_kill_asked_first_skips_the_grace_period(self):
        rig = Rig(self, grace=30.0)
        rig.schedule("a")
        pid = rig.get("a").pid
        asked = replace(rig.get("a"), cancel_requested=True, kill_requested=True)
        self.assertEqual(rig.launcher.carry_out(asked), "kill")
        self.assertEqual(rig.signals.sent, [(pid, KILL_SIGNAL, False)])
        rig.exit("a", signal=9)
        self.assertEqual(rig.get("a").outcome, "cancelled")

    def test_second_cancel_kills_at_once(self):
        rig = Rig(self)
        rig.schedule("a")
        pid = rig.get("a").pid
        rig.cancel("a")
        self.assertEqual(rig.cancel("a"), "running")
        self.assertEqual(rig.signals.sent[-1], (pid, KILL_SIGNAL, False))
        escalations = [c for c in rig.reactor.getDelayedCalls() if c.func == rig.launcher._kill]
        self.assertEqual(escalations, [])

    def test_cancel_with_now_kills_at_once(self):
        rig = Rig(self)
        rig.schedule("a")
        pid = rig.get("a").pid
        rig.cancel("a", now=True)
        self.assertEqual(rig.signals.sent, [(pid, KILL_SIGNAL, False)])
        self.assertTrue(rig.get("a").cancel_requested)

    def test_cancelled_job_that_exits_zero_is_still_cancelled(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.cancel("a")
        rig.exit("a", 0)
        self.assertEqual(rig.get("a").outcome, "cancelled")

    def test_cancel_json_answers_once_the_cancel_is_in_the_table(self):
        # A service killed right after it answered must find the cancel on
        # its restart (adoption carries it out): the answer waits for it.
        rig = Rig(self)
        rig.schedule("a")
        writes, real = [], rig.store.mark_cancel_requested

        def held(*args, **kwargs):
            writes.append((defer.Deferred(), args, kwargs))
            return writes[-1][0]

        rig.store.mark_cancel_requested = held
        answer = rig.scheduler.cancel("a")
        self.assertNoResult(answer)
        written, args, kwargs = writes[0]
        real(*args, **kwargs).chainDeferred(written)
        self.assertEqual(self.successResultOf(answer), "running")
        self.assertTrue(rig.get("a").cancel_requested)
        # A write that fails: the cancel is carried out here all the same,
        # the failure logged once, and the answer says so as before.
        rig.schedule("b")
        answer = rig.scheduler.cancel("b")
        self.assertNoResult(answer)
        writes[-1][0].errback(StoreError("the job table could not be written: disk full"))
        self.assertEqual(self.successResultOf(answer), "running")
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)
        # A table that holds the write back (locked by another program)
        # holds back the record, not the answer, past a moment.
        rig.exit("a", 130)
        rig.exit("b", 130)
        rig.schedule("c")
        answer = rig.scheduler.cancel("c")
        self.assertNoResult(answer)
        rig.reactor.advance(launcher_module.CANCEL_ANSWER_WAIT)
        self.assertEqual(self.successResultOf(answer), "running")
        real(*writes[-1][1], **writes[-1][2]).chainDeferred(writes[-1][0])
        self.assertTrue(rig.get("c").cancel_requested)

    def test_each_end_gets_its_reason(self):
        rig = Rig(self, max_jobs=3)
        for jobid in "abc":
            rig.schedule(jobid)
        rig.exit("a", 0)
        rig.exit("b", 1)
        rig.exit("c", -9)
        self.assertEqual([(rig.get(j).outcome, rig.get(j).reason) for j in "abc"],
                         [("finished", "exit 0"), ("failed", "exit 1"), ("failed", "signal 9")])
        rig.schedule("d")
        rig.cancel("d")
        rig.exit("d", 130)
        self.assertEqual((rig.get("d").outcome, rig.get("d").reason), ("cancelled", "cancel.json"))

    def test_the_first_cancels_reason_stands_through_a_kill_and_in_the_table(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.launcher.cancel("a", reason="timeout")
        # Recorded at once: a service adopting the job would end it so.
        self.assertEqual((rig.get("a").cancel_requested, rig.get("a").reason),
                         (True, "timeout"))
        rig.cancel("a")    # a user's second cancel kills it
        rig.exit("a", -9)
        self.assertEqual((rig.get("a").outcome, rig.get("a").reason), ("cancelled", "timeout"))

    def test_a_job_stopped_with_the_service_says_so(self):
        rig = Rig(self)
        rig.schedule("a")
        rig.launcher.stop()
        rig.exit("a", 130)
        self.assertEqual((rig.get("a").outcome, rig.get("a").reason),
                         ("cancelled", "service stopped"))


class StoppingTests(unittest.TestCase):
    def test_stop_waits_for_every_running_job_and_starts_no_more(self):
        rig = Rig(self, max_jobs=2)
        for jobid in "abc":
            rig.schedule(jobid)
        stopped = rig.launcher.stop()
        fired = []
        stopped.addCallback(fired.append)
        sent = [s for s in rig.signals.sent if s[1] == signal.SIGTERM]
        self.assertEqual(len(sent), 2)
        rig.exit("a", 130)
        self.assertEqual(fired, [])
        self.assertEqual(rig.get("c").state, "pending")
        rig.exit("b", 130)
        self.assertEqual(fired, [None])
        self.assertEqual([rig.get(j).outcome for j in "ab"], ["cancelled", "cancelled"])
        self.assertEqual(rig.get("c").state, "pending")

    def test_stop_escalates_after_grace(self):
        rig = Rig(self, grace=30.0)
        rig.schedule("a")
        pid = rig.get("a").pid
        rig.launcher.stop()
        rig.reactor.advance(30)
        self.assertEqual(rig.signals.sent[-1], (pid, KILL_SIGNAL, False))

    def test_kill_all_while_stopping_kills_every_job_at_once(self):
        rig = Rig(self, max_jobs=2)
        rig.schedule("a")
        rig.schedule("b")
        pids = [rig.get(j).pid for j in "ab"]
        rig.launcher.stop()
        rig.launcher.kill_all()
        kills = [s[0] for s in rig.signals.sent if s[1] == KILL_SIGNAL]
        self.assertEqual(sorted(kills), sorted(pids))

    def test_stop_with_nothing_running_fires_at_once(self):
        rig = Rig(self)
        fired = []
        rig.launcher.stop().addCallback(fired.append)
        self.assertEqual(fired, [None])


class UnexpectedStartErrorTests(unittest.TestCase):
    def test_any_error_while_starting_fails_the_job_and_the_queue_goes_on(self):
        rig = Rig(self, max_jobs=1, fail_with=ValueError("embedded null byte"))
        rig.schedule("a")
        rig.schedule("b")
        self.assertEqual([rig.get(j).outcome for j in "ab"], ["failed", "failed"])
        self.assertEqual(rig.get("a").reason, "not started")
        self.assertIn("embedded null byte", rig.get("a").detail)
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 2)


class RecordingFailureTests(unittest.TestCase):
    def test_a_failure_to_record_the_end_still_frees_the_slot_and_the_stop(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("a")
        rig.schedule("b")
        stopped = []
        rig.launcher.stop().addCallback(stopped.append)

        def disk_full(*args, **kwargs):
            return defer.fail(StoreError("database or disk is full"))

        self.patch(rig.store, "mark_finished", disk_full)
        rig.exit("a", 130)
        self.assertEqual(stopped, [None])
        self.assertEqual(rig.launcher.slots_free(), 0)  # stopping: nothing more starts
        self.assertEqual([r.id for r in rig.ended], ["a"])
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)

    def exit_while_ends_fail(self, rig, jobid):
        real = rig.store.mark_finished
        self.patch(rig.store, "mark_finished",
                   lambda *a, **k: defer.fail(StoreError("disk I/O error")))
        rig.exit(jobid, 0)
        self.patch(rig.store, "mark_finished", real)

    def test_a_failure_to_record_the_end_frees_the_slot_for_the_next_job(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("a")
        rig.schedule("b")
        self.exit_while_ends_fail(rig, "a")
        self.assertEqual(rig.get("b").state, "running")
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)

    def test_an_end_recorded_first_elsewhere_stands_and_is_not_announced_again(self):
        # Another node declared this one dead while it was cut off from the
        # table, and recorded its job lost (and announced it).
        rig = Rig(self, max_jobs=1)
        rig.schedule("a")
        rig.schedule("b")
        self.successResultOf(rig.store.mark_finished("a", "lost", 5.0, reason="declared dead"))
        changed = []
        rig.events.subscribe(lambda kind, record: changed.append(record), kinds=(CHANGED,))
        stopped = []
        rig.exit("a", 0)
        found = rig.get("a")
        self.assertEqual((found.outcome, found.end_time, found.exit_status),
                         ("lost", 5.0, None))
        self.assertEqual(rig.ended, [], "the end was announced a second time")
        # What is said is the slot it freed: the next job starts.
        self.assertEqual([(r.id, r.outcome) for r in changed if r.id == "a"], [("a", "lost")])
        self.assertEqual(rig.get("b").state, "running")
        rig.launcher.stop().addCallback(stopped.append)
        rig.exit("b", 130)
        self.assertEqual(stopped, [None])

    def test_later_tries_at_an_end_go_on_quietly_through_store_errors(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("a")
        self.exit_while_ends_fail(rig, "a")
        real, tries = rig.store.mark_finished, []

        def still_failing(*args, **kwargs):
            tries.append(1)
            if len(tries) < 3:
                return defer.fail(StoreError("disk I/O error"))
            return real(*args, **kwargs)
        self.patch(rig.store, "mark_finished", still_failing)
        for _ in range(3):
            rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual((len(tries), rig.get("a").state), (3, "finished"))
        # Only the first failure is said; the tries after it are quiet.
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)

    def test_a_fault_of_ours_in_a_later_try_at_an_end_is_logged_once_and_ends_the_tries(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("a")
        self.exit_while_ends_fail(rig, "a")
        self.flushLoggedErrors(StoreError)
        tries = []

        def broken(*args, **kwargs):
            tries.append(1)
            return defer.fail(TypeError("a bug"))
        self.patch(rig.store, "mark_finished", broken)
        for _ in range(10):
            rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual(len(tries), 1)
        self.assertEqual(len(self.flushLoggedErrors(TypeError)), 1)
        self.assertEqual([c for c in rig.reactor.getDelayedCalls()
                          if c.func == rig.launcher._record_end_again], [])

    def test_an_end_recorded_late_after_another_was_recorded_is_dropped(self):
        rig = Rig(self, max_jobs=1)
        rig.schedule("a")
        self.exit_while_ends_fail(rig, "a")
        self.assertEqual([r.id for r in rig.ended], ["a"])
        self.successResultOf(rig.store.mark_finished("a", "lost", 5.0))
        changed = []
        rig.events.subscribe(lambda kind, record: changed.append(record), kinds=(CHANGED,))
        rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual((rig.get("a").outcome, changed), ("lost", []))
        self.assertEqual([r.id for r in rig.ended], ["a"])
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)

    def test_on_a_shared_table_an_unrecorded_end_is_told_once_recorded(self):
        rig = Rig(self, max_jobs=1)
        rig.store.shared = True
        rig.schedule("a")
        self.exit_while_ends_fail(rig, "a")
        # Cut off from the table: the slot is free, nothing is announced yet.
        self.assertEqual((rig.launcher.slots_free(), rig.ended), (1, []))
        rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual([(r.id, r.outcome) for r in rig.ended], [("a", "finished")])
        rig.reactor.advance(launcher_module.END_RETRY_DELAY * 3)
        self.assertEqual(len(rig.ended), 1)
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)

    def test_on_a_shared_table_an_end_another_node_recorded_first_is_never_told(self):
        # Declared dead while cut off: another node recorded the job lost
        # and told of it; this node's end of the same crawl is dropped.
        rig = Rig(self, max_jobs=1)
        rig.store.shared = True
        rig.schedule("a")
        self.exit_while_ends_fail(rig, "a")
        self.successResultOf(rig.store.mark_finished("a", "lost", 5.0))
        rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual((rig.get("a").outcome, rig.ended), ("lost", []))
        self.flushLoggedErrors(StoreError)

    def test_on_a_shared_table_a_late_end_whose_reading_fails_is_tried_again(self):
        rig = Rig(self, max_jobs=1)
        rig.store.shared = True
        rig.schedule("a")
        real_end, real_get = rig.store.mark_finished, rig.store.get

        def committed_unanswered(*args, **kwargs):
            real_end(*args, **kwargs)
            return defer.fail(StoreError("the connection was lost as the change was committed"))

        self.patch(rig.store, "mark_finished", committed_unanswered)
        rig.exit("a", 0)
        self.patch(rig.store, "mark_finished", real_end)
        self.patch(rig.store, "get", lambda jobid: defer.fail(StoreError("cut off again")))
        rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual(rig.ended, [])
        self.patch(rig.store, "get", real_get)
        rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual([(r.id, r.outcome) for r in rig.ended], [("a", "finished")])
        self.flushLoggedErrors(StoreError)

    def test_on_a_shared_table_an_end_whose_commit_answer_was_lost_is_told(self):
        # The failed write was committed after all: the end found is its own.
        rig = Rig(self, max_jobs=1)
        rig.store.shared = True
        rig.schedule("a")
        real = rig.store.mark_finished

        def committed_unanswered(*args, **kwargs):
            real(*args, **kwargs)
            return defer.fail(StoreError("the connection was lost as the change was committed"))

        self.patch(rig.store, "mark_finished", committed_unanswered)
        rig.exit("a", 0)
        self.patch(rig.store, "mark_finished", real)
        rig.reactor.advance(launcher_module.END_RETRY_DELAY)
        self.assertEqual([(r.id, r.outcome) for r in rig.ended], [("a", "finished")])
        self.flushLoggedErrors(StoreError)

    def test_the_service_hears_of_the_end_before_the_stop_fires(self):
        rig = Rig(self)
        rig.schedule("a")
        order = []
        rig.events.subscribe(lambda kind, record: order.append("job ended"), kinds=(ENDED,))
        rig.launcher.stop().addCallback(lambda _: order.append("stopped"))
        rig.exit("a", 130)
        self.assertEqual(order, ["job ended", "stopped"])


class ClaimTests(unittest.TestCase):
    """A job is claimed before its process is spawned (item 6 of the core's rebuild)."""

    def test_a_job_is_running_without_a_pid_while_it_is_spawned(self):
        rig = Rig(self)
        seen = []
        spawn = rig.reactor.spawnProcess

        def spawning(protocol, executable, args=(), **kwargs):
            seen.append(rig.get("a"))
            return spawn(protocol, executable, args, **kwargs)

        self.patch(rig.reactor, "spawnProcess", spawning)
        rig.schedule("a")
        self.assertEqual((seen[0].state, seen[0].node, seen[0].pid), ("running", NODE, None))
        self.assertIsNotNone(rig.get("a").pid)

    def test_a_failed_pid_record_is_logged_once_and_the_job_runs_on(self):
        rig = Rig(self)
        self.patch(rig.store, "mark_started",
                   lambda *a: defer.fail(StoreError("database is locked")))
        rig.schedule("a")
        self.assertEqual(rig.launcher.running_count(), 1)
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)
        self.assertEqual((rig.get("a").state, rig.get("a").pid), ("running", None))

    def test_polls_asked_in_one_call_stack_run_once_and_later(self):
        rig = Rig(self, max_jobs=5)
        claims = []
        claim = rig.store.claim_next
        self.patch(rig.store, "claim_next", lambda *a: claims.append(a) or claim(*a))
        checked = SimpleNamespace(project="shop", spider="books", spider_file=rig.spider_file,
                                  settings=(), arguments=())
        for jobid in "abc":
            self.successResultOf(rig.scheduler.schedule(checked, jobid=jobid))
        self.assertEqual(rig.reactor.processes, [])
        rig.settle()
        self.assertEqual(len(rig.reactor.processes), 3)
        # One round: three claims and the one that found nothing.
        self.assertEqual(len(claims), 4)

    def test_a_claim_that_fails_is_logged_and_tried_again_by_the_next_poll(self):
        rig = Rig(self)
        claim = rig.store.claim_next
        self.patch(rig.store, "claim_next", lambda *a: defer.fail(StoreError("locked")))
        rig.schedule("a")
        self.assertEqual(rig.get("a").state, "pending")
        self.patch(rig.store, "claim_next", claim)
        rig.poller.poll()
        rig.settle()
        self.assertEqual(rig.get("a").state, "running")

    def test_a_claim_made_whose_answer_was_lost_is_found_and_started(self):
        # The claim's COMMIT reached the table, its answer never came back
        # (a cut connection): the job is running here, with no process.
        rig = Rig(self)
        claim = rig.store.claim_next
        self.patch(rig.store, "claim_next", lambda *a: claim(*a).addCallback(
            lambda record: defer.fail(StoreError("the connection was lost"))))
        rig.schedule("a")
        self.assertEqual((rig.get("a").state, rig.get("a").pid), ("running", None))
        self.assertEqual(rig.reactor.processes, [])
        self.patch(rig.store, "claim_next", claim)
        rig.reactor.advance(1)
        rig.poller.poll()
        rig.settle()
        record = rig.get("a")
        self.assertEqual([p.pid for p in rig.reactor.processes], [record.pid])
        self.assertEqual(rig.launcher.running_ids(), ["a"])
        # It hears a cancel, as any job it started.
        self.assertEqual(rig.cancel("a"), "running")
        self.assertEqual(rig.signals.sent, [(record.pid, signal.SIGTERM, False)])

    def test_a_job_running_here_without_a_pid_is_not_taken_for_a_lost_answer(self):
        # Claimed by another claim than the one whose answer was lost (an
        # earlier run of this node, say): the claim's time tells them apart.
        rig = Rig(self)
        claim = rig.store.claim_next
        self.successResultOf(rig.store.add(JobRecord(id="old", project="shop", spider="books",
                                                     spider_file=rig.spider_file)))
        self.successResultOf(claim(NODE, ["shop"], 5.0))
        self.patch(rig.store, "claim_next", lambda *a: defer.fail(StoreError("cut off")))
        rig.reactor.advance(10)
        rig.poller.poll()
        rig.settle()
        self.patch(rig.store, "claim_next", claim)
        rig.poller.poll()
        rig.settle()
        self.assertEqual((rig.get("old").state, rig.get("old").pid), ("running", None))
        self.assertEqual(rig.reactor.processes, [])

    def test_a_claim_answered_after_the_stop_puts_its_job_back_in_the_queue(self):
        # A claim waiting on PostgreSQL as the service stops: cancelling its
        # Deferred does not stop the table from making it.
        rig = Rig(self)
        claim = rig.store.claim_next
        asked = []

        def waiting(*args):
            answer = defer.Deferred(lambda d: None)
            asked.append((answer, args))
            return answer

        self.patch(rig.store, "claim_next", waiting)
        rig.schedule("a")
        [(answer, args)] = asked
        stopped = []
        rig.poller.stop().addCallback(stopped.append)
        made = self.successResultOf(claim(*args))
        if not answer.called:
            answer.callback(made)
        self.assertEqual(stopped, [None])
        record = rig.get("a")
        self.assertEqual((record.state, record.node, record.start_time), ("pending", None, None))
        self.assertEqual(rig.reactor.processes, [])

    def test_an_unexpected_error_in_launch_is_contained_to_its_job(self):
        rig = Rig(self, max_jobs=2)
        launch = rig.launcher.launch
        calls = []

        def flaky(record):
            calls.append(record.id)
            if record.id == "a":
                raise RuntimeError("boom")
            return launch(record)

        self.patch(rig.launcher, "launch", flaky)
        rig.schedule("a")
        rig.schedule("b")
        self.assertEqual(calls, ["a", "b"])
        self.assertEqual(rig.get("b").state, "running")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_the_safety_net_timer_claims_what_no_event_announced(self):
        rig = Rig(self)
        record = rig.schedule("a")
        rig.exit("a", 0)
        # A job added behind the service's back (another process's write).
        self.successResultOf(rig.store.add(type(record)(
            id="b", project="shop", spider="books", spider_file=rig.spider_file)))
        rig.poller.start()
        self.addCleanup(rig.poller.stop)
        rig.settle()
        self.assertEqual(rig.get("b").state, "running")


class LimitsTests(unittest.TestCase):
    """A job with a memory or cpu policy, its control group made in a
    temporary tree shaped like cgroup v1 (reliability/cgroups.py)."""

    def setUp(self):
        self.root = os.path.abspath(self.mktemp())
        self.memory_root = os.path.join(self.root, "memory")
        self.cpu_root = os.path.join(self.root, "cpu")
        os.makedirs(self.memory_root)
        os.makedirs(self.cpu_root)
        self.groups = JobGroups.detect(
            os.path.abspath(self.mktemp()),
            f"cgroup {self.memory_root} cgroup rw,memory 0 0\n"
            f"cgroup {self.cpu_root} cgroup rw,cpu 0 0\n",
            "4:memory:/\n3:cpu:/\n")

    def rig(self, groups="default"):
        return Rig(self, groups=self.groups if groups == "default" else groups)

    def private(self, rig, jobid):
        with open(os.path.join(rig.dir, "run", jobid + ".json")) as f:
            return json.load(f)

    def empty(self, directories):
        # What the kernel's rmdir of a cgroup takes for granted: its files
        # are the kernel's. In a temporary tree they are the test's to clear.
        for directory in directories:
            for name in os.listdir(directory):
                os.unlink(os.path.join(directory, name))

    def test_the_crawl_joins_a_group_with_the_limits_and_netweir_stops_itself_first(self):
        rig = self.rig()
        rig.schedule("lim", policy=JobPolicy(memory=200 << 20, cpu=0.2))
        [process] = rig.reactor.processes
        memory, cpu = self.groups.directories("lim")
        crawl = process.argv.index("crawl")
        self.assertEqual(process.argv[crawl - 2:crawl], [f"--cgroup={memory}", f"--cgroup={cpu}"])
        with open(os.path.join(memory, "memory.limit_in_bytes")) as f:
            self.assertEqual(f.read(), str(200 << 20))
        with open(os.path.join(cpu, "cpu.cfs_quota_us")) as f:
            self.assertEqual(f.read(), "20000")
        self.assertIn("--set=max_memory=170", self.private(rig, "lim"))

    def test_a_job_setting_max_memory_keeps_its_own(self):
        rig = self.rig()
        rig.schedule("own", settings=(("max_memory", "50"),), policy=JobPolicy(memory=1 << 30))
        private = self.private(rig, "own")
        self.assertEqual([a for a in private if "max_memory" in a], ["--set=max_memory=50"])

    def test_a_job_without_limits_has_no_group(self):
        rig = self.rig()
        rig.schedule("free", policy=JobPolicy(timeout=60))
        [process] = rig.reactor.processes
        self.assertFalse([a for a in process.argv if a.startswith("--cgroup=")])
        self.assertEqual(self.groups.leftovers(), [])
        self.assertNotIn("--set=max_memory", " ".join(self.private(rig, "free")))

    def test_an_oom_kill_the_parent_wrote_ends_failed_with_reason_memory(self):
        rig = self.rig()
        rig.schedule("hog", policy=JobPolicy(memory=64 << 20))
        path = job_files(rig.dir, "shop", "books", "hog").status
        with open(path, "w") as f:
            f.write('{"exit_status": -9, "end_time": 5.0, "crawl_pid": 7, "oom": true}')
        self.empty(self.groups.directories("hog", ["memory"]))
        rig.exit("hog", 0)
        record = rig.get("hog")
        self.assertEqual((record.outcome, record.reason, record.exit_status),
                         ("failed", "memory", -9))
        self.assertEqual(self.groups.leftovers(), [])

    def test_a_crawl_that_could_not_join_its_group_ends_not_started(self):
        rig = self.rig()
        rig.schedule("nojoin", policy=JobPolicy(memory=64 << 20))
        path = job_files(rig.dir, "shop", "books", "nojoin").status
        with open(path, "w") as f:
            f.write('{"exit_status": 127, "end_time": 5.0, "crawl_pid": 7,'
                    ' "not_started": "the crawl could not join its control group: gone"}')
        self.empty(self.groups.directories("nojoin", ["memory"]))
        rig.exit("nojoin", 0)
        record = rig.get("nojoin")
        self.assertEqual((record.outcome, record.reason, record.detail),
                         ("failed", "not started",
                          "the crawl could not join its control group: gone"))

    def test_a_parent_killed_before_writing_its_status_the_group_tells(self):
        rig = self.rig()
        rig.schedule("hog", policy=JobPolicy(memory=64 << 20))
        [memory] = self.groups.directories("hog", ["memory"])
        self.empty([memory])
        with open(os.path.join(memory, "memory.oom_control"), "w") as f:
            f.write("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
        # The group still has its files: removal is tried again, then left
        # to the next start's sweep.
        rig.exit("hog", signal=9)
        self.assertEqual((rig.get("hog").outcome, rig.get("hog").reason), ("failed", "memory"))
        self.assertTrue(os.path.exists(memory))
        os.unlink(os.path.join(memory, "memory.oom_control"))
        rig.reactor.advance(0.1)
        self.assertFalse(os.path.exists(memory))

    def test_a_job_another_node_recorded_lost_loses_its_group_after_the_kill(self):
        rig = self.rig()
        rig.schedule("gone", policy=JobPolicy(memory=64 << 20))
        [memory] = self.groups.directories("gone", ["memory"])
        self.assertTrue(rig.launcher.drop("gone"))
        self.empty([memory])
        self.assertTrue(os.path.exists(memory))
        rig.reactor.advance(launcher_module.KILL_FALLBACK_SECONDS)
        self.assertFalse(os.path.exists(memory))
        self.assertEqual(self.groups.leftovers(), [])

    def test_a_job_whose_limit_this_node_cannot_enforce_is_left_pending(self):
        # Only the memory hierarchy here: a cpu-limited job (queued by a
        # node that can) is left for such a node; the next job runs.
        only_memory = JobGroups.detect(
            os.path.abspath(self.mktemp()), f"cgroup {self.memory_root} cgroup rw,memory 0 0\n",
            "4:memory:/\n")
        rig = self.rig(groups=only_memory)
        rig.schedule("cpu", priority=5, policy=JobPolicy(cpu=1.0))
        rig.schedule("memory", policy=JobPolicy(memory=64 << 20))
        self.assertEqual((rig.get("cpu").state, rig.get("memory").state),
                         ("pending", "running"))
        self.assertEqual(len(rig.reactor.processes), 1)

    def test_a_limit_the_service_cannot_enforce_fails_the_job_at_start(self):
        rig = self.rig(groups=None)
        rig.schedule("nolimit", policy=JobPolicy(cpu=1.0))
        record = rig.get("nolimit")
        self.assertEqual((record.outcome, record.reason), ("failed", "not started"))
        self.assertIn("cpu limit cannot be enforced", record.detail)
        self.assertEqual(rig.reactor.processes, [])

    def test_a_group_that_cannot_be_made_fails_the_job_at_start(self):
        rig = self.rig()
        # The hierarchy went away since the start (unmounted, say).
        os.rmdir(self.cpu_root)
        rig.schedule("gone", policy=JobPolicy(memory=64 << 20, cpu=1.0))
        record = rig.get("gone")
        self.assertEqual((record.outcome, record.reason), ("failed", "not started"))
        self.assertIn("cannot make the control group", record.detail)
        self.assertEqual(rig.reactor.processes, [])
        # The memory half made before it is gone again.
        self.assertEqual(self.groups.leftovers(), [])
