"""What every IJobStore backend must do, checked through the interface alone.

``JobStoreContract`` is a mixin: a backend's test case mixes it with
``unittest.TestCase`` and says how to open a fresh, empty store
(``make_store``) and a second store on the same database
(``make_second_store``, for the claimers that race). Every test works
through Deferreds, so a backend that answers later (PostgreSQL) runs the
same tests as one that answers at once (SQLite). Nothing here looks at how
a backend keeps its data.
"""

import os
from dataclasses import replace
import subprocess
import sys
import threading
import time

from twisted.internet import defer, reactor
from twisted.internet.task import Clock, deferLater
from twisted.internet.threads import deferToThread
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from netweir_serve.jobs import policies
from netweir_serve.store.interfaces import IClusterStore, IJobStore, IScheduleStore, ITokenStore, IAuditStore
from netweir_serve.store.records import DuplicateJob, JobRecord, StoreError
from netweir_serve.store import notices, open_store
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.store.chain_firings import CHAIN_ENDS
from netweir_serve.store.schedule_records import DuplicateSchedule, ScheduleRecord
from netweir_serve.store.token_records import DuplicateToken, TokenRecord
from netweir_serve.store.audit_records import AuditEntry

NODE_A, NODE_B = "node-a", "node-b"


def record(jobid, project="shop", priority=0.0, created=0.0, spider="books"):
    return JobRecord(id=jobid, project=project, spider=spider, spider_file="/p/books.py",
                     settings=(("max_items", "5"), ("checkpoint", "ck")),
                     arguments=(("category", "x"),), priority=priority, created=created)


def locked(jobid, locks, project="shop", spider="books", priority=0.0):
    return JobRecord(id=jobid, project=project, spider=spider, spider_file="/p/x.py",
                     priority=priority, locks=tuple(locks))


def ids(records):
    return [r.id for r in records]


@defer.inlineCallbacks
def until(condition, within=5.0):
    """Whether ``condition()`` came to hold within ``within`` seconds."""
    from twisted.internet import reactor
    deadline = reactor.seconds() + within
    while not condition():
        if reactor.seconds() > deadline:
            return False
        yield deferLater(reactor, 0.001, lambda: None)
    return True


