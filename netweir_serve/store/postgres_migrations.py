"""The PostgreSQL job table's schema, as versioned migrations.

The versions are SQLite's (migrations.SQLITE_MIGRATIONS), with the same
numbers and descriptions: a version means the same change on both
backends, written in each one's DDL. Version 5, the nodes of a cluster, is
PostgreSQL's own (an SQLite table has one service and no nodes), and so
is version 6, the projects each node serves; from 7 on the versions are
both backends' again (SQLite skips 5 and 6). The ``schema_version`` table holds
how many have been applied, as ``PRAGMA user_version`` does for SQLite.
Append a migration, never edit one that has landed.
"""

from .migrations import (
    CHAIN_FIRINGS, HEALTH_OF_OLD_ENDS, REASONS_OF_OLD_ENDS, RUNS_INDEXES, SQLITE_MIGRATIONS,
    TOKENS, AUDIT, AUDIT_INDEXES, QUEUED_BY, FINISHED_ORDER, Migration, NewerSchema, RunStatements, counts_of_old_runs, run_step)

# The key of the session-level advisory lock held while migrating: two
# nodes starting at once must not both apply a migration (CREATE TABLE IF
# NOT EXISTS would hide it, but an ALTER TABLE would fail on the second).
MIGRATION_LOCK = 0x6E77_0001


def _as_sqlite(version, statements):
    """Migration ``version`` in PostgreSQL's DDL, described as SQLite's is."""
    same = next(m for m in SQLITE_MIGRATIONS if m.version == version)
    return Migration(version, same.what, statements)


