"""NodeMembership on a Clock, with a store that can be cut off: when it
judges the other nodes (tests/test_cluster.py does it for real)."""

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.cluster.membership import FENCE_SHARE, NodeMembership
from netweir_serve.store.records import StoreError

TIMEOUT = 6.0
BEAT = TIMEOUT / 6
# When a node cut off fences itself, counted from its last beat through.
FENCE = FENCE_SHARE * TIMEOUT


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

    def running(self, node=None):
        return self._answer([])

    def declare_dead(self, timeout, end_time=None, reason=None):
        self.judged.append(end_time)
        return self._answer({})


class Poller:
    def poll(self):
        pass


class Idle:
    """A launcher running nothing."""

    def running_count(self):
        return 0

    def running_ids(self):
        return []

    def fence(self, end_time, detail):
        return []


class JudgingTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.store = CutStore()
        self.node = NodeMembership(self.store, launcher=Idle(), poller=Poller(), timetable=None,
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


class Listed:
    """A finished job as the store's listing gives it."""

    def __init__(self, jobid, node, outcome, end_time):
        self.id, self.node, self.outcome, self.end_time = jobid, node, outcome, end_time


class TellingStore(CutStore):
    """A store whose answers the test sets: the node found dead, the jobs
    its declaration ended, this node's own row as registration found it."""

    def __init__(self):
        super().__init__()
        self.dead, self.lost, self.previous, self.alive, self.records = [], [], None, True, {}

    def register_node(self, name, url, timeout=None, projects=()):
        previous, self.previous = self.previous, None
        return self._answer(previous)

    def heartbeat(self, name):
        return self._answer(self.alive)

    def declare_dead(self, timeout, end_time=None, reason=None):
        dead, self.dead = self.dead, []
        return self._answer({name: [Listed(jobid, node, "lost", end_time)
                                    for jobid, node in self.lost if node == name]
                             for name in dead})

    def get(self, jobid):
        return self._answer(self.records.get(jobid))


class Launcher:
    """Jobs running; those in ``retried`` are the ones a lost end would
    retry, which a fence kills (``fenced``: each call's end time, detail
    and ids)."""

    def __init__(self, running=(), retried=()):
        self.settled_ids, self.dropped, self.running = [], [], list(running)
        self.retried, self.fenced = set(retried), []

    def fence(self, end_time, detail):
        ids = [jobid for jobid in self.running if jobid in self.retried]
        self.running = [jobid for jobid in self.running if jobid not in ids]
        self.fenced.append((end_time, detail, ids))
        return ids

    def settled(self, record):
        self.settled_ids.append(record.id)

    def running_ids(self):
        return list(self.running)

    def running_count(self):
        return len(self.running)

    def carry_out(self, record):
        return None

    def drop(self, jobid):
        self.dropped.append(jobid)


class Finished:
    state = "finished"


class Running:
    state = "running"


class LogLineTests(unittest.TestCase):
    """What a node's log says of the cluster: the jobs a dead node's
    declaration ended, and a node coming back after being declared dead."""

    def setUp(self):
        from twisted.logger import formatEvent, globalLogPublisher
        self.lines = []
        observer = lambda event: self.lines.append(formatEvent(event))
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        self.clock = Clock()
        self.store = TellingStore()

    def node(self, launcher):
        node = NodeMembership(self.store, launcher=launcher, poller=Poller(), timetable=None,
                              clock=self.clock, name="n0", url="http://n0", timeout=TIMEOUT)
        node.start()
        self.addCleanup(node.stop)
        return node

    def said(self, words):
        return [line for line in self.lines if words in line]

    def test_a_dead_node_is_named_with_the_jobs_it_lost(self):
        launcher = Launcher()
        self.node(launcher)
        self.clock.advance(TIMEOUT)
        self.store.dead = ["n1", "n2"]
        self.store.lost = [("b-job", "n1"), ("a-job", "n1")]
        self.clock.advance(BEAT)
        self.assertEqual(sorted(launcher.settled_ids), ["a-job", "b-job"])
        self.assertEqual(self.said("is silent past"), [
            "node n1 is silent past 6 s: declared dead; its running job(s) a-job, b-job"
            " marked lost",
            "node n2 is silent past 6 s: declared dead; it ran no job"])

    def test_a_node_back_after_being_declared_dead_says_so_once(self):
        self.store.previous = {"name": "n0", "url": "http://n0", "dead": True}
        self.node(Launcher())
        self.clock.advance(BEAT * 3)
        self.assertEqual(self.said("rejoins"), [
            "node n0 rejoins the cluster at http://n0: the other nodes had declared it dead,"
            " and its jobs running then are recorded lost"])

    def test_a_node_starting_after_a_clean_stop_says_nothing_of_it(self):
        self.store.previous = {"name": "n0", "url": "http://n0", "dead": False}
        self.node(Launcher())
        self.assertEqual(self.said("rejoins"), [])

    def test_found_dead_it_names_the_jobs_whose_processes_it_ends(self):
        launcher = Launcher(running=["ended-meanwhile", "still-ours"])
        self.store.records = {"ended-meanwhile": Finished(), "still-ours": Running()}
        self.node(launcher)
        self.store.alive = False
        self.clock.advance(BEAT)
        self.assertEqual(launcher.dropped, ["ended-meanwhile"])
        self.assertEqual(self.said("declared dead while cut off"), [
            "node n0 was declared dead while cut off from the job table: ended the processes"
            " of job(s) ended-meanwhile (recorded lost); it rejoins and takes new work"])


class FenceTests(unittest.TestCase):
    """A node out of touch with the table past its timeout stops claiming:
    the others may have declared it dead and its jobs lost meanwhile."""

    def setUp(self):
        self.clock = Clock()
        self.store = CutStore()
        self.polls = []
        poller = Poller()
        poller.poll = lambda: self.polls.append(self.clock.seconds())
        self.node = NodeMembership(self.store, launcher=Idle(), poller=poller, timetable=None,
                                   clock=self.clock, name="n0", url="http://n0",
                                   timeout=TIMEOUT)
        self.assertFalse(self.node.may_claim())  # not registered yet
        self.node.start()
        self.addCleanup(self.node.stop)

    def test_it_claims_while_its_beats_reach_the_table(self):
        for _ in range(20):
            self.clock.advance(BEAT)
            self.assertTrue(self.node.may_claim())

    def test_cut_off_past_its_fence_it_claims_nothing_until_a_beat_gets_through(self):
        self.clock.advance(BEAT)
        self.store.up = False
        # FENCE_SHARE of a timeout from its last beat that got through, and no more.
        self.clock.advance(FENCE - 0.1)
        self.assertTrue(self.node.may_claim())
        self.clock.advance(0.2)
        self.assertFalse(self.node.may_claim())
        self.clock.advance(TIMEOUT * 3)
        self.assertFalse(self.node.may_claim())
        self.store.up = True
        before = len(self.polls)
        self.clock.advance(BEAT)
        self.assertTrue(self.node.may_claim())
        # Lifted: a round is asked for at once, not at the next safety net.
        self.assertEqual(len(self.polls), before + 1)

    def test_the_fence_counts_from_when_the_last_beat_was_sent(self):
        # A beat that waits 2 s for its answer: the table stamped it when it
        # was sent, and the others judge the node from that stamp.
        slow = defer.Deferred()
        self.store.heartbeat = lambda name: slow
        self.clock.advance(BEAT)
        sent_at = self.clock.seconds()
        self.clock.advance(2.0)
        slow.callback(True)
        self.store.heartbeat = lambda name: defer.fail(
            StoreError("the job table could not be written: cut off"))
        self.clock.advance(sent_at + FENCE - 0.1 - self.clock.seconds())
        self.assertTrue(self.node.may_claim())
        self.clock.advance(0.2)
        self.assertFalse(self.node.may_claim())


class SelfFenceTests(unittest.TestCase):
    """A node cut off from the table kills the crawls a declaration of its
    death would retry, before any other node can declare it (issue 24:
    otherwise the retry may run on a third node beside the crawl)."""

    def setUp(self):
        from twisted.logger import formatEvent, globalLogPublisher
        self.lines = []
        observer = lambda event: self.lines.append(formatEvent(event))
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        self.clock, self.wall = Clock(), Clock()
        self.wall.advance(1_000_000.0)
        self.store = CutStore()
        self.launcher = Launcher(running=["kept", "retried-b", "retried-a"],
                                 retried={"retried-a", "retried-b"})
        self.node = NodeMembership(self.store, launcher=self.launcher, poller=Poller(),
                                   timetable=None, clock=self.clock, name="n0",
                                   url="http://n0", timeout=TIMEOUT, wall=self.wall)
        self.node.start()
        self.addCleanup(self.node.stop)

    def advance(self, seconds):
        self.wall.advance(seconds)  # the time of day the ends are recorded at
        self.clock.advance(seconds)

    def fences(self):
        return [line for line in self.lines if "no heartbeat through" in line]

    def test_beats_that_get_through_never_fence(self):
        for _ in range(30):
            self.advance(BEAT)
        self.assertEqual(self.launcher.fenced, [])
        self.assertEqual(self.fences(), [])

    def test_cut_off_it_kills_what_a_retry_would_repeat_before_it_can_be_declared(self):
        self.advance(BEAT)
        last_through = self.clock.seconds()
        self.store.up = False
        self.advance(FENCE - 0.1)  # beats fail meanwhile; it waits
        self.assertEqual(self.launcher.fenced, [])
        self.advance(0.2)
        [(end_time, detail, ids)] = self.launcher.fenced
        self.assertEqual(ids, ["retried-b", "retried-a"])
        # Before a whole timeout from its last beat: the earliest moment
        # another node may declare it dead and queue their retries.
        self.assertLess(self.clock.seconds(), last_through + TIMEOUT)
        self.assertEqual(end_time, self.wall.seconds())
        self.assertIn("its node n0 was cut off from the job table for 4.9 s", detail)
        self.assertEqual(self.launcher.running, ["kept"])
        self.assertEqual(self.fences(), [
            "node n0: no heartbeat through to the job table for 4.9 s (--node-timeout 6 s):"
            " it claims nothing until one gets through; killed the crawls of job(s)"
            " retried-a, retried-b, which their end as lost would retry; job(s) kept run on"
            " (no retry would repeat them)"])
        # Said and done once a cut, however long it lasts.
        self.advance(TIMEOUT * 5)
        self.assertEqual(len(self.launcher.fenced), 1)
        self.assertEqual(len(self.fences()), 1)

    def test_it_counts_from_when_its_last_beat_through_was_sent(self):
        slow = defer.Deferred()
        self.store.heartbeat = lambda name: slow
        self.advance(BEAT)
        sent_at = self.clock.seconds()
        self.advance(2.0)
        slow.callback(True)
        self.store.up = False
        del self.store.heartbeat
        self.advance(sent_at + FENCE - 0.1 - self.clock.seconds())
        self.assertEqual(self.launcher.fenced, [])
        self.advance(0.2)
        self.assertEqual(len(self.launcher.fenced), 1)

    def test_back_in_touch_it_carries_on_and_a_second_cut_fences_again(self):
        self.store.up = False
        self.advance(FENCE + 0.1)
        self.assertEqual(len(self.launcher.fenced), 1)
        self.store.up = True
        self.advance(BEAT)
        self.assertTrue(self.node.may_claim())
        self.launcher.running.append("later")
        self.launcher.retried.add("later")
        for _ in range(10):
            self.advance(BEAT)
        self.assertEqual(len(self.launcher.fenced), 1)
        self.store.up = False
        self.advance(FENCE + BEAT)
        self.assertEqual([ids for _, _, ids in self.launcher.fenced],
                         [["retried-b", "retried-a"], ["later"]])
        self.assertEqual(len(self.fences()), 2)
        self.assertIn("it claims nothing until one gets through; killed the crawls of"
                      " job(s) later, which", self.fences()[1])

    def test_a_node_running_nothing_says_so(self):
        self.launcher.running, self.launcher.retried = [], set()
        self.store.up = False
        self.advance(FENCE + 0.1)
        self.assertEqual(len(self.fences()), 1)
        self.assertTrue(self.fences()[0].endswith("until one gets through; it runs no crawl"))
