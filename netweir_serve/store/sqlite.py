"""IJobStore on an SQLite file, DIR/jobs.db by default.

Every statement runs on one thread of the store's own (sqlite_runner.
SQLiteThread, given by open_store), one after the other in the order asked
for: the reactor never waits on the file, however large the table, and
there is still one writer. A read asked after a write sees it. Each result
comes back to the reactor thread, and ``version`` moves on there, when the
write's result is delivered: a cache never holds a version newer than its
answer. Unit tests give the ``Inline`` runner instead, which answers before
the call returns.

A write that finds the file locked (another process holding it) gives up
after a busy timeout of a few milliseconds and waits its turn on a timer,
in order with the writes queued behind it, while reads go on. Every commit
is durable (``synchronous=FULL``): an answered ``schedule.json`` survives a
power cut.
"""

import collections
import sqlite3
import threading

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from .interfaces import IJobStore, IScheduleStore, ITokenStore, IAuditStore
from .records import FINISHED, PENDING, RUNNING, StoreError
from .columns import SCHEDULE_FIELDS, SQLITE_KINDS, columns_of, in_sqlites_words
from .journal import ChangeJournal
from .job_table import SELECT_LISTED, JobColumns, JobTable, where_all
from .migrations import migrate_sqlite
from .schedule_table import ScheduleTable
from .token_table import TokenTable
from .audit_table import AuditTable
from .sqlite_runner import Inline

log = Logger()

# How long one statement may wait for another process's lock before it
# gives the store's thread back (to the reads queued behind it); the write
# is then tried again from a timer.
BUSY_TIMEOUT = 0.01
# Opening (and migrating) happens before the service answers anything, so
# it may wait longer for a lock.
OPEN_BUSY_TIMEOUT = 5.0
# The first retry of a locked write, doubled up to the last.
RETRY_DELAYS = (0.02, 0.05, 0.1, 0.2, 0.5)
# How long a write keeps trying before it fails with StoreError.
WRITE_PATIENCE = 60.0

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _is_busy(error):
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(error) or "busy" in str(error)


class _Statements:
    """A transaction's statements written for every backend (job_table,
    schedule_table), run on SQLite. ``changed`` tells nobody: no other
    store shares the file, and the version moves with any change."""

    def __init__(self, db, noted=None):
        self._db = db
        # Where a write's notices go (store.journal); None for a read.
        self._noted = noted

    def all(self, statement, params):
        return self._db.execute(in_sqlites_words(statement), params).fetchall()

    def each(self, statement, params):
        """The rows one at a time (a big read never all in memory at once)."""
        return self._db.execute(in_sqlites_words(statement), params)

    def one(self, statement, params):
        # Every row read, so that a RETURNING statement is finished.
        rows = self.all(statement, params)
        return rows[0] if rows else None

    def changed(self, kind, jobid=None, node=None):
        # No other store shares the file: only the journal hears it.
        if self._noted is not None:
            self._noted.append((kind, jobid, node))


# A write's course: waiting (queued, or for a lock), committing (its COMMIT
# under way on the store's thread), done (its outcome known), or cancelled
# before it was made.
WAITING, COMMITTING, DONE, CANCELLED = "waiting", "committing", "done", "cancelled"


class _Write:
    """A write asked for: its work, its deadline (the clock's), its
    Deferred, and where it is, which the reactor thread (a cancel) and the
    store's thread (the write itself) both look at, under ``changed``."""

    def __init__(self, work, deadline, delivered):
        self.work = work
        self.deadline = deadline
        self.changed = threading.Condition()
        self.state = WAITING
        self.outcome = None     # (result, version or None), or a Failure
        self.notices = ()       # what the write's transaction changed (tx.changed)
        self.deferred = defer.Deferred(self._cancel)
        self._delivered = delivered

    def _cancel(self, deferred):
        with self.changed:
            # Its COMMIT takes a moment: wait for it rather than say
            # "cancelled" of a write that was made.
            while self.state == COMMITTING:
                self.changed.wait()
            if self.state == WAITING:
                # Never made: the store's thread skips it, or rolls it back.
                self.state = CANCELLED
                return
        # Done, its outcome on its way to the reactor: given now instead.
        self._delivered(self)

    def finish(self, outcome):
        """On the store's thread: the write's outcome; False if it was
        cancelled meanwhile (nobody waits for it then)."""
        with self.changed:
            if self.state == CANCELLED:
                return False
            self.state, self.outcome = DONE, outcome
            self.changed.notify_all()
            return True

    def may_commit(self):
        """On the store's thread, before COMMIT: False if cancelled."""
        with self.changed:
            if self.state == CANCELLED:
                return False
            self.state = COMMITTING
            return True

    def not_committed(self):
        """On the store's thread: the COMMIT failed, the write waits again."""
        with self.changed:
            self.state = WAITING
            self.changed.notify_all()


