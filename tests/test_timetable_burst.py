"""Many schedules due in the same second: their due times taken in one
write, their spider checked once, and on a shared PostgreSQL table each
fired by one node alone."""

import os
import time

from twisted.internet import defer, reactor
from twisted.internet.task import Clock, deferLater
from twisted.trial import unittest

from netweir_serve.jobs.events import JobEvents
from netweir_serve.jobs.scheduler import Scheduler
from netweir_serve.jobs.submit import JobSubmitter
from netweir_serve.projects import Project, ProjectTable
from netweir_serve.schedules.timetable import ScheduleRequest, Timetable
from netweir_serve.spiders import protocol
from netweir_serve.spiders.reader import SpiderReader
from netweir_serve.store.sqlite import SQLiteJobStore

from .test_timetable import FakeSubmitter, Rig

START = 1_000_000.0


class Counting:
    """Wraps a store's claim_firing and claim_firings, counting the calls
    and the due times each store took."""

    def __init__(self, store):
        self.single = 0
        self.batches = []
        self.taken = []
        single, batch = store.claim_firing, store.claim_firings

        def claim_firing(*args):
            self.single += 1
            return single(*args)

        def claim_firings(claims):
            self.batches.append(len(claims))
            return batch(claims).addCallback(self._took)

        store.claim_firing = claim_firing
        store.claim_firings = claim_firings

    def _took(self, taken):
        self.taken += [r.name for r in taken if r is not None]
        return taken


class BatchClaimTests(unittest.TestCase):
    def test_a_burst_is_claimed_in_one_write_and_each_fires_once(self):
        rig = Rig(self, start=START)
        rig.start()
        for n in range(200):
            rig.add(name=f"s{n:03d}", every="1h", overlap="allow")
        counting = Counting(rig.store)
        rig.clock.advance(3600)
        self.assertEqual((counting.single, counting.batches), (0, [200]))
        self.assertEqual(len(rig.job_ids()), 200)
        for n in (0, 199):
            record = rig.schedule(f"s{n:03d}")
            self.assertEqual((record.runs, record.last_due, record.next_due),
                             (1, START + 3600, START + 7200))
        # One timer again, for the next burst.
        self.assertEqual(rig.timetable.next_wake(), START + 7200)
        self.assertEqual(len(rig.clock.getDelayedCalls()), 1)

    def test_a_schedule_paused_while_its_burst_is_claimed_queues_nothing(self):
        rig = Rig(self, start=START)
        rig.start()
        rig.add(name="a", every="1h")
        rig.add(name="b", every="1h")
        # The claims wait for the store (a slow disk): the pause comes first.
        sent = []
        rig.store.claim_firings = lambda claims: sent.append(claims) or defer.Deferred()
        rig.clock.advance(3600)
        self.assertEqual(len(sent[0]), 2)
        self.successResultOf(rig.timetable.pause("shop", "a"))
        self.assertEqual(rig.job_ids(), [])

    def test_a_failed_batch_is_tried_again_later(self):
        rig = Rig(self, start=START)
        rig.start()
        rig.add(name="a", every="1h")
        real = rig.store.claim_firings
        rig.store.claim_firings = lambda claims: defer.fail(OSError("disk full"))
        rig.clock.advance(3600)
        self.assertEqual(rig.job_ids(), [])
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        rig.store.claim_firings = real
        rig.clock.advance(10)
        self.assertEqual(rig.job_ids(), ["a-19700112T144640Z"])


class Runner:
    """The reader processes stood in for: every request recorded and
    answered at once, as a spider that passes."""

    def __init__(self):
        self.requests = []

    def ask(self, request):
        self.requests.append(request)
        return defer.succeed(protocol.ok({"spider": request["spider"],
                                          "file": "books.py"}))


class OneCheckTests(unittest.TestCase):
    def test_a_burst_of_schedules_of_one_spider_reads_the_spider_once(self):
        clock = Clock()
        clock.rightNow = float(int(time.time()))
        folder = os.path.abspath(self.mktemp())
        os.makedirs(folder)
        path = os.path.join(folder, "books.py")
        with open(path, "w") as f:
            f.write("class Books: pass\n")
        os.utime(path, (clock.seconds() - 60, clock.seconds() - 60))
        projects = ProjectTable([Project("shop", folder)])
        store = SQLiteJobStore(":memory:", clock)
        self.addCleanup(store.close)
        runner = Runner()
        reader = SpiderReader(clock, timeout=5.0, wall=clock)
        reader._runner = runner
        submitter = JobSubmitter(projects, store, Scheduler(store, None, clock, JobEvents()),
                                 reader, os.path.abspath(self.mktemp()))
        timetable = Timetable(store, submitter, clock, local_zone="UTC")
        self.successResultOf(timetable.start())
        for n in range(100):
            self.successResultOf(timetable.add(ScheduleRequest(
                project="shop", spider="books", name=f"s{n:03d}", every="1h",
                overlap="allow")))
        # Adding them read it once: it has not changed since.
        self.assertEqual(len(runner.requests), 1)
        clock.advance(3600)
        pending = self.successResultOf(store.jobs())[0]
        self.assertEqual(len(pending), 100)
        self.assertEqual(len(runner.requests), 1)
        # A file of the project changed: the next burst reads it again, once.
        with open(os.path.join(folder, "helper.py"), "w") as f:
            f.write("X = 1\n")
        os.utime(os.path.join(folder, "helper.py"), (clock.seconds() - 30,) * 2)
        clock.advance(3600)
        self.assertEqual(len(self.successResultOf(store.jobs())[0]), 200)
        self.assertEqual(len(runner.requests), 2)


class SharedTableTests(unittest.TestCase):
    """Two timetables (two nodes) on one PostgreSQL table, each with a
    store of its own, their timers on Clocks that wake together."""

    @defer.inlineCallbacks
    def test_two_timetables_fire_a_burst_each_schedule_once(self):
        from netweir_serve.store.postgres import PostgresJobStore
        from . import pg
        url = pg.fresh_url(self)
        clocks, stores, timetables, counts = [], [], [], []
        for _ in range(2):
            store = yield PostgresJobStore.opened(url, reactor)
            self.addCleanup(store.close)
            clock = Clock()
            clock.rightNow = START
            timetable = Timetable(store, FakeSubmitter(store, clock), clock, local_zone="UTC")
            clocks.append(clock)
            stores.append(store)
            timetables.append(timetable)
            counts.append(Counting(store))
        for n in range(60):
            yield timetables[0].add(ScheduleRequest(project="shop", spider="books",
                                                    name=f"s{n:02d}", every="1h",
                                                    overlap="allow"))
        for timetable in timetables:
            yield timetable.start()
            self.addCleanup(timetable.stop)
        for _ in range(3):
            for clock in clocks:
                clock.advance(3600)
            yield self.settled(timetables)
        taken = counts[0].taken + counts[1].taken
        self.assertEqual(len(taken), 180)
        self.assertEqual(len(set(taken)), 60)
        self.assertEqual([c.single for c in counts], [0, 0])
        pending = (yield stores[1].jobs())[0]
        self.assertEqual(len(pending), 180)
        self.assertEqual(len({r.id for r in pending}), 180)
        for record in (yield stores[1].schedules()):
            self.assertEqual((record.runs, record.last_due), (3, START + 3 * 3600))

    @defer.inlineCallbacks
    def settled(self, timetables, within=20.0):
        """Waits until no firing is under way on either timetable."""
        deadline = time.monotonic() + within
        while any(t._firing for t in timetables):
            self.assertLess(time.monotonic(), deadline, "the firings never ended")
            yield deferLater(reactor, 0.01, lambda: None)
