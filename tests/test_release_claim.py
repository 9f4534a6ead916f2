"""IJobStore.release_claim on both backends: a claim answered after its
node began to stop puts its job back in the queue, and only such a claim."""

import os

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore


class ReleaseContract:
    @defer.inlineCallbacks
    def setUp(self):
        self.store = yield defer.maybeDeferred(self.make_store)
        self.addCleanup(self.store.close)
        for jobid in ("a", "b"):
            yield self.store.add(JobRecord(id=jobid, project="shop", spider="books",
                                           spider_file="/shop/books.py"))

    @defer.inlineCallbacks
    def test_a_claimed_job_goes_back_to_the_queue_and_is_claimed_again(self):
        claimed = yield self.store.claim_next("n0", ["shop"], 100.5)
        self.assertEqual(claimed.id, "a")
        released = yield self.store.release_claim("A", "n0", 100.5)
        self.assertEqual((released.id, released.state, released.node, released.start_time),
                         ("a", "pending", None, None))
        record = yield self.store.get("a")
        self.assertEqual((record.state, record.node, record.start_time),
                         ("pending", None, None))
        again = yield self.store.claim_next("n1", ["shop"], 200.25)
        self.assertEqual((again.id, again.node, again.start_time), ("a", "n1", 200.25))

    @defer.inlineCallbacks
    def test_only_the_claim_as_it_left_the_job(self):
        yield self.store.claim_next("n0", ["shop"], 100.5)
        yield self.store.claim_next("n0", ["shop"], 101.5)
        yield self.store.mark_started("b", 4242, "boot:1")
        for jobid, node, at in (("a", "n1", 100.5), ("a", "n0", 100.0), ("b", "n0", 101.5),
                                ("nothing", "n0", 100.5)):
            self.assertIsNone((yield self.store.release_claim(jobid, node, at)), jobid)
        self.assertEqual([(r.id, r.state) for r in (yield self.store.running("n0"))],
                         [("a", "running"), ("b", "running")])


class SQLiteReleaseTests(ReleaseContract, unittest.TestCase):
    def make_store(self):
        return SQLiteJobStore(os.path.abspath(self.mktemp()), Clock())


class PostgresReleaseTests(ReleaseContract, unittest.TestCase):
    def make_store(self):
        from twisted.internet import reactor

        from netweir_serve.store.postgres import PostgresJobStore

        from . import pg
        return PostgresJobStore.opened(pg.fresh_url(self), reactor)
