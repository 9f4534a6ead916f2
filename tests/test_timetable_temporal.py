"""Schedules as Temporal keeps them, on a Clock: jitter, the overlap
policies buffer_all, cancel_other and terminate_other, edits, runs asked
now, backfills, pauses with a note, and the counts of each."""

import os
from types import SimpleNamespace

from twisted.internet import defer
from twisted.trial import unittest

from netweir_serve.jobs import policies
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.schedules.times import jitter_offset
from netweir_serve.schedules.timetable import (
    ScheduleRefused, ScheduleRequest, Timetable, UnknownSchedule)
from netweir_serve.store.sqlite import SQLiteJobStore

from .test_timetable import Rig

HOUR = 3600.0


class CancellingRig(Rig):
    """A Rig whose timetable cancels as IScheduler.cancel does: a pending
    job ends cancelled at once; a running one is asked (recorded here) and
    ends when the test says."""

    def new_timetable(self):
        self.cancels = []
        super().new_timetable()  # its submitter
        return Timetable(self.store, self.submitter, self.clock, local_zone="UTC",
                         on_change=self.changes.append, cancel=self.cancel)

    @defer.inlineCallbacks
    def cancel(self, jobid, now=False):
        self.cancels.append((jobid, now))
        record = yield self.store.get(jobid)
        if record.state == "pending":
            yield self.store.cancel_pending(jobid, self.clock.seconds())
            return "pending"
        return "running"

    def claim(self):
        return self.test.successResultOf(self.store.claim_next("n", ["shop"],
                                                               self.clock.seconds()))


class JitterTests(unittest.TestCase):
    def test_a_job_starts_its_fixed_offset_after_its_due_time_named_after_the_due_time(self):
        rig = Rig(self, start=0.0)
        rig.start()
        offset = jitter_offset("j", 1800)
        self.assertEqual(offset, 173)
        added = rig.add(name="j", every="1h", jitter="30m", overlap="allow", misfire="skip")
        self.assertEqual((added.jitter, added.next_due), (1800.0, HOUR))
        self.assertEqual(rig.timetable.next_wake(), HOUR + offset)
        rig.clock.advance(HOUR + offset - 1)
        self.assertEqual(rig.jobs(), [])
        # 173 s after its due time, past the minute a run may be late, and
        # still on time under misfire=skip: the schedule lives on its
        # shifted times.
        rig.clock.advance(1)
        self.assertEqual(rig.job_ids(), ["j-19700101T010000Z"])
        record = rig.schedule("j")
        self.assertEqual((record.next_due, record.last_due, record.runs, record.caught_up),
                         (2 * HOUR, HOUR, 1, 0))
        rig.run_until(5 * HOUR + offset)
        self.assertEqual(len(rig.jobs()), 5)
        self.assertTrue(all(r.created == due * HOUR + offset for due, r in
                            enumerate(sorted(rig.jobs(), key=lambda r: r.id), start=1)))

    def test_the_offset_is_the_same_after_a_restart_and_differs_between_names(self):
        path = self.mktemp() + ".db"
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="j", every="1h", jitter="30m")
        rig.add(name="spread", every="1h", jitter="30m")
        self.assertEqual(rig.timetable.next_wake(), HOUR + 173)
        rig.timetable.stop()
        self.successResultOf(rig.store.close())
        rig.store = SQLiteJobStore(path, rig.clock)
        rig.timetable = rig.new_timetable()
        rig.start()
        self.assertEqual(rig.timetable.next_wake(), HOUR + 173)
        rig.clock.advance(HOUR + 173)
        self.assertEqual(rig.job_ids(), ["j-19700101T010000Z"])
        rig.clock.advance(1016 - 173)
        self.assertEqual(rig.job_ids(), ["j-19700101T010000Z", "spread-19700101T010000Z"])

    def test_a_bad_jitter_is_refused_naming_it_and_adds_nothing(self):
        rig = Rig(self, start=0.0)
        rig.start()
        failure = self.failureResultOf(rig.timetable.add(ScheduleRequest(
            project="shop", spider="books", every="1h", name="x", jitter="2d")),
            ScheduleRefused)
        self.assertIn("jitter '2d'", failure.value.message)
        self.assertEqual(self.successResultOf(rig.timetable.schedules()), [])


