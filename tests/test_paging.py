"""listjobs.json one page at a time (web/paging.py): ``limit``, the
``before`` cursor and ``next_before``, the filters, and every job exactly
once while jobs end and are pruned between pages."""

import json
from types import SimpleNamespace

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.web.api import Api, ListJobs
from netweir_serve.web.paging import decode_cursor, encode_cursor
from netweir_serve.web.params import ApiError, Params


def record(jobid, spider="books", schedule=None):
    return JobRecord(id=jobid, project="shop", spider=spider, spider_file="/p/books.py",
                     schedule=schedule)


class PagingTests(unittest.TestCase):
    def setUp(self):
        self.store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(self.store.close)
        self.now = 1_700_000_000.0
        self.listjobs = ListJobs(Api(SimpleNamespace(names=lambda: ["shop"]), self.store,
                                     None, None, None, None, None))

    def finish(self, jobid, outcome="finished", spider="books", ended=None, schedule=None):
        self.successResultOf(self.store.add(record(jobid, spider, schedule)))
        claimed = self.successResultOf(self.store.claim_next("n1", ["shop"], self.now))
        self.assertEqual(claimed.id, jobid)
        self.now += 1
        self.successResultOf(self.store.mark_finished(jobid, outcome, ended or self.now,
                                                      exit_status=0))

    def ask(self, **params):
        answer = self.listjobs.answer(Params(sorted(params.items())), None)
        if not isinstance(answer, dict):
            answer = self.successResultOf(answer)
        return answer

    def ids(self, answer, state="finished"):
        return [job["id"] for job in answer[state]]

    def test_finished_jobs_come_newest_first_a_page_at_a_time(self):
        for n in range(5):
            self.finish(f"j{n}")
        first = self.ask(limit="2")
        self.assertEqual(self.ids(first), ["j4", "j3"])
        second = self.ask(limit="2", before=first["next_before"])
        self.assertEqual(self.ids(second), ["j2", "j1"])
        last = self.ask(limit="2", before=second["next_before"])
        self.assertEqual(self.ids(last), ["j0"])
        self.assertIsNone(last["next_before"])

    def test_a_page_that_ends_exactly_at_the_last_job_has_no_next(self):
        for n in range(2):
            self.finish(f"j{n}")
        self.assertIsNone(self.ask(limit="2")["next_before"])

    def test_pending_and_running_come_before_finished_in_their_lists(self):
        self.finish("done")
        self.successResultOf(self.store.add(record("runs")))
        self.successResultOf(self.store.claim_next("n1", ["shop"], self.now))
        self.successResultOf(self.store.add(record("waits")))
        answer = self.ask(limit="10")
        self.assertEqual((self.ids(answer, "pending"), self.ids(answer, "running"),
                          self.ids(answer)), (["waits"], ["runs"], ["done"]))
        page = self.ask(limit="1")
        second = self.ask(limit="1", before=page["next_before"])
        third = self.ask(limit="1", before=second["next_before"])
        self.assertEqual([self.ids(page, "pending"), self.ids(second, "running"),
                          self.ids(third)], [["waits"], ["runs"], ["done"]])
        only = self.ask(limit="10", state="running,finished")
        self.assertEqual((self.ids(only, "pending"), self.ids(only, "running")), ([], ["runs"]))

    def test_filters_narrow_the_page(self):
        self.finish("a-books", spider="books")
        self.finish("b-films", spider="films", outcome="failed")
        self.finish("c-books", spider="books", outcome="failed", schedule="nightly")
        self.assertEqual(self.ids(self.ask(limit="10", spider="BOOKS")), ["c-books", "a-books"])
        self.assertEqual(self.ids(self.ask(limit="10", outcome="failed")),
                         ["c-books", "b-films"])
        self.assertEqual(self.ids(self.ask(limit="10", schedule="nightly")), ["c-books"])
        self.assertEqual(self.ids(self.ask(limit="10", q="FILM")), ["b-films"])
        self.assertEqual(self.ids(self.ask(limit="10", node="n1", outcome="finished")),
                         ["a-books"])
        self.assertEqual(self.ids(self.ask(limit="10", node="elsewhere")), [])

    def test_every_job_exactly_once_while_jobs_end_and_are_pruned_between_pages(self):
        for n in range(30):
            self.finish(f"old{n:02}")
        seen = []
        answer = self.ask(limit="7")
        seen += self.ids(answer)
        ended = 0
        while answer["next_before"]:
            # Between pages: two more jobs end (newer than every page), and
            # the oldest are forgotten, the one the cursor came from among
            # them now and then.
            for _ in range(2):
                self.finish(f"new{ended:02}")
                ended += 1
            self.successResultOf(self.store.prune(28))
            answer = self.ask(limit="7", before=answer["next_before"])
            seen += self.ids(answer)
        self.assertEqual(len(seen), len(set(seen)))
        self.assertFalse([jobid for jobid in seen if jobid.startswith("new")])
        kept = set(self.ids(self.ask(limit="1000")))
        # Every job that was kept throughout the paging was seen.
        self.assertTrue({f"old{n:02}" for n in range(30)} & kept <= set(seen))
        self.assertEqual(seen, sorted(seen, reverse=True))

    def test_a_cursor_stays_valid_when_its_job_is_pruned(self):
        for n in range(6):
            self.finish(f"j{n}")
        first = self.ask(limit="3")
        self.assertEqual(self.ids(first), ["j5", "j4", "j3"])
        self.successResultOf(self.store.prune(2))  # keeps j5, j4: j3 goes
        self.assertEqual(self.ids(self.ask(limit="3", before=first["next_before"])), [])
        for n in range(6, 8):
            self.finish(f"j{n}")
        self.assertEqual(self.ids(self.ask(limit="3", before=first["next_before"])), [])

    def test_bad_parameters_are_refused_naming_them(self):
        for params, named in (({"limit": "0"}, "'limit'"), ({"limit": "x"}, "'limit'"),
                              ({"limit": "1001"}, "'limit'"),
                              ({"limit": "5", "before": "nonsense!"}, "'before'"),
                              ({"limit": "5", "before": encode_cursor((7, 1, 2))}, "'before'"),
                              ({"limit": "5", "state": "sleeping"}, "'state'"),
                              ({"spider": "books"}, "'spider'"),
                              ({"state": "finished"}, "'state'")):
            with self.assertRaises(ApiError) as raised:
                self.ask(**params)
            self.assertEqual(raised.exception.code, 400, params)
            self.assertIn(named, raised.exception.message, params)

    def test_a_finished_jobs_counts_are_on_its_page(self):
        self.successResultOf(self.store.add(record("counted")))
        self.successResultOf(self.store.claim_next("n1", ["shop"], self.now))
        self.successResultOf(self.store.mark_finished(
            "counted", "finished", self.now + 5, exit_status=0,
            stats={"items": 7, "fetched": 3, "failed": 1, "callback_errors": 1}))
        self.finish("no-stats")
        [counted, no_stats] = self.ask(limit="10")["finished"]
        self.assertEqual((counted["items"], counted["pages"], counted["errors"]), (7, 3, 2))
        self.assertEqual((no_stats["items"], no_stats["pages"], no_stats["errors"]),
                         (None, None, None))
        # Not in scrapyd's answer, which stays as it was.
        answer = self.listjobs.answer(Params([]), None)
        body = answer if isinstance(answer, bytes) else self.successResultOf(answer)
        self.assertNotIn("items", json.loads(body)["finished"][0])

    def test_without_limit_the_answer_is_scrapyds(self):
        self.finish("j0")
        answer = self.listjobs.answer(Params([]), None)
        body = answer if isinstance(answer, bytes) else self.successResultOf(answer)
        listing = json.loads(body)
        self.assertNotIn("next_before", listing)
        self.assertEqual([job["id"] for job in listing["finished"]], ["j0"])

    def test_a_cursor_round_trips(self):
        self.assertEqual(decode_cursor(encode_cursor((2, -1700000000.5, -42))),
                         (2, -1700000000.5, -42))


