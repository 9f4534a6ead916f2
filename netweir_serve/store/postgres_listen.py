"""The LISTEN connection of a PostgreSQL store, watched by the reactor.

One psycopg connection of its own, in autocommit mode, that does nothing
but LISTEN. psycopg keeps its libpq connection non-blocking, so when the
reactor says the socket is readable, ``consume_input`` reads what arrived
without waiting and ``notifies`` hands over the notifications already read:
nothing here blocks the reactor. (psycopg's own ``Connection.notifies``
waits in a generator; libpq's calls are what a reactor wants.)

When the connection drops (the server restarts, the network goes), the
watcher says so once in the log, connects again in a thread with a growing
delay, and says so again when it listens once more. A change made while it
was away was not heard, so whoever opened it re-reads the version then.
"""

import os

import psycopg
from twisted.internet import threads
from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import Logger
from zope.interface import implementer

from .notices import CHANNEL

log = Logger()

# The delays before each attempt to connect again, the last repeated.
RECONNECT_DELAYS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def listening_connection(connect, read_version):
    """A new LISTEN connection and the version read once it listens:
    ``connect()`` makes the connection (autocommit), ``read_version(conn)``
    reads the version. Blocks: run it in a thread, or before the reactor."""
    conn = connect()
    try:
        conn.execute(f"LISTEN {CHANNEL}")
        # Read after LISTEN: a change committed from here on is heard.
        version = read_version(conn)
    except BaseException:
        conn.close()
        raise
    return conn, version


@implementer(IReadDescriptor)
class NoticeWatcher:
    """Hands each notification on ``conn`` to ``on_payload(text)``, on the
    reactor thread; after a reconnection, calls ``on_reconnected(version)``.
    ``reconnect()`` blocks (it runs in the reactor's thread pool) and
    returns (conn, version) as ``listening_connection`` does."""

    def __init__(self, reactor, reconnect, on_payload, on_reconnected, describe,
                 delays=RECONNECT_DELAYS):
        self._reactor = reactor
        self._reconnect = reconnect
        self._on_payload = on_payload
        self._on_reconnected = on_reconnected
        self._describe = describe
        self._delays = delays
        self._conn = None
        self._fd = -1
        self._attempts = 0
        self._retry = None
        self._connecting = None
        self._stopped = False

    @property
    def listening(self):
        """Whether notices are being heard now."""
        return self._conn is not None

    def watch(self, conn):
        """Starts watching ``conn``, a connection ``listening_connection`` made."""
        self._conn = conn
        # A descriptor of our own for the same socket: libpq closes its
        # own as soon as it reads the end of the connection, before we
        # could tell the reactor, which would then hold a closed (soon
        # reused) descriptor number. Ours stays open until we drop it.
        self._fd = os.dup(conn.pgconn.socket)
        self._reactor.addReader(self)
        # Anything read while it was set up (LISTEN's own answer may carry
        # notifications) is already in libpq's queue.
        self.doRead()

    def stop(self):
        """Stops listening and closes the connection; no more callbacks."""
        self._stopped = True
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        self._drop()

    # -- IReadDescriptor -------------------------------------------------------

    def fileno(self):
        return self._fd

    def logPrefix(self):
        return "PostgresNotices"

    def doRead(self):
        conn = self._conn
        if conn is None:
            return None
        pgconn = conn.pgconn
        try:
            pgconn.consume_input()
        except psycopg.OperationalError as e:
            self._lost(str(e).strip() or "the server closed the connection")
            return None
        while True:
            notify = pgconn.notifies()
            if notify is None:
                break
            if notify.relname.decode() == CHANNEL:
                self._on_payload(notify.extra.decode("utf-8", "replace"))
            if self._conn is not conn:   # stopped by a callback
                break
        return None

    def connectionLost(self, reason):
        # The reactor gave up on the descriptor (it is removed already).
        self._lost(reason.getErrorMessage())

    # -- losing and finding the connection --------------------------------------

    def _drop(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            self._reactor.removeReader(self)
            os.close(self._fd)
            self._fd = -1
            try:
                conn.close()
            except psycopg.Error:
                pass

    def _lost(self, why):
        if self._conn is None:
            return
        self._drop()
        if self._stopped:
            return
        log.warn("lost the LISTEN connection to {db} ({why}); changes other nodes make are"
                 " not heard until it is back (the poll still runs); reconnecting",
                 db=self._describe, why=why)
        self._attempts = 0
        self._schedule()

    def _schedule(self):
        delay = self._delays[min(self._attempts, len(self._delays) - 1)]
        self._attempts += 1
        self._retry = self._reactor.callLater(delay, self._try)

    def _try(self):
        self._retry = None
        attempt = threads.deferToThreadPool(self._reactor, self._reactor.getThreadPool(),
                                            self._reconnect)
        self._connecting = attempt
        attempt.addCallbacks(self._connected, self._failed)

    def _connected(self, result):
        self._connecting = None
        conn, version = result
        if self._stopped:
            conn.close()
            return
        log.info("listening again on {db}, after {n} attempt(s)", db=self._describe,
                 n=self._attempts)
        self.watch(conn)
        self._on_reconnected(version)

    def _failed(self, failure):
        # Said once, when the connection was lost; every attempt after that
        # is quiet until one succeeds.
        self._connecting = None
        if not self._stopped:
            self._schedule()
