"""The job table's backends, chosen by the --jobs-db URL."""

import os

from .records import StoreError
from .sqlite import SQLiteJobStore
from .sqlite_runner import SQLiteThread

SQLITE, POSTGRESQL = "sqlite", "postgresql"
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def store_location(url, directory):
    """(backend, where) for a --jobs-db ``url``: (SQLITE, a file's path) for
    None (``DIR/jobs.db``) or ``sqlite:///PATH`` (an absolute path; a
    relative one, ``sqlite://jobs.db``, is beneath ``directory``), or
    (POSTGRESQL, the URL) for ``postgresql://...`` (or ``postgres://``).
    Raises ValueError, a sentence, for anything else."""
    if url is None:
        return SQLITE, os.path.join(directory, "jobs.db")
    scheme, colon, rest = url.partition(":")
    scheme = scheme.lower()
    if colon and scheme == SQLITE and rest.startswith("//"):
        path = rest[2:]
        if not path or path == "/":
            return SQLITE, os.path.join(directory, "jobs.db")
        if path.startswith("/"):
            # sqlite:////PATH (SQLAlchemy's spelling of an absolute path) too.
            return SQLITE, "/" + path.lstrip("/")
        return SQLITE, os.path.join(directory, path)
    if colon and scheme in _POSTGRES_SCHEMES and rest.startswith("//"):
        return POSTGRESQL, url
    raise ValueError(
        f"--jobs-db {_without_password(url)!r} is neither sqlite:///PATH nor"
        " postgresql://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE")


def _without_password(url):
    head, at, tail = url.rpartition("@")
    if not at or "//" not in head:
        return url
    scheme, _, credentials = head.partition("//")
    user = credentials.partition(":")[0]
    return f"{scheme}//{user}:***@{tail}" if ":" in credentials else url


def open_store(directory, clock, url=None, reactor=None):
    """The job store of the service whose DIR is ``directory``, brought up
    to date if need be: ``DIR/jobs.db`` without ``url``, else the one the
    --jobs-db ``url`` names (store_location). Either store delivers its
    results on ``reactor``'s thread (``clock`` if not given): SQLite's
    statements run on a thread of the store's own (SQLiteThread). A
    PostgreSQL store needs psycopg, imported only then: a service on
    SQLite does without it. Raises ValueError for a URL of
    neither kind; sqlite3.Error, or StoreError for PostgreSQL (psycopg
    missing, the server not answering), when the table cannot be opened;
    migrations.NewerSchema for one a newer netweir-serve wrote."""
    backend, where = store_location(url, directory)
    if reactor is None:
        reactor = clock
    if backend == SQLITE:
        runner = SQLiteThread(reactor)
        try:
            return SQLiteJobStore(where, clock, runner=runner)
        except BaseException:
            runner.stop()  # the file could not be opened: nothing to run
            raise
    try:
        from .postgres import PostgresJobStore
    except ImportError as e:
        raise StoreError(
            f"--jobs-db postgresql://... needs psycopg 3 ({e}): install"
            " netweir-serve[postgresql]") from None
    return PostgresJobStore(where, clock, reactor)