class KeptPagesTests(unittest.TestCase):
    """The paged listing kept in memory is caught up from the store's
    journal (the jobs that ended or were pruned since) and reads the table
    whole only when the journal cannot say."""

    def setUp(self):
        self.store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(self.store.close)
        self.now = 1_700_000_000.0
        self.api = Api(SimpleNamespace(names=lambda: ["shop", "toys"]), self.store,
                       None, None, None, None, None)

    def kept(self, project=None):
        from netweir_serve.web.paging import KeptPages
        return KeptPages(self.api, project, None)

    def ids(self, kept):
        paged = self.successResultOf(kept.paged())
        return ([r.id for state in ("pending", "running") for r in paged.sections[state][0]]
                + [row.id for row in paged.finished()])

    def whole(self, project=None):
        return self.ids(self.kept(project))

    def test_ends_and_prunes_are_caught_up_without_reading_the_table_again(self):
        kept = self.kept()
        self.assertEqual(self.ids(kept), [])
        for n in range(40):
            project = "shop" if n % 3 else "toys"
            self.successResultOf(self.store.add(JobRecord(
                id=f"j{n:02}", project=project, spider="books", spider_file="/p.py",
                priority=n % 4)))
            if n % 2:
                claimed = self.successResultOf(self.store.claim_next("n1", ["shop", "toys"],
                                                                     self.now))
                self.now += 1
                if n % 4 == 1:
                    self.successResultOf(self.store.mark_finished(
                        claimed.id, "finished", self.now, exit_status=0))
            if n % 7 == 0:
                self.successResultOf(self.store.prune(5))
            self.assertEqual(self.ids(kept), self.whole(), n)
        self.assertEqual(kept.whole_reads, 1)
        self.assertGreater(kept.caught_up, 20)

    def test_a_projects_listing_keeps_to_its_project(self):
        kept = self.kept("shop")
        self.ids(kept)
        for n, project in enumerate(("shop", "toys", "shop")):
            self.successResultOf(self.store.add(JobRecord(
                id=f"j{n}", project=project, spider="books", spider_file="/p.py")))
            claimed = self.successResultOf(self.store.claim_next("n1", ["shop", "toys"],
                                                                 self.now))
            self.now += 1
            self.successResultOf(self.store.mark_finished(claimed.id, "finished", self.now))
        self.assertEqual(self.ids(kept), ["j2", "j0"])
        self.assertEqual(self.ids(kept), self.whole("shop"))
        self.assertEqual(kept.whole_reads, 1)

    def test_a_version_the_journal_never_saw_means_reading_everything_again(self):
        kept = self.kept()
        self.ids(kept)
        self.successResultOf(self.store.add(JobRecord(
            id="late", project="shop", spider="books", spider_file="/p.py")))
        # As a shared table's store does when its LISTEN connection comes
        # back: the changes up to now may have been missed.
        self.store.journal.forget(self.store.version)
        self.assertEqual(self.ids(kept), ["late"])
        self.assertEqual(kept.whole_reads, 2)


