"""A jobs.db from before schema versions is brought up to date in place;
one from a newer netweir-serve is refused, and the daemon says so."""

import json
import os
import sqlite3
import subprocess
import sys

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import DuplicateJob, JobRecord
from netweir_serve.store import migrations
from netweir_serve.store.sqlite import SQLiteJobStore

from .processes import ROOT, free_port

# The job table as netweir-serve created it before schema versions were
# kept (netweir_serve/jobstore.py at 9eec953), written out here as it was:
# the migrations must keep reading a file made by exactly this.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    id TEXT NOT NULL,
    project TEXT NOT NULL,
    project_key TEXT NOT NULL,
    spider TEXT NOT NULL,
    spider_file TEXT NOT NULL,
    settings TEXT NOT NULL,
    arguments TEXT NOT NULL,
    priority REAL NOT NULL,
    state TEXT NOT NULL,
    outcome TEXT,
    pid INTEGER,
    exit_status INTEGER,
    created REAL NOT NULL,
    start_time REAL,
    end_time REAL,
    stats TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, priority DESC, seq);
CREATE INDEX IF NOT EXISTS jobs_project ON jobs (project_key, state);
"""


def old_jobs_db(path):
    """A jobs.db as the old code left it, with a finished, a running and a
    pending job, each written with the statements the old code used."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(OLD_SCHEMA)
    for jobid, project, priority, created in (("Done", "Shop", 0.0, 100.0),
                                             ("Running", "shop", 1.0, 101.0),
                                             ("Waiting", "news", 2.5, 102.0)):
        with db:
            db.execute(
                "INSERT INTO jobs (key, id, project, project_key, spider, spider_file,"
                " settings, arguments, priority, state, created)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (jobid.lower(), jobid, project, project.lower(), "books", "/p/books.py",
                 json.dumps([["max_items", "5"]]), json.dumps([["category", "x"]]),
                 priority, "pending", created))
    for jobid, pid, start in (("done", 41, 110.0), ("running", 42, 111.0)):
        with db:
            db.execute("UPDATE jobs SET state = ?, pid = ?, start_time = ? WHERE key = ?",
                       ("running", pid, start, jobid))
    with db:
        db.execute("UPDATE jobs SET state = ?, outcome = ?, end_time = ?, exit_status = ?,"
                   " stats = ?, reason = ? WHERE key = ?",
                   ("finished", "finished", 120.0, 0, json.dumps({"items": 30}), None, "done"))
    with db:
        db.execute("UPDATE jobs SET cancel_requested = 1 WHERE key = ?", ("running",))
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0
    db.close()


def user_version(path):
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