class BufferAllTests(unittest.TestCase):
    def test_every_firing_waits_and_they_run_one_after_another_in_order(self):
        rig = CancellingRig(self, start=0.0)
        rig.start()
        rig.add(name="b", every="1m", overlap="buffer_all")
        rig.clock.advance(60)
        first = rig.claim()
        for _ in range(3):
            rig.clock.advance(60)
        record = rig.schedule("b")
        self.assertEqual((record.runs, record.skipped, record.buffered), (4, 0, 3))
        self.assertTrue(all(r.locks == (policies.schedule_lock("b"),) for r in rig.jobs()))
        ran = [first.id]
        for _ in range(3):
            self.assertIsNone(rig.claim())
            self.successResultOf(rig.store.mark_finished(ran[-1], "finished", rig.clock.seconds()))
            ran.append(rig.claim().id)
        self.assertEqual(ran, ["b-19700101T000100Z", "b-19700101T000200Z",
                               "b-19700101T000300Z", "b-19700101T000400Z"])

    def test_buffer_one_is_queue_by_its_other_name(self):
        rig = CancellingRig(self, start=0.0)
        rig.start()
        rig.add(name="o", every="1m", overlap="buffer_one")
        rig.clock.advance(60)
        rig.claim()
        rig.clock.advance(60)
        rig.clock.advance(60)
        record = rig.schedule("o")
        self.assertEqual((record.overlap, record.runs, record.skipped, record.buffered),
                         ("buffer_one", 2, 1, 1))


class CancelOtherTests(unittest.TestCase):
    def overlap(self, policy):
        rig = CancellingRig(self, start=0.0)
        rig.start()
        rig.add(name="c", every="1m", overlap=policy)
        rig.clock.advance(60)
        running = rig.claim()
        rig.clock.advance(60)
        return rig, running

    def test_cancel_other_asks_the_running_job_to_stop_and_its_job_waits_for_the_end(self):
        rig, running = self.overlap("cancel_other")
        self.assertEqual(rig.cancels, [(running.id, False)])
        waiting = self.successResultOf(rig.store.get("c-19700101T000200Z"))
        self.assertEqual((waiting.state, waiting.locks),
                         ("pending", (policies.schedule_lock("c"),)))
        self.assertIsNone(rig.claim())
        self.successResultOf(rig.store.mark_finished(running.id, "cancelled", 125.0))
        self.assertEqual(rig.claim().id, "c-19700101T000200Z")
        self.assertEqual(rig.schedule("c").runs, 2)

    def test_terminate_other_kills_at_once(self):
        rig, running = self.overlap("terminate_other")
        self.assertEqual(rig.cancels, [(running.id, True)])

    def test_a_job_waiting_for_the_lock_is_cancelled_too(self):
        rig, running = self.overlap("cancel_other")
        rig.clock.advance(60)
        self.assertEqual(rig.cancels, [(running.id, False), (running.id, False),
                                       ("c-19700101T000200Z", False)])
        states = {r.id: (r.state, r.outcome) for r in rig.jobs()}
        self.assertEqual(states["c-19700101T000200Z"], ("finished", "cancelled"))
        self.assertEqual(states["c-19700101T000300Z"], ("pending", None))

    def test_a_job_that_cannot_be_queued_cancels_nothing(self):
        for policy in ("cancel_other", "terminate_other"):
            rig = CancellingRig(self, start=0.0)
            rig.start()
            rig.add(name="c", every="1m", overlap=policy)
            rig.clock.advance(60)
            running = rig.claim()
            rig.submitter.refuse = "spider 'books' is gone"
            rig.clock.advance(60)
            self.assertEqual(rig.cancels, [], policy)
            self.assertEqual(self.successResultOf(rig.store.get(running.id)).state, "running")
            self.assertEqual((rig.schedule("c").error, rig.job_ids()),
                             ("spider 'books' is gone", [running.id]))

    def test_nothing_running_cancels_nothing(self):
        rig = CancellingRig(self, start=0.0)
        rig.start()
        rig.add(name="c", every="1m", overlap="terminate_other")
        rig.run_until(300)
        self.assertEqual((rig.cancels, rig.schedule("c").runs), ([], 5))


