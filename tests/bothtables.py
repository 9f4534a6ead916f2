"""Live cases run against each job table: a real service on SQLite (its
own file in --dir) and on PostgreSQL (a database of the test's own).

A module writes its cases once, as a mixin of ``LiveCases``, and makes a
test class for each table with ``on_both_tables``."""

import os

from twisted.trial import unittest

from . import pg
from .processes import Daemon, shared_site
from .spiders import write_project
from .test_cluster import kill_beneath


class LiveCases:
    """A project ``shop`` of the test spiders against the shared test
    site, a --dir, and ``daemon(*args)`` serving it on the subclass's
    table (``table_args``); every process left under the test's folder is
    killed at the end."""

    def table_args(self):
        raise NotImplementedError

    def setUp(self):
        self.site = shared_site()
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)
        self.shop = write_project(os.path.join(self.base, "shop"), self.site.base)
        self.directory = os.path.join(self.base, "dir")
        self.addCleanup(kill_beneath, self.base)

    def daemon(self, *args, env=None, start=True):
        daemon = Daemon(self.directory, [f"shop={self.shop}"], [*self.table_args(), *args],
                        env=env)
        self.addCleanup(daemon.kill)
        return daemon.start() if start else daemon


def on_both_tables(cases, name):
    """(SQLite{name}Tests, Postgres{name}Tests): ``cases`` (a LiveCases
    mixin) as a test class for each job table."""

    class OnSQLite(cases, unittest.TestCase):
        def table_args(self):
            return ()

    class OnPostgres(cases, unittest.TestCase):
        def setUp(self):
            self.jobs_db = pg.fresh_url(self)
            super().setUp()

        def table_args(self):
            return ("--jobs-db", self.jobs_db)

    for made, table in ((OnSQLite, "SQLite"), (OnPostgres, "Postgres")):
        made.__name__ = made.__qualname__ = f"{table}{name}Tests"
        made.__module__ = cases.__module__
    return OnSQLite, OnPostgres
