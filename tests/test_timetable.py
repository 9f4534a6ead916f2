"""The recurring schedules' timer on a Clock: a year of firings in a few
milliseconds, DST in two zones, one timer for all, misfires after a long
stop, a clock stepped backwards, and restarts on the same job table."""

import os
from datetime import datetime
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from twisted.internet import defer
from twisted.internet import task
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import DuplicateJob, JobRecord, StoreError
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.jobs.submit import JobRefused, UnknownProject
from netweir_serve.projects import Project, ProjectTable
from netweir_serve.store.schedule_records import DuplicateSchedule
from netweir_serve.schedules.timetable import ScheduleRefused, ScheduleRequest, Timetable


def at(text, zone):
    """Epoch seconds of local time ``text`` (ISO) in ``zone``."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


class FakeSubmitter:
    """The job core's submitter without reader processes: a job is checked
    at once and added to the store as the real one adds it."""

    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.projects = ProjectTable([Project("shop", os.path.dirname(__file__))])
        self.refuse = None
        self.delay = 0

    def project(self, name):
        project = self.projects.get(name)
        if project is None:
            raise UnknownProject(f"no project {name!r}")
        return project

    def policy_of(self, project, spider, own=None):
        # No --policy rules here, and every limit enforceable.
        return own

    def check(self, request):
        self.project(request.project)
        if self.refuse:
            return defer.fail(JobRefused(self.refuse))
        return defer.succeed(SimpleNamespace(spider=request.spider))

    def submit(self, request):
        if self.refuse:
            return defer.fail(JobRefused(self.refuse))
        if self.delay:
            return task.deferLater(self.clock, self.delay, self._add, request)
        return self._add(request)

    def _add(self, request):
        return self.store.add(JobRecord(
            id=request.jobid, project=request.project, spider=request.spider,
            spider_file="/p/books.py", settings=request.settings, arguments=request.arguments,
            priority=request.priority, created=self.clock.seconds(),
            schedule=request.schedule, locks=request.schedule_locks))


class Rig:
    def __init__(self, test, start, path=":memory:"):
        self.test = test
        self.clock = Clock()
        self.clock.rightNow = start
        self.path = path
        self.store = SQLiteJobStore(path, self.clock)
        self.changes = []
        self.timetable = self.new_timetable()

    def new_timetable(self):
        self.submitter = FakeSubmitter(self.store, self.clock)
        return Timetable(self.store, self.submitter, self.clock, local_zone="UTC",
                         on_change=self.changes.append)

    def start(self):
        self.test.successResultOf(self.timetable.start())

    def add(self, **fields):
        fields.setdefault("project", "shop")
        fields.setdefault("spider", "books")
        return self.test.successResultOf(self.timetable.add(ScheduleRequest(**fields)))

    def schedule(self, name):
        return self.test.successResultOf(self.store.get_schedule(name))

    def jobs(self):
        pending, running, finished = self.test.successResultOf(self.store.jobs())
        return pending + running + finished

    def job_ids(self):
        return sorted(r.id for r in self.jobs())

    def finish_all(self):
        for record in self.test.successResultOf(self.store.jobs())[0]:
            self.test.successResultOf(self.store.mark_finished(
                record.id, "finished", self.clock.seconds()))

    def run_until(self, end, finish=True):
        """Jumps from one wake of the timer to the next until ``end``."""
        while True:
            wake = self.timetable.next_wake()
            if wake is None or wake > end:
                self.clock.advance(max(0, end - self.clock.seconds()))
                return
            self.clock.advance(max(0, wake - self.clock.seconds()))
            if finish:
                self.finish_all()


class OneTimerTests(unittest.TestCase):
    def test_a_thousand_schedules_share_one_timer_set_for_the_earliest(self):
        rig = Rig(self, start=1_000_000.0)
        rig.start()
        for n in range(1000):
            rig.add(name=f"s{n}", every=f"{60 + n}s")
        rig.add(name="cron", cron="*/5 * * * *")
        self.assertEqual(len(rig.clock.getDelayedCalls()), 1)
        earliest = min(rig.schedule(f"s{n}").next_due for n in range(3))
        self.assertEqual(rig.timetable.next_wake(), min(earliest, rig.schedule("cron").next_due))

    def test_no_schedule_no_timer(self):
        rig = Rig(self, start=1_000_000.0)
        rig.start()
        self.assertEqual(rig.clock.getDelayedCalls(), [])
        rig.add(name="a", every="1m")
        rig.test.successResultOf(rig.timetable.delete("shop", "a"))
        self.assertEqual(rig.clock.getDelayedCalls(), [])


class CronYearTests(unittest.TestCase):
    def year(self, zone, cron):
        start = at("2026-01-01T00:00:00", zone)
        rig = Rig(self, start=start)
        rig.start()
        rig.add(name="n", cron=cron, tz=zone, overlap="allow")
        rig.run_until(at("2027-01-01T00:00:00", zone))
        days = {}
        for record in rig.jobs():
            due = datetime.strptime(record.id[2:], "%Y%m%dT%H%M%SZ").replace(
                tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(zone))
            days.setdefault(due.date(), []).append(due)
        return rig, days

    def test_a_nightly_cron_runs_once_every_day_of_the_year_in_berlin(self):
        rig, days = self.year("Europe/Berlin", "0 3 * * *")
        self.assertEqual(len(days), 365)
        self.assertTrue(all(len(d) == 1 and d[0].hour == 3 for d in days.values()))
        self.assertEqual(rig.schedule("n").runs, 365)

    def test_a_time_skipped_by_spring_forward_runs_once_right_after_the_jump(self):
        _, days = self.year("Europe/Berlin", "30 2 * * *")
        self.assertEqual(len(days), 365)
        jump = days[datetime(2026, 3, 29).date()]
        self.assertEqual([(d.hour, d.minute) for d in jump], [(3, 0)])
        self.assertTrue(all(len(d) == 1 for d in days.values()))

    def test_a_time_repeated_by_fall_back_runs_once_in_new_york(self):
        _, days = self.year("America/New_York", "30 1 * * *")
        self.assertEqual(len(days), 365)
        back = days[datetime(2026, 11, 1).date()]
        self.assertEqual(len(back), 1)
        self.assertEqual(back[0].utcoffset().total_seconds(), -4 * 3600)

    def test_a_new_york_spring_forward(self):
        _, days = self.year("America/New_York", "30 2 * * *")
        jump = days[datetime(2026, 3, 8).date()]
        self.assertEqual([(d.hour, d.minute) for d in jump], [(3, 0)])


class EveryTests(unittest.TestCase):
    def test_every_runs_on_its_grid_from_the_time_it_was_added(self):
        rig = Rig(self, start=1000.3)
        rig.start()
        added = rig.add(name="g", every="10s", overlap="allow")
        self.assertEqual((added.anchor, added.next_due), (1000.0, 1010.0))
        # Late wakes (a busy reactor) don't move the grid.
        rig.clock.advance(10.0)
        rig.clock.advance(13.5)
        rig.clock.advance(6.2)
        dues = sorted(r.id for r in rig.jobs())
        self.assertEqual(dues, ["g-19700101T001650Z", "g-19700101T001700Z",
                                "g-19700101T001710Z"])
        self.assertEqual(rig.schedule("g").next_due, 1040.0)

    def test_overlap_skip_counts_the_skips_while_its_job_waits(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="s", every="1m")
        rig.clock.advance(60)
        rig.clock.advance(60)
        rig.clock.advance(60)
        record = rig.schedule("s")
        self.assertEqual((record.runs, record.skipped, len(rig.jobs())), (1, 2, 1))
        rig.finish_all()
        rig.clock.advance(60)
        self.assertEqual((rig.schedule("s").runs, len(rig.jobs())), (2, 2))

    def test_overlap_queue_holds_one_job_behind_the_running_one(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="q", every="1m", overlap="queue")
        rig.clock.advance(60)
        claimed = self.successResultOf(rig.store.claim_next("n", ["shop"], 60.0))
        self.assertEqual(claimed.id, "q-19700101T000100Z")
        rig.clock.advance(60)
        rig.clock.advance(60)
        record = rig.schedule("q")
        self.assertEqual((record.runs, record.skipped), (2, 1))
        # The waiting one may not start while the first runs.
        self.assertIsNone(self.successResultOf(rig.store.claim_next("n", ["shop"], 180.0)))
        self.successResultOf(rig.store.mark_finished(claimed.id, "finished", 190.0))
        second = self.successResultOf(rig.store.claim_next("n", ["shop"], 190.0))
        self.assertEqual(second.id, "q-19700101T000200Z")

    def test_a_failed_check_queues_nothing_and_says_why(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="e", every="1m")
        rig.submitter.refuse = "spider 'books' is gone"
        rig.clock.advance(60)
        record = rig.schedule("e")
        self.assertEqual((record.error, record.runs, rig.jobs()), ("spider 'books' is gone", 0, []))
        rig.submitter.refuse = None
        rig.clock.advance(60)
        record = rig.schedule("e")
        self.assertEqual((record.error, record.runs), (None, 1))


class MisfireTests(unittest.TestCase):
    def restarted(self, misfire, down_for):
        path = os.path.join(self.mktemp() + ".db")
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="m", every="1h", misfire=misfire)
        rig.timetable.stop()
        self.successResultOf(rig.store.close())
        rig.clock.advance(down_for)
        rig.store = SQLiteJobStore(path, rig.clock)
        rig.timetable = rig.new_timetable()
        rig.start()
        return rig

    def test_once_runs_one_job_for_every_run_missed_during_a_long_stop(self):
        rig = self.restarted("once", down_for=3 * 86400 + 1800)
        self.assertEqual(rig.job_ids(), ["m-19700104T000000Z"])
        record = rig.schedule("m")
        self.assertEqual((record.runs, record.next_due), (1, 3 * 86400 + 3600))

    def test_skip_runs_none_and_goes_on_from_now(self):
        rig = self.restarted("skip", down_for=3 * 86400 + 1800)
        self.assertEqual(rig.job_ids(), [])
        self.assertEqual(rig.schedule("m").next_due, 3 * 86400 + 3600)
        rig.clock.advance(1800)
        self.assertEqual(rig.job_ids(), ["m-19700104T010000Z"])

    def test_skip_stays_skip_beside_a_schedule_catching_up_first(self):
        # A timer set by the first schedule's catch-up must not take the
        # second's missed run for one a little late.
        path = self.mktemp() + ".db"
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="catchup", every="30s", misfire="once")
        rig.add(name="skipper", every="30s", misfire="skip")
        rig.timetable.stop()
        rig.clock.advance(100 + 19 - 100 % 30)
        rig.timetable = rig.new_timetable()
        # As a reader process would, the check takes a moment, during which
        # the reactor runs whatever timer is due.
        rig.submitter.delay = 0.01
        started = rig.timetable.start()
        for _ in range(10):
            rig.clock.advance(0.01)
        self.successResultOf(started)
        self.assertEqual([j.split("-")[0] for j in rig.job_ids()], ["catchup"])

    def test_a_restart_before_the_due_time_misses_nothing_and_adds_nothing(self):
        rig = self.restarted("once", down_for=600)
        self.assertEqual(rig.job_ids(), [])
        self.assertEqual(rig.timetable.next_wake(), 3600.0)

    def test_a_job_queued_just_before_a_crash_is_not_queued_again(self):
        path = self.mktemp() + ".db"
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="c", every="1h")
        # The job of 01:00 was added, then the service died before the
        # schedule's row said so.
        self.successResultOf(rig.submitter.submit(SimpleNamespace(
            jobid="c-19700101T010000Z", project="shop", spider="books", settings=(),
            arguments=(), priority=0.0, schedule="c", schedule_locks=())))
        rig.timetable.stop()
        rig.clock.advance(3600 + 5)
        rig.timetable = rig.new_timetable()
        rig.start()
        self.assertEqual(rig.job_ids(), ["c-19700101T010000Z"])
        self.assertEqual(rig.schedule("c").runs, 1)
        rig.clock.advance(3600)
        self.assertEqual(rig.schedule("c").runs, 1)  # skipped: its job still waits
        self.assertEqual(rig.schedule("c").skipped, 1)


    def test_an_uncounted_job_is_counted_even_when_later_runs_were_missed(self):
        path = self.mktemp() + ".db"
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="k", every="1h")
        self.successResultOf(rig.submitter.submit(SimpleNamespace(
            jobid="k-19700101T010000Z", project="shop", spider="books", settings=(),
            arguments=(), priority=0.0, schedule="k", schedule_locks=())))
        rig.timetable.stop()
        # Down past the next due time too.
        rig.clock.advance(2 * 3600 + 5)
        rig.timetable = rig.new_timetable()
        rig.start()
        record = rig.schedule("k")
        self.assertEqual((record.runs, record.skipped, record.last_job),
                         (1, 1, "k-19700101T010000Z"))
        self.assertEqual(rig.job_ids(), ["k-19700101T010000Z"])


class BackwardsClockTests(unittest.TestCase):
    def test_a_clock_stepped_back_fires_nothing_twice(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="b", cron="0 * * * *", overlap="allow")
        rig.clock.advance(3600)
        rig.clock.advance(3600)
        self.assertEqual(len(rig.jobs()), 2)
        # NTP steps the clock back 90 minutes; the timer then wakes.
        rig.clock.rightNow -= 5400
        rig.timetable._wake()
        rig.run_until(7200.0 + 1, finish=False)
        self.assertEqual(rig.job_ids(), ["b-19700101T010000Z", "b-19700101T020000Z"])
        rig.run_until(3 * 3600 + 1, finish=False)
        self.assertEqual(len(rig.jobs()), 3)


class UseCaseTests(unittest.TestCase):
    def test_pause_stops_firing_and_resume_goes_on_from_now(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="p", every="1m", overlap="allow")
        self.successResultOf(rig.timetable.pause("shop", "P"))
        self.assertEqual(rig.clock.getDelayedCalls(), [])
        rig.clock.advance(600)
        self.assertEqual(rig.jobs(), [])
        resumed = self.successResultOf(rig.timetable.resume("shop", "p"))
        self.assertEqual((resumed.paused, resumed.next_due), (False, 660.0))
        rig.clock.advance(60)
        self.assertEqual(rig.job_ids(), ["p-19700101T001100Z"])

    def test_refusals_name_what_is_wrong_and_add_nothing(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="Taken", every="1m")
        cases = [
            (dict(cron="61 * * * *"), ScheduleRefused, "61"),
            (dict(every="0"), ScheduleRefused, "every"),
            (dict(cron="* * * * *", every="1m"), ScheduleRefused, "not both"),
            (dict(), ScheduleRefused, "cron=EXPR or every"),
            (dict(every="1m", tz="Mars/Base"), ScheduleRefused, "Mars/Base"),
            (dict(every="1m", overlap="sometimes"), ScheduleRefused, "overlap"),
            (dict(every="1m", misfire="twice"), ScheduleRefused, "misfire"),
            (dict(every="1m", name="bad name"), ScheduleRefused, "name"),
            (dict(every="1m", name="x" * 190), ScheduleRefused, "longer"),
            (dict(every="1m", name="TAKEN"), DuplicateSchedule, "TAKEN"),
        ]
        for fields, kind, word in cases:
            failure = self.failureResultOf(rig.timetable.add(
                ScheduleRequest(project="shop", spider="books", **fields)), kind)
            self.assertIn(word, str(failure.value))
        self.failureResultOf(rig.timetable.add(
            ScheduleRequest(project="nope", spider="books", every="1m")), UnknownProject)
        self.assertEqual([r.name for r in self.successResultOf(rig.timetable.schedules())],
                         ["Taken"])

    def test_unknown_schedules_and_other_projects_are_not_found(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="x", every="1m")
        for action in (rig.timetable.pause, rig.timetable.resume, rig.timetable.delete):
            self.failureResultOf(action("shop", "nosuch"))
            self.failureResultOf(action("other", "x"))

    def test_delete_leaves_its_jobs(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="d", every="1m")
        rig.clock.advance(60)
        self.successResultOf(rig.timetable.delete("shop", "d"))
        rig.clock.advance(600)
        self.assertEqual(rig.job_ids(), ["d-19700101T000100Z"])
        self.assertIsNone(rig.schedule("d"))

    def test_every_change_is_announced(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="a", every="1m")
        rig.clock.advance(60)
        self.successResultOf(rig.timetable.pause("shop", "a"))
        self.assertEqual([(r.name, r.runs, r.paused) for r in rig.changes],
                         [("a", 0, False), ("a", 1, False), ("a", 1, True)])


class InFlightTests(unittest.TestCase):
    """A firing waits for the spider check; what happens meanwhile."""

    def test_a_schedule_deleted_and_added_again_while_it_fires_keeps_its_new_row(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="a", every="1m")
        rig.submitter.delay = 10
        rig.clock.advance(60)  # the firing's check is under way
        self.successResultOf(rig.timetable.delete("shop", "a"))
        again = rig.add(name="a", every="1h")
        rig.clock.advance(10)
        record = rig.schedule("a")
        self.assertEqual((record.seq, record.runs, record.next_due, record.last_due),
                         (again.seq, 0, again.next_due, None))
        self.assertEqual(rig.job_ids(), [])  # the deleted one's firing was stopped
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_a_pause_stops_a_firing_under_way(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="p", every="1m")
        rig.submitter.delay = 10
        rig.clock.advance(60)
        self.successResultOf(rig.timetable.pause("shop", "p"))
        rig.clock.advance(10)
        self.assertEqual((rig.job_ids(), rig.schedule("p").paused), ([], True))

    def test_a_failed_write_at_start_stops_one_schedule_not_the_timer(self):
        path = self.mktemp() + ".db"
        rig = Rig(self, start=0.0, path=path)
        rig.start()
        rig.add(name="broken", every="1m")
        rig.add(name="fine", every="1m", overlap="allow")
        rig.timetable.stop()
        rig.clock.advance(90)
        rig.timetable = rig.new_timetable()
        update = rig.store.update_schedule

        def failing(name, **changes):
            if name == "broken":
                return defer.fail(StoreError("database or disk is full"))
            return update(name, **changes)

        self.patch(rig.store, "update_schedule", failing)
        rig.start()
        self.assertIsNotNone(rig.timetable.next_wake())
        rig.clock.advance(60)
        self.assertIn("fine-19700101T000200Z", rig.job_ids())
        self.assertTrue(self.flushLoggedErrors(StoreError))


class DuplicateGuardTests(unittest.TestCase):
    def test_the_derived_id_is_refused_a_second_time(self):
        store = SQLiteJobStore(":memory:", Clock())
        record = JobRecord(id="n-20261202T020000Z", project="shop", spider="b",
                           spider_file="/p.py")
        self.successResultOf(store.add(record))
        self.failureResultOf(store.add(record), DuplicateJob)


class CountingSubmitter(FakeSubmitter):
    """Counts the jobs it was asked to submit (each checks the spider)."""

    def __init__(self, store, clock):
        super().__init__(store, clock)
        self.submitted = []

    def submit(self, request):
        self.submitted.append(request.jobid)
        return super().submit(request)


class OneFiringPerDueTimeTests(unittest.TestCase):
    """Timetables of several nodes on one table: every one wakes for a due
    time, one takes it, and only that one checks the spider."""

    def test_three_timetables_fire_each_due_time_once(self):
        rig = Rig(self, start=0.0)
        rig.start()
        rig.add(name="t", every="1m", overlap="allow")
        nodes = []
        for _ in range(3):
            submitter = CountingSubmitter(rig.store, rig.clock)
            nodes.append((Timetable(rig.store, submitter, rig.clock), submitter))
            self.successResultOf(nodes[-1][0].start())
        rig.timetable.stop()
        # Each check takes a moment, as a reader process's would.
        for _, submitter in nodes:
            submitter.delay = 1
        for _ in range(5):
            rig.clock.advance(30)
        checked = [jobid for _, submitter in nodes for jobid in submitter.submitted]
        self.assertEqual(sorted(checked), [f"t-19700101T00{m:02d}00Z" for m in (1, 2)])
        self.assertEqual(rig.job_ids(), sorted(checked))
        record = rig.schedule("t")
        self.assertEqual((record.runs, record.last_due, record.next_due),
                         (2, 120.0, 180.0))
        # Whoever lost goes on from the row the winner wrote.
        for timetable, _ in nodes:
            self.assertEqual(timetable.next_wake(), 180.0)
        self.assertEqual(self.flushLoggedErrors(), [])


class ElsewhereTests(unittest.TestCase):
    """Two timetables on one SQLite table, as two nodes on one shared
    table: what ``reload`` finds another one changed."""

    def setUp(self):
        self.rig = Rig(self, start=1_000_000.0)
        self.rig.start()
        self.heard = []
        self.here = Timetable(self.rig.store, FakeSubmitter(self.rig.store, self.rig.clock),
                              self.rig.clock, on_change_elsewhere=self.heard.append)
        self.successResultOf(self.here.start())

    def reload(self):
        self.successResultOf(self.here.reload())
        found = [(r.name, r.paused, self.here.has(r.name)) for r in self.heard]
        del self.heard[:]
        return found

    def test_what_another_node_added_paused_deleted_or_replaced_is_heard_once(self):
        self.assertEqual(self.reload(), [])
        self.rig.add(name="a", every="1h")
        self.rig.add(name="b", every="1h")
        self.assertEqual(self.reload(), [("a", False, True), ("b", False, True)])
        self.assertEqual(self.reload(), [])
        self.successResultOf(self.rig.timetable.pause("shop", "a"))
        self.assertEqual(self.reload(), [("a", True, True)])
        self.successResultOf(self.rig.timetable.delete("shop", "b"))
        self.assertEqual(self.reload(), [("b", False, False)])
        self.successResultOf(self.rig.timetable.delete("shop", "a"))
        self.rig.add(name="a", every="2h")
        self.assertEqual(self.reload(), [("a", False, True)])
        self.assertEqual(self.here.next_wake(), self.rig.schedule("a").next_due)

    def test_reloads_asked_while_one_reads_make_one_more_read(self):
        store = self.rig.store
        schedules = store.schedules
        reads = []

        def held(project=None):
            reads.append(defer.Deferred())
            return reads[-1].addCallback(lambda _: schedules(project))

        self.patch(store, "schedules", held)
        first = self.here.reload()
        self.rig.add(name="a", every="1h")
        later = [self.here.reload() for _ in range(5)]
        self.assertEqual(len(reads), 1)
        reads[0].callback(None)
        # The first is done; the five after it wait for the one read more.
        self.assertIsNone(self.successResultOf(first))
        self.assertEqual([d.called for d in later], [False] * 5)
        self.assertEqual(len(reads), 2)
        self.rig.add(name="b", every="1h")
        reads[1].callback(None)
        self.assertEqual([self.successResultOf(d) for d in later], [None] * 5)
        self.assertEqual(len(reads), 2)
        self.assertEqual(sorted(r.name for r in self.heard), ["a", "b"])

    def test_a_failed_read_fails_its_waiters_and_the_next_reload_reads(self):
        store = self.rig.store
        schedules = store.schedules
        self.patch(store, "schedules", lambda project=None: defer.fail(StoreError("gone")))
        self.failureResultOf(self.here.reload(), StoreError)
        self.patch(store, "schedules", schedules)
        self.rig.add(name="a", every="1h")
        self.assertEqual(self.reload(), [("a", False, True)])
