"""The job table's schema, as an ordered list of migrations.

``PRAGMA user_version`` says how many have been applied; a table written by
an older netweir-serve is brought up to date in place when it is opened.
Append a migration, never edit one that has landed: a ``jobs.db`` on some
machine was made by it.
"""

import json
from dataclasses import dataclass

from ..health.counts import counts_of
from .columns import in_sqlites_words


@dataclass(frozen=True)
class Migration:
    """A version of the schema: ``statements`` run in order, in one
    transaction. Each is SQL, or a step written in Python (a callable
    given a RunStatements) where SQL cannot say it once for both
    backends."""

    version: int
    what: str
    statements: tuple


class RunStatements:
    """What a Python step of a migration is given: ``all`` (a statement
    with psycopg's named placeholders, its rows) and ``many`` (one
    statement for each parameters of a list), in the migration's
    transaction on either backend."""

    def __init__(self, all, many):
        self.all = all
        self.many = many


def run_step(step, runner):
    """Runs one of a migration's statements: ``runner`` executes SQL (a
    RunStatements for a Python step)."""
    if callable(step):
        step(runner)
    else:
        runner.all(step, None)


# Migration 8's reasons: a job ended before it had a reason code keeps its
# sentence as detail and gets the code its outcome and status say (a
# cancel is the user's, a lost job of a node declared dead is node lost, a
# failure with no status is a start that failed). Written once for both
# backends (the same SQL).
REASONS_OF_OLD_ENDS = (
    "UPDATE jobs SET detail = reason, reason = CASE"
    " WHEN state != 'finished' THEN NULL"
    " WHEN outcome = 'cancelled' THEN 'cancel.json'"
    " WHEN outcome = 'lost' AND reason LIKE 'node % stopped answering%' THEN 'node lost'"
    " WHEN outcome = 'lost' THEN 'lost'"
    " WHEN exit_status IS NULL THEN 'not started'"
    " WHEN exit_status < 0 THEN 'signal ' || CAST(-exit_status AS TEXT)"
    " ELSE 'exit ' || CAST(exit_status AS TEXT) END")


# Migration 9: a chain schedule's firing owed, written with the end of
# the upstream job that owes it and deleted once its job is queued (or the
# firing is skipped): the outbox that makes a chain fire once per upstream
# job whatever restarts or nodes (schedules.chains).
CHAIN_FIRINGS = """CREATE TABLE chain_firings (
    schedule_key TEXT NOT NULL,
    upstream TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (schedule_key, upstream)
)"""

# Migration 10: the service's tokens (access.tokens), one row each, in the
# job table so that every node of a cluster knows the same ones. Never a
# secret: its salted hash (and, while a rotation's grace lasts, the one
# before it). ``projects`` a JSON list of names ([] for every project).
TOKENS = """CREATE TABLE tokens (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    projects TEXT NOT NULL,
    created REAL NOT NULL,
    last_used REAL,
    expires REAL,
    hash TEXT NOT NULL,
    previous_hash TEXT,
    previous_until REAL
)"""

# Migration 11: the audit of every write (web/audit.py, access.commands),
# one row each, in the job table so that every node of a cluster writes
# and lists the same one; ``project_key`` the folded project (NULL for a
# token's change), ``change`` short JSON text with no secret in it. And
# who queued each job (``queued_by``: ``by`` is a word of SQL's own).
AUDIT = """CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    who TEXT,
    address TEXT,
    endpoint TEXT NOT NULL,
    project TEXT,
    project_key TEXT,
    target TEXT,
    change TEXT,
    status INTEGER NOT NULL
)"""
# audit.json reads a project's rows newest first; the prune reads by time.
AUDIT_INDEXES = (
    "CREATE INDEX audit_project ON audit (project_key, time)",
    "CREATE INDEX audit_time ON audit (time)",
)
QUEUED_BY = "ALTER TABLE jobs ADD COLUMN queued_by TEXT"

