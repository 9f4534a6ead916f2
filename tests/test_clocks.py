"""The two clocks (netweir_serve/clocks.py): intervals on the reactor's,
times of day on the wall clock, each injected, so a wall clock stepped
back or forward stretches no timer and every time recorded is a time of
day. tests/test_clock_steps.py steps a real daemon's clock."""

from twisted.internet.selectreactor import SelectReactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.clocks import WallClock, use_monotonic_time
from netweir_serve.cluster.membership import NodeMembership
from netweir_serve.schedules.timetable import WALL_CHECK_SECONDS, Timetable

from . import test_launcher, test_membership, test_timetable

# A time of day, far from the reactor's clock (seconds since boot, say).
DAY = 1_790_000_000.0


def wall_at(seconds):
    wall = Clock()
    wall.rightNow = seconds
    return wall


class MonotonicReactorTests(unittest.TestCase):
    def reactor(self):
        reactor = SelectReactor()
        self.addCleanup(reactor.waker.connectionLost, None)
        return reactor

    def test_delayed_calls_are_timed_by_the_clock_given(self):
        reactor = self.reactor()
        now = [50.0]
        use_monotonic_time(reactor, monotonic=lambda: now[0])
        call = reactor.callLater(15, lambda: None)
        self.assertEqual(call.getTime(), 65.0)
        self.assertEqual(reactor.timeout(), 15.0)
        now[0] = 60.0
        self.assertEqual(reactor.timeout(), 5.0)
        call.delay(10)
        self.assertEqual(call.getTime(), 75.0)

    def test_refused_once_a_call_is_timed_by_the_old_clock(self):
        reactor = self.reactor()
        call = reactor.callLater(15, lambda: None)
        self.assertRaises(RuntimeError, use_monotonic_time, reactor)
        call.cancel()

    def test_the_wall_clock_is_the_time_of_day(self):
        import time

        before = time.time()
        self.assertTrue(before <= WallClock().seconds() <= time.time())


class LauncherWallTests(unittest.TestCase):
    """Records' times from the wall clock; the grace on the reactor's."""

    def test_times_recorded_are_the_wall_clocks(self):
        wall = wall_at(DAY)
        rig = test_launcher.Rig(self, grace=30.0, wall=wall)
        rig.schedule("a")
        record = rig.get("a")
        self.assertEqual((record.created, record.start_time), (DAY, DAY))
        rig.schedule("b", project="removed")
        self.assertEqual((rig.get("b").outcome, rig.get("b").end_time), ("failed", DAY))
        wall.rightNow -= 600  # stepped back
        rig.exit("a", 0)
        self.assertEqual(rig.get("a").end_time, DAY - 600)

    def test_the_grace_runs_on_the_reactors_clock_whatever_the_wall_clock_does(self):
        wall = wall_at(DAY)
        rig = test_launcher.Rig(self, grace=30.0, wall=wall)
        rig.schedule("a")
        rig.cancel("a")
        wall.rightNow -= 600
        rig.reactor.advance(30)
        pid = rig.get("a").pid
        self.assertIn(pid, [sent[0] for sent in rig.signals.sent[1:]])


class MembershipWallTests(unittest.TestCase):
    def test_beats_and_judging_on_the_reactor_dead_nodes_jobs_ended_at_the_wall_time(self):
        clock, wall, store = Clock(), wall_at(DAY), test_membership.CutStore()
        node = NodeMembership(store, launcher=test_membership.Idle(), poller=test_membership.Poller(),
                              timetable=None, clock=clock, name="n0", url="http://n0",
                              timeout=test_membership.TIMEOUT, wall=wall)
        node.start()
        self.addCleanup(node.stop)
        for _ in range(6):
            wall.rightNow -= 100  # stepped back again and again
            clock.advance(test_membership.BEAT)
        self.assertEqual(store.judged, [DAY - 600])


class TimetableWallTests(unittest.TestCase):
    """Due times follow the wall clock; the timer is the reactor's."""

    def rig(self):
        rig = test_timetable.Rig(self, start=1000.0)
        rig.wall = wall_at(DAY)
        # Jobs are made at the wall clock's time, as the service's Scheduler
        # makes them (its clock is the wall): a schedule counts a job made
        # no earlier than itself.
        rig.submitter.clock = rig.wall
        rig.timetable = Timetable(rig.store, rig.submitter, rig.clock, local_zone="UTC",
                                  on_change=rig.changes.append, wall=rig.wall)
        rig.start()
        return rig

    def both(self, rig, seconds):
        """Time passing: both clocks move on."""
        rig.wall.advance(seconds)
        rig.clock.advance(seconds)

    def test_stepped_back_it_fires_at_the_due_time_of_day_once(self):
        rig = self.rig()
        record = rig.add(name="every", every="60s")
        due = record.next_due
        self.assertEqual(rig.timetable.next_wake(), due)
        self.both(rig, 30)
        rig.wall.rightNow -= 600
        # The timer set for it wakes 30 s on: nothing is due by the wall clock.
        self.both(rig, 30)
        self.assertEqual(rig.job_ids(), [])
        while rig.wall.seconds() < due + 5:
            self.both(rig, 5)
        # Once, for its due time of day (600 s of the reactor's later).
        self.assertEqual(len(rig.job_ids()), 1)
        self.assertEqual(rig.schedule("every").last_due, due)
        self.assertEqual(rig.schedule("every").runs, 1)

    def test_stepped_forward_it_fires_within_the_wall_check(self):
        rig = self.rig()
        rig.add(name="hourly", every="1h")
        self.both(rig, 10)
        rig.wall.rightNow += 7200
        self.assertEqual(rig.job_ids(), [])
        rig.clock.advance(WALL_CHECK_SECONDS)
        self.assertEqual(len(rig.job_ids()), 1)
