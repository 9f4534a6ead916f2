"""Chain schedules on a Clock: what addschedule.json's after= and on= take
and refuse (loops among them), and the firings the outbox holds made once
each across restarts, kills between the steps, and two nodes."""

import os

from twisted.internet import defer
from twisted.trial import unittest

from netweir_serve.jobs.submit import JobRefused
from netweir_serve.names import MAX_JOB_ID_LENGTH
from netweir_serve.projects import ProjectTable
from netweir_serve.schedules import chains
from netweir_serve.schedules.chains import Chains, chain_job_id, parse_on
from netweir_serve.schedules.timetable import ScheduleRefused, ScheduleRequest, Timetable
from netweir_serve.store.records import JobRecord

from .test_store_contract import chain
from .test_timetable import FakeSubmitter, Rig

START = 1_000_000.0


class ChainSubmitter(FakeSubmitter):
    """FakeSubmitter that knows which spiders exist and keeps a job's upstream."""

    spiders = ("books", "details", "authors", "prices")

    def __init__(self, store, clock):
        super().__init__(store, clock)
        self.submitted = []  # the ids asked, in order

    def submit(self, request):
        self.submitted.append(request.jobid)
        return super().submit(request)

    def check(self, request):
        if request.spider not in self.spiders:
            return defer.fail(JobRefused(f"no spider {request.spider!r} in project"
                                         f" {request.project!r}"))
        return super().check(request)

    def _add(self, request):
        return self.store.add(JobRecord(
            id=request.jobid, project=request.project, spider=request.spider,
            spider_file="/p/x.py", settings=request.settings, arguments=request.arguments,
            priority=request.priority, created=self.clock.seconds(),
            schedule=request.schedule, locks=request.schedule_locks,
            upstream=request.upstream))


class ChainRig(Rig):
    """A timetable and its Chains on one job table (a file, for restarts)."""

    def __init__(self, test, path, clock=None):
        self.chains = None
        super().__init__(test, START, path=path)
        if clock is not None:
            # Another node: the same table, its own timetable, one time.
            self.clock = clock
            self.store = type(self.store)(path, clock)
            self.timetable = self.new_timetable()

    def new_timetable(self):
        self.submitter = ChainSubmitter(self.store, self.clock)
        timetable = Timetable(self.store, self.submitter, self.clock, local_zone="UTC",
                              on_change=self.changes.append)
        self.chains = Chains(self.store, timetable, self.clock,
                             serves=lambda project: self.submitter.projects.get(project)
                             is not None)
        return timetable

    def start(self):
        super().start()
        self.test.successResultOf(self.chains.start())

    def stop(self):
        self.chains.stop()
        self.timetable.stop()

    def refused(self, **fields):
        fields.setdefault("project", "shop")
        fields.setdefault("spider", "details")
        failure = self.test.failureResultOf(
            self.timetable.add(ScheduleRequest(**fields)), ScheduleRefused)
        return failure.value.message

    def end(self, jobid, spider="books", outcome="finished", schedule=None):
        """A job of ``spider`` added and ended; its ended record."""
        self.test.successResultOf(self.store.add(JobRecord(
            id=jobid, project="shop", spider=spider, spider_file="/p/x.py",
            schedule=schedule, created=self.clock.seconds())))
        return self.test.successResultOf(self.store.mark_finished(
            jobid, outcome, self.clock.seconds()))

    def owed(self):
        return [(f.schedule_key, f.upstream)
                for f in self.test.successResultOf(self.store.chain_firings())]


