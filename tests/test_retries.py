"""Retries on a Clock: the job core queues, announces and starts them
(one timer for the earliest due time), and what the watching parts make
of them (/metrics, --notify, listjobs.json's waiting_for, --notify-on).
The table's own part (the retry written with the end) is the contract's
(tests/test_store_contract.py); real crawls are tests/test_retries_live.py's."""

import json
from types import SimpleNamespace

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.python import usage
from twisted.trial import unittest

from netweir_serve import names
from netweir_serve.jobs.events import ENDED, QUEUED, JobEvents
from netweir_serve.jobs.notify import Notifier
from netweir_serve.options import parse_outcomes
from netweir_serve.reliability.policy import MAX_RETRIES, JobPolicy
from netweir_serve.jobs.launcher import END_RETRY_DELAY
from netweir_serve.store.records import FINISHED, PENDING, JobRecord, StoreError
from netweir_serve.store.runpolicy import RunningSet
from netweir_serve.web.metrics import ServiceMetrics, metrics_registry
from netweir_serve.web.views import format_time, job_entry

from .test_launcher import Rig
from .test_metrics import FakeStore, samples, value
from .test_notify import FakeAgent


# The time of day the wall clock starts at: far from the reactor's
# (monotonic) clock, as in the service, so that a retry's wait measured on
# the wrong one (not_before is a time of day) shows.
WALL_START = 1_790_000_000.0


class RetryRig(Rig):
    """The job core on a Clock, with jobs that carry a policy, and the
    events it publishes in order. Its wall clock (the table's times) is a
    Clock of its own: ``advance`` moves both."""

    def __init__(self, test, max_jobs=5, jitter=0.5):
        self.wall = Clock()
        self.wall.advance(WALL_START)
        super().__init__(test, max_jobs=max_jobs, wall=self.wall)
        # Half the jitter: each wait is its backoff times 1.05.
        self.store._jitter = lambda: jitter
        self.heard = []
        self.events.subscribe(lambda kind, record: self.heard.append((kind, record.id)),
                              kinds=(QUEUED, ENDED))

    def schedule_with(self, jobid, policy):
        checked = SimpleNamespace(project="shop", spider="books", spider_file=self.spider_file,
                                  settings=(("checkpoint", "ck"),),
                                  arguments=(("category", "fiction"),))
        record = self.test.successResultOf(self.scheduler.schedule(
            checked, jobid=jobid, policy=JobPolicy.parse(policy).to_json()))
        self.settle()
        return record

    def advance(self, seconds):
        """Time passes alike on the wall and the reactor (the wall first:
        what the reactor's calls do reads it)."""
        self.wall.advance(seconds)
        self.reactor.advance(seconds)

    def due_timers(self):
        """The poller's timers for retries (its safety net is not started)."""
        return [c for c in self.reactor.getDelayedCalls()
                if getattr(c.func, "__name__", "") == "_retry_due"]


