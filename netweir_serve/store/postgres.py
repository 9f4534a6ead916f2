"""IJobStore (with IScheduleStore and IClusterStore) on PostgreSQL, one
table shared by every node of a cluster.

The work is done by ``twisted.enterprise.adbapi`` in a small thread pool,
one psycopg connection per thread, so the reactor never waits for the
database: every method answers with a Deferred that fires later. Every
change is one transaction, which also moves the store-wide version on
(``store_meta``, one row) and sends a NOTIFY per thing changed
(store.notices); each store LISTENs on a connection of its own that
the reactor watches (postgres_listen), so it keeps ``version`` current and
tells ``on_notice`` callbacks what the other nodes did within milliseconds.

A lost connection is the normal course of a long-running service here (the
server restarts, the network goes away): a connection psycopg found broken
is dropped and the next statement connects again, and a transaction that
failed on a broken connection before its COMMIT was sent (so nothing of it
was made) is tried once more on a new one. Anything else fails with
StoreError, a sentence saying why.
"""

import json
import secrets

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from twisted.enterprise import adbapi
from twisted.internet import defer, threads
from twisted.logger import Logger
from zope.interface import implementer

from ..names import fold
from .interfaces import IClusterStore, IJobStore, IScheduleStore, ITokenStore, IAuditStore
from .records import FINISHED, NODE_LOST, PENDING, RUNNING, NodeNameTaken, StoreError
from .columns import POSTGRES_KINDS, SCHEDULE_FIELDS, columns_of, dump_json
from .job_table import LISTED_STATE, SELECT_ALL, SELECT_LISTED, JobColumns, JobTable, where_all
from .notices import CHANGED, CHANNEL, NODE, STATS
from .journal import ChangeJournal
from .notices import DONE, PROGRESS
from .notices import StoreNotice, decode, payload_tail
from .postgres_listen import NoticeWatcher, listening_connection
from .postgres_migrations import migrate_postgres
from .schedule_table import ScheduleTable
from .token_table import TokenTable
from .audit_table import AuditTable

log = Logger()

# Connections (and threads) per store: the work is short statements, and
# claims queue behind one advisory lock anyway.
POOL_SIZE = 3

# libpq settings a connection gets unless the URL says otherwise: give up
# connecting after 10 s, and notice a dead peer (a network cut, which no
# packet announces) within about half a minute instead of TCP's default of
# hours: a LISTEN connection sits idle, and an idle socket hears nothing.
CONNECTION_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
    "application_name": "netweir-serve",
}

# Versions of other nodes' changes whose notices are being heard at once.
HEARD_PARTS_KEPT = 64

# The key of the transaction-level advisory lock every prune takes first:
# a prune counts, then deletes up to a cut-off, in separate statements.
PRUNE_LOCK = 0x6E77_0004
# The key of the transaction-level advisory lock every claim takes first.
CLAIM_LOCK = 0x6E77_0002
# ... and the one that serializes registrations of node names.
NODE_LOCK = 0x6E77_0003

_NODE_FIELDS = ("name", "url", "heartbeat", "started", "dead", "age", "projects")
_SELECT_NODE = (
    "SELECT name, url, extract(epoch FROM heartbeat)::float8,"
    " extract(epoch FROM started)::float8, dead,"
    " extract(epoch FROM now() - heartbeat)::float8, projects FROM nodes")


def _node(row):
    node = dict(zip(_NODE_FIELDS, row))
    node["projects"] = json.loads(node["projects"])
    return node


def conninfo_of(url):
    """The libpq connection string for ``url`` (a postgresql:// URL or a
    key=value string), with CONNECTION_DEFAULTS for what it leaves out."""
    given = conninfo_to_dict(url)
    return make_conninfo(url, **{k: v for k, v in CONNECTION_DEFAULTS.items()
                                 if k not in given})