class ParameterTests(unittest.TestCase):
    def test_on_repeated_or_comma_separated_in_one_order_healthy_by_default(self):
        self.assertEqual(parse_on(()), ("healthy",))
        self.assertEqual(parse_on(["failed,finished", " Degraded "]),
                         ("finished", "degraded", "failed"))
        self.assertEqual(parse_on(["healthy", "healthy,"]), ("healthy",))
        with self.assertRaises(chains.ChainError) as caught:
            parse_on(["finished,done"])
        self.assertIn("parameter 'on': 'done' is not an end", str(caught.exception))

    def test_a_chain_job_id_names_both_and_a_long_one_a_hash_within_the_limit(self):
        self.assertEqual(chain_job_id("detail", "nightly-20261201T020000Z"),
                         "detail-after-nightly-20261201T020000Z")
        name, upstream = "d" * 170, "u" * 150
        long_id = chain_job_id(name, upstream)
        self.assertEqual(len(long_id), 170 + len("-after-") + 16)
        self.assertTrue(long_id.startswith("d" * 170 + "-after-"), long_id)
        # The longest schedule name: its -after- is cut to leave the hash room.
        longest = chain_job_id("n" * 179, upstream)
        self.assertEqual(len(longest), MAX_JOB_ID_LENGTH)
        self.assertTrue(longest.startswith("n" * 179 + "-"), longest)
        self.assertEqual(chain_job_id(name.upper(), upstream.upper())[-16:], long_id[-16:])
        self.assertNotEqual(chain_job_id(name, "u" * 149 + "v"), long_id)


