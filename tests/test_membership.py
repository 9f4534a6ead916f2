"""NodeMembership on a Clock, with a store that can be cut off: when it
judges the other nodes (tests/test_cluster.py does it for real)."""

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.cluster.membership import NodeMembership
from netweir_serve.jobs.records import StoreError

TIMEOUT = 6.0
BEAT = TIMEOUT / 6


class CutStore:
    """The parts of a shared store NodeMembership uses; ``up`` False makes
    every call fail as a lost connection does."""

    def __init__(self):
        self.up = True
        self.judged = []

    def _answer(self, value):
        if not self.up:
            return defer.fail(StoreError("the job table could not be written: cut off"))
        return defer.succeed(value)

    def register_node(self, name, url, timeout=None, projects=()):
        return self._answer(None)

    def on_notice(self, callback):
        return lambda: None

    def heartbeat(self, name):
        return self._answer(True)

    def declare_dead(self, timeout, end_time=None, reason=None):
        self.judged.append(end_time)
        return self._answer([])


class Poller:
    def poll(self):
        pass


class JudgingTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.store = CutStore()
        self.node = NodeMembership(self.store, launcher=None, poller=Poller(), timetable=None,
                                   clock=self.clock, name="n0", url="http://n0",
                                   timeout=TIMEOUT)
        self.node.start()
        self.addCleanup(self.node.stop)

    def beats(self, count):
        for _ in range(count):
            self.clock.advance(BEAT)

    def test_the_others_are_judged_once_it_has_beaten_for_a_whole_timeout(self):
        self.beats(5)
        self.assertEqual(self.store.judged, [])
        self.beats(1)
        self.assertEqual(self.store.judged, [TIMEOUT])
        self.beats(1)
        self.assertEqual(len(self.store.judged), 2)

    def test_after_a_cut_it_waits_a_whole_timeout_in_touch_again(self):
        # The table away for everyone, longer than the timeout: when it is
        # back, every node's heartbeat is late, and none is dead for it.
        self.beats(8)
        judged = len(self.store.judged)
        self.store.up = False
        self.beats(10)
        self.store.up = True
        self.beats(6)
        self.assertEqual(len(self.store.judged), judged)
        self.beats(1)
        self.assertEqual(len(self.store.judged), judged + 1)