class SkipLockTests(unittest.TestCase):
    def test_a_job_queued_under_skip_holds_the_lock_and_a_backfill_waits_for_it(self):
        rig = CancellingRig(self, start=10 * HOUR)
        rig.start()
        rig.add(name="s", every="1h")
        rig.clock.advance(HOUR)
        [fired] = rig.jobs()
        self.assertEqual(fired.locks, (policies.schedule_lock("s"),))
        self.assertEqual(rig.claim().id, fired.id)
        self.successResultOf(rig.timetable.backfill("shop", "s", "1970-01-01T08:00:00Z",
                                                    "1970-01-01T10:00:00Z"))
        self.assertIsNone(rig.claim())
        self.successResultOf(rig.store.mark_finished(fired.id, "finished", 11 * HOUR + 5))
        self.assertEqual(rig.claim().id, "s-19700101T080000Z")

    def test_allow_alone_queues_without_the_lock(self):
        rig = CancellingRig(self, start=0.0)
        rig.start()
        rig.add(name="a", every="1h", overlap="allow")
        rig.clock.advance(HOUR)
        self.assertEqual([r.locks for r in rig.jobs()], [()])


class EditTests(unittest.TestCase):
    def test_an_edit_keeps_the_counts_and_moves_the_next_run(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="e", every="1m", overlap="allow", settings=(("A", "1"),),
                arguments=(("x", "1"),), policy=JobPolicy(retries=2))
        rig.run_until(180)
        rig.clock.advance(10)
        edited = self.successResultOf(rig.timetable.edit("shop", "E", {
            "every": "1h", "settings": (("B", "2"),), "policy": JobPolicy(timeout=60.0)}))
        self.assertEqual((edited.runs, edited.rule, edited.anchor, edited.next_due),
                         (3, "1h", 190.0, 190.0 + HOUR))
        self.assertEqual((edited.settings, edited.arguments, edited.overlap),
                         ((("B", "2"),), (("x", "1"),), "allow"))
        self.assertEqual(JobPolicy.from_json(edited.policy), JobPolicy(retries=2, timeout=60.0))
        self.assertEqual(rig.schedule("e"), edited)
        self.assertEqual(rig.timetable.next_wake(), 190.0 + HOUR)
        rig.clock.advance(HOUR)
        self.assertEqual(rig.schedule("e").runs, 4)
        self.assertIn("e-19700101T010310Z", rig.job_ids())

    def test_a_new_zone_keeps_the_rule_and_an_edit_of_the_rest_keeps_the_grid(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="z", cron="0 3 * * *")
        edited = self.successResultOf(rig.timetable.edit("shop", "z", {"tz": "Asia/Tokyo"}))
        self.assertEqual((edited.rule, edited.tz, edited.next_due), ("0 3 * * *", "Asia/Tokyo",
                                                                     18 * HOUR))
        rig.add(name="g", every="10m")
        rig.clock.advance(125)
        edited = self.successResultOf(rig.timetable.edit("shop", "g", {"pause_after": "3",
                                                                       "jitter": "1m"}))
        self.assertEqual((edited.anchor, edited.next_due, edited.pause_after, edited.jitter),
                         (0.0, 600.0, 3, 60.0))

    def test_an_edit_keeps_a_due_time_passed_whose_job_waits_for_its_offset(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="j", every="1h", jitter="30m", overlap="allow", misfire="skip")
        # Due at 1 h, its job starts 173 s later: 100 s after, it waits.
        rig.clock.advance(HOUR + 100)
        edited = self.successResultOf(rig.timetable.edit("shop", "j", {"pause_after": "3"}))
        self.assertEqual(edited.next_due, HOUR)
        rig.clock.advance(73)
        self.assertEqual(rig.job_ids(), ["j-19700101T010000Z"])
        self.assertEqual(rig.schedule("j").next_due, 2 * HOUR)
        # A longer jitter (offset 1038 s) makes the due time fired wait
        # again: the last_due guard fires it once, not twice.
        edited = self.successResultOf(rig.timetable.edit("shop", "j", {"jitter": "3h"}))
        self.assertEqual((edited.next_due, edited.last_due), (HOUR, HOUR))
        rig.clock.advance(1038)
        self.assertEqual(rig.job_ids(), ["j-19700101T010000Z"])
        self.assertEqual((rig.schedule("j").next_due, rig.schedule("j").runs), (2 * HOUR, 1))
        rig.run_until(2 * HOUR + 1038)
        self.assertEqual(rig.job_ids(), ["j-19700101T010000Z", "j-19700101T020000Z"])

    def test_refused_edits_name_the_parameter_and_store_nothing(self):
        rig = Rig(self, start=0.0)
        rig.start()
        before = rig.add(name="r", every="1m")
        cases = [({"cron": "61 * * * *"}, "61"), ({"every": "0"}, "every"),
                 ({"tz": "Mars/Base"}, "Mars/Base"), ({"overlap": "often"}, "overlap"),
                 ({"jitter": "3d"}, "jitter"), ({"pause_after": "-1"}, "pause_after"),
                 ({"cron": "* * * * *", "every": "1m"}, "not both")]
        for given, word in cases:
            failure = self.failureResultOf(rig.timetable.edit("shop", "r", given),
                                           ScheduleRefused)
            self.assertIn(word, failure.value.message)
        rig.submitter.refuse = "spider 'books' takes no argument 'y'"
        self.failureResultOf(rig.timetable.edit("shop", "r", {"arguments": (("y", "1"),)}))
        rig.submitter.refuse = None
        self.assertEqual(rig.schedule("r"), before)
        self.failureResultOf(rig.timetable.edit("shop", "nosuch", {"every": "1h"}),
                             UnknownSchedule)
        self.failureResultOf(rig.timetable.edit("other", "r", {"every": "1h"}), UnknownSchedule)


