"""A real PostgreSQL server for the tests that need one.

The server is NETWEIR_SERVE_TEST_PG (a URL) or, on this project's machines,
postgresql://postgres@127.0.0.1:5432/test. Each test run (each trial
process) makes a database of its own on it, netweir_serve_test_PID_RANDOM,
dropped when the process exits; each test gets a schema of its own in it
(``fresh_url``), so it starts from an empty table and runs the migrations
from nothing. The user needs CREATEDB. When no server answers, the tests
are skipped saying why, except under CI=true, where they fail: CI must
never pass by skipping them.
"""

import atexit
import os
import secrets
from urllib.parse import quote

from twisted.trial.unittest import SkipTest

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/test"


def server_url():
    return os.environ.get("NETWEIR_SERVE_TEST_PG") or DEFAULT_SERVER


class NoServer(Exception):
    """No PostgreSQL server answers (under CI=true, a test error)."""


_database = {}


def _psycopg():
    try:
        import psycopg
    except ImportError as e:
        _unavailable(f"psycopg is not installed ({e}): pip install -e '.[test]'")
    return psycopg


def _unavailable(why):
    if os.environ.get("CI", "").lower() == "true":
        raise NoServer(f"{why} (CI=true: the PostgreSQL tests must run)")
    raise SkipTest(f"{why}; set NETWEIR_SERVE_TEST_PG to a server's URL to run these tests")


def _admin(psycopg, url):
    return psycopg.connect(url, autocommit=True, connect_timeout=3)


def database_url():
    """The URL of this process's test database, made at the first call.
    Skips the test (fails it under CI=true) when no server answers."""
    if "url" in _database:
        return _database["url"]
    if "error" in _database:
        _unavailable(_database["error"])
    psycopg = _psycopg()
    from psycopg.conninfo import make_conninfo
    server = server_url()
    name = f"netweir_serve_test_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with _admin(psycopg, server) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as e:
        from netweir_serve.store.postgres import shown
        _database["error"] = (f"no PostgreSQL server to test against at {shown(server)}:"
                              f" {str(e).strip().splitlines()[0] if str(e).strip() else e}")
        _unavailable(_database["error"])
    _database["url"] = make_conninfo(server, dbname=name)
    atexit.register(_drop, server, name)
    return _database["url"]


def _drop(server, name):
    import psycopg
    try:
        with _admin(psycopg, server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass


def admin_connection(url=None):
    """A psycopg connection (autocommit) to the test database, or ``url``."""
    return _admin(_psycopg(), url or database_url())


def fresh_url(testcase):
    """The URL of a new, empty schema of the test database (its
    search_path), dropped after ``testcase``, once the stores it opened
    were closed (cleanups run last first)."""
    base = database_url()
    schema = f"t_{secrets.token_hex(6)}"
    with admin_connection() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")

    def drop():
        with admin_connection() as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

    testcase.addCleanup(drop)
    # postgresql:// with every key of the conninfo as a query parameter.
    from psycopg.conninfo import conninfo_to_dict
    params = conninfo_to_dict(base)
    params["options"] = f"-csearch_path={schema}"
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    return f"postgresql:///?{query}"


def schema_of(url):
    """The schema a ``fresh_url`` names."""
    from psycopg.conninfo import conninfo_to_dict
    return conninfo_to_dict(url)["options"].partition("=")[2]