class JobStoreContract:
    """The behaviour of IJobStore. Subclasses define ``make_store()`` and
    ``make_second_store()``; either may return the store or a Deferred of
    it. Stores they return are closed after each test."""

    def make_store(self):
        raise NotImplementedError

    def make_second_store(self):
        raise NotImplementedError

    @defer.inlineCallbacks
    def setUp(self):
        self.store = yield self.open(self.make_store)

    @defer.inlineCallbacks
    def open(self, make):
        store = yield defer.maybeDeferred(make)
        self.addCleanup(self.close_store, store)
        return store

    def close_store(self, store):
        """Closes ``store`` once (a test may close it before its cleanup)."""
        closed = self.__dict__.setdefault("_closed_stores", [])
        if any(store is other for other in closed):
            return None
        closed.append(store)
        return store.close()

    @defer.inlineCallbacks
    def versions_agree(self, store, other, within=5.0):
        """Waits until ``store``'s version is ``other``'s: a shared store
        hears the other's change by a notice, after the change's own
        Deferred has fired ("it may trail their changes by the time a
        notice takes"). Gives up after ``within`` seconds (the test's
        assertions then say so)."""
        from twisted.internet import reactor
        deadline = reactor.seconds() + within
        while store.version != other.version and reactor.seconds() < deadline:
            yield deferLater(reactor, 0.001, lambda: None)

    @defer.inlineCallbacks
    def add_all(self, *records, store=None):
        store = store or self.store
        added = []
        for r in records:
            added.append((yield store.add(r)))
        return added

    @defer.inlineCallbacks
    def claim_all(self, node, projects, now=1.0, store=None):
        """Claims until nothing is left; the ids in the order claimed."""
        store = store or self.store
        claimed = []
        while True:
            r = yield store.claim_next(node, projects, now)
            if r is None:
                return claimed
            claimed.append(r.id)
            now += 1.0

    @defer.inlineCallbacks
    def finish(self, jobid, end_time, outcome="finished", node=NODE_A, **fields):
        """Claims, starts and ends ``jobid`` (it must be next in its project)."""
        claimed = yield self.store.claim_next(node, ["shop", "news"], end_time - 1)
        self.assertEqual(claimed.id, jobid)
        yield self.store.mark_started(jobid, 100)
        done = yield self.store.mark_finished(jobid, outcome, end_time, **fields)
        return done

    # -- the interface ---------------------------------------------------------

    def test_provides_the_interface(self):
        self.assertTrue(verifyObject(IJobStore, self.store))

    # -- adding and reading ----------------------------------------------------

    @defer.inlineCallbacks
    def test_add_and_get_ignore_case(self):
        added = yield self.store.add(record("Job1", project="Shop", priority=2.5, created=7.0))
        self.assertEqual((added.id, added.state, added.project), ("Job1", "pending", "Shop"))
        for asked in ("Job1", "JOB1", "job1"):
            found = yield self.store.get(asked)
            self.assertEqual(found.id, "Job1")
            self.assertEqual(found.project, "Shop")
            self.assertEqual(found.spider, "books")
            self.assertEqual(found.spider_file, "/p/books.py")
            self.assertEqual(found.state, "pending")
            self.assertEqual(found.settings, (("max_items", "5"), ("checkpoint", "ck")))
            self.assertEqual(found.arguments, (("category", "x"),))
            self.assertEqual((found.priority, found.created), (2.5, 7.0))
            self.assertEqual((found.outcome, found.pid, found.node, found.start_time,
                              found.end_time, found.stats, found.cancel_requested),
                             (None, None, None, None, None, None, False))
        self.assertIsNone((yield self.store.get("job2")))

    @defer.inlineCallbacks
    def test_duplicate_id_in_any_case_is_refused(self):
        yield self.store.add(record("job1"))
        for taken in ("job1", "JOB1", "Job1"):
            yield self.assertFailure(self.store.add(record(taken, project="news")),
                                     DuplicateJob)
        found = yield self.store.get("job1")
        self.assertEqual((found.id, found.project), ("job1", "shop"))
        self.assertEqual((yield self.store.counts()),
                         {"pending": 1, "running": 0, "finished": 0})

    @defer.inlineCallbacks
    def test_a_refused_duplicate_leaves_the_store_usable(self):
        yield self.store.add(record("a"))
        yield self.assertFailure(self.store.add(record("A")), DuplicateJob)
        yield self.store.add(record("b"))
        self.assertEqual(ids((yield self.store.jobs())[0]), ["a", "b"])

    # -- claiming --------------------------------------------------------------

    @defer.inlineCallbacks
    def test_claim_by_priority_then_age(self):
        yield self.add_all(record("a", priority=0, created=1), record("b", priority=5, created=2),
                           record("c", priority=5, created=3), record("d", priority=-1, created=4),
                           record("e", priority=0, created=5))
        order = yield self.claim_all(NODE_A, ["shop"])
        self.assertEqual(order, ["b", "c", "a", "e", "d"])

    @defer.inlineCallbacks
    def test_claim_marks_the_job_running_on_the_node_without_a_pid(self):
        yield self.store.add(record("a"))
        claimed = yield self.store.claim_next(NODE_A, ["shop"], 42.0)
        self.assertEqual((claimed.id, claimed.state, claimed.node, claimed.start_time,
                          claimed.pid), ("a", "running", NODE_A, 42.0, None))
        found = yield self.store.get("A")
        self.assertEqual((found.state, found.node, found.start_time, found.pid),
                         ("running", NODE_A, 42.0, None))
        self.assertIsNone((yield self.store.claim_next(NODE_A, ["shop"], 43.0)))

    @defer.inlineCallbacks
    def test_claim_only_among_the_projects_given_in_any_case(self):
        yield self.add_all(record("s1", project="Shop"), record("n1", project="news", priority=9),
                           record("s2", project="shop"), record("o1", project="other"))
        self.assertEqual((yield self.claim_all(NODE_A, ["SHOP"])), ["s1", "s2"])
        self.assertEqual((yield self.claim_all(NODE_A, ["nosuch"])), [])
        self.assertEqual((yield self.claim_all(NODE_A, ["NEWS", "Other"])), ["n1", "o1"])

    @defer.inlineCallbacks
    def test_no_claim_for_no_projects(self):
        yield self.store.add(record("a"))
        self.assertIsNone((yield self.store.claim_next(NODE_A, [], 1.0)))
        self.assertIsNone((yield self.store.claim_next(NODE_A, (), 1.0)))
        self.assertEqual((yield self.store.get("a")).state, "pending")

    @defer.inlineCallbacks
    def test_two_claimers_of_one_job_one_gets_it(self):
        other = yield self.open(self.make_second_store)
        yield self.store.add(record("only"))
        # Both asked before either answer is looked at.
        first = self.store.claim_next(NODE_A, ["shop"], 1.0)
        second = other.claim_next(NODE_B, ["shop"], 1.0)
        results = yield defer.gatherResults([first, second])
        got = [r for r in results if r is not None]
        self.assertEqual(len(got), 1, results)
        self.assertEqual(got[0].id, "only")
        found = yield other.get("only")
        self.assertEqual((found.state, found.node), ("running", got[0].node))

    @defer.inlineCallbacks
    def test_two_claimers_never_take_a_job_twice(self):
        other = yield self.open(self.make_second_store)
        jobs = [record(f"j{i:02}", priority=i % 3, created=i) for i in range(30)]
        yield self.add_all(*jobs[:20])
        claimed = {NODE_A: [], NODE_B: []}
        now = 1.0
        # Alternate, in pairs asked at once, and add more on the way.
        for turn in range(25):
            if turn == 5:
                yield self.add_all(*jobs[20:], store=other)
            pair = yield defer.gatherResults([
                self.store.claim_next(NODE_A, ["shop"], now),
                other.claim_next(NODE_B, ["shop"], now)])
            for node, r in zip((NODE_A, NODE_B), pair):
                if r is not None:
                    self.assertEqual(r.node, node)
                    claimed[node].append(r.id)
            now += 1.0
        every = claimed[NODE_A] + claimed[NODE_B]
        self.assertEqual(len(every), len(set(every)), claimed)
        self.assertEqual(sorted(every), sorted(ids(jobs)))
        self.assertTrue(claimed[NODE_A] and claimed[NODE_B], claimed)
        for jobid in every:
            found = yield self.store.get(jobid)
            self.assertEqual(found.state, "running")
            self.assertIn(jobid, claimed[found.node])

    # -- run policies (store.runpolicy), as every backend's claim applies them ---

    @defer.inlineCallbacks
    def claim_ids(self, limits, node=NODE_A, projects=("shop",)):
        claimed = []
        for limit in limits:
            r = yield self.store.claim_next(node, list(projects), 1.0, limit)
            claimed.append(r.id if r else None)
        return claimed

    @defer.inlineCallbacks
    def test_a_job_waits_for_its_lock_without_holding_back_the_next(self):
        yield self.add_all(locked("a", ("path:x",)), locked("b", ("path:x",), priority=5),
                           record("c"))
        self.assertEqual((yield self.claim_ids([None] * 3)), ["b", "c", None])
        yield self.store.mark_finished("b", "finished", 2.0)
        self.assertEqual((yield self.claim_ids([None])), ["a"])

    @defer.inlineCallbacks
    def test_a_lock_held_in_another_project_holds_too(self):
        # What runs is every project's, as RunningSet's is.
        yield self.add_all(locked("other", ("schedule:s",), project="news"),
                           locked("mine", ("schedule:s", "path:y")), record("free"))
        self.assertEqual((yield self.claim_ids([None], projects=["news"])), ["other"])
        self.assertEqual((yield self.claim_ids([None, None])), ["free", None])

    @defer.inlineCallbacks
    def test_max_per_spider_gives_the_slot_to_the_next_that_may_run(self):
        yield self.add_all(record("a"), record("b"), record("n1", spider="news"), record("c"))
        self.assertEqual((yield self.claim_ids([1, 1, 1])), ["a", "n1", None])
        yield self.store.mark_finished("a", "finished", 2.0)
        self.assertEqual((yield self.claim_ids([2, 2, 2])), ["b", "c", None])

    @defer.inlineCallbacks
    def test_a_spiders_limit_counts_its_running_jobs_of_every_node(self):
        yield self.add_all(record("a"), record("b"), record("c", project="news"))
        self.assertEqual((yield self.claim_ids([1], node=NODE_B)), ["a"])
        # Another project's spider of the same name is another spider.
        self.assertEqual((yield self.claim_ids([1, 1], projects=["shop", "news"])),
                         ["c", None])

    @defer.inlineCallbacks
    def test_a_node_claims_no_job_it_cannot_run_and_another_node_may(self):
        # A node that cannot enforce a memory limit (cluster: any node may
        # claim, not only the one that took the request).
        limited = JobRecord(id="limited", project="shop", spider="books", spider_file="/p",
                            priority=5, policy={"memory": 200 << 20})
        yield self.add_all(limited, record("plain"))
        seen = []

        def no_memory(candidate):
            seen.append(candidate.id)
            return (candidate.policy or {}).get("memory") is None

        claimed = yield self.store.claim_next(NODE_A, ["shop"], 1.0, None, no_memory)
        self.assertEqual(claimed.id, "plain")
        # The predicate read the policy the claim took from the table.
        self.assertIn("limited", seen)
        self.assertIsNone((yield self.store.claim_next(NODE_A, ["shop"], 1.0, None, no_memory)))
        self.assertEqual((yield self.store.get("limited")).state, "pending")
        claimed = yield self.store.claim_next(NODE_B, ["shop"], 1.0, None, lambda r: True)
        self.assertEqual((claimed.id, claimed.node), ("limited", NODE_B))

    @defer.inlineCallbacks
    def test_locks_and_the_schedule_read_back(self):
        lock = policies.schedule_lock("Nightly")
        added = yield self.store.add(JobRecord(
            id="s1", project="shop", spider="books", spider_file="/p", schedule="Nightly",
            locks=(lock, "path:shop:/d")))
        found = yield self.store.get("s1")
        self.assertEqual((found.locks, found.schedule, found.seq),
                         ((lock, "path:shop:/d"), "Nightly", added.seq))
        self.assertEqual((yield self.store.schedule_jobs("Nightly")), (1, 0))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        self.assertEqual((yield self.store.schedule_jobs("Nightly")), (0, 1))
        # A schedule's name ignores case, as its key does (names.fold).
        self.assertEqual((yield self.store.schedule_jobs("NIGHTLY")), (0, 1))

    @defer.inlineCallbacks
    def test_claims_at_once_from_two_stores_keep_every_policy(self):
        # Two stores (on PostgreSQL each with its own pool: six claims at
        # once in the database), as two nodes would claim.
        stores = {NODE_A: self.store, NODE_B: (yield self.open(self.make_second_store))}
        every = []
        for n in range(60):
            locks = () if n % 3 == 0 else (f"path:shop:/data/{n % 5}",)
            if n % 7 == 0:
                locks += (policies.schedule_lock("queued"),)
            every.append(locked(f"j{n:03d}", locks, spider=f"s{n % 4}", priority=float(n % 2)))
        yield self.add_all(*every[:30])
        yield self.add_all(*every[30:], store=stores[NODE_B])
        locks_of = {r.id: set(r.locks) for r in every}
        spider_of = {r.id: r.spider for r in every}
        taken = {}

        @defer.inlineCallbacks
        def claimer(node):
            while True:
                r = yield stores[node].claim_next(node, ["shop"], 1.0, max_per_spider=3)
                if r is None:
                    return
                self.assertNotIn(r.id, taken, f"{r.id} claimed twice")
                taken[r.id] = node

        rounds = 0
        while len(taken) < len(every):
            rounds += 1
            self.assertLess(rounds, 100, "claims stopped making progress")
            before = set(taken)
            yield defer.gatherResults([claimer(node) for node in stores for _ in range(3)])
            running = [r.id for r in (yield self.store.running())]
            self.assertEqual(set(running), set(taken) - before)
            # Nothing ended during the round: whatever runs now ran together.
            for i, one in enumerate(running):
                for other in running[i + 1:]:
                    self.assertFalse(locks_of[one] & locks_of[other],
                                     f"{one} and {other} run at once sharing a lock")
            per_spider = {}
            for jobid in running:
                per_spider[spider_of[jobid]] = per_spider.get(spider_of[jobid], 0) + 1
            self.assertLessEqual(max(per_spider.values()), 3, per_spider)
            for jobid in running:
                yield stores[taken[jobid]].mark_finished(jobid, "finished", 1.0)
        self.assertEqual(sorted(taken), sorted(r.id for r in every))
        self.assertEqual((yield stores[NODE_B].counts()),
                         {"pending": 0, "running": 0, "finished": len(every)})

    def test_two_processes_claiming_at_once_take_each_job_once_and_keep_the_locks(self):
        # Each process with its own connection(s) and reactor: the claim is
        # atomic across processes, not only in one reactor's turn.
        url = self.store_url()
        wanted = [locked(f"j{n:03d}", (f"path:shop:/d/{n % 4}",) if n % 2 else ())
                  for n in range(200)]
        done = self.add_all(*wanted)
        done.addCallback(lambda _: self.close_store(self.store))
        done.addCallback(lambda _: deferToThread(self.race, url))
        done.addCallback(self.check_race, sorted(r.id for r in wanted))
        return done

    def race(self, url):
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        go = os.path.join(directory, "go")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        claimers = [subprocess.Popen([sys.executable, "-c", _CLAIMER, url, directory, node, go],
                                     cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
                    for node in (NODE_A, NODE_B)]
        # Both ready (imported, table open) before either may claim, so that
        # neither can take every job before the other starts.
        deadline = time.monotonic() + 60
        while not all(os.path.exists(f"{go}.{node}") for node in (NODE_A, NODE_B)):
            if time.monotonic() > deadline or any(c.poll() is not None for c in claimers):
                break
            time.sleep(0.01)
        open(go, "w").close()
        return [(c.returncode, out, err) for c in claimers
                for out, err in [c.communicate(timeout=120)]]

    @defer.inlineCallbacks
    def check_race(self, results, wanted):
        for returncode, _, err in results:
            self.assertEqual(returncode, 0, err)
        taken = [out.split() for _, out, _ in results]
        self.assertEqual(sorted(taken[0] + taken[1]), wanted)
        # Both really claimed: the test would prove nothing otherwise.
        self.assertTrue(taken[0] and taken[1], [len(t) for t in taken])
        reopened = yield self.open(self.make_second_store)
        running = (yield reopened.jobs())[1]
        self.assertEqual({r.id: r.node for r in running},
                         {j: node for node, ids_ in zip((NODE_A, NODE_B), taken)
                          for j in ids_ if int(j[1:]) % 2 == 0})

    # -- starting and ending ---------------------------------------------------

    @defer.inlineCallbacks
    def test_mark_started_records_the_pid(self):
        yield self.store.add(record("Job"))
        yield self.store.claim_next(NODE_A, ["shop"], 5.0)
        started = yield self.store.mark_started("JOB", 4242)
        self.assertEqual((started.id, started.state, started.pid, started.node,
                          started.start_time), ("Job", "running", 4242, NODE_A, 5.0))
        found = yield self.store.get("job")
        self.assertEqual((found.state, found.pid), ("running", 4242))

    @defer.inlineCallbacks
    def test_mark_finished_records_how_it_ended(self):
        yield self.store.add(record("Job"))
        yield self.store.claim_next(NODE_A, ["shop"], 5.0)
        yield self.store.mark_started("job", 7)
        done = yield self.store.mark_finished("JOB", "failed", 12.0, exit_status=1,
                                              stats={"items": 3, "finish_reason": "x"},
                                              reason="it broke")
        self.assertEqual((done.id, done.state, done.outcome, done.end_time, done.exit_status,
                          done.stats, done.reason),
                         ("Job", "finished", "failed", 12.0, 1, {"items": 3,
                                                                 "finish_reason": "x"},
                          "it broke"))
        found = yield self.store.get("job")
        self.assertEqual((found.state, found.outcome, found.exit_status, found.stats,
                          found.reason, found.start_time, found.pid, found.node),
                         ("finished", "failed", 1, {"items": 3, "finish_reason": "x"},
                          "it broke", 5.0, 7, NODE_A))

    @defer.inlineCallbacks
    def test_every_outcome_is_accepted(self):
        for n, outcome in enumerate(("finished", "failed", "cancelled", "lost")):
            yield self.store.add(record(f"j{n}"))
            yield self.store.claim_next(NODE_A, ["shop"], 1.0)
            done = yield self.store.mark_finished(f"j{n}", outcome, 2.0 + n)
            self.assertEqual((done.state, done.outcome), ("finished", outcome))

    @defer.inlineCallbacks
    def test_an_unknown_outcome_is_refused(self):
        yield self.store.add(record("a"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        version = self.store.version
        yield self.assertFailure(self.store.mark_finished("a", "exploded", 2.0), ValueError)
        found = yield self.store.get("a")
        self.assertEqual((found.state, found.outcome), ("running", None))
        self.assertEqual(self.store.version, version)

    @defer.inlineCallbacks
    def test_a_change_answers_the_record_a_read_gives(self):
        # A write answers with the row it wrote (RETURNING); the times and
        # the priority must come back as a read gives them, floats, even
        # when they were given whole (SQLite's RETURNING gives an integral
        # REAL as an int).
        yield self.store.add(record("a", priority=2, created=7))
        answers = [(yield self.store.claim_next(NODE_A, ["shop"], 8)),
                   (yield self.store.mark_started("a", 5)),
                   (yield self.store.mark_cancel_requested("a")) or (yield self.store.get("a")),
                   (yield self.store.mark_finished("a", "finished", 9))]
        read = yield self.store.get("a")
        self.assertEqual(answers[-1], read)
        for answer in answers:
            times = (answer.created, answer.priority, answer.start_time)
            self.assertEqual(times, (7.0, 2.0, 8.0))
            self.assertEqual([type(t) for t in times], [float] * 3, answer)
        self.assertIs(type(read.end_time), float)

    @defer.inlineCallbacks
    def test_the_first_end_stands_and_a_second_says_it_changed_nothing(self):
        yield self.store.add(record("a"))
        first = yield self.finish("a", 5.0, exit_status=0, stats={"items": 3})
        self.assertEqual((first.state, first.outcome), ("finished", "finished"))
        version = self.store.version
        for outcome in ("lost", "finished"):
            again = yield self.store.mark_finished("A", outcome, 9.0, exit_status=1,
                                                   stats={"items": 9}, reason="late")
            self.assertIsNone(again, "a second end must say it changed nothing")
        found = yield self.store.get("a")
        self.assertEqual((found.outcome, found.end_time, found.exit_status, found.stats,
                          found.reason), ("finished", 5.0, 0, {"items": 3}, None))
        self.assertEqual(self.store.version, version, "a second end moved the version")

    @defer.inlineCallbacks
    def test_an_end_recorded_after_another_store_ended_the_job_leaves_the_first(self):
        # A node cut off from the table records its crawl's end once it is
        # back; another had ended the job (lost) meanwhile.
        other = yield self.open(self.make_second_store)
        yield self.store.add(record("one"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        lost = yield other.mark_finished("one", "lost", 5.0, reason="its node went silent")
        self.assertEqual(lost.outcome, "lost")
        yield self.versions_agree(self.store, other)
        version = self.store.version
        late = yield self.store.mark_finished("one", "finished", 4.0, exit_status=0)
        self.assertIsNone(late)
        found = yield other.get("one")
        self.assertEqual((found.outcome, found.end_time, found.exit_status, found.reason),
                         ("lost", 5.0, None, "its node went silent"))
        self.assertEqual(self.store.version, version)

    @defer.inlineCallbacks
    def test_ending_an_unknown_job_changes_nothing(self):
        version = self.store.version
        self.assertIsNone((yield self.store.mark_finished("nosuch", "finished", 1.0)))
        self.assertEqual(self.store.version, version)
        self.assertEqual((yield self.store.counts()),
                         {"pending": 0, "running": 0, "finished": 0})

    @defer.inlineCallbacks
    def test_a_cancel_request_is_recorded(self):
        yield self.store.add(record("a"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.store.mark_cancel_requested("A")
        found = yield self.store.get("a")
        self.assertEqual((found.cancel_requested, found.kill_requested), (True, False))

    @defer.inlineCallbacks
    def test_a_kill_request_is_state_no_later_cancel_takes_back(self):
        yield self.store.add(record("a"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.store.mark_cancel_requested("a", kill=True)
        found = yield self.store.get("a")
        self.assertEqual((found.cancel_requested, found.kill_requested), (True, True))
        yield self.store.mark_cancel_requested("a")
        self.assertTrue((yield self.store.get("a")).kill_requested)
        listed = (yield self.store.jobs())[1]
        self.assertEqual([(r.id, r.kill_requested) for r in listed], [("a", True)])

    # -- cancelling a pending job ----------------------------------------------

    @defer.inlineCallbacks
    def test_cancel_pending_ends_a_pending_job(self):
        yield self.add_all(record("Wait"), record("other"))
        ended = yield self.store.cancel_pending("WAIT", 9.0)
        self.assertEqual((ended.id, ended.state, ended.outcome, ended.end_time),
                         ("Wait", "finished", "cancelled", 9.0))
        self.assertIsNone(ended.start_time)
        found = yield self.store.get("wait")
        self.assertEqual((found.state, found.outcome), ("finished", "cancelled"))
        # Once ended it is no longer pending, and never claimed.
        self.assertIsNone((yield self.store.cancel_pending("wait", 10.0)))
        self.assertEqual((yield self.claim_all(NODE_A, ["shop"])), ["other"])

    @defer.inlineCallbacks
    def test_cancel_pending_leaves_a_claimed_job_alone(self):
        yield self.store.add(record("a"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        self.assertIsNone((yield self.store.cancel_pending("a", 2.0)))
        found = yield self.store.get("a")
        self.assertEqual((found.state, found.outcome, found.node), ("running", None, NODE_A))
        yield self.store.mark_started("a", 5)
        self.assertIsNone((yield self.store.cancel_pending("a", 2.0)))
        self.assertEqual((yield self.store.get("a")).state, "running")

    @defer.inlineCallbacks
    def test_cancel_pending_of_a_finished_or_unknown_job(self):
        yield self.store.add(record("a"))
        yield self.finish("a", 3.0)
        self.assertIsNone((yield self.store.cancel_pending("a", 4.0)))
        self.assertEqual((yield self.store.get("a")).outcome, "finished")
        self.assertIsNone((yield self.store.cancel_pending("nosuch", 4.0)))

    # -- listings and counts ---------------------------------------------------

    @defer.inlineCallbacks
    def test_listings_in_the_order_of_each_section(self):
        yield self.add_all(*(record(n, created=i) for i, n in enumerate("abcdefgh")))
        # Finished: d ends last although it ended first in the calls.
        for jobid, end in (("a", 30.0), ("b", 10.0), ("c", 20.0)):
            yield self.finish(jobid, end)
        # Running: claimed in the order d, e, f with start times 50, 40, 45.
        for jobid, start in (("d", 50.0), ("e", 40.0), ("f", 45.0)):
            claimed = yield self.store.claim_next(NODE_A, ["shop"], start)
            self.assertEqual(claimed.id, jobid)
        # Pending: higher priority first, then the older.
        yield self.add_all(record("low", priority=-1, created=20),
                           record("high", priority=3, created=21),
                           record("high2", priority=3, created=22))
        pending, running, finished = yield self.store.jobs()
        self.assertEqual(ids(pending), ["high", "high2", "g", "h", "low"])
        self.assertEqual(ids(running), ["e", "f", "d"])
        self.assertEqual(ids(finished), ["b", "c", "a"])
        self.assertEqual({r.state for r in pending}, {"pending"})
        self.assertEqual({r.state for r in running}, {"running"})
        self.assertEqual({r.state for r in finished}, {"finished"})

    @defer.inlineCallbacks
    def test_listings_of_one_project_in_any_case(self):
        yield self.add_all(record("a", project="Shop"), record("b", project="news"),
                           record("c", project="shop"), record("d", project="news"),
                           record("e", project="SHOP"))
        yield self.finish("a", 5.0)
        yield self.finish("b", 6.0)
        yield self.store.claim_next(NODE_A, ["shop"], 7.0)
        for asked in ("SHOP", "shop", "Shop"):
            pending, running, finished = yield self.store.jobs(asked)
            self.assertEqual((ids(pending), ids(running), ids(finished)),
                             (["e"], ["c"], ["a"]))
        pending, running, finished = yield self.store.jobs("NEWS")
        self.assertEqual((ids(pending), ids(running), ids(finished)), (["d"], [], ["b"]))
        self.assertEqual((yield self.store.jobs("nosuch")), ([], [], []))
        pending, running, finished = yield self.store.jobs()
        self.assertEqual((sorted(ids(pending)), ids(running), ids(finished)),
                         (["d", "e"], ["c"], ["a", "b"]))

    @defer.inlineCallbacks
    def test_listings_carry_no_stats_but_get_does(self):
        yield self.add_all(record("done"), record("lost"))
        yield self.finish("done", 5.0, stats={"items": 30})
        yield self.store.claim_next(NODE_A, ["shop"], 6.0)
        yield self.store.recover(NODE_A, 7.0, lambda r: {"items": 2})
        _, _, finished = yield self.store.jobs()
        self.assertEqual(ids(finished), ["done", "lost"])
        self.assertEqual([r.stats for r in finished], [None, None])
        _, _, finished = yield self.store.jobs("shop")
        self.assertEqual([r.stats for r in finished], [None, None])
        self.assertEqual((yield self.store.get("done")).stats, {"items": 30})
        self.assertEqual((yield self.store.get("lost")).stats, {"items": 2})

    @defer.inlineCallbacks
    def test_counts(self):
        self.assertEqual((yield self.store.counts()),
                         {"pending": 0, "running": 0, "finished": 0})
        yield self.add_all(*(record(f"j{i}") for i in range(6)))
        yield self.finish("j0", 2.0)
        yield self.store.cancel_pending("j5", 3.0)
        yield self.store.claim_next(NODE_A, ["shop"], 4.0)
        yield self.store.claim_next(NODE_B, ["shop"], 4.0)
        self.assertEqual((yield self.store.counts()),
                         {"pending": 2, "running": 2, "finished": 2})

    # -- recovery --------------------------------------------------------------

    @defer.inlineCallbacks
    def test_recovery_is_scoped_to_a_node(self):
        yield self.add_all(record("a1"), record("b1"), record("a2"), record("done"),
                           record("waiting"))
        for jobid, node in (("a1", NODE_A), ("b1", NODE_B), ("a2", NODE_A)):
            claimed = yield self.store.claim_next(node, ["shop"], 3.0)
            self.assertEqual(claimed.id, jobid)
        yield self.store.mark_started("a1", 11)
        yield self.store.mark_started("b1", 12)
        # a2 was claimed on A, but its process never started (no pid).
        claimed = yield self.store.claim_next(NODE_B, ["shop"], 4.0)
        yield self.store.mark_finished(claimed.id, "finished", 5.0, stats={"items": 1})
        asked = []

        def stats_of(r):
            asked.append(r.id)
            return {"items": len(r.id), "of": r.id}

        lost = yield self.store.recover(NODE_A, 20.0, stats_of)
        self.assertEqual(sorted(ids(lost)), ["a1", "a2"])
        self.assertEqual(sorted(asked), ["a1", "a2"])
        for r in lost:
            self.assertEqual((r.state, r.outcome, r.end_time), ("finished", "lost", 20.0))
            self.assertEqual(r.stats, {"items": 2, "of": r.id})
            self.assertEqual(r.reason, "lost")
            found = yield self.store.get(r.id)
            self.assertEqual((found.state, found.outcome, found.end_time, found.stats),
                             ("finished", "lost", 20.0, {"items": 2, "of": r.id}))
            self.assertEqual(found.reason, "lost")
        # Why they were lost differs: one ran, the other never started.
        a1, a2 = (yield self.store.get("a1")), (yield self.store.get("a2"))
        self.assertEqual(a1.pid, 11)
        self.assertIsNone(a2.pid)
        self.assertNotEqual(a1.detail, a2.detail)
        b1 = yield self.store.get("b1")
        self.assertEqual((b1.state, b1.outcome, b1.node, b1.pid), ("running", None, NODE_B, 12))
        self.assertEqual((yield self.store.get("done")).stats, {"items": 1})
        self.assertEqual((yield self.store.get("done")).outcome, "finished")
        self.assertEqual((yield self.store.get("waiting")).state, "pending")
        self.assertEqual((yield self.store.recover(NODE_A, 21.0, stats_of)), [])
        lost = yield self.store.recover(NODE_B, 22.0, lambda r: None)
        self.assertEqual(ids(lost), ["b1"])
        self.assertIsNone((yield self.store.get("b1")).stats)

    @defer.inlineCallbacks
    def test_recovery_of_no_node_in_particular_ends_every_running_job(self):
        # What a start on a table no other service shares asks for.
        self.assertIsInstance(self.store.shared, bool)
        yield self.add_all(record("a1"), record("b1"), record("waiting"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.store.claim_next(NODE_B, ["shop"], 1.0)
        yield self.store.mark_started("b1", 12)
        lost = yield self.store.recover(None, 9.0, lambda r: {"of": r.id})
        self.assertEqual(sorted(ids(lost)), ["a1", "b1"])
        for jobid in ("a1", "b1"):
            found = yield self.store.get(jobid)
            self.assertEqual((found.state, found.outcome, found.end_time, found.stats),
                             ("finished", "lost", 9.0, {"of": jobid}))
        self.assertEqual((yield self.store.get("waiting")).state, "pending")

    # -- retries ---------------------------------------------------------------

    def retrying(self, jobid, policy=None, **fields):
        """A job whose policy retries (twice by default, backoff 60 s)."""
        policy = policy if policy is not None else {"retries": 2, "backoff": 60}
        return JobRecord(id=jobid, project="shop", spider="books", spider_file="/p/books.py",
                         settings=(("checkpoint", "/d/shop/ck"), ("max_items", "5")),
                         arguments=(("category", "x"),), priority=1.5, created=1.0,
                         policy=policy, locks=("path:shop:/d/shop/ck",), **fields)

    @defer.inlineCallbacks
    def run_and_end(self, jobid, now, outcome="failed", reason="exit 1", store=None):
        """Claims ``jobid`` at ``now`` (it must be next), starts and ends it."""
        store = store or self.store
        claimed = yield store.claim_next(NODE_A, ["shop"], now)
        self.assertEqual(claimed.id if claimed else None, jobid)
        yield store.mark_started(jobid, 100)
        ended = yield store.mark_finished(jobid, outcome, now + 10.0, exit_status=1,
                                          reason=reason)
        return ended

    @defer.inlineCallbacks
    def test_an_end_that_retries_writes_the_retry_with_it(self):
        listener, heard = yield self.listener()
        yield self.store.add(self.retrying("Nightly"))
        version = self.store.version
        ended = yield self.run_and_end("Nightly", 100.0)
        self.assertNotEqual(self.store.version, version)
        self.assertEqual((ended.outcome, ended.reason, ended.attempt), ("failed", "exit 1", 1))
        retry = ended.retry
        self.assertEqual((retry.id, retry.state, retry.attempt, retry.retry_of),
                         ("Nightly.r1", "pending", 2, "Nightly"))
        # The backoff from the end: 60 s plus at most 10 % of jitter.
        self.assertTrue(170.0 <= retry.not_before <= 176.0, retry.not_before)
        found = yield self.store.get("nightly.R1")
        self.assertEqual(found, retry)
        self.assertEqual((found.project, found.spider, found.spider_file, found.settings,
                          found.arguments, found.priority, found.locks, found.policy,
                          found.created, found.node, found.pid),
                         ("shop", "books", "/p/books.py",
                          (("checkpoint", "/d/shop/ck"), ("max_items", "5")),
                          (("category", "x"),), 1.5, ("path:shop:/d/shop/ck",),
                          {"retries": 2, "backoff": 60}, 110.0, None, None))
        pending, _, finished = yield self.store.jobs()
        self.assertEqual((ids(pending), ids(finished)), (["Nightly.r1"], ["Nightly"]))
        if listener is not None:
            arrived = yield until(lambda: (notices.QUEUED, "Nightly.r1") in
                                  [(n.kind, n.jobid) for n in heard])
            self.assertTrue(arrived, heard)

    @defer.inlineCallbacks
    def test_retries_wait_longer_each_time_and_stop_past_retries(self):
        yield self.store.add(self.retrying("a"))
        first = yield self.run_and_end("a", 100.0)
        due = first.retry.not_before
        # Not before its time: no claim, and the earliest due time is known.
        self.assertIsNone((yield self.store.claim_next(NODE_A, ["shop"], due - 1)))
        self.assertEqual((yield self.store.next_retry(["SHOP"], due - 1)), due)
        self.assertIsNone((yield self.store.next_retry(["shop"], due)))
        self.assertIsNone((yield self.store.next_retry(["news"], 0.0)))
        second = yield self.run_and_end("a.r1", due)
        retry = second.retry
        self.assertEqual((second.attempt, second.retry_of), (2, "a"))
        self.assertEqual((retry.id, retry.attempt, retry.retry_of), ("a.r2", 3, "a"))
        # Twice the first wait, plus at most 10 %.
        wait = retry.not_before - second.end_time
        self.assertTrue(120.0 <= wait <= 132.0, wait)
        third = yield self.run_and_end("a.r2", retry.not_before)
        self.assertEqual(third.attempt, 3)
        self.assertIsNone(third.retry, "retries=2: the third attempt is the last")
        pending, _, finished = yield self.store.jobs()
        self.assertEqual((pending, ids(finished)), ([], ["a", "a.r1", "a.r2"]))

    @defer.inlineCallbacks
    def test_the_jitter_stays_within_ten_percent_at_every_attempt(self):
        # Waits of 1, 2, 4... s from backoff=1s, each with its jitter.
        yield self.store.add(self.retrying("j", policy={"retries": 10, "backoff": 1}))
        jobid, now = "j", 10.0
        for attempt in range(1, 12):
            ended = yield self.run_and_end(jobid, now)
            if attempt == 11:
                self.assertIsNone(ended.retry)
                break
            wait = ended.retry.not_before - ended.end_time
            first = min(2 ** (attempt - 1), 3600)
            self.assertTrue(first <= wait <= first * 1.1, (attempt, wait))
            self.assertEqual(ended.retry.attempt, attempt + 1)
            jobid, now = ended.retry.id, ended.retry.not_before
        self.assertEqual(jobid, "j.r10")

    @defer.inlineCallbacks
    def test_what_a_policy_retries_and_what_it_does_not(self):
        cases = [
            # (policy, outcome, reason, retried)
            ({"retries": 1}, "failed", "exit 1", True),
            ({"retries": 1}, "lost", "lost", True),
            ({"retries": 1}, "cancelled", "timeout", True),
            ({"retries": 1}, "cancelled", "stalled", True),
            ({"retries": 1}, "failed", "memory", True),
            ({"retries": 1}, "finished", "exit 0", False),
            ({"retries": 1}, "cancelled", "cancel.json", False),
            ({"retries": 1}, "cancelled", "service stopped", False),
            ({"retries": 1, "retry_on": ["timeout"]}, "failed", "exit 1", False),
            ({"retries": 1, "retry_on": ["timeout"]}, "cancelled", "timeout", True),
            ({"retries": 0}, "failed", "exit 1", False),
            (None, "failed", "exit 1", False),
        ]
        for n, (policy, outcome, reason, retried) in enumerate(cases):
            jobid = f"c{n}"
            yield self.store.add(JobRecord(id=jobid, project="shop", spider=f"s{n}",
                                           spider_file="/p/x.py", policy=policy))
            ended = yield self.run_and_end(jobid, 10.0, outcome, reason)
            self.assertEqual(ended.retry is not None, retried, (policy, outcome, reason))
            found = yield self.store.get(f"{jobid}.r1")
            self.assertEqual(found is not None, retried, (policy, outcome, reason))

    @defer.inlineCallbacks
    def test_a_users_cancel_never_retries_and_cancelling_a_pending_retry_ends_the_chain(
            self):
        yield self.store.add(self.retrying("u", policy={"retries": 3, "retry_on": ["failed"]}))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.store.mark_cancel_requested("u")
        ended = yield self.store.mark_finished("u", "cancelled", 5.0, reason="cancel.json")
        self.assertIsNone(ended.retry)
        yield self.store.add(self.retrying("v"))
        retry = (yield self.run_and_end("v", 10.0)).retry
        cancelled = yield self.store.cancel_pending(retry.id, 30.0)
        self.assertEqual((cancelled.outcome, cancelled.reason, cancelled.attempt),
                         ("cancelled", "cancel.json", 2))
        self.assertIsNone(cancelled.retry)
        self.assertEqual((yield self.store.counts()),
                         {"pending": 0, "running": 0, "finished": 3})

    @defer.inlineCallbacks
    def test_an_end_recorded_twice_queues_one_retry(self):
        other = yield self.open(self.make_second_store)
        yield self.store.add(self.retrying("once"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        # Two ends at once, through two stores (two nodes; or a node and
        # the start that settles what it left): the first stands, alone.
        ends = yield defer.gatherResults([
            self.store.mark_finished("once", "failed", 5.0, exit_status=1, reason="exit 1"),
            other.mark_finished("once", "lost", 6.0, reason="node lost")])
        made = [e for e in ends if e is not None]
        self.assertEqual(len(made), 1, ends)
        self.assertEqual(made[0].retry.id, "once.r1")
        pending, _, _ = yield self.store.jobs()
        self.assertEqual(ids(pending), ["once.r1"])

    @defer.inlineCallbacks
    def test_a_retry_whose_id_is_taken_leaves_the_end_recorded(self):
        # A user named a job as the retry would be named.
        yield self.store.add(JobRecord(id="X.R1", project="news", spider="other",
                                       spider_file="/p/o.py"))
        yield self.store.add(self.retrying("x"))
        ended = yield self.run_and_end("x", 10.0)
        self.assertEqual((ended.state, ended.outcome), ("finished", "failed"))
        self.assertIsNone(ended.retry)
        self.assertEqual((yield self.store.get("x")).outcome, "failed")
        self.assertEqual((yield self.store.get("x.r1")).project, "news")

    @defer.inlineCallbacks
    def test_a_waiting_retry_holds_back_neither_its_spider_nor_its_lock(self):
        yield self.store.add(self.retrying("r"))
        retry = (yield self.run_and_end("r", 10.0)).retry
        # Queued after it: same spider, same checkpoint lock.
        yield self.store.add(self.retrying("later"))
        claimed = yield self.store.claim_next(NODE_A, ["shop"], retry.not_before - 5)
        self.assertEqual(claimed.id, "later")
        # Due, but "later" holds the checkpoint: it waits for that now.
        self.assertIsNone((yield self.store.claim_next(NODE_A, ["shop"], retry.not_before)))
        yield self.store.mark_finished("later", "finished", retry.not_before + 1)
        claimed = yield self.store.claim_next(NODE_A, ["shop"], retry.not_before + 2)
        self.assertEqual(claimed.id, "r.r1")

    @defer.inlineCallbacks
    def test_a_pending_retry_counts_as_its_schedules_run(self):
        yield self.store.add(self.retrying("tick-1", schedule="tick"))
        yield self.run_and_end("tick-1", 10.0)
        self.assertEqual((yield self.store.schedule_jobs("tick")), (1, 0))
        self.assertEqual((yield self.store.get("tick-1.r1")).schedule, "tick")

    @defer.inlineCallbacks
    def test_a_job_lost_at_recovery_gets_its_retry(self):
        yield self.store.add(self.retrying("gone"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.store.mark_started("gone", 5)
        lost = yield self.store.recover(None, 50.0, lambda r: None)
        self.assertEqual([(r.id, r.outcome, r.retry.id) for r in lost],
                         [("gone", "lost", "gone.r1")])
        self.assertTrue(110.0 <= lost[0].retry.not_before <= 116.0)
        self.assertEqual((yield self.store.recover(None, 60.0, lambda r: None)), [])
        self.assertEqual((yield self.store.counts())["pending"], 1)

    # -- the version -----------------------------------------------------------

    # -- run health (health.checks, judged with the end) ----------------------

    @defer.inlineCallbacks
    def run_counted(self, jobid, now, items, policy=None, outcome="finished", runtime=10.0,
                    spider="books", schedule=None, pages=10):
        """Adds, runs and ends ``jobid`` at ``now`` with ``items`` in its stats."""
        yield self.store.add(JobRecord(id=jobid, project="shop", spider=spider,
                                       spider_file="/p/x.py", policy=policy,
                                       schedule=schedule))
        claimed = yield self.store.claim_next(NODE_A, ["shop"], now)
        self.assertEqual(claimed.id, jobid)
        yield self.store.mark_started(jobid, 100)
        ended = yield self.store.mark_finished(
            jobid, outcome, now + runtime, exit_status=0,
            stats={"items": items, "fetched": pages, "failed": 1, "callback_errors": 2})
        return ended

    @defer.inlineCallbacks
    def test_a_run_is_judged_against_the_healthy_runs_before_it(self):
        drop = {"items_drop": 50}
        for n in range(5):
            ended = yield self.run_counted(f"r{n}", 100.0 * n, 100 + n, drop)
            self.assertEqual((ended.health, ended.health_reasons), ("healthy", ()))
            self.assertEqual((ended.items, ended.pages, ended.errors), (100 + n, 10, 3))
        ended = yield self.run_counted("r5", 600.0, 10, drop)
        reasons = ("items 10 < 50% of median 102 over 5 runs",)
        self.assertEqual((ended.outcome, ended.health, ended.health_reasons),
                         ("finished", "degraded", reasons))
        found = yield self.store.get("R5")
        self.assertEqual((found.health, found.health_reasons, found.items), ("degraded", reasons, 10))
        _, _, finished = yield self.store.jobs("shop")
        listed = {r.id: (r.health, r.health_reasons) for r in finished}
        self.assertEqual((listed["r5"], listed["r4"]), (("degraded", reasons), ("healthy", ())))
        # A degraded run is no part of the history the next is judged by:
        # three more of them would make the median 10 if they were.
        for n in (6, 7):
            ended = yield self.run_counted(f"r{n}", 100.0 * n, 10, drop)
            self.assertEqual(ended.health, "degraded")
        ended = yield self.run_counted("r8", 800.0, 40, drop)
        self.assertEqual(ended.health_reasons,
                         ("items 40 < 50% of median 102 over 5 runs",))
        ended = yield self.run_counted("r9", 900.0, 51, drop)
        self.assertEqual(ended.health, "healthy")

    @defer.inlineCallbacks
    def test_a_count_no_64_bit_column_holds_is_none_and_the_end_is_written(self):
        ended = yield self.run_counted("huge", 10.0, 2 ** 63, {"min_pages": 1})
        self.assertEqual((ended.outcome, ended.items, ended.pages, ended.errors, ended.health),
                         ("finished", None, 10, 3, "healthy"))
        found = yield self.store.get("huge")
        self.assertEqual((found.state, found.items, found.stats["items"]),
                         ("finished", None, 2 ** 63))

    @defer.inlineCallbacks
    def test_an_end_whose_judging_fails_is_written_without_counts_or_health(self):
        from netweir_serve.store import job_table

        def broken(run, policy, history=()):
            raise ZeroDivisionError("a check's bug")

        self.patch(job_table, "judge", broken)
        ended = yield self.run_counted("judged", 10.0, 5, {"min_items": 1})
        self.assertEqual((ended.outcome, ended.items, ended.pages, ended.errors, ended.health,
                          ended.health_reasons), ("finished", None, None, None, None, ()))
        found = yield self.store.get("judged")
        self.assertEqual((found.state, found.outcome, found.items, found.health),
                         ("finished", "finished", None, None))
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    @defer.inlineCallbacks
    def test_no_drop_or_slower_check_before_three_runs_and_min_items_at_once(self):
        policy = {"items_drop": 10, "slower": 2, "min_pages": 5}
        for n, items in enumerate((100, 0, 100)):
            ended = yield self.run_counted(f"f{n}", 100.0 * n, items, policy, runtime=10.0)
            self.assertEqual(ended.health, "healthy", n)
        ended = yield self.run_counted("f3", 400.0, 100, policy, runtime=25.0, pages=4)
        self.assertEqual(ended.health_reasons,
                         ("pages 4 < min_pages 5", "runtime 25s > 2x median 10s over 3 runs"))

    @defer.inlineCallbacks
    def test_only_a_run_that_finished_has_a_health(self):
        policy = {"min_items": 50}
        failed = yield self.run_counted("bad", 10.0, 1, policy, outcome="failed")
        self.assertEqual((failed.health, failed.health_reasons, failed.items), (None, (), 1))
        yield self.store.add(JobRecord(id="waits", project="shop", spider="books",
                                       spider_file="/p/x.py", policy=policy))
        cancelled = yield self.store.cancel_pending("waits", 20.0)
        self.assertEqual((cancelled.health, cancelled.items), (None, None))
        first = yield self.run_counted("first", 30.0, 1, policy)
        self.assertEqual((first.health, first.health_reasons),
                         ("degraded", ("items 1 < min_items 50",)))

    @defer.inlineCallbacks
    def test_a_schedules_run_is_compared_with_its_schedules_runs_and_history_k(self):
        drop = {"items_drop": 95, "history": 3}
        for n, items in enumerate((1000, 1000, 1000, 100, 100, 100)):
            ended = yield self.run_counted(f"s{n}", 100.0 * n, items, drop, schedule="Nightly")
            self.assertEqual(ended.health, "healthy", n)
        # The spider's own runs (another schedule, or none) are not its history.
        for n in range(3):
            yield self.run_counted(f"o{n}", 700.0 + n, 1, drop, schedule="other")
        ended = yield self.run_counted("s6", 800.0, 1, drop, schedule="Nightly")
        self.assertEqual(ended.health_reasons, ("items 1 < 5% of median 100 over 3 runs",))
        # A job no schedule queued compares with every run of its spider.
        ended = yield self.run_counted("alone", 900.0, 0, drop)
        self.assertEqual(ended.health_reasons, ("items 0 < 5% of median 1 over 3 runs",))

    @defer.inlineCallbacks
    def test_a_schedule_name_used_again_for_another_spider_has_not_the_old_runs(self):
        drop = {"items_drop": 50}
        for n in range(3):
            yield self.run_counted(f"old{n}", 100.0 * n, 1000, drop, schedule="Daily")
        # Deleted, and made again for another spider (or project): its runs
        # are compared with its own, not with those of the old one's spider.
        ended = yield self.run_counted("new", 400.0, 1, drop, schedule="Daily", spider="news")
        self.assertEqual((ended.health, ended.health_reasons), ("healthy", ()))
        runs, history = yield self.store.runs("shop", "news", schedule="Daily")
        self.assertEqual((ids(runs), [r.items for r in history]), (["new"], [1]))
        runs, history = yield self.store.runs("shop", "books", schedule="Daily")
        self.assertEqual((ids(runs), len(history)), (["old2", "old1", "old0"], 3))

    @defer.inlineCallbacks
    def test_a_schedules_runs_are_found_whatever_the_case_of_its_name(self):
        drop = {"items_drop": 50}
        for n in range(3):
            yield self.run_counted(f"d{n}", 100.0 * n, 1000, drop, schedule="Daily")
        # Made again as "DAILY" for the same spider: the same schedule key.
        ended = yield self.run_counted("d3", 400.0, 1, drop, schedule="DAILY")
        self.assertEqual(ended.health_reasons, ("items 1 < 50% of median 1000 over 3 runs",))
        runs, history = yield self.store.runs("shop", "books", schedule="daily")
        self.assertEqual((ids(runs), len(history)), (["d3", "d2", "d1", "d0"], 3))

    @defer.inlineCallbacks
    def test_runs_of_a_spider_and_of_a_schedule_newest_first_with_their_history(self):
        for n in range(4):
            yield self.run_counted(f"a{n}", 100.0 * n, 10 * (n + 1), {"min_items": 15},
                                   schedule="Nightly" if n % 2 else None)
        yield self.run_counted("broke", 500.0, 0, outcome="failed")
        yield self.run_counted("news", 600.0, 5, spider="news")
        runs, history = yield self.store.runs("SHOP", "books")
        self.assertEqual(ids(runs), ["broke", "a3", "a2", "a1", "a0"])
        self.assertEqual((runs[0].outcome, runs[0].health, runs[0].stats), ("failed", None, None))
        self.assertEqual([(r.items, r.runtime) for r in history],
                         [(40, 10.0), (30, 10.0), (20, 10.0)])
        runs, history = yield self.store.runs("shop", "books", limit=2, history=3)
        self.assertEqual((ids(runs), len(history)), (["broke", "a3"], 3))
        runs, history = yield self.store.runs("shop", "books", schedule="Nightly")
        self.assertEqual((ids(runs), [r.items for r in history]), (["a3", "a1"], [40, 20]))
        self.assertEqual((yield self.store.runs("shop", "nothing")), ([], []))

    @defer.inlineCallbacks
    def test_the_version_moves_on_every_change_and_not_on_reads(self):
        seen = [self.store.version]

        def moved(what):
            now = self.store.version
            self.assertNotIn(now, seen, f"the version did not move on after {what}")
            seen.append(now)

        @defer.inlineCallbacks
        def reads():
            yield self.store.get("a")
            yield self.store.get("nosuch")
            yield self.store.jobs()
            yield self.store.jobs("shop")
            yield self.store.counts()
            self.store.jobs()
            self.assertEqual(self.store.version, seen[-1], "a read moved it")

        yield reads()
        yield self.store.add(record("a"))
        yield moved("add")
        yield reads()
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield moved("claim_next")
        yield self.store.mark_started("a", 5)
        yield moved("mark_started")
        yield self.store.mark_cancel_requested("a")
        yield moved("mark_cancel_requested")
        yield self.store.mark_finished("a", "cancelled", 2.0)
        yield moved("mark_finished")
        yield reads()
        yield self.store.add(record("b"))
        yield moved("add")
        yield self.store.cancel_pending("b", 3.0)
        yield moved("cancel_pending")
        yield self.store.add(record("c"))
        yield moved("add")
        yield self.store.claim_next(NODE_A, ["shop"], 4.0)
        yield moved("claim_next")
        yield self.store.recover(NODE_A, 5.0, lambda r: None)
        yield moved("recover")
        yield self.store.prune(1)
        yield moved("prune")
        yield reads()

    @defer.inlineCallbacks
    def test_the_version_moves_for_a_change_made_through_another_store(self):
        # "for whichever service changed it": answers cached by one service
        # must not outlive a change another made. A table that is not
        # shared has one service at a time, which keeps its version itself;
        # another's changes are seen from the next start on.
        other = yield self.open(self.make_second_store)
        initial = self.store.version
        seen = {initial}
        for change in (lambda: other.add(record("a")),
                       lambda: other.claim_next(NODE_B, ["shop"], 1.0),
                       lambda: self.store.mark_started("a", 5),
                       lambda: other.mark_finished("a", "finished", 2.0)):
            yield change()
            if not self.store.shared:
                continue
            yield self.versions_agree(self.store, other)
            mine, theirs = self.store.version, other.version
            self.assertEqual(mine, theirs)
            self.assertNotIn(mine, seen)
            seen.add(mine)
        latest = other.version
        reopened = yield self.open(self.make_second_store)
        self.assertEqual(reopened.version, latest)
        self.assertNotEqual(latest, initial)

    @defer.inlineCallbacks
    def test_tally_counts_by_state_project_and_node(self):
        yield self.add_all(record("a"), record("b"), record("c"), record("n1", project="news"),
                           record("w"))
        yield self.finish("a", 5.0)
        yield self.store.claim_next(NODE_B, ["news"], 6.0)
        yield self.store.claim_next(NODE_A, ["shop"], 6.0)
        yield self.store.cancel_pending("w", 7.0)
        self.assertEqual((yield self.store.tally()), {
            ("finished", "shop", NODE_A): 1, ("running", "shop", NODE_A): 1,
            ("running", "news", NODE_B): 1, ("pending", "shop", None): 1,
            ("finished", "shop", None): 1})

    # -- every change is told ------------------------------------------------

    def changes(self):
        """Every method that changes a job or a schedule: (name, the kind
        of notice it sends, the job it names, what to set up first, and a
        call that changes something). IClusterStore's too, where the store
        provides it."""
        found = {}

        def job_of(jobid, project, node=NODE_A):
            return lambda s: self.add_all(record(jobid, project=project), store=s).addCallback(
                lambda _: s.claim_next(node, [project], 1.0))

        def plan(name, kind, jobid, call, prepare=lambda s: defer.succeed(None)):
            found[name] = (kind, jobid, prepare, call)

        plan("add", notices.QUEUED, "n-add", lambda s, _: s.add(record("n-add")))
        plan("claim_next", notices.CLAIMED, "n-claim",
             lambda s, _: s.claim_next(NODE_A, ["claims"], 1.0),
             lambda s: s.add(record("n-claim", project="claims")))
        plan("release_claim", notices.QUEUED, "n-back",
             lambda s, claimed: s.release_claim("n-back", NODE_A, claimed.start_time),
             job_of("n-back", "backs"))
        plan("mark_started", notices.STARTED, "n-start",
             lambda s, _: s.mark_started("n-start", 5), job_of("n-start", "starts"))
        plan("mark_finished", notices.ENDED, "n-end",
             lambda s, _: s.mark_finished("n-end", "finished", 2.0), job_of("n-end", "ends"))
        plan("cancel_pending", notices.ENDED, "n-cancel",
             lambda s, _: s.cancel_pending("n-cancel", 3.0), lambda s: s.add(record("n-cancel")))
        plan("mark_cancel_requested", notices.CANCEL, "n-ask",
             lambda s, _: s.mark_cancel_requested("n-ask"), job_of("n-ask", "asks"))
        plan("recover", notices.ENDED, "n-lost",
             lambda s, _: s.recover("node-r", 4.0, lambda r: None),
             job_of("n-lost", "recovering", node="node-r"))
        # One notice per job forgotten, naming it (store/journal.py).
        plan("prune", notices.PRUNED, "n-end", lambda s, _: s.prune(0))
        plan("add_schedule", notices.SCHEDULE, None,
             lambda s, _: s.add_schedule(schedule("s-add")))
        plan("update_schedule", notices.SCHEDULE, None,
             lambda s, _: s.update_schedule("s-up", paused=True),
             lambda s: s.add_schedule(schedule("s-up")))
        plan("claim_firing", notices.SCHEDULE, None,
             lambda s, added: s.claim_firing("s-fire", added.seq, 10.0, 12.0, 10.0),
             lambda s: s.add_schedule(schedule("s-fire")))
        plan("claim_firings", notices.SCHEDULE, None,
             lambda s, added: s.claim_firings([("s-burst", added.seq, 10.0, 12.0, 10.0)]),
             lambda s: s.add_schedule(schedule("s-burst")))
        plan("delete_schedule", notices.SCHEDULE, None,
             lambda s, _: s.delete_schedule("s-del"),
             lambda s: s.add_schedule(schedule("s-del")))
        plan("settle_chain_firing", notices.SCHEDULE, None,
             lambda s, _: s.settle_chain_firing("s-chain", "n-up", skipped_added=1,
                                                last_job="s-chain-after-n-up"),
             lambda s: s.add_schedule(chain("s-chain", "books", project="chained")).addCallback(
                 lambda _: job_of("n-up", "chained")(s)).addCallback(
                 lambda _: s.mark_finished("n-up", "finished", 2.0)))
        if IClusterStore.providedBy(self.store):
            plan("register_node", notices.NODE, None,
                 lambda s, _: s.register_node("node-x", "http://x"))
            plan("save_stats", notices.STATS, "n-stats",
                 lambda s, _: s.save_stats("n-stats", {"items": 1}), job_of("n-stats", "stats"))
            plan("mark_lost", notices.ENDED, "n-ml", lambda s, _: s.mark_lost("node-ml", 5.0),
                 job_of("n-ml", "ml", node="node-ml"))
            # A timeout in the past: every live node is silent past it.
            plan("declare_dead", notices.NODE, None,
                 lambda s, _: s.declare_dead(-3600, end_time=6.0),
                 lambda s: s.register_node("node-dd", "http://dd"))
        return found

    # Methods that change no job and no schedule, and so tell nothing.
    READS = ("get", "unfinished_jobs", "finished_rows", "listed_jobs", "schedule_jobs",
             "unfinished_schedule_jobs", "runs", "running", "jobs", "counts", "tally", "next_retry", "get_schedule", "chain_firings",
             "schedules", "nodes", "heartbeat", "on_notice", "close")

    def test_every_method_is_known_as_a_change_or_not(self):
        # A method added to an interface must say here whether it changes
        # a job or a schedule, and so be held to telling it.
        declared = set()
        for interface in (IJobStore, IScheduleStore, IClusterStore):
            if interface.providedBy(self.store):
                declared |= {name for name, spec in interface.namesAndDescriptions()
                             if hasattr(spec, "getSignatureInfo")}
        self.assertEqual(declared - set(self.READS), set(self.changes()))

    @defer.inlineCallbacks
    def listener(self):
        """(another store, the notices it hears from now on) on a shared
        backend, as another node would hear them; (None, []) on one that
        is not shared (it has no one to tell)."""
        heard = []
        if not self.store.shared:
            return None, heard
        listener = yield self.open(self.make_second_store)
        yield self.versions_agree(listener, self.store)
        listener.on_notice(heard.append)
        return listener, heard

    @defer.inlineCallbacks
    def test_every_change_moves_the_version_and_tells_the_other_stores(self):
        listener, heard = yield self.listener()
        for name, (kind, jobid, prepare, call) in self.changes().items():
            prepared = yield prepare(self.store)
            if listener is not None:
                yield self.versions_agree(listener, self.store)
            del heard[:]
            before = self.store.version
            yield call(self.store, prepared)
            if kind in notices.PROGRESS:
                # Progress alone: told, but no listing shows it.
                self.assertEqual(self.store.version, before, f"{name} moved the version")
            else:
                self.assertNotEqual(self.store.version, before,
                                    f"{name} did not move the version")
            if listener is None:
                continue
            yield self.versions_agree(listener, self.store)
            self.assertEqual(listener.version, self.store.version, name)
            arrived = yield until(lambda: (kind, jobid) in [(n.kind, n.jobid) for n in heard])
            self.assertTrue(arrived, f"{name} sent no {kind} notice for {jobid}: {heard}")
            self.assertTrue(all(n.version <= self.store.version for n in heard), heard)

    @defer.inlineCallbacks
    def test_a_read_or_a_write_that_changes_nothing_tells_nothing(self):
        yield self.add_all(record("a"), record("done"))
        yield self.finish("a", 2.0)
        yield self.store.add_schedule(schedule())
        listener, heard = yield self.listener()
        version = self.store.version
        for call in (lambda: self.store.get("a"), lambda: self.store.jobs(),
                     lambda: self.store.counts(), lambda: self.store.tally(),
                     lambda: self.store.running(), lambda: self.store.schedule_jobs("tick"),
                     lambda: self.store.schedules(), lambda: self.store.get_schedule("tick"),
                     lambda: self.store.claim_next(NODE_A, ["nosuch"], 3.0),
                     lambda: self.store.mark_finished("a", "lost", 4.0),
                     lambda: self.store.cancel_pending("a", 4.0),
                     lambda: self.store.mark_started("nosuch", 4),
                     lambda: self.store.release_claim("a", NODE_A, 1.0),
                     lambda: self.store.prune(10),
                     lambda: self.store.update_schedule("nosuch", paused=True),
                     lambda: self.store.claim_firing("tick", 999, 10.0, 12.0, 10.0),
                     lambda: self.store.chain_firings(),
                     lambda: self.store.settle_chain_firing("tick", "a", skipped_added=1),
                     lambda: self.store.delete_schedule("nosuch")):
            yield call()
        self.assertEqual(self.store.version, version)
        # A change made after them is the first thing heard.
        yield self.store.add(record("last"))
        if listener is not None:
            yield self.versions_agree(listener, self.store)
            self.assertEqual([(n.kind, n.jobid) for n in heard], [(notices.QUEUED, "last")])
        self.assertNotEqual(self.store.version, version)

    # -- pruning ---------------------------------------------------------------

    @defer.inlineCallbacks
    def test_pruning_keeps_the_newest_finished_and_returns_the_others(self):
        yield self.add_all(*(record(f"j{i}") for i in range(5)))
        # Ended out of order: j3 is the newest, then j1.
        ends = {"j0": 10.0, "j1": 40.0, "j2": 20.0, "j3": 50.0, "j4": 30.0}
        for jobid in sorted(ends):
            yield self.finish(jobid, ends[jobid])
        yield self.add_all(record("running"), record("waiting"))
        yield self.store.claim_next(NODE_A, ["shop"], 60.0)
        gone = yield self.store.prune(2)
        self.assertEqual(sorted(ids(gone)), ["j0", "j2", "j4"])
        self.assertEqual({r.state for r in gone}, {"finished"})
        pending, running, finished = yield self.store.jobs()
        self.assertEqual((ids(pending), ids(running), ids(finished)),
                         (["waiting"], ["running"], ["j1", "j3"]))
        for jobid in ("j0", "j2", "j4"):
            self.assertIsNone((yield self.store.get(jobid)))
        self.assertEqual((yield self.store.prune(2)), [])
        self.assertEqual((yield self.store.counts()),
                         {"pending": 1, "running": 1, "finished": 2})
        # A forgotten id is free again.
        yield self.store.add(record("J0"))

    @defer.inlineCallbacks
    def test_pruning_for_a_node_counts_its_own_and_those_no_node_ran(self):
        yield self.add_all(*(record(f"j{i}") for i in range(6)))
        for i, node in enumerate((NODE_A, NODE_B, NODE_A, NODE_B, NODE_A)):
            yield self.finish(f"j{i}", 10.0 + i, node=node)
        yield self.store.cancel_pending("j5", 20.0)  # ran nowhere: no node
        gone = yield self.store.prune(2, node=NODE_A)
        # NODE_A's window, newest first: j5 (no node), j4; j2 and j0 go.
        self.assertEqual(sorted(ids(gone)), ["j0", "j2"])
        self.assertEqual((yield self.store.prune(2, node=NODE_A)), [])
        # NODE_B's own window: j5, j3; j1 goes. Nobody else's is touched.
        self.assertEqual(ids((yield self.store.prune(2, node=NODE_B))), ["j1"])
        self.assertEqual(sorted(ids((yield self.store.jobs())[2])), ["j3", "j4", "j5"])
        # Without a node, every finished job counts.
        self.assertEqual(sorted(ids((yield self.store.prune(1)))), ["j3", "j4"])

    @defer.inlineCallbacks
    def test_keep_zero_forgets_every_finished_job_and_nothing_else(self):
        yield self.add_all(record("a"), record("b"), record("c"), record("d"))
        yield self.finish("a", 1.0)
        yield self.store.cancel_pending("d", 2.0)
        yield self.store.claim_next(NODE_A, ["shop"], 3.0)
        gone = yield self.store.prune(0)
        self.assertEqual(sorted(ids(gone)), ["a", "d"])
        self.assertEqual((yield self.store.counts()),
                         {"pending": 1, "running": 1, "finished": 0})
        self.assertEqual((yield self.store.get("b")).state, "running")
        self.assertEqual((yield self.store.get("c")).state, "pending")

    @defer.inlineCallbacks
    def test_pruning_with_fewer_than_keep_forgets_nothing(self):
        yield self.add_all(record("a"), record("b"))
        yield self.finish("a", 1.0)
        self.assertEqual((yield self.store.prune(5)), [])
        self.assertEqual((yield self.store.get("a")).state, "finished")

    # -- closing ---------------------------------------------------------------

    @defer.inlineCallbacks
    def test_close_fails_later_writes_with_store_error(self):
        yield self.add_all(record("a"), record("b"))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.close_store(self.store)
        writes = [
            lambda: self.store.add(record("c")),
            lambda: self.store.claim_next(NODE_A, ["shop"], 2.0),
            lambda: self.store.mark_started("a", 5),
            lambda: self.store.mark_finished("a", "finished", 3.0),
            lambda: self.store.cancel_pending("b", 3.0),
            lambda: self.store.mark_cancel_requested("a"),
            lambda: self.store.recover(NODE_A, 3.0, lambda r: None),
        ]
        for write in writes:
            yield self.assertFailure(defer.maybeDeferred(write), StoreError)

    @defer.inlineCallbacks
    def test_what_was_written_survives_a_close(self):
        other = yield self.open(self.make_second_store)
        yield self.add_all(record("a"), record("b"))
        yield self.finish("a", 2.0, stats={"items": 4})
        yield self.close_store(self.store)
        found = yield other.get("a")
        self.assertEqual((found.outcome, found.stats), ("finished", {"items": 4}))
        self.assertEqual((yield other.get("b")).state, "pending")


def schedule(name="tick", project="shop", next_due=10.0, **fields):
    return ScheduleRecord(name=name, project=project, spider="books", kind="every",
                          rule="2s", tz="UTC", next_due=next_due, anchor=8.0,
                          settings=(("max_items", "5"),), arguments=(("a", "1"),), **fields)


def chain(name, upstream, project="shop", spider="details", on=("healthy",), **fields):
    """A chain schedule: ``spider`` runs after each job of ``upstream`` (a
    spider, or schedule:NAME) that ends as ``on`` says."""
    return ScheduleRecord(name=name, project=project, spider=spider, kind="after",
                          rule=upstream, tz="UTC", chain_on=tuple(on), **fields)


class ScheduleStoreContract:
    """The behaviour of IScheduleStore, on the stores JobStoreContract opens."""

    def test_provides_the_schedule_interface(self):
        self.assertTrue(verifyObject(IScheduleStore, self.store))

    @defer.inlineCallbacks
    def test_an_edit_sets_its_fields_and_the_counts_only_grow(self):
        old = yield self.store.add_schedule(schedule(runs=0))
        edited = yield self.store.update_schedule(
            "tick", seq=old.seq, kind="cron", rule="0 3 * * *", tz="Europe/Berlin", anchor=9.0,
            overlap="buffer_all", misfire="skip", settings=(("B", "2"),), arguments=(),
            priority=2.5, policy={"timeout": 60}, jitter=90.0, pause_after=3, note="edited",
            next_due=30.0, buffered_added=2, caught_up_added=1, skipped_added=1)
        self.assertEqual(edited, replace(old, kind="cron", rule="0 3 * * *", tz="Europe/Berlin",
                                         anchor=9.0, overlap="buffer_all", misfire="skip",
                                         settings=(("B", "2"),), arguments=(), priority=2.5,
                                         policy={"timeout": 60}, jitter=90.0, pause_after=3,
                                         note="edited", next_due=30.0, buffered=2,
                                         caught_up=1, skipped=1))
        self.assertEqual((yield self.store.get_schedule("tick")), edited)
        for count in ("buffered", "caught_up", "failed_in_row_added"):
            yield self.assertFailure(self.store.update_schedule("tick", **{count: 5}), TypeError)

    @defer.inlineCallbacks
    def test_a_schedules_unfinished_jobs_oldest_first(self):
        for jobid, name in (("a", "Nightly"), ("b", "other"), ("c", "Nightly"), ("d", "Nightly")):
            yield self.store.add(replace(record(jobid), schedule=name))
        yield self.store.claim_next(NODE_A, ["shop"], 1.0)
        yield self.store.cancel_pending("d", 2.0)
        self.assertEqual((yield self.store.unfinished_schedule_jobs("Nightly")), ["a", "c"])
        self.assertEqual((yield self.store.get("a")).state, "running")
        self.assertEqual((yield self.store.unfinished_schedule_jobs("none")), [])
        self.assertEqual((yield self.store.unfinished_schedule_jobs("nightLY")), ["a", "c"])

    @defer.inlineCallbacks
    def end_run(self, jobid, outcome, reason=None, policy=None, now=100.0):
        yield self.store.add(self.retrying(jobid, policy=policy or {}, schedule="Tick"))
        ended = yield self.run_and_end(jobid, now, outcome=outcome, reason=reason or (
            "exit 0" if outcome == "finished" else "exit 1"))
        return ended

    @defer.inlineCallbacks
    def test_pause_after_pauses_in_the_transaction_of_the_second_bad_end(self):
        yield self.store.add_schedule(schedule("tick", pause_after=2))
        first = yield self.end_run("t1", "failed")
        self.assertIsNone(first.paused_schedule)
        self.assertEqual((yield self.store.get_schedule("tick")).failed_in_row, 1)
        yield self.end_run("t2", "finished")
        self.assertEqual((yield self.store.get_schedule("tick")).failed_in_row, 0)
        yield self.end_run("t3", "failed")
        # A cancel says nothing of the spider: the streak stays.
        yield self.end_run("t4", "cancelled", reason="cancel.json")
        self.assertEqual((yield self.store.get_schedule("tick")).failed_in_row, 1)
        version = self.store.version
        last = yield self.end_run("t5", "failed", reason="exit 3")
        self.assertNotEqual(self.store.version, version)
        paused = yield self.store.get_schedule("tick")
        self.assertEqual(last.paused_schedule, paused)
        self.assertEqual((paused.paused, paused.failed_in_row, paused.note),
                         (True, 2, "paused after 2 runs in a row failed or degraded;"
                          " the last: t5 (failed, exit 3)"))
        # Paused once: a later bad end counts, and pauses nothing again.
        later = yield self.end_run("t6", "failed")
        self.assertIsNone(later.paused_schedule)
        self.assertEqual((yield self.store.get_schedule("tick")).failed_in_row, 3)

    @defer.inlineCallbacks
    def test_a_retried_attempt_is_not_counted_its_final_one_is(self):
        yield self.store.add_schedule(schedule("tick", pause_after=1))
        ended = yield self.end_run("r", "failed", policy={"retries": 1, "backoff": 1})
        self.assertIsNotNone(ended.retry)
        self.assertEqual((yield self.store.get_schedule("tick")).failed_in_row, 0)
        final = yield self.run_and_end("r.r1", 200.0)
        self.assertIsNone(final.retry)
        self.assertEqual(final.paused_schedule.note,
                         "paused after 1 run in a row failed or degraded; the last: r.r1"
                         " (failed, exit 1)")

    @defer.inlineCallbacks
    def test_a_job_older_than_the_schedule_of_its_name_counts_in_no_streak(self):
        # A deleted schedule's job ending: the new schedule given its name
        # (made after the job) owes it nothing, and is not paused by it.
        yield self.store.add_schedule(schedule("tick", pause_after=1, created=50.0))
        ended = yield self.end_run("old", "failed")  # created at 1.0
        self.assertIsNone(ended.paused_schedule)
        found = yield self.store.get_schedule("tick")
        self.assertEqual((found.paused, found.failed_in_row), (False, 0))
        yield self.store.add(replace(self.retrying("new", policy={}, schedule="Tick"),
                                     created=60.0))
        ended = yield self.run_and_end("new", 100.0)
        self.assertEqual((ended.paused_schedule.paused, ended.paused_schedule.failed_in_row),
                         (True, 1))

    @defer.inlineCallbacks
    def test_without_pause_after_the_streak_is_kept_and_nothing_pauses(self):
        yield self.store.add_schedule(schedule("tick"))
        for n in range(3):
            ended = yield self.end_run(f"n{n}", "failed")
            self.assertIsNone(ended.paused_schedule)
        found = yield self.store.get_schedule("tick")
        self.assertEqual((found.paused, found.failed_in_row), (False, 3))

    @defer.inlineCallbacks
    def test_schedules_are_added_read_listed_and_deleted_ignoring_case(self):
        added = yield self.store.add_schedule(schedule("Tick", project="Shop", paused=False))
        yield self.store.add_schedule(schedule("other", project="news"))
        self.assertIsNotNone(added.seq)
        found = yield self.store.get_schedule("TICK")
        self.assertEqual(found, added)
        self.assertEqual((found.name, found.project, found.settings, found.arguments,
                          found.paused, found.next_due, found.runs),
                         ("Tick", "Shop", (("max_items", "5"),), (("a", "1"),), False, 10.0, 0))

        self.assertEqual([r.name for r in (yield self.store.schedules())], ["Tick", "other"])
        self.assertEqual([r.name for r in (yield self.store.schedules("SHOP"))], ["Tick"])
        yield self.assertFailure(self.store.add_schedule(schedule("tick")), DuplicateSchedule)
        self.assertEqual((yield self.store.delete_schedule("tick")), found)
        self.assertIsNone((yield self.store.delete_schedule("tick")))
        self.assertIsNone((yield self.store.get_schedule("tick")))

    @defer.inlineCallbacks
    def test_real_numbers_read_back_as_floats_from_every_call(self):
        # addschedule.json shows "priority": 0.0, as it always has.
        reals = ("priority", "anchor", "next_due", "created")
        added = yield self.store.add_schedule(schedule())
        answers = [added, (yield self.store.get_schedule("tick")),
                   (yield self.store.claim_firing("tick", added.seq, 10.0, 12.0, 10.0)),
                   (yield self.store.update_schedule("tick", last_job="tick-10")),
                   (yield self.store.delete_schedule("tick"))]
        for answer in answers:
            self.assertEqual([type(getattr(answer, f)) for f in reals], [float] * 4, answer)
        self.assertEqual([type(r.last_due) for r in answers[2:]], [float] * 3)

    @defer.inlineCallbacks
    def test_an_update_sets_fields_adds_counts_and_keeps_to_its_seq(self):
        old = yield self.store.add_schedule(schedule())
        updated = yield self.store.update_schedule("TICK", seq=old.seq, paused=True,
                                                   error="no spider", skipped_added=2)
        self.assertEqual((updated.paused, updated.error, updated.skipped, updated.runs),
                         (True, "no spider", 2, 0))
        yield self.assertFailure(self.store.update_schedule("tick", runs=5), TypeError)
        yield self.store.delete_schedule("tick")
        new = yield self.store.add_schedule(schedule())
        # A firing of the deleted one must not write into the new one.
        self.assertIsNone((yield self.store.update_schedule("tick", seq=old.seq, skipped_added=1)))
        self.assertEqual((yield self.store.get_schedule("tick")), new)

    @defer.inlineCallbacks
    def test_a_schedules_job_is_counted_by_its_insert_once(self):
        yield self.store.add_schedule(schedule(created=5.0))
        yield self.store.add_schedule(schedule("other"))
        version = self.store.version
        yield self.store.add(replace(record("tick-10", created=6.0), schedule="TICK"))
        self.assertNotEqual(self.store.version, version)
        yield self.assertFailure(self.store.add(replace(record("TICK-10", created=7.0),
                                                        schedule="tick")), DuplicateJob)
        yield self.store.add(record("plain", created=7.0))
        found = yield self.store.get_schedule("tick")
        self.assertEqual((found.runs, (yield self.store.get_schedule("other")).runs), (1, 0))
        # Recording it (last_job, a firing's) counts nothing more.
        for _ in range(2):
            yield self.store.update_schedule("tick", last_job="tick-10", error=None)
        self.assertEqual((yield self.store.get_schedule("tick")).runs, 1)
        # Nor does its retry: an attempt is not a run.
        yield self.store.add(replace(self.retrying("tick-12", policy={"retries": 1,
                                                                      "backoff": 1}),
                                     schedule="tick", created=8.0))
        ended = yield self.run_and_end("tick-12", 10.0)
        self.assertIsNotNone(ended.retry)
        self.assertEqual((yield self.store.get_schedule("tick")).runs, 2)

    @defer.inlineCallbacks
    def test_a_new_priority_is_given_to_the_schedules_pending_jobs_alone(self):
        yield self.store.add_schedule(schedule("Tick", created=5.0))
        for jobid, name, created in (("run", "Tick", 6.0), ("wait1", "Tick", 7.0),
                                     ("wait2", "Tick", 8.0), ("older", "Tick", 1.0),
                                     ("others", "other", 9.0), ("plain", None, 9.0)):
            yield self.store.add(replace(record(jobid, created=created), schedule=name))
        self.assertEqual((yield self.store.claim_next(NODE_A, ["shop"], 10.0)).id, "run")
        updated = yield self.store.update_schedule("tick", priority=2.5)
        self.assertEqual(updated.priority, 2.5)
        found = {}
        for jobid in ("run", "wait1", "wait2", "older", "others", "plain"):
            found[jobid] = (yield self.store.get(jobid)).priority
        self.assertEqual(found, {"run": 0.0, "wait1": 2.5, "wait2": 2.5, "older": 0.0,
                                 "others": 0.0, "plain": 0.0})
        # Claims take them first now, in the order queued.
        self.assertEqual((yield self.store.claim_next(NODE_A, ["shop"], 11.0)).id, "wait1")

    @defer.inlineCallbacks
    def test_a_job_older_than_the_schedule_of_its_name_is_not_its_run(self):
        # A deleted schedule's job queued before its namesake was added.
        yield self.store.add_schedule(schedule(created=50.0))
        yield self.store.add(replace(record("tick-old", created=40.0), schedule="tick"))
        yield self.store.add(replace(record("tick-new", created=50.0), schedule="tick"))
        self.assertEqual((yield self.store.get_schedule("tick")).runs, 1)

    @defer.inlineCallbacks
    def test_a_due_time_is_claimed_once(self):
        added = yield self.store.add_schedule(schedule())
        won = yield self.store.claim_firing("TICK", added.seq, 10.0, 12.0, due=10.0)
        self.assertEqual((won.next_due, won.last_due, won.runs), (12.0, 10.0, 0))
        version = self.store.version
        # Decided from the same row again (another node's timer): lost.
        self.assertIsNone((yield self.store.claim_firing("tick", added.seq, 10.0, 12.0, 10.0)))
        # An earlier due time, or the same one again, never: even from the new row.
        self.assertIsNone((yield self.store.claim_firing("tick", added.seq, 12.0, 14.0, 10.0)))
        self.assertEqual(self.store.version, version)
        self.assertEqual((yield self.store.get_schedule("tick")), won)
        # The next one is there to take; a next due time alone (a missed run
        # skipped) too.
        later = yield self.store.claim_firing("tick", added.seq, 12.0, 14.0, 12.0)
        self.assertEqual((later.next_due, later.last_due), (14.0, 12.0))
        moved = yield self.store.claim_firing("tick", added.seq, 14.0, 20.0)
        self.assertEqual((moved.next_due, moved.last_due), (20.0, 12.0))

    @defer.inlineCallbacks
    def test_no_firing_of_a_paused_deleted_or_replaced_schedule(self):
        added = yield self.store.add_schedule(schedule())
        yield self.store.update_schedule("tick", paused=True)
        self.assertIsNone((yield self.store.claim_firing("tick", added.seq, 10.0, 12.0, 10.0)))
        yield self.store.delete_schedule("tick")
        self.assertIsNone((yield self.store.claim_firing("tick", added.seq, 10.0, 12.0, 10.0)))
        again = yield self.store.add_schedule(schedule())
        self.assertIsNone((yield self.store.claim_firing("tick", added.seq, 10.0, 12.0, 10.0)))
        self.assertIsNotNone((yield self.store.claim_firing("tick", again.seq, 10.0, 12.0,
                                                            10.0)))

    @defer.inlineCallbacks
    def test_stores_claiming_one_due_time_at_once_one_takes_it(self):
        others = []
        for _ in range(2):
            others.append((yield self.open(self.make_second_store)))
        stores = [self.store] + others
        added = yield self.store.add_schedule(schedule())
        for due in (10.0, 12.0, 14.0):
            won = yield defer.gatherResults([
                s.claim_firing("tick", added.seq, due, due + 2, due) for s in stores * 2])
            self.assertEqual(len([r for r in won if r is not None]), 1, won)
        found = yield others[1].get_schedule("tick")
        self.assertEqual((found.next_due, found.last_due), (16.0, 14.0))

    @defer.inlineCallbacks
    def test_a_batch_of_claims_answers_each_as_claim_firing_would(self):
        tick = yield self.store.add_schedule(schedule())
        tock = yield self.store.add_schedule(schedule("tock", next_due=11.0))
        held = yield self.store.add_schedule(schedule("held", paused=True))
        taken = yield self.store.claim_firings([
            ("TICK", tick.seq, 10.0, 12.0, 10.0), ("tock", tock.seq, 11.0, 13.0, 11.0),
            ("held", held.seq, 10.0, 12.0, 10.0), ("gone", 99, 10.0, 12.0, 10.0),
            # Twice in one batch: the second finds it taken.
            ("tick", tick.seq, 10.0, 12.0, 10.0)])
        self.assertEqual([(r.name, r.next_due, r.last_due) if r else None for r in taken],
                         [("tick", 12.0, 10.0), ("tock", 13.0, 11.0), None, None, None])
        self.assertEqual((yield self.store.get_schedule("tock")), taken[1])
        # Taken, so lost from the same rows; the next due times are there.
        again = yield self.store.claim_firings([
            ("tick", tick.seq, 10.0, 12.0, 10.0), ("tick", tick.seq, 12.0, 14.0, 12.0)])
        self.assertEqual([r.last_due if r else None for r in again], [None, 12.0])
        self.assertEqual((yield self.store.claim_firings([])), [])

    @defer.inlineCallbacks
    def test_stores_claiming_one_burst_at_once_take_each_due_time_once(self):
        others = []
        for _ in range(2):
            others.append((yield self.open(self.make_second_store)))
        stores = [self.store] + others
        added = []
        for n in range(30):
            added.append((yield self.store.add_schedule(schedule(f"s{n:02d}"))))
        claims = [(r.name, r.seq, 10.0, 12.0, 10.0) for r in added]
        # Each store asks for the burst in an order of its own, twice over.
        batches = yield defer.gatherResults([
            s.claim_firings(claims[::step]) if step == 1
            else s.claim_firings(list(reversed(claims)))
            for s in stores for step in (1, -1)])
        won = {}
        for batch in batches:
            for record in batch:
                if record is not None:
                    won[record.name] = won.get(record.name, 0) + 1
        self.assertEqual(won, {r.name: 1 for r in added})

    # -- chains: the outbox of firings owed -------------------------------------

    @defer.inlineCallbacks
    def end_job(self, jobid, outcome="finished", end_time=20.0, spider="books",
                schedule=None, project="shop", reason=None, **fields):
        """Adds, claims, starts and ends one job; its ended record."""
        yield self.store.add(JobRecord(id=jobid, project=project, spider=spider,
                                       spider_file="/p/x.py", schedule=schedule, **fields))
        claimed = yield self.store.claim_next(NODE_A, [project], end_time - 1)
        self.assertEqual(claimed.id, jobid)
        ended = yield self.store.mark_finished(jobid, outcome, end_time, reason=reason)
        return ended

    @defer.inlineCallbacks
    def owed(self):
        return [(f.schedule_key, f.upstream) for f in (yield self.store.chain_firings())]

    @defer.inlineCallbacks
    def test_a_final_end_writes_one_firing_for_each_chain_it_matches(self):
        listener, heard = yield self.listener()
        yield self.store.add_schedule(schedule("tick"))
        yield self.store.add_schedule(chain("Detail", "BOOKS"))
        yield self.store.add_schedule(chain("alert", "books", on=("failed",)))
        yield self.store.add_schedule(chain("by-tick", "schedule:TICK", on=("finished",)))
        yield self.store.add_schedule(chain("degraded", "books", on=("degraded",)))
        yield self.store.add_schedule(chain("elsewhere", "books", project="news"))
        yield self.store.add_schedule(chain("other", "authors", on=CHAIN_ENDS))
        ended = yield self.end_job("a", schedule="tick", end_time=20.0)
        self.assertEqual((ended.health, ended.chain_firings), ("healthy", ("Detail", "by-tick")))
        failed = yield self.end_job("b", outcome="failed", end_time=30.0)
        self.assertEqual(failed.chain_firings, ("alert",))
        self.assertEqual((yield self.owed()), [("by-tick", "a"), ("detail", "a"), ("alert", "b")])
        firings = yield self.store.chain_firings()
        self.assertEqual([f.created for f in firings], [20.0, 20.0, 30.0])
        # A user's cancel fires no chain; a lost job is a failed one.
        yield self.store.add(record("c"))
        cancelled = yield self.store.cancel_pending("c", 40.0)
        self.assertEqual(cancelled.chain_firings, ())
        yield self.add_all(record("d"))
        yield self.store.claim_next("node-gone", ["shop"], 41.0)
        lost = yield self.store.recover("node-gone", 50.0, lambda r: None)
        self.assertEqual([r.chain_firings for r in lost], [("alert",)])
        # The first end stands: ending a job again writes nothing.
        self.assertIsNone((yield self.store.mark_finished("a", "finished", 60.0)))
        self.assertEqual(len((yield self.owed())), 4)
        if listener is not None:
            yield self.versions_agree(listener, self.store)
            self.assertIn(notices.SCHEDULE, [n.kind for n in heard])

    @defer.inlineCallbacks
    def test_failed_covers_the_services_own_deadlines_not_a_users_cancel_or_a_stop(self):
        yield self.store.add_schedule(chain("alert", "books", on=("failed",)))
        yield self.store.add_schedule(chain("detail", "books", on=("finished",)))
        # Cancelled by a timeout or a stall while running: a run gone wrong.
        timed_out = yield self.end_job("t", outcome="cancelled", reason="timeout")
        stalled = yield self.end_job("s", outcome="cancelled", reason="stalled", end_time=21.0)
        # Cancelled pending past its expiry.
        yield self.store.add(record("e"))
        expired = yield self.store.cancel_pending("e", 22.0, reason="expired")
        # A user's cancel, running or pending, and a stop fire nothing.
        by_user = yield self.end_job("u", outcome="cancelled", reason="cancel.json",
                                     end_time=23.0)
        yield self.store.add(record("p"))
        pending_by_user = yield self.store.cancel_pending("p", 24.0)
        stopped = yield self.end_job("x", outcome="cancelled", reason="service stopped",
                                     end_time=25.0)
        self.assertEqual([r.chain_firings for r in (timed_out, stalled, expired)],
                         [("alert",)] * 3)
        self.assertEqual([r.chain_firings for r in (by_user, pending_by_user, stopped)],
                         [()] * 3)
        self.assertEqual((yield self.owed()), [("alert", "t"), ("alert", "s"), ("alert", "e")])

    @defer.inlineCallbacks
    def test_an_end_that_queues_a_retry_owes_nothing_its_final_attempt_does(self):
        yield self.store.add_schedule(chain("alert", "books", on=("failed",)))
        yield self.store.add(self.retrying("n", policy={"retries": 1, "backoff": 1}))
        first = yield self.run_and_end("n", 100.0)
        self.assertEqual((first.retry.id, first.chain_firings), ("n.r1", ()))
        self.assertEqual((yield self.owed()), [])
        final = yield self.run_and_end("n.r1", 200.0)
        self.assertEqual((final.retry, final.chain_firings), (None, ("alert",)))
        self.assertEqual((yield self.owed()), [("alert", "n.r1")])

    @defer.inlineCallbacks
    def test_the_retry_of_a_chains_job_keeps_its_upstream(self):
        # The retry is the same job again: it still follows the job whose
        # end queued it (a loop guard walks that line back).
        yield self.store.add(self.retrying("detail-after-up", upstream="up",
                                           schedule="detail"))
        first = yield self.run_and_end("detail-after-up", 100.0)
        self.assertEqual((first.retry.id, first.retry.upstream, first.retry.schedule),
                         ("detail-after-up.r1", "up", "detail"))
        found = yield self.store.get("detail-after-up.r1")
        self.assertEqual(found.upstream, "up")

    @defer.inlineCallbacks
    def test_a_firing_is_settled_and_counted_once(self):
        added = yield self.store.add_schedule(chain("detail", "books"))
        yield self.end_job("a")
        others = []
        for _ in range(2):
            others.append((yield self.open(self.make_second_store)))
        settled = yield defer.gatherResults([
            s.settle_chain_firing("DETAIL", "a", seq=added.seq, buffered_added=1,
                                  last_job="detail-after-a", error=None)
            for s in [self.store] + others])
        won = [r for r in settled if r is not None]
        self.assertEqual([(r.buffered, r.last_job) for r in won], [(1, "detail-after-a")])
        self.assertEqual((yield self.owed()), [])
        found = yield self.store.get_schedule("detail")
        self.assertEqual((found.buffered, found.skipped, found.last_job),
                         (1, 0, "detail-after-a"))
        yield self.assertFailure(self.store.settle_chain_firing("detail", "a", runs=3),
                                 TypeError)

    @defer.inlineCallbacks
    def test_a_firing_of_a_deleted_or_replaced_chain_is_dropped_counting_nothing(self):
        old = yield self.store.add_schedule(chain("detail", "books", on=("finished",)))
        yield self.end_job("a")
        yield self.end_job("b", end_time=30.0)
        yield self.store.delete_schedule("detail")
        self.assertIsNone((yield self.store.settle_chain_firing("detail", "a", skipped_added=1)))
        new = yield self.store.add_schedule(chain("detail", "books", on=("finished",)))
        self.assertIsNone((yield self.store.settle_chain_firing("detail", "b", seq=old.seq,
                                                                skipped_added=1)))
        self.assertEqual((yield self.owed()), [])
        self.assertEqual((yield self.store.get_schedule("detail")), new)


    @defer.inlineCallbacks
    def test_deleting_a_chain_drops_its_owed_firings_and_no_others(self):
        yield self.store.add_schedule(chain("detail", "books", on=("finished",)))
        yield self.store.add_schedule(chain("alert", "books", on=("finished",)))
        yield self.end_job("a")
        deleted = yield self.store.delete_schedule("DETAIL")
        self.assertEqual(deleted.name, "detail")
        self.assertEqual((yield self.owed()), [("alert", "a")])
        # A new chain of its name is owed nothing its namesake was.
        yield self.store.add_schedule(chain("detail", "books", on=("finished",)))
        self.assertEqual((yield self.owed()), [("alert", "a")])
        self.assertIsNone((yield self.store.settle_chain_firing("detail", "a", skipped_added=1)))
        self.assertEqual((yield self.store.get_schedule("detail")).skipped, 0)


# A claimer in a process of its own: claims until no job is pending,
# printing each id; after each claim, what runs must share no lock (it ends
# each job that holds one, so that the others may run).
_CLAIMER = r"""
import os, sys, time
from twisted.internet import defer, task
from netweir_serve.store import open_store

@defer.inlineCallbacks
def main(reactor, url, directory, node, go):
    store = open_store(directory, reactor, url=url, reactor=reactor)
    open(go + "." + node, "w").close()  # ready
    while not os.path.exists(go):
        yield task.deferLater(reactor, 0.001, lambda: None)
    while True:
        claimed = yield store.claim_next(node, ["shop"], time.time())
        if claimed is None:
            if (yield store.counts())["pending"] == 0:
                break
            yield task.deferLater(reactor, 0.002, lambda: None)
            continue
        held = [lock for r in (yield store.running()) for lock in r.locks]
        if len(held) != len(set(held)):
            raise SystemExit(f"jobs sharing a lock run at once: {sorted(held)}")
        print(claimed.id, flush=True)
        if claimed.locks:
            yield store.mark_finished(claimed.id, "finished", time.time())
    yield store.close()

task.react(main, sys.argv[1:])
"""


def token(name="ci", role="viewer", projects=("shop",), **fields):
    return TokenRecord(name=name, role=role, projects=tuple(projects),
                       created=fields.pop("created", 100.0), hash=fields.pop("hash", "h1"),
                       **fields)


class TokenStoreContract:
    """The behaviour of ITokenStore, on the stores JobStoreContract opens."""

    def test_provides_the_token_interface(self):
        self.assertTrue(verifyObject(ITokenStore, self.store))

    @defer.inlineCallbacks
    def test_a_token_is_kept_as_added_and_its_name_ignores_case(self):
        added = yield self.store.add_token(token("CI", projects=("shop", "news"), expires=900.5))
        self.assertEqual(added, token("CI", projects=("shop", "news"), expires=900.5))
        self.assertEqual((yield self.store.get_token("ci")), added)
        yield self.assertFailure(self.store.add_token(token("ci")), DuplicateToken)
        yield self.store.add_token(token("admin", role="admin", projects=()))
        self.assertEqual([t.name for t in (yield self.store.tokens())], ["admin", "CI"])
        self.assertIsNone((yield self.store.get_token("nobody")))

    @defer.inlineCallbacks
    def test_a_revoked_token_is_gone_and_revoking_it_again_finds_none(self):
        yield self.store.add_token(token())
        self.assertEqual((yield self.store.revoke_token("CI")), token())
        self.assertEqual((yield self.store.tokens()), [])
        self.assertIsNone((yield self.store.revoke_token("ci")))

    @defer.inlineCallbacks
    def test_a_rotation_keeps_the_old_hash_until_the_grace_ends(self):
        yield self.store.add_token(token())
        rotated = yield self.store.rotate_token("ci", "h2", 160.0)
        self.assertEqual(rotated, token(hash="h2", previous_hash="h1", previous_until=160.0))
        again = yield self.store.rotate_token("ci", "h3", None)
        self.assertEqual(again, token(hash="h3", previous_hash="h2", previous_until=None))
        self.assertIsNone((yield self.store.rotate_token("nobody", "h", None)))

    @defer.inlineCallbacks
    def test_last_used_only_moves_forward(self):
        yield self.store.add_token(token())
        yield self.store.add_token(token("other"))
        yield self.store.tokens_used({"CI": 200.0, "gone": 5.0})
        yield self.store.tokens_used({"ci": 150.0, "other": 120.0})
        found = {t.name: t.last_used for t in (yield self.store.tokens())}
        self.assertEqual(found, {"ci": 200.0, "other": 120.0})

    @defer.inlineCallbacks
    def test_every_token_change_tells_the_other_stores(self):
        listener, heard = yield self.listener()
        changes = (lambda s: s.add_token(token()), lambda s: s.rotate_token("ci", "h2", None),
                   lambda s: s.revoke_token("ci"))
        for change in changes:
            del heard[:]
            yield change(self.store)
            if listener is None:
                # Not shared: the tokens are read again from the file.
                continue
            arrived = yield until(lambda: notices.TOKEN in [n.kind for n in heard])
            self.assertTrue(arrived, f"no token notice: {heard}")
        # A use is no change: nobody is told.
        del heard[:]
        yield self.store.add_token(token("used"))
        if listener is not None:
            yield until(lambda: notices.TOKEN in [n.kind for n in heard])
            del heard[:]
        yield self.store.tokens_used({"used": 300.0})
        self.assertEqual((yield self.store.get_token("used")).last_used, 300.0)
        self.assertEqual([n.kind for n in heard if n.kind == notices.TOKEN], [])

    @defer.inlineCallbacks
    def test_a_change_and_its_audit_row_are_one_transaction(self):
        def row(status):
            return lambda record: AuditEntry(
                time=100.0, who="root", endpoint="token x", target="ci",
                change={"role": record.role} if record else None, status=status)

        def broken(record):
            raise RuntimeError("the row cannot be made")

        yield self.store.add_token(token(), audit=row(200))
        yield self.store.rotate_token("ci", "h2", None, audit=row(201))
        # None from the function: nothing to record (no such token).
        self.assertIsNone((yield self.store.rotate_token("nobody", "h", None,
                                                         audit=lambda r: None)))
        yield self.assertFailure(self.store.add_token(token("other"), audit=broken), Exception)
        yield self.assertFailure(self.store.rotate_token("ci", "h3", None, audit=broken),
                                 Exception)
        yield self.assertFailure(self.store.revoke_token("ci", audit=broken), Exception)
        self.assertEqual([(t.name, t.hash) for t in (yield self.store.tokens())],
                         [("ci", "h2")])
        yield self.store.revoke_token("ci", audit=row(202))
        self.assertEqual((yield self.store.tokens()), [])
        rows = yield self.store.audit(every=True)
        self.assertEqual([(r.status, r.change) for r in rows],
                         [(202, {"role": "viewer"}), (201, {"role": "viewer"}),
                          (200, {"role": "viewer"})])

    @defer.inlineCallbacks
    def test_a_token_added_by_one_store_is_read_by_another(self):
        other = yield self.open(self.make_second_store)
        yield self.store.add_token(token())
        self.assertEqual((yield other.tokens()), [token()])
        yield self.store.revoke_token("ci")
        self.assertEqual((yield other.tokens()), [])


def entry(time, project="shop", target="a", status=200, **fields):
    return AuditEntry(time=time, who=fields.pop("who", "ci"), address="10.0.0.1",
                      endpoint=fields.pop("endpoint", "schedule.json"), project=project,
                      target=target, change=fields.pop("change", {"spider": "books"}),
                      status=status, **fields)


class AuditStoreContract:
    """The behaviour of IAuditStore, and of the jobs' ``queued_by``, on
    the stores JobStoreContract opens."""

    def test_provides_the_audit_interface(self):
        self.assertTrue(verifyObject(IAuditStore, self.store))

    @defer.inlineCallbacks
    def test_a_row_is_kept_as_written_and_listed_newest_first(self):
        first = yield self.store.add_audit(entry(100.5, change={"spider": "books",
                                                                 "jobid": "ü"}))
        self.assertIsNotNone(first.seq)
        self.assertEqual(replace(first, seq=None),
                         entry(100.5, change={"spider": "books", "jobid": "ü"}))
        yield self.store.add_audit(entry(102.0, project="SHOP", target="b", status=403))
        yield self.store.add_audit(entry(101.0, project="news", target="c", change=None))
        listed = yield self.store.audit(projects=["Shop"])
        self.assertEqual([(e.target, e.project, e.status) for e in listed],
                         [("b", "SHOP", 403), ("a", "shop", 200)])
        listed = yield self.store.audit()
        self.assertEqual([e.target for e in listed], ["b", "c", "a"])
        self.assertIsNone(listed[1].change)

    @defer.inlineCallbacks
    def test_since_limit_and_the_rows_of_no_project(self):
        for t in range(10):
            yield self.store.add_audit(entry(100.0 + t, target=str(t)))
        yield self.store.add_audit(entry(200.0, project=None, target="ci",
                                         endpoint="token add", change={"role": "viewer"}))
        self.assertEqual([e.target for e in (yield self.store.audit(["shop"], since=107.0))],
                         ["9", "8", "7"])
        self.assertEqual([e.target for e in (yield self.store.audit(["shop"], limit=2))],
                         ["9", "8"])
        self.assertEqual([e.target for e in (yield self.store.audit(limit=1))], ["9"])
        self.assertEqual([e.target for e in (yield self.store.audit(limit=1, every=True))],
                         ["ci"])
        self.assertEqual((yield self.store.audit(projects=[])), [])

    @defer.inlineCallbacks
    def test_prune_forgets_the_rows_before_a_time(self):
        for t in (100.0, 150.0, 200.0):
            yield self.store.add_audit(entry(t, target=str(int(t))))
        self.assertEqual((yield self.store.prune_audit(150.0)), 1)
        self.assertEqual([e.target for e in (yield self.store.audit())], ["200", "150"])
        self.assertEqual((yield self.store.prune_audit(150.0)), 0)

    @defer.inlineCallbacks
    def test_a_row_written_by_one_store_is_read_by_another(self):
        other = yield self.open(self.make_second_store)
        yield self.store.add_audit(entry(100.0))
        self.assertEqual([e.target for e in (yield other.audit(["shop"]))], ["a"])

    @defer.inlineCallbacks
    def test_who_queued_a_job_is_kept_and_its_retry_keeps_it(self):
        yield self.store.add(self.retrying("j1", queued_by="ci"))
        self.assertEqual((yield self.store.get("J1")).queued_by, "ci")
        pending, _, _ = yield self.store.jobs("shop")
        self.assertEqual([r.queued_by for r in pending], ["ci"])
        ended = yield self.run_and_end("j1", 5.0)
        self.assertIsNotNone(ended.retry)
        self.assertEqual((yield self.store.get(ended.retry.id)).queued_by, "ci")


class SQLiteJobStoreContractTests(JobStoreContract, ScheduleStoreContract, TokenStoreContract,
                                  AuditStoreContract, unittest.TestCase):
    """The contract on a temporary SQLite file, timed by a Clock, each
    statement run at once (the Inline runner unit tests use)."""

    def setUp(self):
        self.clock = Clock()
        self.path = os.path.abspath(self.mktemp())
        return super().setUp()

    def make_store(self):
        return SQLiteJobStore(self.path, self.clock)

    def make_second_store(self):
        return SQLiteJobStore(self.path, self.clock)

    def store_url(self):
        return f"sqlite://{self.path}"


class SQLiteThreadContractTests(JobStoreContract, ScheduleStoreContract, TokenStoreContract,
                                AuditStoreContract, unittest.TestCase):
    """The contract on a temporary SQLite file as the service opens it:
    each store's statements on a thread of its own, the results delivered
    on the running reactor, which also times the retries of locked writes
    (two stores' threads write to one file at once here)."""

    def setUp(self):
        self.path = os.path.abspath(self.mktemp())
        return super().setUp()

    def make_store(self):
        return open_store(os.path.dirname(self.path), reactor,
                          url=f"sqlite:///{self.path}", reactor=reactor)

    def make_second_store(self):
        return self.make_store()

    def store_url(self):
        return f"sqlite://{self.path}"

    def test_each_store_has_a_thread_of_its_own_that_ends_with_close(self):
        thread = self.store._runner.thread
        self.assertTrue(thread.is_alive())
        self.assertIsNot(thread, threading.current_thread())
        d = self.close_store(self.store)

        def closed(_):
            thread.join(5)
            self.assertFalse(thread.is_alive())

        return d.addCallback(closed)


class PostgresJobStoreContractTests(JobStoreContract, ScheduleStoreContract, TokenStoreContract,
                                    AuditStoreContract, unittest.TestCase):
    """The contract on a real PostgreSQL server (tests/pg.py), each test in
    a schema of its own, migrated from nothing; the second store has a
    pool, a LISTEN connection and an origin of its own, as another node's."""

    def setUp(self):
        from twisted.internet import reactor
        from . import pg
        self.reactor = reactor
        self.url = pg.fresh_url(self)
        return super().setUp()

    def make_store(self):
        from netweir_serve.store.postgres import PostgresJobStore
        return PostgresJobStore.opened(self.url, self.reactor)

    make_second_store = make_store

    def store_url(self):
        return self.url