class ChainEditTests(unittest.TestCase):
    """editschedule.json takes a chain's after and on as addschedule.json
    does: a chain's ends changed, a schedule made a chain, a chain given
    times; its upstream checked, a loop refused, nothing stored then."""

    def setUp(self):
        from .test_chains import ChainRig
        self.rig = ChainRig(self, os.path.abspath(self.mktemp()))
        self.rig.start()

    def edit(self, name, given):
        return self.successResultOf(self.rig.timetable.edit("shop", name, given))

    def refused(self, name, given):
        return self.failureResultOf(self.rig.timetable.edit("shop", name, given),
                                    ScheduleRefused).value.message

    def test_a_chain_is_edited_made_and_unmade_keeping_its_counts(self):
        rig = self.rig
        rig.add(name="nightly", spider="books", cron="0 2 * * *")
        rig.add(name="detail", spider="details", after="books")
        edited = self.edit("detail", {"on": ("failed,degraded",)})
        self.assertEqual((edited.kind, edited.rule, edited.chain_on), (
            "after", "books", ("degraded", "failed")))
        edited = self.edit("detail", {"after": "schedule:NIGHTLY"})
        self.assertEqual((edited.rule, edited.chain_on, edited.next_due),
                         ("schedule:nightly", ("degraded", "failed"), None))
        # Given times: a chain no more, fired by its times from now.
        edited = self.edit("detail", {"every": "1h"})
        self.assertEqual((edited.kind, edited.rule, edited.chain_on, edited.next_due),
                         ("every", "1h", (), rig.clock.seconds() + HOUR))
        # And a clock schedule made a chain: no due time, the default ends.
        edited = self.edit("detail", {"after": "books"})
        self.assertEqual((edited.kind, edited.chain_on, edited.next_due),
                         ("after", ("healthy",), None))
        self.assertEqual(rig.timetable.next_wake(), rig.schedule("nightly").next_due)

    def test_bad_chain_edits_name_the_parameter_and_store_nothing(self):
        rig = self.rig
        rig.add(name="nightly", spider="books", cron="0 2 * * *")
        rig.add(name="detail", spider="details", after="books")
        rig.add(name="more", spider="authors", after="details")
        before = [rig.schedule(n) for n in ("nightly", "detail", "more")]
        cases = [
            ("detail", {"after": "nosuch"}, "parameter 'after': no spider 'nosuch'"),
            ("detail", {"after": "schedule:nosuch"}, "no schedule 'nosuch'"),
            ("detail", {"after": "authors"}, "would make a loop"),
            ("detail", {"on": ("sometimes",)}, "parameter 'on': 'sometimes'"),
            ("detail", {"after": "books", "cron": "0 3 * * *"}, "parameter 'cron'"),
            ("detail", {"after": "books", "misfire": "skip"}, "parameter 'misfire'"),
            # A chain has no due times to miss: misfire does not unmake it.
            ("detail", {"misfire": "skip"}, "parameter 'misfire': schedule 'detail' is a chain"),
            ("detail", {"arguments": (("upstream_job", "x"),)}, "upstream_job"),
            ("nightly", {"on": ("failed",)}, "parameter 'on' is for a chain"),
        ]
        for name, given, message in cases:
            self.assertIn(message, self.refused(name, given), given)
        self.assertEqual([rig.schedule(n) for n in ("nightly", "detail", "more")], before)