# Migration 12: the finished jobs in the order of their ends, so that the
# prune after each end (store.job_table.prune) finds its cut-off by
# walking the index from the oldest, a few steps, rather than sorting every
# finished job (300 ms with 100,000 kept).
FINISHED_ORDER = "CREATE INDEX jobs_finished_order ON jobs (state, end_time, seq)"

# How many finished runs the backfill of their counts reads at once.
COUNTS_BATCH = 500


def _stats_of(text):
    """The stats a job's column holds, as the store reads them (Python's
    json takes the NaN and Infinity json.dumps writes); None for text
    that is no JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def counts_of_old_runs(run):
    """Migration 9's step: the counts of every run that ended before
    counts were kept, read from its stats by the rule a run's end uses
    (health.counts.counts_of), so an old run and a new one count alike.
    In Python, not in a database's JSON functions: PostgreSQL's refuse a
    \\u0000 or a NaN json.dumps writes, and would stop the service
    starting. Read in batches of COUNTS_BATCH, in order of seq."""
    after = -1
    while True:
        rows = run.all(
            "SELECT seq, stats FROM jobs WHERE state = 'finished' AND stats IS NOT NULL"
            " AND seq > %(after)s ORDER BY seq LIMIT %(batch)s",
            {"after": after, "batch": COUNTS_BATCH})
        if not rows:
            return
        counted = []
        for seq, text in rows:
            items, pages, errors = counts_of(_stats_of(text))
            counted.append({"items": items, "pages": pages, "errors": errors, "seq": seq})
        run.many("UPDATE jobs SET items = %(items)s, pages = %(pages)s, errors = %(errors)s"
                 " WHERE seq = %(seq)s", counted)
        after = rows[-1][0]


# Runs that finished before health was judged are healthy (no check
# applied to them): they are the history the first checks compare with.
HEALTH_OF_OLD_ENDS = "UPDATE jobs SET health = 'healthy' WHERE state = 'finished' AND outcome = 'finished'"

# A spider's runs and a schedule's, newest first: the history a run's end
# is judged against (in the end's transaction, so it must be quick) and
# what runs.json lists. A schedule's name is compared folded
# (lower(schedule), store.job_table), so its indexes hold it so; the
# index of migration 3 on the name as spelt is replaced. The same DDL on
# both backends.
RUNS_INDEXES = (
    "CREATE INDEX jobs_runs ON jobs (project_key, spider, end_time)",
    "CREATE INDEX jobs_schedule_runs ON jobs (project_key, spider, lower(schedule), end_time)",
    "DROP INDEX jobs_schedule",
    "CREATE INDEX jobs_schedule_key ON jobs (lower(schedule), state)",
)


SQLITE_MIGRATIONS = (
    # The schema netweir-serve shipped with before versions were kept (a
    # jobs.db from then has user_version 0 and this table already).
    Migration(1, "the job table", (
        """CREATE TABLE IF NOT EXISTS jobs (
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
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, priority DESC, seq)",
        "CREATE INDEX IF NOT EXISTS jobs_project ON jobs (project_key, state)",
    )),
    Migration(2, "the node that claimed a job, and a store-wide version", (
        "ALTER TABLE jobs ADD COLUMN node TEXT",
        "CREATE INDEX jobs_node ON jobs (node, state)",
        "CREATE TABLE store_meta (version INTEGER NOT NULL)",
        "INSERT INTO store_meta (version) VALUES (0)",
    )),
    Migration(3, "recurring schedules, and what a job must hold alone", (
        "ALTER TABLE jobs ADD COLUMN schedule TEXT",
        "ALTER TABLE jobs ADD COLUMN locks TEXT NOT NULL DEFAULT '[]'",
        "CREATE INDEX jobs_schedule ON jobs (schedule, state)",
        """CREATE TABLE schedules (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            key TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            project TEXT NOT NULL,
            project_key TEXT NOT NULL,
            spider TEXT NOT NULL,
            kind TEXT NOT NULL,
            rule TEXT NOT NULL,
            tz TEXT NOT NULL,
            overlap TEXT NOT NULL,
            misfire TEXT NOT NULL,
            settings TEXT NOT NULL,
            arguments TEXT NOT NULL,
            priority REAL NOT NULL,
            paused INTEGER NOT NULL DEFAULT 0,
            anchor REAL NOT NULL,
            next_due REAL,
            last_due REAL,
            last_job TEXT,
            runs INTEGER NOT NULL DEFAULT 0,
            skipped INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            created REAL NOT NULL
        )""",
    )),
    Migration(4, "the identity of a running job's process, for adoption", (
        "ALTER TABLE jobs ADD COLUMN proc_start TEXT",
    )),
    # (5 and 6 are PostgreSQL's own: the nodes of a cluster.)
    Migration(7, "a kill asked of a running job, beside its cancel", (
        "ALTER TABLE jobs ADD COLUMN kill_requested INTEGER NOT NULL DEFAULT 0",
    )),
    Migration(8, "policies, attempts and retries, and a reason's sentence", (
        "ALTER TABLE jobs ADD COLUMN policy TEXT",
        "ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE jobs ADD COLUMN retry_of TEXT",
        "ALTER TABLE jobs ADD COLUMN not_before REAL",
        "ALTER TABLE jobs ADD COLUMN detail TEXT",
        "ALTER TABLE schedules ADD COLUMN policy TEXT",
        REASONS_OF_OLD_ENDS,
    )),
    Migration(9, "run health, chains and schedules kept as Temporal keeps them", (
        "ALTER TABLE jobs ADD COLUMN health TEXT",
        "ALTER TABLE jobs ADD COLUMN health_reasons TEXT",
        "ALTER TABLE jobs ADD COLUMN items INTEGER",
        "ALTER TABLE jobs ADD COLUMN pages INTEGER",
        "ALTER TABLE jobs ADD COLUMN errors INTEGER",
        "ALTER TABLE jobs ADD COLUMN upstream TEXT",
        "ALTER TABLE schedules ADD COLUMN chain_on TEXT",
        "ALTER TABLE schedules ADD COLUMN jitter REAL NOT NULL DEFAULT 0",
        "ALTER TABLE schedules ADD COLUMN pause_after INTEGER",
        "ALTER TABLE schedules ADD COLUMN note TEXT",
        "ALTER TABLE schedules ADD COLUMN failed_in_row INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE schedules ADD COLUMN buffered INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE schedules ADD COLUMN caught_up INTEGER NOT NULL DEFAULT 0",
        CHAIN_FIRINGS,
        counts_of_old_runs,
        HEALTH_OF_OLD_ENDS,
        *RUNS_INDEXES,
    )),
    Migration(10, "tokens and their roles", (TOKENS,)),
    Migration(11, "the audit of every write, and who queued each job",
              (AUDIT, *AUDIT_INDEXES, QUEUED_BY)),
    Migration(12, "the finished jobs indexed in the order of their ends", (FINISHED_ORDER,)),
)

LATEST = SQLITE_MIGRATIONS[-1].version


class NewerSchema(Exception):
    """The table was written by a newer netweir-serve than this one."""


def migrate_sqlite(db):
    """Applies the migrations ``db`` (an sqlite3 connection in autocommit
    mode) lacks, each in a transaction of its own. Returns the versions
    applied. Raises NewerSchema for a table from a later version."""
    current = db.execute("PRAGMA user_version").fetchone()[0]
    if current > LATEST:
        raise NewerSchema(
            f"the job table has schema version {current}, newer than this"
            f" netweir-serve knows ({LATEST}): use the newer netweir-serve")
    runner = RunStatements(
        lambda statement, params: db.execute(in_sqlites_words(statement), params or ()).fetchall(),
        lambda statement, rows: db.executemany(in_sqlites_words(statement), rows))
    applied = []
    for migration in SQLITE_MIGRATIONS:
        if migration.version <= current:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in migration.statements:
                run_step(statement, runner)
            # PRAGMA takes no parameters; the version is our own int.
            db.execute(f"PRAGMA user_version = {int(migration.version)}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        applied.append(migration.version)
    return applied