class AddTests(unittest.TestCase):
    def setUp(self):
        self.rig = ChainRig(self, os.path.abspath(self.mktemp()))
        self.rig.start()

    def test_a_chain_after_a_spider_or_a_schedule_is_stored_without_times(self):
        rig = self.rig
        rig.add(name="nightly", spider="books", cron="0 2 * * *")
        after_spider = rig.add(name="detail", spider="details", after="books",
                               on=("finished,degraded",))
        self.assertEqual((after_spider.kind, after_spider.rule, after_spider.chain_on,
                          after_spider.next_due, after_spider.tz),
                         ("after", "books", ("finished", "degraded"), None, "UTC"))
        after_schedule = rig.add(name="prices", spider="prices", after="schedule:NIGHTLY")
        self.assertEqual((after_schedule.rule, after_schedule.chain_on),
                         ("schedule:nightly", ("healthy",)))
        # No timer wakes for a chain.
        self.assertEqual(rig.timetable.next_wake(), rig.schedule("nightly").next_due)

    def test_bad_chains_are_refused_naming_the_parameter_and_nothing_is_stored(self):
        rig = self.rig
        rig.add(name="nightly", spider="books", cron="0 2 * * *")
        cases = [
            (dict(after="nosuch"), "parameter 'after': no spider 'nosuch' in project 'shop'"),
            (dict(after="schedule:nosuch"),
             "parameter 'after': no schedule 'nosuch' in project 'shop'"),
            (dict(after="books", cron="0 3 * * *"), "parameter 'cron': a chain (after=)"),
            (dict(after="books", every="1h"), "parameter 'every': a chain (after=)"),
            (dict(after="books", misfire="skip"), "parameter 'misfire': a chain (after=)"),
            (dict(after="books", on=("sometimes",)), "parameter 'on': 'sometimes' is not"),
            (dict(every="1h", on=("failed",)), "parameter 'on' is for a chain"),
            (dict(after="books", arguments=(("upstream_job", "x"),)),
             "parameter 'upstream_job': a chain's jobs get it"),
        ]
        for fields, message in cases:
            self.assertIn(message, rig.refused(name="bad", **fields), fields)
        self.assertEqual([r.name for r in self.successResultOf(rig.store.schedules())],
                         ["nightly"])

    def test_a_loop_through_spiders_or_schedules_is_refused_naming_it(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books")
        # books after details after books.
        message = rig.refused(name="back", spider="books", after="details")
        self.assertIn("parameter 'after': a chain after details would make a loop: back"
                      " (spider books) after detail (spider details) after back", message)
        # Through a schedule's jobs: prices after detail's, authors after
        # prices, detail's spider... after authors.
        rig.add(name="price", spider="prices", after="schedule:detail")
        rig.add(name="author", spider="authors", after="prices")
        message = rig.refused(name="again", spider="books", after="authors")
        self.assertIn("again (spider books) after detail (spider details) after price"
                      " (spider prices) after author (spider authors) after again", message)
        # A spider after itself.
        self.assertEqual(rig.refused(name="self", spider="books", after="books"),
                         "parameter 'after': a chain after books would make a loop:"
                         " self (spider books) after self")
        # Not a loop: the same spider after a schedule of another.
        rig.add(name="nightly", spider="books", every="1d")
        rig.add(name="fine", spider="details", after="schedule:nightly")
        self.assertEqual(len(self.successResultOf(rig.store.schedules())), 5)


class FiringTests(unittest.TestCase):
    def setUp(self):
        self.path = os.path.abspath(self.mktemp())
        self.rig = ChainRig(self, self.path)
        self.rig.start()

    def restart(self, rig=None):
        """The service stopped (or killed) and started on the same table."""
        (rig or self.rig).stop()
        self.rig = ChainRig(self, self.path)
        self.rig.start()
        return self.rig

    def job(self, jobid):
        return self.successResultOf(self.rig.store.get(jobid))

    def test_an_upstream_end_queues_the_chains_job_once_with_upstream_job(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books", arguments=(("a", "1"),))
        rig.add(name="alert", spider="authors", after="books", on=("failed",))
        ended = rig.end("up1")
        self.assertEqual(ended.chain_firings, ("detail",))
        rig.chains.ended(ended)
        job = self.job("detail-after-up1")
        self.assertEqual((job.spider, job.schedule, job.upstream, job.arguments, job.state),
                         ("details", "detail", "up1", (("a", "1"), ("upstream_job", "up1")),
                          "pending"))
        found = rig.schedule("detail")
        self.assertEqual((found.runs, found.skipped, found.last_job),
                         (1, 0, "detail-after-up1"))
        self.assertEqual(rig.owed(), [])
        self.assertEqual(rig.changes[-1], found)
        # Processing again, or ending another way, queues nothing more.
        self.successResultOf(rig.chains.process())
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1"])
        self.assertIsNone(self.job("alert-after-up1"))

    def finish(self, jobid):
        """Ends a queued job (finished); its firings made."""
        rig = self.rig
        ended = self.successResultOf(rig.store.mark_finished(jobid, "finished",
                                                             rig.clock.seconds()))
        rig.chains.ended(ended)
        return ended

    def test_a_loop_two_chains_stored_at_once_made_stops_at_its_first_turn(self):
        rig = self.rig
        # details after books, and books after details' jobs: each added on
        # its own node at once, each checked against a table without the
        # other (the second is written here as that node's add wrote it).
        rig.add(name="detail", spider="details", after="books", on=("finished",))
        self.successResultOf(rig.store.add_schedule(chain(
            "back", "schedule:detail", spider="books", on=("finished",))))
        rig.chains.ended(rig.end("up1"))
        self.finish("detail-after-up1")
        self.assertEqual(self.job("back-after-detail-after-up1").upstream, "detail-after-up1")
        self.finish("back-after-detail-after-up1")
        # detail's job would follow its own: not queued, the row settled.
        self.assertEqual(rig.job_ids(), ["back-after-detail-after-up1", "detail-after-up1",
                                         "up1"])
        self.assertEqual(rig.owed(), [])
        found = rig.schedule("detail")
        self.assertEqual((found.runs, found.last_job, found.error),
                         (1, "detail-after-up1",
                          "would loop: job back-after-detail-after-up1 comes after its own job"
                          " detail-after-up1: back-after-detail-after-up1 after"
                          " detail-after-up1"))
        self.assertEqual(rig.schedule("back").runs, 1)

    def test_a_chain_after_its_own_jobs_stored_by_a_race_queues_nothing_after_them(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books", on=("finished",))
        # Stored past the add's check: details after details.
        self.successResultOf(rig.store.add_schedule(chain("again", "details",
                                                          on=("finished",))))
        rig.chains.ended(rig.end("up1"))
        self.finish("detail-after-up1")
        self.finish("again-after-detail-after-up1")
        self.assertEqual(rig.job_ids(), ["again-after-detail-after-up1", "detail-after-up1",
                                         "up1"])
        self.assertEqual(rig.owed(), [])
        self.assertEqual(rig.schedule("again").error,
                         "would loop: job again-after-detail-after-up1 is its own")
        self.assertEqual(rig.schedule("detail").error, None)

    def test_a_firing_left_by_a_kill_before_its_job_was_queued_is_made_at_start(self):
        self.rig.add(name="detail", spider="details", after="books")
        self.rig.end("up1")  # ended; the service died before its chain was told
        self.assertEqual(self.rig.owed(), [("detail", "up1")])
        rig = self.restart()
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1"])
        self.assertEqual((rig.schedule("detail").runs, rig.owed()), (1, []))
        rig = self.restart()
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1"])
        self.assertEqual(rig.schedule("detail").runs, 1)

    def test_a_firing_left_by_a_kill_after_its_job_was_queued_is_counted_once(self):
        rig = self.rig
        detail = rig.add(name="detail", spider="details", after="books")
        rig.end("up1")
        # Queued, then the service died before the settle deleted the row.
        changes = self.successResultOf(rig.timetable.queue_job(
            detail, "detail-after-up1", arguments=(("upstream_job", "up1"),), upstream="up1"))
        self.assertEqual(changes["last_job"], "detail-after-up1")
        self.assertEqual(rig.schedule("detail").runs, 1)  # counted by its insert
        rig = self.restart()
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1"])
        self.assertEqual((rig.schedule("detail").runs, rig.owed()), (1, []))

    def test_a_retried_upstream_fires_once_after_its_final_attempt(self):
        rig = self.rig
        rig.add(name="alert", spider="authors", after="books", on=("failed",))
        self.successResultOf(rig.store.add(JobRecord(
            id="up1", project="shop", spider="books", spider_file="/p/x.py",
            created=START, policy={"retries": 1, "backoff": 1})))
        self.successResultOf(rig.store.claim_next("n", ["shop"], START))
        first = self.successResultOf(rig.store.mark_finished("up1", "failed", START + 1))
        rig.chains.ended(first)
        self.assertEqual(rig.job_ids(), ["up1", "up1.r1"])
        self.successResultOf(rig.store.claim_next("n", ["shop"], START + 100))
        final = self.successResultOf(rig.store.mark_finished("up1.r1", "failed", START + 101))
        rig.chains.ended(final)
        self.assertEqual(rig.job_ids(), ["alert-after-up1.r1", "up1", "up1.r1"])
        self.assertEqual(self.job("alert-after-up1.r1").arguments,
                         (("upstream_job", "up1.r1"),))

    def test_two_nodes_making_one_firing_queue_one_job_counted_once(self):
        self.rig.add(name="detail", spider="details", after="books")
        other = ChainRig(self, self.path, clock=self.rig.clock)
        other.start()
        # Each node's job check takes five seconds: both read the row, find
        # no job of its id and submit one before either has queued it (the
        # end heard on one, a sweep on the other).
        for rig in (self.rig, other):
            rig.submitter.delay = 5
        self.rig.end("up1")
        passes = defer.gatherResults([self.rig.chains.process(), other.chains.process()])
        self.assertEqual((self.rig.submitter.submitted, other.submitter.submitted),
                         (["detail-after-up1"], ["detail-after-up1"]))
        self.assertEqual(self.rig.job_ids(), ["up1"])
        self.assertNoResult(passes)
        self.rig.clock.advance(5)
        self.successResultOf(passes)
        self.assertEqual(self.rig.job_ids(), ["detail-after-up1", "up1"])
        found = self.rig.schedule("detail")
        self.assertEqual((found.runs, found.skipped, found.last_job, found.error),
                         (1, 0, "detail-after-up1", None))
        self.assertEqual(self.rig.owed(), [])
        # Later passes on either node make nothing more.
        self.successResultOf(defer.gatherResults([self.rig.chains.process(),
                                                  other.chains.process()]))
        self.assertEqual((self.rig.job_ids(), self.rig.schedule("detail").runs),
                         (["detail-after-up1", "up1"], 1))

    def test_a_node_that_does_not_serve_the_project_leaves_the_firing_to_one_that_does(self):
        self.rig.add(name="detail", spider="details", after="books")
        other = ChainRig(self, self.path, clock=self.rig.clock)
        other.submitter.projects = ProjectTable([])  # serves no project
        other.start()
        ended = self.rig.end("up1")  # the end and its firing, written by any node
        other.chains.ended(ended)
        self.successResultOf(other.chains.process())
        # Kept, untouched: no job, no error, no count.
        self.assertEqual(self.rig.owed(), [("detail", "up1")])
        found = self.rig.schedule("detail")
        self.assertEqual((found.runs, found.skipped, found.error), (0, 0, None))
        self.successResultOf(self.rig.chains.process())
        self.assertEqual(self.rig.job_ids(), ["detail-after-up1", "up1"])
        self.assertEqual((self.rig.schedule("detail").runs, self.rig.owed()), (1, []))

    def test_another_nodes_new_chain_is_read_before_its_firing_is_made(self):
        other = ChainRig(self, self.path, clock=self.rig.clock)
        other.start()
        # Added on the other node: this one has not heard of it yet.
        other.add(name="detail", spider="details", after="books")
        self.assertFalse(self.rig.timetable.has("detail"))
        self.rig.chains.ended(self.rig.end("up1"))
        self.assertEqual(self.rig.job_ids(), ["detail-after-up1", "up1"])

    def test_the_sweep_makes_a_firing_no_end_here_announced(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books")
        rig.end("up1")  # another node's end, say, which died before queueing
        rig.clock.advance(chains.SWEEP_SECONDS - 1)
        self.assertEqual(rig.job_ids(), ["up1"])
        rig.clock.advance(1)
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1"])

    def test_stopping_waits_for_the_firing_under_way_and_makes_no_more(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books")
        rig.submitter.delay = 5  # the job's check takes five seconds
        rig.chains.ended(rig.end("up1"))
        rig.end("up2")
        stopped = rig.chains.stop()
        self.assertNoResult(stopped)
        rig.clock.advance(5)
        self.successResultOf(stopped)
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1", "up2"])
        self.assertEqual(rig.owed(), [("detail", "up2")])
        rig.clock.advance(chains.SWEEP_SECONDS * 2)
        self.assertEqual(rig.owed(), [("detail", "up2")])

    def test_a_paused_chain_skips_the_firing_and_a_deleted_one_drops_it(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books", on=("finished",))
        self.successResultOf(rig.timetable.pause("shop", "detail"))
        rig.chains.ended(rig.end("up1"))
        found = rig.schedule("detail")
        self.assertEqual((found.runs, found.skipped, rig.owed()), (0, 1, []))
        self.successResultOf(rig.timetable.resume("shop", "detail"))
        self.assertIsNone(rig.schedule("detail").next_due)
        rig.end("up2")
        self.successResultOf(rig.timetable.delete("shop", "detail"))
        self.successResultOf(rig.chains.process())
        self.assertEqual((rig.job_ids(), rig.owed()), (["up1", "up2"], []))

    def test_a_chain_deleted_and_added_again_does_not_make_its_namesakes_firings(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books", on=("finished",))
        rig.end("up1")  # owed; not made before the chain was deleted
        self.successResultOf(rig.timetable.delete("shop", "detail"))
        rig.add(name="detail", spider="details", after="books", on=("finished",))
        self.successResultOf(rig.chains.process())
        rig.clock.advance(chains.SWEEP_SECONDS)
        self.assertEqual((rig.job_ids(), rig.owed()), (["up1"], []))
        found = rig.schedule("detail")
        self.assertEqual((found.runs, found.skipped, found.last_job), (0, 0, None))
        # The new chain fires after the jobs that end from now on.
        rig.chains.ended(rig.end("up2"))
        self.assertEqual(rig.job_ids(), ["detail-after-up2", "up1", "up2"])

    def test_overlap_applies_a_chain_whose_job_is_still_pending_skips(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books")
        rig.chains.ended(rig.end("up1"))
        rig.chains.ended(rig.end("up2"))
        self.assertEqual(rig.job_ids(), ["detail-after-up1", "up1", "up2"])
        found = rig.schedule("detail")
        self.assertEqual((found.runs, found.skipped, rig.owed()), (1, 1, []))

    def test_a_firing_whose_job_cannot_be_queued_records_why_and_is_dropped(self):
        rig = self.rig
        rig.add(name="detail", spider="details", after="books")
        rig.submitter.refuse = "no spider 'details' in project 'shop'"
        rig.chains.ended(rig.end("up1"))
        found = rig.schedule("detail")
        self.assertEqual((found.runs, found.error, rig.owed()),
                         (0, "no spider 'details' in project 'shop'", []))