class RacingNodeTests(unittest.TestCase):
    """Two nodes making the same firing (a chain's row every node's sweep
    reads, a run asked of each): the other node queues the job between this
    one's look for it and its overlap check."""

    def racing(self, overlap):
        rig = CancellingRig(self, start=0.0)
        rig.start()
        record = rig.add(name="r", every="1h", overlap=overlap)
        store, looks = rig.store, []
        real_get = store.get

        def get(jobid):
            looks.append(jobid)
            if len(looks) == 1:
                # This node's first look finds nothing; the other node's
                # job lands right after it.
                found = real_get(jobid)
                rig.submitter._add(SimpleNamespace(
                    jobid=jobid, project="shop", spider="books", settings=(), arguments=(),
                    priority=0.0, schedule="r", schedule_locks=()))
                return found
            return real_get(jobid)

        self.patch(store, "get", get)
        changes = self.successResultOf(rig.timetable.queue_job(record, "r-raced"))
        return rig, changes

    def test_the_job_seen_waiting_is_this_one_counted_once_not_skipped(self):
        for overlap in ("skip", "buffer_one"):
            rig, changes = self.racing(overlap)
            self.assertEqual(changes, {"last_job": "r-raced", "error": None}, overlap)
            self.assertEqual(rig.schedule("r").runs, 1, overlap)
            self.assertEqual(rig.job_ids(), ["r-raced"])

    def test_cancel_other_does_not_cancel_the_job_it_is_making(self):
        for overlap in ("cancel_other", "terminate_other"):
            rig, changes = self.racing(overlap)
            self.assertEqual(rig.cancels, [], overlap)
            self.assertEqual([r.state for r in rig.jobs()], ["pending"])


class RunNowTests(unittest.TestCase):
    def test_a_run_now_is_named_after_now_and_its_overlap_applies(self):
        rig = Rig(self, start=1000.5)
        rig.start()
        rig.add(name="n", every="1h")
        record, jobid, changes = self.successResultOf(rig.timetable.run_now("shop", "n"))
        self.assertEqual((jobid, changes.get("queued"), record.runs),
                         ("n-19700101T001640Z", True, 1))
        self.assertEqual(rig.job_ids(), ["n-19700101T001640Z"])
        rig.clock.advance(5)
        record, jobid, changes = self.successResultOf(rig.timetable.run_now("shop", "n"))
        self.assertEqual((jobid, changes, record.runs, record.skipped),
                         ("n-19700101T001645Z", {"skipped_added": 1}, 1, 1))
        # Its firing's job is still counted once, not mistaken for the run.
        self.assertIsNone(rig.schedule("n").last_job)

    def test_a_refused_run_says_why_and_writes_nothing(self):
        rig = Rig(self, start=1000.5)
        rig.start()
        before = rig.add(name="n", every="1h")
        rig.submitter.refuse = "spider 'books' is gone"
        record, jobid, changes = self.successResultOf(rig.timetable.run_now("shop", "n"))
        self.assertEqual(changes, {"error": "spider 'books' is gone"})
        self.assertEqual((rig.schedule("n"), rig.jobs()), (before, []))