class RetryingJobCoreTests(unittest.TestCase):
    def test_a_failing_job_runs_three_times_with_growing_waits(self):
        rig = RetryRig(self)
        rig.schedule_with("a", {"retries": "2", "backoff": "10s"})
        self.assertEqual(rig.get("a").state, "running")
        rig.exit("a", 1)
        # Ended, then its retry queued: in that order, one event each.
        self.assertEqual(rig.heard[-2:], [(ENDED, "a"), (QUEUED, "a.r1")])
        retry = rig.get("a.r1")
        self.assertEqual((retry.state, retry.attempt, retry.retry_of, retry.settings,
                          retry.arguments), (PENDING, 2, "a", (("checkpoint", "ck"),),
                                             (("category", "fiction"),)))
        self.assertEqual(retry.not_before, rig.get("a").end_time + 10.5)
        # The poller's one timer, on the reactor's clock, 10.5 s on: the
        # wait is measured on the wall clock that not_before is a time of.
        [timer] = rig.due_timers()
        self.assertEqual(timer.getTime(), rig.reactor.seconds() + 10.5)
        rig.advance(10.4)
        self.assertEqual(rig.get("a.r1").state, PENDING)
        rig.advance(0.1)
        rig.settle()
        self.assertEqual(rig.get("a.r1").state, "running")
        rig.exit("a.r1", 1)
        second = rig.get("a.r2")
        # Twice the first wait, with the same jitter.
        self.assertEqual(second.not_before - rig.get("a.r1").end_time, 21.0)
        rig.advance(21)
        rig.settle()
        rig.exit("a.r2", 1)
        last = rig.get("a.r2")
        self.assertEqual((last.outcome, last.attempt, last.retry_of), ("failed", 3, "a"))
        self.assertIsNone(rig.get("a.r3"))
        self.assertEqual([jobid for kind, jobid in rig.heard if kind == QUEUED],
                         ["a", "a.r1", "a.r2"])
        self.assertEqual(rig.jobs()[0], [])

    def test_one_timer_for_the_earliest_of_many_retries(self):
        rig = RetryRig(self, max_jobs=10)
        backoffs = {"j1": 50, "j2": 20, "j3": 80, "j4": 20, "j5": 35}
        for jobid, seconds in backoffs.items():
            rig.schedule_with(jobid, {"retries": "1", "backoff": f"{seconds}s"})
        start = rig.reactor.seconds()
        for jobid in backoffs:
            rig.exit(jobid, 1)
        # Five retries wait; the poller keeps one timer, for the earliest.
        self.assertEqual(len(rig.jobs()[0]), 5)
        [timer] = rig.due_timers()
        self.assertEqual(timer.getTime(), start + 21.0)
        rig.advance(21)
        rig.settle()
        self.assertEqual(sorted(r.id for r in rig.jobs()[1]), ["j2.r1", "j4.r1"])
        [timer] = rig.due_timers()
        self.assertEqual(timer.getTime(), start + 35 * 1.05)
        rig.advance(35 * 1.05 - 21)
        rig.settle()
        self.assertIn("j5.r1", [r.id for r in rig.jobs()[1]])
        [timer] = rig.due_timers()
        self.assertEqual(timer.getTime(), start + 50 * 1.05)

    def test_a_retry_written_by_an_end_whose_answer_was_lost_is_announced(self):
        # On a shared table the end is written, retry and all, but its
        # answer is lost: the end is held, tried again, found recorded as
        # this node's own, and then told with the retry read from the table.
        rig = RetryRig(self)
        rig.store.shared = True
        write = rig.store.mark_finished
        answers = []

        def first_answer_lost(*args, **kwargs):
            answers.append(1)
            written = write(*args, **kwargs)
            if len(answers) == 1:
                return written.addCallback(lambda _: defer.fail(StoreError("answer lost")))
            return written
        rig.store.mark_finished = first_answer_lost
        rig.schedule_with("a", {"retries": "1", "backoff": "1m"})
        rig.exit("a", 1)
        self.assertEqual(len(self.flushLoggedErrors(StoreError)), 1)
        self.assertEqual(rig.ended, [])
        rig.advance(END_RETRY_DELAY)
        self.assertEqual(rig.heard[-2:], [(ENDED, "a"), (QUEUED, "a.r1")])
        (ended,) = rig.ended
        self.assertEqual((ended.retry.id, ended.retry.not_before),
                         ("a.r1", rig.get("a.r1").not_before))
        [timer] = rig.due_timers()
        self.assertEqual(timer.getTime() - rig.reactor.seconds(),
                         rig.get("a.r1").not_before - rig.wall.seconds())
        rig.advance(rig.get("a.r1").not_before - rig.wall.seconds())
        rig.settle()
        self.assertEqual(rig.get("a.r1").state, "running")

    def test_a_slot_freed_later_starts_a_retry_already_due(self):
        rig = RetryRig(self, max_jobs=1)
        rig.schedule_with("a", {"retries": "1", "backoff": "5s"})
        rig.exit("a", 1)
        rig.schedule("busy")
        self.assertEqual(rig.get("busy").state, "running")
        rig.advance(6)
        rig.settle()
        self.assertEqual(rig.get("a.r1").state, PENDING)
        rig.exit("busy", 0)
        self.assertEqual(rig.get("a.r1").state, "running")

    def test_cancelling_a_pending_retry_ends_the_chain(self):
        rig = RetryRig(self)
        rig.schedule_with("a", {"retries": "3", "backoff": "5s"})
        rig.exit("a", 1)
        self.assertEqual(rig.cancel("a.r1"), PENDING)
        ended = rig.get("a.r1")
        self.assertEqual((ended.outcome, ended.reason), ("cancelled", "cancel.json"))
        rig.advance(60)
        rig.settle()
        self.assertEqual(rig.jobs()[:2], ([], []))
        self.assertIsNone(rig.get("a.r2"))

    def test_a_user_cancel_of_a_running_job_is_never_retried(self):
        rig = RetryRig(self)
        rig.schedule_with("a", {"retries": "3", "retry_on": "failed,lost"})
        rig.cancel("a")
        rig.exit("a", 130)
        self.assertEqual((rig.get("a").outcome, rig.get("a").reason),
                         ("cancelled", "cancel.json"))
        self.assertEqual(rig.jobs()[0], [])

    def test_the_poller_stops_its_timer_with_it(self):
        rig = RetryRig(self)
        rig.schedule_with("a", {"retries": "1", "backoff": "1m"})
        rig.exit("a", 1)
        self.assertEqual(len(rig.due_timers()), 1)
        self.successResultOf(rig.poller.stop())
        self.assertEqual(rig.due_timers(), [])


def ended_with_retry(jobid="a", outcome="failed", reason="exit 1", not_before=1000.0):
    retry = JobRecord(id=f"{jobid}.r1", project="shop", spider="books", spider_file="/x.py",
                      attempt=2, retry_of=jobid, not_before=not_before)
    return JobRecord(id=jobid, project="shop", spider="books", spider_file="/x.py",
                     state=FINISHED, outcome=outcome, reason=reason, start_time=100.0,
                     end_time=160.0, exit_status=1, retry=retry)