class JournalTests(unittest.TestCase):
    def test_ends_and_prunes_are_named_other_changes_are_empty(self):
        from netweir_serve.store.journal import ChangeJournal
        journal = ChangeJournal()
        journal.record(5, [("queued", "a", None)])
        journal.record(6, [("ended", "b", "n1"), ("queued", "c", None)])
        journal.record(7, [("pruned", "d", "n1")])
        self.assertEqual(journal.finished_since(4, 7), {"b", "d"})
        self.assertEqual(journal.finished_since(5, 6), {"b"})
        self.assertEqual(journal.finished_since(7, 7), set())
        # Before what it saw, or past a version it never saw: unknown.
        self.assertIsNone(journal.finished_since(3, 7))
        self.assertIsNone(journal.finished_since(6, 9))
        journal.record(8, [("pruned", None, None)])
        self.assertIsNone(journal.finished_since(7, 8))
        journal.forget(9)
        journal.record(10, [("ended", "e", None)])
        self.assertIsNone(journal.finished_since(8, 10))
        self.assertEqual(journal.finished_since(9, 10), {"e"})

    def test_only_the_newest_versions_are_kept(self):
        from netweir_serve.store.journal import ChangeJournal
        journal = ChangeJournal(kept=3)
        for version in range(1, 11):
            journal.record(version, [("ended", f"j{version}", None)])
        self.assertIsNone(journal.finished_since(6, 10))
        self.assertEqual(journal.finished_since(7, 10), {"j8", "j9", "j10"})


class SharedTableCase(unittest.TestCase):
    """A database of the test's own; ``open()`` a store on it (several may
    share it, as nodes do), closed at the end."""

    def setUp(self):
        from . import pg
        self.url = pg.fresh_url(self)

    @defer.inlineCallbacks
    def open(self):
        from netweir_serve.store.postgres import PostgresJobStore
        store = yield PostgresJobStore.opened(self.url, reactor)
        self.addCleanup(store.close)
        return store