class BackfillTests(unittest.TestCase):
    def test_a_backfill_repeated_adds_each_due_time_once(self):
        rig = Rig(self, start=10 * HOUR)
        rig.start()
        rig.add(name="bf", every="1h")
        record, queued, already = self.successResultOf(rig.timetable.backfill(
            "shop", "bf", "1970-01-01T06:00:00Z", "1970-01-01T09:00:00Z"))
        self.assertEqual(queued, ["bf-19700101T060000Z", "bf-19700101T070000Z",
                                  "bf-19700101T080000Z"])
        self.assertEqual((already, record.runs), ([], 3))
        self.assertTrue(all(r.locks == (policies.schedule_lock("bf"),) for r in rig.jobs()))
        record, queued, already = self.successResultOf(rig.timetable.backfill(
            "shop", "bf", "1970-01-01T07:00:00+00:00", "1970-01-01T10:00:00"))
        self.assertEqual(queued, ["bf-19700101T090000Z"])
        self.assertEqual(already, [7 * HOUR, 8 * HOUR])
        self.assertEqual((record.runs, len(rig.jobs())), (4, 4))

    def test_a_reversed_or_too_long_range_is_refused_and_queues_nothing(self):
        rig = Rig(self, start=10 * HOUR)
        rig.start()
        rig.add(name="bf", every="1m")
        for start, end, word in (("1970-01-01T09:00:00Z", "1970-01-01T08:00:00Z", "'to'"),
                                 ("1970-01-01T08:00:00Z", "1970-01-01T08:00:00Z", "'to'"),
                                 ("1970-01-01T07:00:00Z", "1970-01-01T09:00:00Z", "100"),
                                 # Due times to come are the timer's.
                                 ("1970-01-01T09:59:00Z", "1970-01-01T10:00:01Z",
                                  "parameter 'to': '1970-01-01T10:00:01Z' is later than now"),
                                 ("yesterday", "1970-01-01T09:00:00Z", "'from'")):
            failure = self.failureResultOf(rig.timetable.backfill("shop", "bf", start, end),
                                           ScheduleRefused)
            self.assertIn(word, failure.value.message)
        self.assertEqual((rig.jobs(), rig.schedule("bf").runs), ([], 0))
        self.failureResultOf(rig.timetable.backfill("shop", "nosuch", "1970-01-01T07:00:00Z",
                                                    "1970-01-01T09:00:00Z"), UnknownSchedule)


    def test_a_chain_is_refused_it_has_no_due_times(self):
        from .test_chains import ChainRig
        rig = ChainRig(self, os.path.abspath(self.mktemp()))
        rig.start()
        rig.add(name="detail", spider="details", after="books")
        failure = self.failureResultOf(rig.timetable.backfill(
            "shop", "detail", "1970-01-01T07:00:00Z", "1970-01-01T09:00:00Z"), ScheduleRefused)
        self.assertIn("schedule 'detail' is a chain (after=books)", failure.value.message)
        self.assertIn("no due times to backfill", failure.value.message)
        self.assertEqual(rig.jobs(), [])