class _Locked(Exception):
    """The file is locked by another process (SQLITE_BUSY): the write is to
    be tried again. ``error`` is SQLite's."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


@implementer(IJobStore, IScheduleStore, ITokenStore, IAuditStore)
class SQLiteJobStore(JobTable, ScheduleTable, TokenTable, AuditTable):
    """IJobStore on the SQLite file ``path`` (or ``:memory:`` for tests).

    ``clock`` (IReactorTime) times the retries of locked writes; ``runner``
    (sqlite_runner) runs the statements: ``Inline`` unless given. Raises
    sqlite3.Error (or migrations.NewerSchema) when the file cannot be
    opened or brought up to date."""

    def __init__(self, path, clock, busy_timeout=BUSY_TIMEOUT, patience=WRITE_PATIENCE,
                 runner=None):
        self._clock = clock
        self._patience = patience
        self._runner = runner if runner is not None else Inline()
        self.location = path
        # Opened and brought up to date here, before the service answers
        # anything; every statement after runs on the runner's thread.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                   timeout=OPEN_BUSY_TIMEOUT)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        migrate_sqlite(self._db)
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        # The version as of this store's last write delivered (``version``).
        self._version = self._db.execute("SELECT version FROM store_meta").fetchone()[0]
        # Which finished jobs each version changed (store/journal.py).
        self.journal = ChangeJournal()
        self._noting = None
        # The store's thread's alone: the writes held back by a lock, in order.
        self._blocked = collections.deque()
        # The reactor thread's: the timer of the next try, and how many so far.
        self._retry = None
        self._retries = 0
        self._closed = False
        self._stopped = None

    # -- the writes, on the store's thread ---------------------------------------

    def _write(self, work):
        """Runs ``work(db)`` in a write transaction on the store's thread;
        Deferred of its result. Writes are made in the order they were
        asked for."""
        write = _Write(work, self._clock.seconds() + self._patience, self._delivered)
        if self._closed:
            write.deferred.errback(StoreError("the job table is closed"))
            return write.deferred
        self._runner.submit(lambda: self._arrived(write))
        return write.deferred

    def _arrived(self, write):
        if self._blocked:
            # Behind a write that waits for the lock: after it, in order.
            self._blocked.append(write)
        elif self._attempt(write) is not None:
            self._blocked.append(write)
            self._runner.deliver(self._wait_for_lock, False)

    def _attempt(self, write):
        """Makes ``write``, or fails it, and delivers its outcome; when the
        file is locked, delivers nothing and returns SQLite's error."""
        if write.state == CANCELLED:
            return None
        try:
            outcome = self._transaction(write)
        except _Locked as locked:
            return locked.error
        except sqlite3.Error as e:
            outcome = Failure(StoreError(f"the job table could not be written: {e}"))
        except Exception:
            outcome = Failure()
        if write.finish(outcome):
            self._runner.deliver(self._delivered, write)
        return None

    def _transaction(self, write):
        """(result, the new version or None when nothing changed); raises
        _Locked for a busy file (the write to be tried again), or what the
        work or the file raised. None when the write was cancelled during
        its work (rolled back)."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                before = db.total_changes
                # The write's notices, for the journal (on this thread
                # alone: one write at a time).
                self._noting = write.notices = []
                result = write.work(db)
                changed = db.total_changes != before
                version = None
                if changed:
                    version = db.execute("UPDATE store_meta SET version = version + 1"
                                         " RETURNING version").fetchone()[0]
                if not write.may_commit():
                    db.execute("ROLLBACK")
                    return None
                try:
                    # Nothing changed (a claim that found no job, say): no
                    # commit to wait for, and cached answers stay good.
                    db.execute("COMMIT" if changed else "ROLLBACK")
                except BaseException:
                    write.not_committed()
                    raise
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as e:
            if _is_busy(e):
                raise _Locked(e) from e
            raise
        return result, version

    def _retry_blocked(self, now):
        """Tries the writes held back by a lock again, in order; the ones
        past their patience fail if the lock is still held."""
        made = False
        while self._blocked:
            write = self._blocked[0]
            locked = self._attempt(write)
            if locked is not None:
                # Every write already past its patience fails now, untried:
                # trying each would wait out the busy timeout on a lock
                # just seen held.
                self._fail_expired(now, locked)
                if self._blocked:
                    self._runner.deliver(self._wait_for_lock, made)
                return
            self._blocked.popleft()
            made = True
        self._runner.deliver(self._lock_freed)

    def _fail_expired(self, now, error):
        expired = [w for w in self._blocked if w.deadline <= now]
        for write in expired:
            self._blocked.remove(write)
            self._fail(write, StoreError(
                f"the job table could not be written: {error} (for {self._patience:g} s)"))

    def _fail(self, write, error):
        if write.finish(Failure(error)):
            self._runner.deliver(self._delivered, write)

    # -- the writes, on the reactor thread ------------------------------------------

    def _delivered(self, write):
        """Fires ``write``'s Deferred with its outcome, once (a cancel may
        have given it already)."""
        if write.deferred.called:
            return
        if isinstance(write.outcome, Failure):
            write.deferred.errback(write.outcome)
            return
        result, version = write.outcome if write.outcome is not None else (None, None)
        if version is not None:
            self.journal.record(version, write.notices)
            # Only ever up: a cancel may have delivered a later write first.
            self._version = max(self._version, version)
        write.deferred.callback(result)

    def _wait_for_lock(self, progressed):
        if self._closed:
            return
        if progressed:
            self._retries = 0
        if self._retries == 0:
            log.warn("the job table is locked by another process; writes wait for it")
        delay = RETRY_DELAYS[min(self._retries, len(RETRY_DELAYS) - 1)]
        self._retries += 1
        self._retry = self._clock.callLater(delay, self._try_again)

    def _try_again(self):
        self._retry = None
        if not self._closed:
            now = self._clock.seconds()
            self._runner.submit(lambda: self._retry_blocked(now))

    def _lock_freed(self):
        self._retries = 0

    # -- reads ---------------------------------------------------------------------------

    def _read(self, work):
        """``work(db)`` on the store's thread, after everything asked before
        it (but not after writes held back by a lock); Deferred of its result."""
        if self._closed:
            return defer.fail(StoreError("the job table is closed"))
        answered = defer.Deferred()

        def read():
            try:
                outcome = work(self._db)
            except sqlite3.Error as e:
                outcome = Failure(StoreError(f"the job table could not be read: {e}"))
            except Exception:
                outcome = Failure()
            self._runner.deliver(_answer, answered, outcome)

        self._runner.submit(read)
        return answered

    # JobTable's and ScheduleTable's statements, and what they need of a backend.
    _jobs = JobColumns(SQLITE_KINDS)
    _schedule_columns = columns_of(SCHEDULE_FIELDS, SQLITE_KINDS)
    _name_taken = sqlite3.IntegrityError

    def _write_statements(self, work):
        return self._write(lambda db: work(_Statements(db, self._noting)))

    def _read_statements(self, work):
        return self._read(lambda db: work(_Statements(db)))

    # -- IJobStore -------------------------------------------------------------

    # Only one service at a time uses an SQLite table (the directory lock):
    # whatever it shows running at start, under any node name, is stale.
    shared = False

    @property
    def version(self):
        # The stored version, as this store last wrote it: the table is not
        # shared, so nobody else moves it on (a hand edit of jobs.db while
        # the service runs is not seen until the next change or start).
        return self._version

    def _lock_prunes(self, tx):
        # Nothing to take: every write runs inside BEGIN IMMEDIATE.
        pass

    def _lock_claims(self, tx):
        # Nothing to take: every write runs inside BEGIN IMMEDIATE, so
        # nobody else writes between a claim's reads and its update.
        pass

    def _listed(self, tx, where, params):
        # Three reads, each in the order of its index; one connection on
        # one thread, so no write comes between them.
        return [tx.all(f"SELECT {SELECT_LISTED} FROM jobs"
                       f" {where_all(where + ['state = %(state)s'])} ORDER BY {order}",
                       {**params, "state": state})
                for state, order in ((PENDING, "priority DESC, seq"),
                                     (RUNNING, "start_time, seq"),
                                     (FINISHED, "end_time, seq"))]

    def close(self):
        """Waits for what was asked before, fails the writes still waiting
        for a lock, closes the file and ends the store's thread; a Deferred
        that fires once it has."""
        if self._stopped is not None:
            return self._stopped
        self._closed = True
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None

        def last():
            while self._blocked:
                self._fail(self._blocked.popleft(), StoreError("the job table is closed"))
            self._db.close()

        self._runner.submit(last)
        self._stopped = self._runner.stop()
        return self._stopped


def _answer(deferred, outcome):
    if isinstance(outcome, Failure):
        deferred.errback(outcome)
    else:
        deferred.callback(outcome)