class OldTableTests(unittest.TestCase):
    def setUp(self):
        self.path = os.path.abspath(self.mktemp())
        old_jobs_db(self.path)

    def open(self):
        store = SQLiteJobStore(self.path, Clock())
        self.addCleanup(store.close)
        return store

    @defer.inlineCallbacks
    def test_the_table_is_migrated_in_place_and_every_record_reads_back(self):
        store = self.open()
        self.assertEqual(user_version(self.path), migrations.LATEST)
        done = yield store.get("DONE")
        self.assertEqual(
            (done.id, done.project, done.spider, done.spider_file, done.settings,
             done.arguments, done.priority, done.state, done.outcome, done.pid,
             done.exit_status, done.created, done.start_time, done.end_time, done.stats,
             done.cancel_requested, done.reason, done.node),
            ("Done", "Shop", "books", "/p/books.py", (("max_items", "5"),),
             (("category", "x"),), 0.0, "finished", "finished", 41, 0, 100.0, 110.0, 120.0,
             {"items": 30}, False, "exit 0", None))
        # Migration 8: a job of then was a first attempt, with no policy,
        # and its reason is the code its status gives.
        self.assertEqual((done.attempt, done.retry_of, done.not_before, done.policy,
                          done.detail), (1, None, None, None, None))
        running = yield store.get("running")
        self.assertEqual((running.id, running.state, running.pid, running.start_time,
                          running.cancel_requested, running.node, running.outcome),
                         ("Running", "running", 42, 111.0, True, None, None))
        waiting = yield store.get("waiting")
        self.assertEqual((waiting.id, waiting.project, waiting.state, waiting.priority,
                          waiting.created, waiting.pid, waiting.node),
                         ("Waiting", "news", "pending", 2.5, 102.0, None, None))
        pending, running_list, finished = yield store.jobs()
        self.assertEqual(([r.id for r in pending], [r.id for r in running_list],
                          [r.id for r in finished]), (["Waiting"], ["Running"], ["Done"]))
        self.assertEqual([r.id for r in (yield store.jobs("SHOP"))[1]], ["Running"])
        self.assertEqual((yield store.counts()), {"pending": 1, "running": 1, "finished": 1})

    @defer.inlineCallbacks
    def test_opening_it_again_changes_nothing_more(self):
        store = self.open()
        before = yield store.jobs()
        yield store.close()
        again = self.open()
        self.assertEqual(user_version(self.path), migrations.LATEST)
        self.assertEqual((yield again.jobs()), before)

    @defer.inlineCallbacks
    def test_the_running_job_is_lost_for_any_node_name(self):
        # Before nodes were recorded, an SQLite table had one service only:
        # whatever that service is called now, the running job was its. (A
        # start on a table that is not shared asks for every node's: None.)
        for node in ("box", "another-name", None):
            path = f"{self.path}-{node}"
            old_jobs_db(path)
            store = SQLiteJobStore(path, Clock())
            self.addCleanup(store.close)
            lost = yield store.recover(node, 200.0, lambda r: {"items": 7, "of": r.id})
            self.assertEqual([r.id for r in lost], ["Running"])
            found = yield store.get("running")
            self.assertEqual((found.state, found.outcome, found.end_time, found.stats),
                             ("finished", "lost", 200.0, {"items": 7, "of": "Running"}))
            self.assertTrue(found.reason)
            self.assertEqual((yield store.get("done")).outcome, "finished")
            self.assertEqual((yield store.get("done")).stats, {"items": 30})
            self.assertEqual((yield store.get("waiting")).state, "pending")

    @defer.inlineCallbacks
    def test_new_jobs_can_be_added_and_claimed(self):
        store = self.open()
        yield store.recover("box", 200.0, lambda r: None)
        added = yield store.add(JobRecord(id="new", project="news", spider="books",
                                          spider_file="/p/books.py", created=300.0))
        self.assertEqual(added.state, "pending")
        yield self.assertFailure(
            store.add(JobRecord(id="WAITING", project="news", spider="books",
                                spider_file="/p/books.py")), DuplicateJob)
        first = yield store.claim_next("box", ["NEWS"], 301.0)
        second = yield store.claim_next("box", ["news"], 302.0)
        self.assertEqual((first.id, first.node, first.state), ("Waiting", "box", "running"))
        self.assertEqual((second.id, second.node, second.state), ("new", "box", "running"))
        self.assertIsNone((yield store.claim_next("box", ["news", "shop"], 303.0)))
        yield store.mark_started("new", 9)
        done = yield store.mark_finished("new", "finished", 310.0, exit_status=0)
        self.assertEqual((done.state, done.pid, done.node), ("finished", 9, "box"))
        self.assertEqual((yield store.counts()), {"pending": 0, "running": 1, "finished": 3})


def newer_jobs_db(path):
    """A jobs.db written by a netweir-serve one schema version ahead."""
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(OLD_SCHEMA)
    db.execute("CREATE TABLE from_the_future (x INTEGER)")
    db.execute(f"PRAGMA user_version = {migrations.LATEST + 1}")
    db.close()