class RunCountTests(unittest.TestCase):
    """Each job a schedule queues is counted once, by the insert that
    queues it, whatever queued it and wherever that stopped."""

    def test_a_backfill_of_a_skipped_due_time_then_a_restart_counts_each_job_once(self):
        path = os.path.join(self.mktemp() + ".db")
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="s", every="1h")
        rig.clock.advance(HOUR)
        rig.clock.advance(HOUR)  # skipped: the first job still waits
        rig.finish_all()
        self.assertEqual((rig.schedule("s").runs, rig.schedule("s").skipped), (1, 1))
        rig.clock.advance(600)
        record, queued, _ = self.successResultOf(rig.timetable.backfill(
            "shop", "s", "1970-01-01T02:00:00Z", "1970-01-01T02:10:00Z"))
        self.assertEqual((queued, record.runs), (["s-19700101T020000Z"], 2))
        rig.timetable.stop()
        self.successResultOf(rig.store.close())
        rig.store = SQLiteJobStore(path, rig.clock)
        rig.timetable = rig.new_timetable()
        rig.start()
        self.assertEqual((rig.schedule("s").runs, len(rig.jobs())), (2, 2))

    def test_a_run_now_in_a_jittered_due_second_is_its_firings_job_counted_once(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="j", every="1h", jitter="30m", overlap="allow")
        rig.clock.advance(HOUR)
        _, jobid, changes = self.successResultOf(rig.timetable.run_now("shop", "j"))
        rig.clock.advance(173)  # the firing, its offset later, finds it queued
        record = rig.schedule("j")
        self.assertEqual((record.runs, record.last_job, rig.job_ids()),
                         (1, "j-19700101T010000Z", ["j-19700101T010000Z"]))
        self.assertEqual((jobid, changes.get("queued")), ("j-19700101T010000Z", True))

    def test_a_backfill_stopped_part_way_counts_the_jobs_it_queued(self):
        rig = Rig(self, start=10 * HOUR)
        rig.start()
        rig.add(name="bf", every="1h")
        real_submit, calls = rig.submitter.submit, []

        def submit(request):
            calls.append(request.jobid)
            if len(calls) == 3:
                rig.submitter.refuse = "spider 'books' is gone"
            return real_submit(request)

        self.patch(rig.submitter, "submit", submit)
        failure = self.failureResultOf(rig.timetable.backfill(
            "shop", "bf", "1970-01-01T05:00:00Z", "1970-01-01T09:00:00Z"), ScheduleRefused)
        self.assertIn("(2 queued before it)", failure.value.message)
        record = rig.schedule("bf")
        self.assertEqual((record.runs, record.buffered, len(rig.jobs())), (2, 1, 2))

    def test_a_backfill_behind_a_job_counts_its_jobs_buffered(self):
        rig = Rig(self, start=10 * HOUR)
        rig.start()
        rig.add(name="bf", every="1h")
        rig.clock.advance(HOUR)  # its job waits
        record, queued, _ = self.successResultOf(rig.timetable.backfill(
            "shop", "bf", "1970-01-01T07:00:00Z", "1970-01-01T10:00:00Z"))
        self.assertEqual((len(queued), record.runs, record.buffered), (3, 4, 3))
        self.assertEqual(rig.schedule("bf"), record)


class PauseNoteTests(unittest.TestCase):
    def test_a_pause_keeps_its_note_and_a_resume_clears_it(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="p", every="1m")
        paused = self.successResultOf(rig.timetable.pause("shop", "p", note="site down"))
        self.assertEqual((paused.paused, paused.note), (True, "site down"))
        again = self.successResultOf(rig.timetable.pause("shop", "p", note="until Monday"))
        self.assertEqual(again.note, "until Monday")
        resumed = self.successResultOf(rig.timetable.resume("shop", "p"))
        self.assertEqual((resumed.paused, resumed.note, resumed.failed_in_row),
                         (False, None, 0))


class PauseAfterTests(unittest.TestCase):
    def test_a_pause_its_jobs_end_made_stops_the_timer_and_is_announced(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="f", every="1m", pause_after="1")
        rig.clock.advance(60)
        [job] = rig.jobs()
        ended = self.successResultOf(rig.store.mark_finished(job.id, "failed", 61.0))
        self.assertTrue(ended.paused_schedule.paused)
        self.assertEqual(rig.timetable.next_wake(), 60.0 * 2)
        rig.timetable.heard_paused(ended.paused_schedule)
        self.assertIsNone(rig.timetable.next_wake())
        self.assertEqual(rig.changes[-1], ended.paused_schedule)
        rig.clock.advance(600)
        self.assertEqual(len(rig.jobs()), 1)


class CatchUpTests(unittest.TestCase):
    def test_a_run_made_up_for_at_start_is_counted(self):
        path = os.path.join(self.mktemp() + ".db")
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="m", every="1h")
        rig.timetable.stop()
        self.successResultOf(rig.store.close())
        rig.clock.advance(5 * HOUR + 60)
        rig.store = SQLiteJobStore(path, rig.clock)
        rig.timetable = rig.new_timetable()
        rig.start()
        record = rig.schedule("m")
        self.assertEqual((record.runs, record.caught_up), (1, 1))
        rig.finish_all()
        rig.clock.advance(HOUR)
        record = rig.schedule("m")
        self.assertEqual((record.runs, record.caught_up), (2, 1))