POSTGRES_MIGRATIONS = (
    _as_sqlite(1, (
        # Epoch seconds as double precision (what the records hold, and
        # exact for a Python float); JSON as text, as SQLite keeps it:
        # jsonb would reorder keys and refuse a \u0000 a crawl's stats may hold.
        """CREATE TABLE jobs (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            key text NOT NULL UNIQUE,
            id text NOT NULL,
            project text NOT NULL,
            project_key text NOT NULL,
            spider text NOT NULL,
            spider_file text NOT NULL,
            settings text NOT NULL,
            arguments text NOT NULL,
            priority double precision NOT NULL,
            state text NOT NULL,
            outcome text,
            pid integer,
            exit_status integer,
            created double precision NOT NULL,
            start_time double precision,
            end_time double precision,
            stats text,
            cancel_requested boolean NOT NULL DEFAULT false,
            reason text
        )""",
        "CREATE INDEX jobs_queue ON jobs (state, priority DESC, seq)",
        "CREATE INDEX jobs_project ON jobs (project_key, state)",
    )),
    _as_sqlite(2, (
        "ALTER TABLE jobs ADD COLUMN node text",
        "CREATE INDEX jobs_node ON jobs (node, state)",
        "CREATE TABLE store_meta (version bigint NOT NULL)",
        "INSERT INTO store_meta (version) VALUES (0)",
    )),
    _as_sqlite(3, (
        "ALTER TABLE jobs ADD COLUMN schedule text",
        # An array, not JSON text: a list as the database holds one (the
        # claim groups its candidates by it).
        "ALTER TABLE jobs ADD COLUMN locks text[] NOT NULL DEFAULT '{}'",
        "CREATE INDEX jobs_schedule ON jobs (schedule, state)",
        """CREATE TABLE schedules (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            key text NOT NULL UNIQUE,
            name text NOT NULL,
            project text NOT NULL,
            project_key text NOT NULL,
            spider text NOT NULL,
            kind text NOT NULL,
            rule text NOT NULL,
            tz text NOT NULL,
            overlap text NOT NULL,
            misfire text NOT NULL,
            settings text NOT NULL,
            arguments text NOT NULL,
            priority double precision NOT NULL,
            paused boolean NOT NULL DEFAULT false,
            anchor double precision NOT NULL,
            next_due double precision,
            last_due double precision,
            last_job text,
            runs integer NOT NULL DEFAULT 0,
            skipped integer NOT NULL DEFAULT 0,
            error text,
            created double precision NOT NULL
        )""",
    )),
    _as_sqlite(4, (
        "ALTER TABLE jobs ADD COLUMN proc_start text",
    )),
    Migration(5, "the nodes of a cluster, and when each was last heard of", (
        # Times by the database's clock (now()), never a node's: whether a
        # node is silent past the timeout must not depend on whose clock
        # is right.
        """CREATE TABLE nodes (
            name text PRIMARY KEY,
            url text,
            heartbeat timestamptz NOT NULL,
            dead boolean NOT NULL DEFAULT false,
            started timestamptz NOT NULL
        )""",
    )),
    Migration(6, "the projects each node serves", (
        # A JSON list of folded project names, written at registration:
        # the listings say when no live node serves a pending job's project.
        "ALTER TABLE nodes ADD COLUMN projects text NOT NULL DEFAULT '[]'",
    )),
    _as_sqlite(7, (
        "ALTER TABLE jobs ADD COLUMN kill_requested boolean NOT NULL DEFAULT false",
    )),
    _as_sqlite(8, (
        # JSON as text, as the other JSON columns (see 1).
        "ALTER TABLE jobs ADD COLUMN policy text",
        "ALTER TABLE jobs ADD COLUMN attempt integer NOT NULL DEFAULT 1",
        "ALTER TABLE jobs ADD COLUMN retry_of text",
        "ALTER TABLE jobs ADD COLUMN not_before double precision",
        "ALTER TABLE jobs ADD COLUMN detail text",
        "ALTER TABLE schedules ADD COLUMN policy text",
        REASONS_OF_OLD_ENDS,
    )),
    _as_sqlite(9, (
        "ALTER TABLE jobs ADD COLUMN health text",
        "ALTER TABLE jobs ADD COLUMN health_reasons text[]",
        "ALTER TABLE jobs ADD COLUMN items bigint",
        "ALTER TABLE jobs ADD COLUMN pages bigint",
        "ALTER TABLE jobs ADD COLUMN errors bigint",
        "ALTER TABLE jobs ADD COLUMN upstream text",
        "ALTER TABLE schedules ADD COLUMN chain_on text[]",
        "ALTER TABLE schedules ADD COLUMN jitter double precision NOT NULL DEFAULT 0",
        "ALTER TABLE schedules ADD COLUMN pause_after integer",
        "ALTER TABLE schedules ADD COLUMN note text",
        "ALTER TABLE schedules ADD COLUMN failed_in_row integer NOT NULL DEFAULT 0",
        "ALTER TABLE schedules ADD COLUMN buffered integer NOT NULL DEFAULT 0",
        "ALTER TABLE schedules ADD COLUMN caught_up integer NOT NULL DEFAULT 0",
        CHAIN_FIRINGS.replace("REAL", "double precision"),
        counts_of_old_runs,
        HEALTH_OF_OLD_ENDS,
        *RUNS_INDEXES,
    )),
    _as_sqlite(10, (TOKENS.replace("REAL", "double precision"),)),
    _as_sqlite(11, (
        AUDIT.replace("INTEGER PRIMARY KEY AUTOINCREMENT",
                      "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
             .replace("REAL", "double precision"),
        *AUDIT_INDEXES,
        QUEUED_BY.replace("TEXT", "text"),
    )),
    # The prune takes a job with no end time as the oldest: first, as
    # SQLite's index has it.
    _as_sqlite(12, (FINISHED_ORDER.replace("end_time,", "end_time NULLS FIRST,"),)),
)

POSTGRES_LATEST = POSTGRES_MIGRATIONS[-1].version


def _runner(conn):
    """A migration's statements run on ``conn``."""
    def all(statement, params):
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []

    def many(statement, rows):
        with conn.cursor() as cursor:
            cursor.executemany(statement, rows)

    return RunStatements(all, many)


def migrate_postgres(conn):
    """Applies the migrations the schema of ``conn`` (a psycopg connection
    in autocommit mode; its search_path says where the tables are) lacks,
    each in a transaction of its own, holding an advisory lock meanwhile.
    Returns the versions applied. Raises NewerSchema for a schema from a
    later version."""
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        with conn.transaction():
            if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
                conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
                conn.execute("INSERT INTO schema_version (version) VALUES (0)")
            current = conn.execute("SELECT version FROM schema_version").fetchone()[0]
        if current > POSTGRES_LATEST:
            raise NewerSchema(
                f"the job table has schema version {current}, newer than this"
                f" netweir-serve knows ({POSTGRES_LATEST}): use the newer netweir-serve")
        runner = _runner(conn)
        applied = []
        for migration in POSTGRES_MIGRATIONS:
            if migration.version <= current:
                continue
            with conn.transaction():
                for statement in migration.statements:
                    run_step(statement, runner)
                conn.execute("UPDATE schema_version SET version = %s", (migration.version,))
            applied.append(migration.version)
        return applied
    finally:
        # (A connection that broke has lost the lock with its session.)
        if not (conn.closed or conn.broken):
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
