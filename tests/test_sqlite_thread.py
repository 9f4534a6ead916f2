"""The SQLite store on its own thread (store/sqlite_runner.SQLiteThread),
with the real reactor: the reactor goes on while a statement runs, answers
keep the order they were asked in, a write cancelled while it waits is never
made, a locked file holds writes back without losing any, and close waits
for what was asked before it. (The contract itself runs on this runner in
test_store_contract.SQLiteThreadContractTests.)"""

import os
import sqlite3
import threading

from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord, StoreError
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.store.sqlite_runner import SQLiteThread
from netweir_serve.store.schedule_records import DuplicateSchedule, ScheduleRecord

# Long enough that a store answering on the reactor thread could not hide
# it; the tests never wait it out when the store is right.
HOLD_SECONDS = 10.0


def record(jobid, project="shop"):
    return JobRecord(id=jobid, project=project, spider="echo", spider_file="/p/echo.py")


class ThreadCase(unittest.TestCase):
    def setUp(self):
        self.path = os.path.abspath(self.mktemp())
        self.store = self.open()

    def open(self, **options):
        store = SQLiteJobStore(self.path, reactor, runner=SQLiteThread(reactor), **options)
        self.addCleanup(store.close)
        return store

    def hold_thread(self):
        """Holds the store's thread in a statement until the Event returned
        is set (or HOLD_SECONDS pass); a Deferred of whether it was set."""
        release = threading.Event()
        held = self.store._read(lambda db: release.wait(HOLD_SECONDS))
        return release, held


class ReactorGoesOnTests(ThreadCase):
    @defer.inlineCallbacks
    def test_the_reactor_fires_a_timer_while_a_statement_holds_the_store(self):
        release, held = self.hold_thread()
        # Only the reactor can release it: a store that ran the statement
        # on the reactor thread would wait out HOLD_SECONDS first.
        yield deferLater(reactor, 0.01, release.set)
        self.assertTrue((yield held))

    @defer.inlineCallbacks
    def test_answers_keep_the_order_they_were_asked_in(self):
        release, held = self.hold_thread()
        added = self.store.add(record("a"))
        found = self.store.get("a")
        claimed = self.store.claim_next("n", ["shop"], 1.0)
        counts = self.store.counts()
        version = self.store.version
        release.set()
        yield held
        self.assertEqual((yield added).id, "a")
        # A read asked after a write sees it, though neither had run.
        self.assertEqual((yield found).state, "pending")
        self.assertEqual((yield claimed).id, "a")
        self.assertEqual((yield counts)["running"], 1)
        self.assertEqual(self.store.version, version + 2)

    @defer.inlineCallbacks
    def test_the_version_moves_when_the_write_is_delivered_not_before(self):
        release, held = self.hold_thread()
        version = self.store.version
        added = self.store.add(record("a"))
        # Not made yet: a cache reading the version now must not be told of it.
        self.assertEqual(self.store.version, version)
        release.set()
        yield held
        yield added
        self.assertEqual(self.store.version, version + 1)

    @defer.inlineCallbacks
    def test_a_write_cancelled_while_queued_is_never_made(self):
        release, held = self.hold_thread()
        kept = self.store.add(record("kept1"))
        gone = self.store.add(record("gone"))
        last = self.store.add(record("kept2"))
        gone.cancel()
        self.failureResultOf(gone, defer.CancelledError)
        release.set()
        yield held
        made = yield defer.gatherResults([kept, last])
        self.assertEqual([r.id for r in made], ["kept1", "kept2"])
        self.assertIsNone((yield self.store.get("gone")))

    @defer.inlineCallbacks
    def test_a_statements_error_comes_back_as_a_store_error(self):
        def broken(db):
            db.execute("SELECT nothing FROM nowhere")

        yield self.assertFailure(self.store._read(broken), StoreError)
        yield self.assertFailure(self.store._write(broken), StoreError)
        self.assertEqual((yield self.store.add(record("after"))).id, "after")


