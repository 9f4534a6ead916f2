"""The kept paged listing and the prune under the cases a review found
wrong (each failed before its fix): a shared table's version heard in
parts, two prunes at once, jobs with no end time, a page asked after a
write while an older catch-up is under way, a catch-up that raises."""

import threading
from types import SimpleNamespace

from twisted.internet import defer, reactor, threads
from twisted.internet.task import Clock, deferLater
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.web.api import Api
from netweir_serve.web.paging import KeptPages

from .test_paging import SharedTableCase


def listed_ids(paged):
    return ([r.id for state in ("pending", "running") for r in paged.sections[state][0]]
            + [row.id for row in paged.finished()])


class SQLiteCases(unittest.TestCase):
    def setUp(self):
        self.store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(self.store.close)
        self.now = 1_700_000_000.0

    def api(self, **options):
        return Api(SimpleNamespace(names=lambda: ["shop"]), self.store, None, None, None,
                   None, None, **options)

    def finish(self, jobid):
        self.successResultOf(self.store.add(JobRecord(
            id=jobid, project="shop", spider="books", spider_file="/p.py")))
        self.successResultOf(self.store.claim_next("n1", ["shop"], self.now))
        self.now += 1
        self.successResultOf(self.store.mark_finished(jobid, "finished", self.now,
                                                      exit_status=0))

    def test_finished_jobs_with_no_end_time_are_pruned_first(self):
        for n in range(10):
            self.finish(f"j{n}")
        # Rows of an older version, or a hand edit, with no end time.
        self.store._db.execute("UPDATE jobs SET end_time = NULL WHERE id IN ('j0','j1','j2')")
        pruned = self.successResultOf(self.store.prune(5))
        self.assertEqual(sorted(r.id for r in pruned), ["j0", "j1", "j2", "j3", "j4"])
        self.assertEqual(self.successResultOf(self.store.counts())["finished"], 5)

    def test_a_page_asked_after_a_write_sees_it(self):
        aside = []

        def build_aside(function, *args):
            built = defer.Deferred()
            aside.append((built, function, args))
            return built

        kept = KeptPages(self.api(build_aside=build_aside), None, None)
        first = kept.paged()                   # a whole read, built aside
        self.successResultOf(self.store.add(JobRecord(
            id="new", project="shop", spider="books", spider_file="/p.py")))
        second = kept.paged()                  # asked after the add was answered
        built, function, args = aside.pop()
        built.callback(function(*args))
        self.successResultOf(first)
        self.assertIn("new", listed_ids(self.successResultOf(second)))

    def test_a_catch_up_that_raises_at_once_does_not_wedge_the_listing(self):
        kept = KeptPages(self.api(), None, None)
        self.successResultOf(kept.paged())
        self.finish("j0")
        real = self.store.unfinished_jobs

        def raising(*args):
            raise RuntimeError("synchronous")

        self.store.unfinished_jobs = raising
        self.failureResultOf(kept.paged(), RuntimeError)
        self.store.unfinished_jobs = real
        self.assertEqual(listed_ids(self.successResultOf(kept.paged())), ["j0"])

    def test_a_big_change_is_read_whole_not_moved_row_by_row(self):
        kept = KeptPages(self.api(), None, None)
        self.successResultOf(kept.paged())
        for n in range(30):
            self.finish(f"j{n:02}")
        from netweir_serve.web import paging
        self.patch(paging, "CATCH_UP_AT_MOST", 10)
        self.assertEqual(len(listed_ids(self.successResultOf(kept.paged()))), 30)
        self.assertEqual(kept.whole_reads, 2)


class SharedTableCases(SharedTableCase):

    @defer.inlineCallbacks
    def finish_many(self, store, n, prefix="j", now=1_700_000_000.0):
        for i in range(n):
            yield store.add(JobRecord(id=f"{prefix}{i:05}", project="shop", spider="books",
                                      spider_file="/p.py"))
            claimed = yield store.claim_next("n1", ["shop"], now)
            now += 1
            yield store.mark_finished(claimed.id, "finished", now, exit_status=0)
        return now

    @defer.inlineCallbacks
    def test_a_page_asked_between_two_reads_of_one_versions_notices(self):
        # libpq reads about 32 KB at a time: a prune of a few hundred jobs
        # by another node is heard over several reads, requests answered
        # between them.
        from .test_store_postgres import until
        writer = yield self.open()
        reader = yield self.open()
        api = Api(SimpleNamespace(names=lambda: ["shop"]), reader, None, None, None, None,
                  None)
        kept = KeptPages(api, None, None)
        yield self.finish_many(writer, 6)
        self.assertTrue((yield until(lambda: reader.version >= writer.version)))
        self.assertEqual(len(listed_ids((yield kept.paged()))), 6)
        held = []
        heard = reader._heard
        reader._watcher._on_payload = held.append
        self.assertEqual(len((yield writer.prune(2))), 4)
        self.assertTrue((yield until(lambda: len(held) == 5)))  # 4 pruned, and DONE
        for payload in held[:2]:
            heard(payload)            # the first read
        self.assertEqual(reader.version, writer.version)
        yield kept.paged()            # a page asked between the two
        for payload in held[2:]:
            heard(payload)            # the second read
        reader._watcher._on_payload = heard
        yield self.finish_many(writer, 1, prefix="late", now=1_800_000_000.0)
        self.assertTrue((yield until(lambda: reader.version >= writer.version)))
        listing = listed_ids((yield kept.paged()))
        whole = listed_ids((yield KeptPages(api, None, None).paged()))
        self.assertEqual(listing, whole)
        self.assertEqual(len(listing), 3)

    @defer.inlineCallbacks
    def test_two_prunes_at_once_keep_keep_jobs(self):
        store = yield self.open()
        yield self.finish_many(store, 7)
        counted, go_on = threading.Event(), threading.Event()
        plain = store._write_statements

        def slow_first(work):
            # The first prune's transaction pauses after its count.
            class Paused:
                def __init__(self, tx):
                    self._tx = tx

                def __getattr__(self, name):
                    return getattr(self._tx, name)

                def one(self, sql, params=None):
                    row = self._tx.one(sql, params)
                    if sql.startswith("SELECT COUNT(*)"):
                        counted.set()
                        go_on.wait(10)
                    return row

            store._write_statements = plain
            return plain(lambda tx: work(Paused(tx)))

        store._write_statements = slow_first
        first = store.prune(5)
        yield threads.deferToThread(counted.wait, 10)
        second = store.prune(5)
        yield deferLater(reactor, 0.3, lambda: None)
        go_on.set()
        gone = (yield first) + (yield second)
        self.assertEqual(len(gone), 2)
        self.assertEqual((yield store.counts())["finished"], 5)

    @defer.inlineCallbacks
    def test_jobs_with_no_end_time_are_pruned_first(self):
        import psycopg
        store = yield self.open()
        now = yield self.finish_many(store, 10)

        def null_ends():
            with psycopg.connect(store._conninfo, autocommit=True) as conn:
                conn.execute("UPDATE jobs SET end_time = NULL WHERE id < 'j00006'")

        yield threads.deferToThread(null_ends)
        yield self.finish_many(store, 5, prefix="k", now=now)
        yield store.prune(5)
        self.assertEqual((yield store.counts())["finished"], 5)