class WatchingRetriesTests(unittest.TestCase):
    def test_metrics_count_retries_queued_by_project_and_spider(self):
        metrics = ServiceMetrics(FakeStore(), lambda: 1, 1)
        events = JobEvents()
        metrics.subscribe(events)
        record = ended_with_retry()
        events.publish(QUEUED, JobRecord(id="first", project="shop", spider="books",
                                         spider_file="/x.py"))
        events.publish(ENDED, record)
        events.publish(QUEUED, record.retry)
        events.publish(QUEUED, JobRecord(id="b.r2", project="shop", spider="books",
                                         spider_file="/x.py", attempt=3, retry_of="b"))
        metrics.refresh()
        from prometheus_client import generate_latest
        found = samples(generate_latest(metrics_registry(metrics)).decode())
        self.assertEqual(value(found, "netweir_serve_retries_total", project="shop",
                               spider="books"), 2.0)

    def notifier(self, outcomes=("failed", "lost")):
        agent = FakeAgent(Clock(), [200] * 5)
        notifier = Notifier(agent.clock, ["http://127.0.0.1:1/hook"], job_entry, "box",
                            outcomes=outcomes, agent=agent, show_time=format_time)
        events = JobEvents()
        notifier.subscribe(events)
        return events, agent

    def test_a_notice_names_the_retry_its_end_queued(self):
        events, agent = self.notifier()
        events.publish(ENDED, ended_with_retry(not_before=1_800_000_000.0))
        sent = json.loads(agent.requests[0][4])
        self.assertEqual(sent["retry"], {"id": "a.r1",
                                         "not_before": format_time(1_800_000_000.0)})
        self.assertEqual((sent["job"]["attempt"], sent["job"]["reason"]), (1, "exit 1"))
        self.assertTrue(sent["text"].endswith("; retry a.r1 (attempt 2) queued"), sent["text"])
        # A retry's own end names its first job; no retry, no field.
        last = JobRecord(id="a.r2", project="shop", spider="books", spider_file="/x.py",
                         state=FINISHED, outcome="failed", reason="exit 1", attempt=3,
                         retry_of="a")
        events.publish(ENDED, last)
        sent = json.loads(agent.requests[1][4])
        self.assertNotIn("retry", sent)
        self.assertEqual((sent["job"]["attempt"], sent["job"]["retry_of"]), (3, "a"))

    def test_notify_on_takes_reasons_as_well_as_outcomes(self):
        events, agent = self.notifier(outcomes=parse_outcomes("failed,timeout"))
        for jobid, outcome, reason in (("f", "failed", "exit 1"),
                                       ("t", "cancelled", "timeout"),
                                       ("c", "cancelled", "cancel.json"),
                                       ("ok", "finished", "exit 0")):
            events.publish(ENDED, ended_with_retry(jobid, outcome, reason))
        self.assertEqual([json.loads(r[4])["job"]["id"] for r in agent.requests], ["f", "t"])

    def test_notify_on_reads_outcomes_and_reasons_and_refuses_others(self):
        self.assertEqual(parse_outcomes("timeout, Failed,exit  1,memory,failed"),
                         ("failed", "timeout", "exit 1", "memory"))
        self.assertEqual(parse_outcomes("signal 9,node lost"), ("signal 9", "node lost"))
        # Run health: a run that finished degraded (or healthy).
        self.assertEqual(parse_outcomes("Degraded,failed"), ("failed", "degraded"))
        for wrong in ("timeouts", "exit", "exit x", ",", "stopped"):
            error = self.assertRaises(usage.UsageError, parse_outcomes, wrong)
            self.assertIn("reasons", str(error))

    def test_a_retry_before_its_time_waits_for_it(self):
        retry = ended_with_retry(not_before=500.0).retry
        self.assertEqual(RunningSet(now=499.0, show_time=lambda t: f"at {t:g}").waits_for(
            retry), "its retry time, at 500 (attempt 2 of job a)")
        self.assertIsNone(RunningSet(now=500.0).waits_for(retry))
        # A listing without the time of day says nothing of it (the claim's own check).
        self.assertIsNone(RunningSet().waits_for(retry))


class RetryIdTests(unittest.TestCase):
    def test_every_retry_of_the_longest_job_id_is_a_name(self):
        longest = "j" * names.MAX_JOB_ID_LENGTH
        self.assertIsNone(names.job_id_problem("job id", longest))
        self.assertIn("196", names.job_id_problem("job id", longest + "x"))
        for attempt in range(2, MAX_RETRIES + 2):
            self.assertTrue(names.is_name(names.retry_id(longest, attempt)), attempt)
        self.assertEqual(names.retry_id("nightly", 2), "nightly.r1")