def shown(url):
    """``url`` as a log line or an error may show it: without its password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "the PostgreSQL database given"
    where = params.get("host", "localhost")
    if params.get("port"):
        where += f":{params['port']}"
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{where}/{params.get('dbname', '')}"


def _sentence(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class CommitUnknown(StoreError):
    """The connection broke while a change was being committed: it may or
    may not have been made (a claim, say, may have taken a job for this
    node). Read the table again to know."""


class _BrokenCommit(Exception):
    def __init__(self, error):
        super().__init__(_sentence(error))


class _PooledConnection(adbapi.Connection):
    """adbapi's connection, but one found broken is dropped quietly: the
    next statement on this thread connects again. (adbapi's own logs a
    traceback twice and raises from the rollback, hiding the real error.)"""

    def commit(self):
        try:
            self._connection.commit()
        except psycopg.OperationalError as e:
            if self._connection.closed or self._connection.broken:
                raise _BrokenCommit(e) from e
            raise

    def rollback(self):
        conn = self._connection
        if not (conn.closed or conn.broken):
            try:
                conn.rollback()
                return
            except psycopg.Error:
                pass
        # (Unless it was dropped already, by a reconnection that failed.)
        if self._pool.connections.get(self._pool.threadID()) is conn:
            self._pool.disconnect(conn)


class _Pool(adbapi.ConnectionPool):
    connectionFactory = _PooledConnection

    def connect(self):
        conn = super().connect()
        if conn.closed or conn.broken:
            self.disconnect(conn)
            conn = super().connect()
        return conn


class _Tx:
    """One transaction, in a pool thread: its statements, and the notices
    of what it changed (which also move the version on)."""

    def __init__(self, cursor):
        self.cursor = cursor
        self.notices = []

    def execute(self, sql, params=None):
        self.cursor.execute(sql, params)
        return self.cursor

    def each(self, sql, params=None):
        """The rows one at a time (a big read never all in memory at once)."""
        cursor = self.execute(sql, params)
        while True:
            rows = cursor.fetchmany(1000)
            if not rows:
                return
            yield from rows

    def one(self, sql, params=None):
        return self.execute(sql, params).fetchone()

    def all(self, sql, params=None):
        return self.execute(sql, params).fetchall()

    def changed(self, kind, jobid=None, node=None):
        self.notices.append((kind, jobid, node))


def _broken(cursor):
    conn = cursor.connection
    return conn.closed or conn.broken


@implementer(IJobStore, IScheduleStore, IClusterStore, ITokenStore, IAuditStore)
class PostgresJobStore(JobTable, ScheduleTable, TokenTable, AuditTable):
    """The job table in the PostgreSQL database ``url`` (a postgresql://
    URL or a libpq key=value string; its ``options`` may set a search_path
    to keep the tables in a schema of their own), on ``reactor`` (``clock``
    if not given: the service passes its reactor as both).

    Connects, brings the schema up to date and starts listening before it
    returns: it blocks, as opening an SQLite file does, so make it before
    the reactor runs, or use ``opened`` (a Deferred, the blocking part in
    a thread). Raises StoreError when the database cannot be used, and
    migrations.NewerSchema for a schema a newer netweir-serve made."""

    shared = True

    def __init__(self, url, clock, reactor=None, pool_size=POOL_SIZE,
                 reconnect_delays=None, _listening=None):
        self._clock = clock
        self._reactor = reactor if reactor is not None else clock
        self._conninfo = conninfo_of(url)
        self._shown = self.location = shown(url)
        # Tells this store's own notices from the others'.
        self._origin = secrets.token_hex(8)
        self._closed = False
        self._in_flight = set()
        self._callbacks = []
        if _listening is None:
            _listening = self._start_listening(migrate=True)
        conn, self._version = _listening
        # Which finished jobs each version changed (store/journal.py), and
        # the notices heard of versions whose DONE is yet to come.
        self.journal = ChangeJournal()
        self._heard_parts = {}
        self._pool = _Pool("psycopg", self._conninfo, cp_min=1, cp_max=pool_size,
                           cp_reconnect=True, cp_reactor=self._reactor)
        watcher_options = {} if reconnect_delays is None else {"delays": reconnect_delays}
        self._watcher = NoticeWatcher(
            self._reactor, self._start_listening, self._heard, self._listening_again,
            self._shown, **watcher_options)
        self._watcher.watch(conn)

    @classmethod
    def opened(cls, url, clock, reactor=None, **options):
        """A Deferred of a store opened as the constructor does, with the
        connecting and migrating done in the reactor's thread pool."""
        reactor = reactor if reactor is not None else clock
        conninfo = conninfo_of(url)
        listening = threads.deferToThreadPool(
            reactor, reactor.getThreadPool(), _listening_connection, conninfo, shown(url),
            True)
        return listening.addCallback(
            lambda done: cls(url, clock, reactor, _listening=done, **options))

    def _start_listening(self, migrate=False):
        # Blocks: at start, or in a thread when the watcher connects again.
        return _listening_connection(self._conninfo, self._shown, migrate)

    # -- running the work ------------------------------------------------------

    def _write(self, work):
        return self._run(work, "written")

    def _read(self, work):
        return self._run(work, "read")

    # JobTable's and ScheduleTable's statements (written for psycopg), and
    # what they need.
    _jobs = JobColumns(POSTGRES_KINDS)
    _schedule_columns = columns_of(SCHEDULE_FIELDS, POSTGRES_KINDS)
    _name_taken = psycopg.errors.UniqueViolation
    _write_statements = _write
    _read_statements = _read

    def _run(self, work, what):
        # A cancel of the Deferred returned does not stop the work:
        # runInteraction has no canceller, so the Deferred says
        # CancelledError while the transaction goes on and may commit. A
        # caller never cancels a write (web/endpoint.py shields them, and
        # jobs/submit.py keeps a job's folders when queueing it is cancelled).
        if self._closed:
            return defer.fail(StoreError("the job table is closed"))
        d = self._pool.runInteraction(self._transaction, work)
        self._in_flight.add(d)

        def settled(result):
            self._in_flight.discard(d)
            return result

        d.addBoth(settled)
        d.addCallbacks(self._made, self._failed, errbackArgs=(what,))
        return d

    def _transaction(self, cursor, work):
        # In a pool thread. A connection found broken inside the work has
        # committed nothing (adbapi commits after it returns): try once
        # more on a new connection.
        try:
            return self._attempt(cursor, work)
        except psycopg.OperationalError:
            if not _broken(cursor):
                raise
        cursor.reconnect()
        cursor.reopen()
        return self._attempt(cursor, work)

    def _attempt(self, cursor, work):
        tx = _Tx(cursor)
        result = work(tx)
        if not tx.notices:
            return result, None, ()
        # The version moves on and every notice goes out in one statement,
        # at the end: the row lock on store_meta is held only until the
        # commit, and commits (so versions, and the notices' order) follow it.
        tails = list(dict.fromkeys(payload_tail(self._origin, *n) for n in tx.notices))
        if all(kind in PROGRESS for kind, _, _ in tx.notices):
            # Progress only (stats saved): watchers hear it, but no listing
            # shows it, so the version, and every answer cached on it, stay.
            rows = tx.all(
                "SELECT version, pg_notify(%s, version::text || ' ' || tail)"
                " FROM store_meta, unnest(%s::text[]) AS tail", (CHANNEL, tails))
            return result, None, ()
        # Last, after them all: the version is whole (notices.DONE).
        tails.append(payload_tail(self._origin, DONE))
        rows = tx.all(
            "WITH bumped AS (UPDATE store_meta SET version = version + 1 RETURNING version)"
            " SELECT bumped.version, pg_notify(%s, bumped.version::text || ' ' || tail)"
            " FROM bumped, unnest(%s::text[]) AS tail", (CHANNEL, tails))
        return result, rows[0][0], tuple(tx.notices)

    def _made(self, done):
        result, version, notices = done
        if version is not None:
            self.journal.record(version, notices)
            if version > self._version:
                self._version = version
        return result

    def _failed(self, failure, what):
        error = failure.value
        if isinstance(error, _BrokenCommit):
            raise CommitUnknown(
                f"the job table at {self._shown} could not be {what}: the connection was"
                f" lost as the change was committed ({error}), so it may or may not have"
                " been made")
        if isinstance(error, psycopg.Error):
            raise StoreError(
                f"the job table at {self._shown} could not be {what}: {_sentence(error)}")
        if isinstance(error, adbapi.ConnectionLost):
            raise StoreError(f"the job table at {self._shown} could not be {what}: the"
                             " connection to PostgreSQL was lost")
        return failure

    # -- notices ---------------------------------------------------------------

    def on_notice(self, callback):
        """Calls ``callback(notice)`` (a notices.StoreNotice), on the reactor
        thread, for every change another store (node) makes, as soon as it
        is heard: to poll at once for a queued or ended job, or, as the
        job's owner, to act on a CANCEL asked elsewhere. After the LISTEN
        connection was lost and came back, a CHANGED notice says that
        anything may have changed meanwhile (re-read what matters: a cancel
        asked meanwhile was not heard). A store's own changes are not
        announced to itself. Returns a function that stops the calls."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    @property
    def listening(self):
        """Whether the LISTEN connection is up (other nodes' changes heard now)."""
        return self._watcher.listening

    def _heard(self, payload):
        decoded = decode(payload)
        if decoded is None:
            return
        origin, notice = decoded
        if origin != self._origin:
            # Another node's change (our own are recorded as made). One
            # transaction's notices may come over several reads of the
            # connection, with requests answered between them: the journal
            # hears of its version once its DONE, the last, is heard.
            if notice.kind == DONE:
                self.journal.record(notice.version, self._heard_parts.pop(notice.version, []))
                return
            if notice.kind not in PROGRESS:
                self._heard_parts.setdefault(notice.version, []).append(
                    (notice.kind, notice.jobid, notice.node))
                if len(self._heard_parts) > HEARD_PARTS_KEPT:
                    # Versions whose DONE never comes (from an older node).
                    del self._heard_parts[min(self._heard_parts)]
        if notice.version > self._version:
            self._version = notice.version
        if origin != self._origin:
            self._announce(notice)

    def _listening_again(self, version):
        # Notices up to ``version`` may have been missed while it was down.
        self._heard_parts.clear()
        self.journal.forget(version)
        if version > self._version:
            self._version = version
        self._announce(StoreNotice(CHANGED, self._version))

    def _announce(self, notice):
        for callback in list(self._callbacks):
            try:
                callback(notice)
            except Exception:
                log.failure("a store notice's callback failed ({kind})", kind=notice.kind)

    # -- IJobStore -------------------------------------------------------------

    @property
    def version(self):
        return self._version

    def _lock_prunes(self, tx):
        # Prunes one at a time, across nodes: under READ COMMITTED a count
        # taken before another prune committed would cut too far after it.
        tx.execute("SELECT pg_advisory_xact_lock(%s)", (PRUNE_LOCK,))

    def _lock_claims(self, tx):
        # Two claims at once, each in READ COMMITTED, would each see the
        # other's job still pending (not yet committed) and so each
        # find its own job free to run, although the two share a lock.
        # So every claim first takes this advisory lock, held to its
        # commit, and its reads, begun after it is granted, see every
        # claim made before it. Claims are a few milliseconds.
        tx.execute("SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK,))

    def _listed(self, tx, where, params):
        # One statement, so one snapshot: a job moving on meanwhile is
        # in exactly one of the lists.
        sections = {PENDING: [], RUNNING: [], FINISHED: []}
        for row in tx.all(
                f"SELECT {SELECT_LISTED} FROM jobs {where_all(where)} ORDER BY state,"
                " CASE state WHEN 'pending' THEN -priority WHEN 'running' THEN start_time"
                " ELSE end_time END, seq", params):
            sections.setdefault(row[LISTED_STATE], []).append(row)
        return sections[PENDING], sections[RUNNING], sections[FINISHED]

    def close(self):
        """Stops listening, lets the statements under way finish, and closes
        the connections; later calls fail with StoreError."""
        if self._closed:
            return defer.succeed(None)
        self._closed = True
        self._watcher.stop()
        under_way = defer.DeferredList(list(self._in_flight), consumeErrors=False)
        return under_way.addCallback(lambda _: self._pool.close())

    # -- IClusterStore ---------------------------------------------------------

    def register_node(self, name, url, timeout=None, projects=()):
        served = dump_json(sorted({fold(p) for p in projects}))

        def register(tx):
            tx.execute("SELECT pg_advisory_xact_lock(%s)", (NODE_LOCK,))
            row = tx.one(f"{_SELECT_NODE} WHERE name = %s", (name,))
            previous = _node(row) if row else None
            if (previous is not None and timeout is not None and not previous["dead"]
                    and previous["age"] < timeout and previous["url"] != url):
                raise NodeNameTaken(name, previous["url"])
            tx.execute(
                "INSERT INTO nodes (name, url, heartbeat, dead, started, projects)"
                " VALUES (%s, %s, now(), false, now(), %s) ON CONFLICT (name) DO UPDATE"
                " SET url = excluded.url, heartbeat = now(), dead = false, started = now(),"
                " projects = excluded.projects",
                (name, url, served))
            tx.changed(NODE, node=name)
            return previous

        return self._write(register)

    def heartbeat(self, name):
        def beat(tx):
            return tx.one("UPDATE nodes SET heartbeat = now() WHERE name = %s AND NOT dead"
                          " RETURNING name", (name,)) is not None

        return self._write(beat)

    def declare_dead(self, timeout_seconds, end_time=None, reason=None):
        def declare(tx):
            # One statement: two nodes declaring at once both find the node
            # silent, but the second waits for the first's row lock, then
            # sees it dead already and leaves it out.
            names = [row[0] for row in tx.all(
                "UPDATE nodes SET dead = true WHERE NOT dead"
                " AND heartbeat < now() - %s * interval '1 second' RETURNING name",
                (float(timeout_seconds),))]
            lost = {}
            for name in sorted(names):
                tx.changed(NODE, node=name)
                lost[name] = self._lose(tx, name, end_time, reason) if end_time is not None else []
            return lost

        return self._write(declare)

    def nodes(self):
        return self._read(lambda tx: [_node(row) for row in tx.all(
            f"{_SELECT_NODE} ORDER BY name")])

    def mark_lost(self, node, end_time, reason=None):
        return self._write(lambda tx: self._lose(tx, node, end_time, reason))

    def save_stats(self, jobid, stats):
        def save(tx):
            row = tx.one("UPDATE jobs SET stats = %s WHERE key = %s AND state = %s"
                         " RETURNING id, node", (dump_json(stats), fold(jobid), RUNNING))
            if row is None:
                return False
            tx.changed(STATS, *row)
            return True

        return self._write(save)

    def _lose(self, tx, node, end_time, reason):
        """Ends every job still running on ``node`` as lost: the ended
        records, in queue order, their notices sent."""
        detail = reason or f"node {node} stopped answering (declared dead)"
        rows = tx.all(
            "UPDATE jobs SET state = %s, outcome = 'lost', end_time = %s, reason = %s,"
            f" detail = %s WHERE state = %s AND node = %s RETURNING {SELECT_ALL}",
            (FINISHED, end_time, NODE_LOST, detail, RUNNING, node))
        return sorted((self._ended(tx, row) for row in rows), key=lambda r: r.seq)


# -- run in pool threads -------------------------------------------------------

def _listening_connection(conninfo, described, migrate):
    def connect():
        try:
            return psycopg.connect(conninfo, autocommit=True)
        except psycopg.Error as e:
            raise StoreError(f"cannot connect to the job table at {described}:"
                             f" {_sentence(e)}") from None

    def read_version(conn):
        try:
            if migrate:
                migrate_postgres(conn)
            return conn.execute("SELECT version FROM store_meta").fetchone()[0]
        except psycopg.Error as e:
            raise StoreError(f"cannot use the job table at {described}:"
                             f" {_sentence(e)}") from None

    return listening_connection(connect, read_version)