class SharedTableKeptPagesTests(SharedTableCase):
    """On a shared (PostgreSQL) table, a node's listing follows the ends and
    prunes another node makes from their notices, and reads everything
    again after its LISTEN connection may have missed some."""

    @defer.inlineCallbacks
    def test_another_nodes_ends_and_prunes_are_caught_up(self):
        from netweir_serve.web.paging import KeptPages
        from .test_store_postgres import until
        writer = yield self.open()
        reader = yield self.open()
        api = Api(SimpleNamespace(names=lambda: ["shop"]), reader, None, None, None, None,
                  None)
        kept = KeptPages(api, None, None)
        now = 1_700_000_000.0

        @defer.inlineCallbacks
        def listed():
            # Once the reader has heard of every change the writer made.
            self.assertTrue((yield until(lambda: reader.version >= writer.version)))
            paged = yield kept.paged()
            return ([r.id for state in ("pending", "running") for r in paged.sections[state][0]]
                    + [row.id for row in paged.finished()])

        @defer.inlineCallbacks
        def whole():
            paged = yield KeptPages(api, None, None).paged()
            return ([r.id for state in ("pending", "running") for r in paged.sections[state][0]]
                    + [row.id for row in paged.finished()])

        self.assertEqual((yield listed()), [])
        for n in range(12):
            yield writer.add(JobRecord(id=f"j{n:02}", project="shop", spider="books",
                                       spider_file="/p.py"))
            claimed = yield writer.claim_next("n1", ["shop"], now)
            now += 1
            if n % 3:
                yield writer.mark_finished(claimed.id, "finished", now, exit_status=0)
            if n % 4 == 3:
                yield writer.prune(3)
            self.assertEqual((yield listed()), (yield whole()), n)
        self.assertEqual(kept.whole_reads, 1)
        self.assertGreater(kept.caught_up, 5)
        yield writer.add(JobRecord(id="late", project="shop", spider="books",
                                   spider_file="/p.py"))
        self.assertTrue((yield until(lambda: reader.version >= writer.version)))
        # As when the LISTEN connection comes back at this version: what
        # came before it may have been missed.
        reader._listening_again(reader.version)
        self.assertEqual((yield listed()), (yield whole()))
        self.assertIn("late", (yield listed()))
        self.assertEqual(kept.whole_reads, 2)


class FilteredPagesAsideTests(unittest.TestCase):
    """A filtered page may look at every finished job kept before it finds
    ``limit`` (8 to 15 ms for 100,000 on the reactor's thread): it is made
    where Api.build_aside says, on a copy a catch-up leaves alone."""

    def setUp(self):
        self.store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(self.store.close)
        self.aside = []

        def build_aside(function, *args):
            self.aside.append(function)
            return defer.maybeDeferred(function, *args)

        self.listjobs = ListJobs(Api(SimpleNamespace(names=lambda: ["shop"]), self.store,
                                     None, None, None, None, None, build_aside=build_aside))
        for n in range(3):
            self.successResultOf(self.store.add(record(f"j{n}", spider=("a", "b")[n % 2])))
            self.successResultOf(self.store.claim_next("n1", ["shop"], 1e9 + n))
            self.successResultOf(self.store.mark_finished(f"j{n}", "finished", 1e9 + n))

    def ask(self, **params):
        answer = self.listjobs.answer(Params(sorted(params.items())), None)
        return answer if isinstance(answer, dict) else self.successResultOf(answer)

    def test_a_filtered_page_is_made_aside_and_a_plain_one_at_once(self):
        self.ask(limit="10")  # the listing's first, whole read is made aside too
        self.aside.clear()
        self.assertEqual([j["id"] for j in self.ask(limit="10")["finished"]],
                         ["j2", "j1", "j0"])
        self.assertEqual(self.aside, [])
        self.assertEqual([j["id"] for j in self.ask(limit="10", spider="a")["finished"]],
                         ["j2", "j0"])
        self.assertEqual(len(self.aside), 1)

    def test_a_frozen_copy_keeps_its_rows_while_the_listing_catches_up(self):
        from netweir_serve.web.paging import PagedJobs
        paged = PagedJobs(([], []), [(1e9, 1, "old", "shop", "a", "finished", None, None,
                                      None, None)], lambda r: None)
        frozen = paged.frozen()
        paged.catch_up(([], []), [], {"old"}, lambda r: None)
        self.assertEqual([row.id for row in paged.finished()], [])
        self.assertEqual([row.id for row in frozen.finished()], ["old"])