def tables(path):
    db = sqlite3.connect(path)
    try:
        return sorted(row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"))
    finally:
        db.close()


class NewerTableTests(unittest.TestCase):
    def test_a_newer_table_is_refused_and_left_as_it_was(self):
        path = os.path.abspath(self.mktemp())
        newer_jobs_db(path)
        before = tables(path)
        with self.assertRaises(migrations.NewerSchema) as raised:
            SQLiteJobStore(path, Clock())
        self.assertIn(str(migrations.LATEST + 1), str(raised.exception))
        self.assertEqual(user_version(path), migrations.LATEST + 1)
        self.assertEqual(tables(path), before)

    def test_the_daemon_on_a_newer_table_exits_1_with_one_line_naming_it(self):
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        path = os.path.join(directory, "jobs.db")
        newer_jobs_db(path)
        before = tables(path)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
        done = subprocess.run(
            [sys.executable, "-m", "netweir_serve", "--dir", directory,
             "--port", str(free_port())],
            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        line = done.stderr.strip()
        self.assertTrue(line.startswith(f"netweir-serve: error: cannot use --dir {directory}"),
                        line)
        self.assertIn("job table", line)
        self.assertIn(path, line)
        self.assertIn(str(migrations.LATEST + 1), line)
        self.assertEqual(done.stdout, "")
        self.assertEqual(user_version(path), migrations.LATEST + 1)
        self.assertEqual(tables(path), before)


def version_7_db(path, ends):
    """A jobs.db of schema version 7 (before reason codes) holding one
    finished job per ``ends`` entry: (id, outcome, exit_status, reason)."""
    db = sqlite3.connect(path, isolation_level=None)
    for migration in migrations.SQLITE_MIGRATIONS:
        if migration.version <= 7:
            for statement in migration.statements:
                db.execute(statement)
    db.execute("PRAGMA user_version = 7")
    for jobid, outcome, status, reason in ends:
        db.execute(
            "INSERT INTO jobs (key, id, project, project_key, spider, spider_file, settings,"
            " arguments, priority, state, outcome, exit_status, created, end_time, reason)"
            " VALUES (?, ?, 'shop', 'shop', 'books', '/p/books.py', '[]', '[]', 0, 'finished',"
            " ?, ?, 1.0, 2.0, ?)", (jobid, jobid, outcome, status, reason))
    db.execute("INSERT INTO jobs (key, id, project, project_key, spider, spider_file, settings,"
               " arguments, priority, state, created) VALUES ('waiting', 'waiting', 'shop',"
               " 'shop', 'books', '/p/books.py', '[]', '[]', 0, 'pending', 1.0)")
    db.close()


# What ended before reason codes, and the reason and detail it reads with.
OLD_ENDS = [
    (("ok", "finished", 0, None), ("exit 0", None)),
    (("crashed", "failed", 1, None), ("exit 1", None)),
    (("killed", "failed", -9, None), ("signal 9", None)),
    (("unstarted", "failed", None, "project 'x' is no longer served"),
     ("not started", "project 'x' is no longer served")),
    (("waited", "cancelled", None, "cancelled before it started"),
     ("cancel.json", "cancelled before it started")),
    (("stopped", "cancelled", 130, None), ("cancel.json", None)),
    (("gone", "lost", None, "the service stopped while the job ran"),
     ("lost", "the service stopped while the job ran")),
    (("dead", "lost", None, "node n1 stopped answering (declared dead)"),
     ("node lost", "node n1 stopped answering (declared dead)")),
]


class ReasonCodesTests(unittest.TestCase):
    @defer.inlineCallbacks
    def test_migration_8_gives_every_old_end_its_code_and_keeps_its_sentence(self):
        path = os.path.abspath(self.mktemp())
        version_7_db(path, [old for old, _ in OLD_ENDS])
        store = SQLiteJobStore(path, Clock())
        self.addCleanup(store.close)
        for old, expected in OLD_ENDS:
            found = yield store.get(old[0])
            self.assertEqual((found.reason, found.detail), expected, old)
        waiting = yield store.get("waiting")
        self.assertEqual((waiting.state, waiting.reason, waiting.detail),
                         ("pending", None, None))


# Runs that ended before health was judged: (id, outcome, stats) and the
# (items, pages, errors, health) migration 9 gives them.
OLD_RUNS = [
    (("full", "finished", {"items": 40, "fetched": 12, "failed": 2, "callback_errors": 1}),
     (40, 12, 3, "healthy")),
    (("partial", "finished", {"items": 5}), (5, None, 0, "healthy")),
    (("odd", "finished", {"items": "many", "fetched": 3.5}), (None, None, 0, "healthy")),
    (("nostats", "finished", None), (None, None, None, "healthy")),
    (("crashed", "failed", {"items": 1, "fetched": 2}), (1, 2, 0, None)),
    # What json.dumps writes and a database's own JSON functions may refuse:
    # a \u0000 in a string (PostgreSQL's ->> cannot give it as text), NaN
    # and Infinity (no JSON at all to PostgreSQL); and counts no 64-bit
    # column holds, and stats that are no object. The migration counts
    # them as a run's end does (health.counts), and still starts.
    (("nul", "finished", {"items": 3, "title": "a\u0000b"}), (3, None, 0, "healthy")),
    (("nan", "finished", {"items": 2, "fetched": float("nan"), "rate": float("inf")}),
     (2, None, 0, "healthy")),
    (("negative", "finished", {"items": -1, "fetched": 4, "failed": -2}),
     (None, 4, 0, "healthy")),
    (("huge", "finished", {"items": 2 ** 70, "fetched": 1, "failed": 2 ** 62,
                           "callback_errors": 2 ** 62}), (None, 1, 2 ** 63 - 1, "healthy")),
    (("list", "finished", [1, 2]), (None, None, None, "healthy")),
]


def version_8_db(path, runs):
    """A jobs.db of schema version 8 (before health) holding one finished
    job per ``runs`` entry (id, outcome, stats) and a pending one."""
    db = sqlite3.connect(path, isolation_level=None)
    for migration in migrations.SQLITE_MIGRATIONS:
        if migration.version <= 8:
            for statement in migration.statements:
                db.execute(statement)
    db.execute("PRAGMA user_version = 8")
    for jobid, outcome, stats in runs:
        db.execute(
            "INSERT INTO jobs (key, id, project, project_key, spider, spider_file, settings,"
            " arguments, priority, state, outcome, exit_status, created, start_time, end_time,"
            " stats) VALUES (?, ?, 'shop', 'shop', 'books', '/p/books.py', '[]', '[]', 0,"
            " 'finished', ?, 0, 1.0, 1.5, 2.0, ?)",
            (jobid, jobid, outcome, json.dumps(stats) if stats is not None else None))
    db.execute("INSERT INTO jobs (key, id, project, project_key, spider, spider_file, settings,"
               " arguments, priority, state, created) VALUES ('waiting', 'waiting', 'shop',"
               " 'shop', 'books', '/p/books.py', '[]', '[]', 0, 'pending', 1.0)")
    db.close()


@defer.inlineCallbacks
def check_old_runs_counted(test, store):
    """That ``store``, migrated from a table holding OLD_RUNS and a pending
    job 'waiting', counted each run as OLD_RUNS expects (both stores)."""
    for old, expected in OLD_RUNS:
        found = yield store.get(old[0])
        test.assertEqual((found.items, found.pages, found.errors, found.health), expected, old)
        test.assertEqual(found.health_reasons, ())
    waiting = yield store.get("waiting")
    test.assertEqual((waiting.items, waiting.errors, waiting.health), (None, None, None))


class RunHealthMigrationTests(unittest.TestCase):
    @defer.inlineCallbacks
    def test_migration_9_counts_old_runs_from_their_stats_and_calls_them_healthy(self):
        path = os.path.abspath(self.mktemp())
        version_8_db(path, [old for old, _ in OLD_RUNS])
        store = SQLiteJobStore(path, Clock())
        self.addCleanup(store.close)
        yield check_old_runs_counted(self, store)

    def test_the_history_of_a_spider_and_of_a_schedule_is_read_by_an_index(self):
        path = os.path.abspath(self.mktemp())
        version_8_db(path, [])
        SQLiteJobStore(path, Clock()).close()
        from netweir_serve.store.job_table import _HISTORY, _OF_SCHEDULE, _OF_SPIDER
        db = sqlite3.connect(path)
        self.addCleanup(db.close)
        for owner, index in ((_OF_SPIDER, "jobs_runs"), (_OF_SCHEDULE, "jobs_schedule_runs")):
            query = _HISTORY.format(owner=owner).replace("%(", ":").replace(")s", "")
            plan = " ".join(row[-1] for row in db.execute(
                "EXPLAIN QUERY PLAN " + query,
                {"project": "shop", "spider": "books", "schedule_key": "s", "seq": 0,
                 "size": 5}))
            self.assertIn(index, plan)
            self.assertNotIn("TEMP B-TREE", plan)
        # A schedule's jobs that wait or run (overlap, cancel), by its folded name.
        from netweir_serve.store.job_table import _SCHEDULE_IS
        plan = " ".join(row[-1] for row in db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE "
            + _SCHEDULE_IS.replace("%(", ":").replace(")s", "") + " AND state != 'finished'",
            {"schedule_key": "s"}))
        self.assertIn("jobs_schedule_key", plan)
