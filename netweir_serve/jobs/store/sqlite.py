"""The job table in DIR/jobs.db: SQLite, opened once, one transaction per change.

Each call is a handful of indexed statements on a local file, small enough
to run on the reactor thread; nothing here reads job files.
"""

import json
import sqlite3
from dataclasses import dataclass, replace

from zope.interface import implementer

from ..interfaces import IJobStore
from ...names import fold

PENDING, RUNNING, FINISHED = "pending", "running", "finished"
OUTCOMES = ("finished", "failed", "cancelled", "lost")


class DuplicateJob(ValueError):
    """A job with this id (compared ignoring case) is already known."""


@dataclass(frozen=True)
class JobRecord:
    """One job as the table holds it. Immutable: a change makes a new one."""

    id: str
    project: str
    spider: str
    spider_file: str
    settings: tuple = ()
    arguments: tuple = ()
    priority: float = 0.0
    state: str = PENDING
    outcome: str = None
    pid: int = None
    exit_status: int = None
    created: float = 0.0
    start_time: float = None
    end_time: float = None
    stats: dict = None
    cancel_requested: bool = False
    reason: str = None
    seq: int = None


_SCHEMA = """
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

_COLUMNS = (
    "seq, id, project, spider, spider_file, settings, arguments, priority, state,"
    " outcome, pid, exit_status, created, start_time, end_time, stats,"
    " cancel_requested, reason"
)


def _pairs(text):
    return tuple(tuple(pair) for pair in json.loads(text))


def _record(row):
    (seq, id_, project, spider, spider_file, settings, arguments, priority, state,
     outcome, pid, exit_status, created, start_time, end_time, stats,
     cancel_requested, reason) = row
    return JobRecord(
        id=id_, project=project, spider=spider, spider_file=spider_file,
        settings=_pairs(settings), arguments=_pairs(arguments), priority=priority,
        state=state, outcome=outcome, pid=pid, exit_status=exit_status,
        created=created, start_time=start_time, end_time=end_time,
        stats=json.loads(stats) if stats else None,
        cancel_requested=bool(cancel_requested), reason=reason, seq=seq,
    )


@implementer(IJobStore)
class JobStore:
    """IJobStore on an SQLite file (or ``:memory:`` for tests)."""

    def __init__(self, path):
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL with synchronous=NORMAL survives a crash of this process (the
        # case that matters); only a power cut may lose the last changes.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self.generation = 0

    def close(self):
        self._db.close()

    def _write(self, sql, params=()):
        with self._db:
            cursor = self._db.execute(sql, params)
        self.generation += 1
        return cursor

    def _one(self, where, params):
        row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE {where}", params).fetchone()
        return _record(row) if row else None

    def _many(self, where, params=(), order="seq"):
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE {where} ORDER BY {order}", params)
        return [_record(row) for row in rows]

    def add(self, record):
        try:
            cursor = self._write(
                "INSERT INTO jobs (key, id, project, project_key, spider, spider_file,"
                " settings, arguments, priority, state, created)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (fold(record.id), record.id, record.project, fold(record.project),
                 record.spider, record.spider_file, json.dumps(record.settings),
                 json.dumps(record.arguments), record.priority, PENDING, record.created),
            )
        except sqlite3.IntegrityError:
            raise DuplicateJob(f"a job with id {record.id!r} already exists"
                               " (job ids ignore case)") from None
        return replace(record, state=PENDING, seq=cursor.lastrowid)

    def get(self, jobid):
        return self._one("key = ?", (fold(jobid),))

    def next_pending(self):
        return self._one(
            "state = ? ORDER BY priority DESC, seq LIMIT 1", (PENDING,))

    def mark_running(self, jobid, pid, start_time):
        self._write(
            "UPDATE jobs SET state = ?, pid = ?, start_time = ? WHERE key = ?",
            (RUNNING, pid, start_time, fold(jobid)))
        return self.get(jobid)

    def mark_finished(self, jobid, outcome, end_time, exit_status=None, stats=None,
                      reason=None):
        if outcome not in OUTCOMES:
            raise ValueError(f"not an outcome: {outcome!r}")
        self._write(
            "UPDATE jobs SET state = ?, outcome = ?, end_time = ?, exit_status = ?,"
            " stats = ?, reason = ? WHERE key = ?",
            (FINISHED, outcome, end_time, exit_status,
             json.dumps(stats) if stats is not None else None, reason, fold(jobid)))
        return self.get(jobid)

    def mark_cancel_requested(self, jobid):
        self._write("UPDATE jobs SET cancel_requested = 1 WHERE key = ?", (fold(jobid),))

    def jobs(self, project=None):
        where, params = "state = ?", ()
        if project is not None:
            where, params = "project_key = ? AND state = ?", (fold(project),)
        return (
            self._many(where, params + (PENDING,), "priority DESC, seq"),
            self._many(where, params + (RUNNING,), "start_time, seq"),
            self._many(where, params + (FINISHED,), "end_time, seq"),
        )

    def counts(self):
        found = {PENDING: 0, RUNNING: 0, FINISHED: 0}
        for state, count in self._db.execute(
                "SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            found[state] = count
        return found

    def mark_running_lost(self, end_time, stats_of):
        lost = []
        for record in self._many("state = ?", (RUNNING,)):
            lost.append(self.mark_finished(
                record.id, "lost", end_time, stats=stats_of(record),
                reason="the service stopped while the job ran"))
        return lost

    def prune(self, keep):
        # Called after every job ends: the count, from the index, spares a
        # sort of the whole finished list when nothing is to go.
        finished = self._db.execute(
            "SELECT COUNT(*) FROM jobs WHERE state = ?", (FINISHED,)).fetchone()[0]
        if finished <= keep:
            return []
        old = self._many(
            "state = ? AND seq NOT IN (SELECT seq FROM jobs WHERE state = ?"
            " ORDER BY end_time DESC, seq DESC LIMIT ?)",
            (FINISHED, FINISHED, int(keep)),
        )
        if old:
            with self._db:
                self._db.executemany("DELETE FROM jobs WHERE seq = ?", [(r.seq,) for r in old])
            self.generation += 1
        return old