class ScheduleTableTests(ThreadCase):
    """The schedules' methods go through the same thread and queue."""

    @defer.inlineCallbacks
    def test_a_schedule_added_changed_and_deleted_in_order(self):
        release, held = self.hold_thread()
        schedule = ScheduleRecord(name="Daily", project="shop", spider="echo", kind="every",
                                  rule="1d", tz="UTC", next_due=100.0)
        added = self.store.add_schedule(schedule)
        again = self.store.add_schedule(schedule)
        changed = self.store.update_schedule("daily", skipped_added=1, next_due=200.0)
        listed = self.store.schedules("SHOP")
        deleted = self.store.delete_schedule("daily")
        gone = self.store.get_schedule("daily")
        release.set()
        yield held
        self.assertEqual((yield added).name, "Daily")
        yield self.assertFailure(again, DuplicateSchedule)
        updated = yield changed
        self.assertEqual((updated.skipped, updated.next_due), (1, 200.0))
        self.assertEqual([r.name for r in (yield listed)], ["Daily"])
        self.assertEqual((yield deleted).name, "Daily")
        self.assertIsNone((yield gone))


class LockedFileTests(ThreadCase):
    """Another connection holds the file's write lock."""

    def setUp(self):
        super().setUp()
        self.other = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.addCleanup(self.other.close)

    def lock(self):
        self.other.execute("BEGIN IMMEDIATE")

    def unlock(self):
        if self.other.in_transaction:
            self.other.execute("ROLLBACK")

    @defer.inlineCallbacks
    def test_writes_wait_for_the_lock_in_order_while_reads_go_on(self):
        yield self.store.add(record("first"))
        self.lock()
        self.addCleanup(self.unlock)
        writes = [self.store.add(record(f"j{i}")) for i in range(3)]
        claimed = self.store.claim_next("n", ["shop"], 1.0)
        # Several tries (20, 50, 100 ms apart) find the lock held.
        yield deferLater(reactor, 0.3, lambda: None)
        self.assertFalse(any(w.called for w in writes + [claimed]))
        pending, running, _ = yield self.store.jobs()
        self.assertEqual(([r.id for r in pending], running), (["first"], []))
        self.unlock()
        made = yield defer.gatherResults(writes)
        self.assertEqual([r.id for r in made], ["j0", "j1", "j2"])
        self.assertEqual((yield claimed).id, "first")
        self.assertEqual((yield self.store.counts())["pending"], 3)

    @defer.inlineCallbacks
    def test_a_write_past_its_patience_fails_and_the_store_goes_on(self):
        store = self.open(patience=0.2)
        self.lock()
        self.addCleanup(self.unlock)
        failure = yield self.assertFailure(store.add(record("late")), StoreError)
        self.assertIn("could not be written", failure.message)
        self.unlock()
        self.assertEqual((yield store.add(record("next"))).id, "next")
        self.assertIsNone((yield store.get("late")))

    @defer.inlineCallbacks
    def test_closing_fails_the_writes_that_wait_and_ends_the_thread(self):
        self.lock()
        self.addCleanup(self.unlock)
        waiting = self.store.add(record("a"))
        yield deferLater(reactor, 0.05, lambda: None)
        thread = self.store._runner.thread
        yield self.store.close()
        yield self.assertFailure(waiting, StoreError)
        thread.join(5)
        self.assertFalse(thread.is_alive())


class CloseTests(ThreadCase):
    @defer.inlineCallbacks
    def test_close_waits_for_what_was_asked_before_it(self):
        release, held = self.hold_thread()
        added = self.store.add(record("a"))
        closed = self.store.close()
        yield self.assertFailure(self.store.add(record("b")), StoreError)
        yield self.assertFailure(self.store.get("a"), StoreError)
        release.set()
        yield closed
        self.assertEqual((yield added).id, "a")
        reopened = self.open()
        self.assertEqual((yield reopened.get("a")).state, "pending")
