"""What the PostgreSQL store does beyond the contract (test_store_contract,
which also races claims and keeps the run policies on this backend):
notices between stores, the nodes of a cluster, migrations, and
connections that drop. Against a real server (tests/pg.py), each test in a
schema of its own."""

import threading
import time
from dataclasses import replace

from twisted.internet import defer, protocol, reactor
from twisted.internet.task import deferLater
from twisted.protocols import portforward
from twisted.trial import unittest
from zope.interface.verify import verifyObject

from netweir_serve.store.interfaces import IClusterStore, IJobStore, IScheduleStore
from netweir_serve.store.records import JobRecord, NodeNameTaken, StoreError
from netweir_serve.store import notices, open_store
from netweir_serve.store.migrations import NewerSchema
from netweir_serve.store.schedule_records import ScheduleRecord

from . import pg

FAST_RECONNECT = (0.05, 0.1, 0.2)


def job(jobid, spider="books", locks=(), priority=0.0, project="shop"):
    return JobRecord(id=jobid, project=project, spider=spider, spider_file="/p/x.py",
                     priority=priority, locks=tuple(locks))


def until(condition, within=5.0, step=0.002):
    """A Deferred that fires once ``condition()`` holds (True), or with
    False after ``within`` seconds."""
    deadline = time.monotonic() + within

    @defer.inlineCallbacks
    def wait():
        while not condition():
            if time.monotonic() > deadline:
                return False
            yield deferLater(reactor, step, lambda: None)
        return True

    return wait()


class StoreCase(unittest.TestCase):
    """Opens stores on a fresh schema; closes them after the test."""

    def setUp(self):
        self.url = pg.fresh_url(self)

    @defer.inlineCallbacks
    def open(self, url=None, **options):
        from netweir_serve.store.postgres import PostgresJobStore
        options.setdefault("reconnect_delays", FAST_RECONNECT)
        store = yield PostgresJobStore.opened(url or self.url, reactor, **options)
        self.addCleanup(store.close)
        return store

    def sql(self, statement, params=None):
        """Runs ``statement`` in the test's schema; its rows, if any."""
        with pg.admin_connection() as conn:
            conn.execute(f"SET search_path TO {pg.schema_of(self.url)}")
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else None


class InterfaceTests(StoreCase):
    @defer.inlineCallbacks
    def test_it_provides_the_three_interfaces_and_is_shared(self):
        store = yield self.open()
        for interface in (IJobStore, IScheduleStore, IClusterStore):
            self.assertTrue(verifyObject(interface, store))
        self.assertIs(store.shared, True)


class NoticeTests(StoreCase):
    @defer.inlineCallbacks
    def test_another_store_hears_each_kind_of_change_and_its_version_moves(self):
        a, b = (yield self.open()), (yield self.open())
        heard_a, heard_b = [], []
        a.on_notice(heard_a.append)
        stop = b.on_notice(heard_b.append)

        @defer.inlineCallbacks
        def heard(kind, jobid=None):
            arrived = yield until(lambda: any(n.kind == kind and n.jobid == jobid
                                              for n in heard_b))
            self.assertTrue(arrived, f"no {kind} notice for {jobid}: {heard_b}")
            self.assertTrue((yield until(lambda: b.version == a.version)))
            notice = [n for n in heard_b if n.kind == kind][-1]
            self.assertLessEqual(notice.version, a.version)
            return notice

        yield a.add(job("one"))
        yield heard(notices.QUEUED, "one")
        yield a.claim_next("node-a", ["shop"], 1.0)
        self.assertEqual((yield heard(notices.CLAIMED, "one")).node, "node-a")
        yield a.mark_started("one", 42)
        yield heard(notices.STARTED, "one")
        before = a.version
        yield a.save_stats("one", {"items": 3})
        yield heard(notices.STATS, "one")
        # Progress alone moves no version: answers cached on it stay good.
        self.assertEqual((a.version, b.version), (before, before))
        yield a.mark_cancel_requested("one")
        # The owner is named: the node that must do the cancelling.
        self.assertEqual((yield heard(notices.CANCEL, "one")).node, "node-a")
        yield a.mark_finished("one", "cancelled", 2.0)
        yield heard(notices.ENDED, "one")
        yield a.add_schedule(ScheduleRecord(name="h", project="shop", spider="books",
                                            kind="every", rule="1h", tz="UTC"))
        yield heard(notices.SCHEDULE)
        yield a.register_node("node-a", "http://a:6800")
        self.assertEqual((yield heard(notices.NODE)).node, "node-a")
        # A store is not told of its own changes.
        self.assertEqual(heard_a, [])
        stop()
        yield a.add(job("two"))
        yield until(lambda: b.version == a.version)
        self.assertNotIn("two", [n.jobid for n in heard_b])

    @defer.inlineCallbacks
    def test_a_notice_arrives_within_milliseconds(self):
        a, b = (yield self.open()), (yield self.open())
        arrivals = []
        b.on_notice(lambda n: arrivals.append(time.monotonic()))
        delays = []
        for n in range(20):
            yield a.add(job(f"j{n}"))
            answered = time.monotonic()
            self.assertTrue((yield until(lambda: len(arrivals) == n + 1, step=0.0005)))
            delays.append(max(0.0, arrivals[-1] - answered))
        delays.sort()
        self.assertLess(delays[len(delays) // 2], 0.05, delays)

    @defer.inlineCallbacks
    def test_a_failing_callback_spoils_neither_the_others_nor_the_version(self):
        a, b = (yield self.open()), (yield self.open())
        heard = []
        b.on_notice(lambda n: 1 / 0)
        b.on_notice(heard.append)
        yield a.add(job("x"))
        self.assertTrue((yield until(lambda: heard)))
        self.assertEqual(b.version, a.version)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    @defer.inlineCallbacks
    def test_a_reopened_store_reads_the_version_others_made(self):
        a = yield self.open()
        yield a.add(job("x"))
        yield a.add(job("y"))
        b = yield self.open()
        self.assertEqual(b.version, a.version)
        self.assertNotEqual(a.version, 0)


class NodeTests(StoreCase):
    def age(self, *names, seconds=3600):
        self.sql("UPDATE nodes SET heartbeat = now() - %s * interval '1 second'"
                 " WHERE name = ANY(%s)", (seconds, list(names)))

    @defer.inlineCallbacks
    def test_register_heartbeat_and_list(self):
        store = yield self.open()
        self.assertIsNone((yield store.register_node("a", "http://a:6800")))
        yield store.register_node("b", "http://b:6800")
        nodes = yield store.nodes()
        self.assertEqual([(n["name"], n["url"], n["dead"]) for n in nodes],
                         [("a", "http://a:6800", False), ("b", "http://b:6800", False)])
        for n in nodes:
            self.assertLess(abs(n["heartbeat"] - time.time()), 60)
            self.assertLess(n["age"], 5)
            self.assertGreaterEqual(n["heartbeat"], n["started"])
        self.age("a", seconds=100)
        version = store.version
        self.assertIs((yield store.heartbeat("a")), True)
        self.assertEqual(store.version, version, "a heartbeat moved the version")
        self.assertLess([n for n in (yield store.nodes()) if n["name"] == "a"][0]["age"], 5)
        self.assertIs((yield store.heartbeat("nosuch")), False)

    @defer.inlineCallbacks
    def test_the_projects_a_node_serves_are_kept_folded_and_replaced_at_registration(self):
        store = yield self.open()
        yield store.register_node("a", "http://a", projects=["Shop", "news", "shop"])
        yield store.register_node("b", "http://b")
        served = {n["name"]: n["projects"] for n in (yield store.nodes())}
        self.assertEqual(served, {"a": ["news", "shop"], "b": []})
        version = store.version
        yield store.register_node("a", "http://a", projects=["books"])
        self.assertGreater(store.version, version, "what a node serves changed unseen")
        self.assertEqual([n["projects"] for n in (yield store.nodes()) if n["name"] == "a"],
                         [["books"]])

    @defer.inlineCallbacks
    def test_a_live_name_at_another_url_is_refused_and_the_same_url_welcome(self):
        store = yield self.open()
        yield store.register_node("a", "http://a:6800", timeout=30)
        failure = yield self.assertFailure(
            store.register_node("a", "http://elsewhere:6800", timeout=30), NodeNameTaken)
        self.assertIn("http://a:6800", str(failure))
        self.assertEqual([n["url"] for n in (yield store.nodes())], ["http://a:6800"])
        # The same node started again (same URL), within the timeout.
        previous = yield store.register_node("a", "http://a:6800", timeout=30)
        self.assertEqual((previous["name"], previous["dead"]), ("a", False))
        # Silent past the timeout: the name is free.
        self.age("a", seconds=60)
        yield store.register_node("a", "http://elsewhere:6800", timeout=30)
        self.assertEqual([n["url"] for n in (yield store.nodes())], ["http://elsewhere:6800"])

    @defer.inlineCallbacks
    def test_declared_dead_exactly_once_by_stores_asking_at_once(self):
        a, b = (yield self.open()), (yield self.open())
        names = [f"n{i}" for i in range(10)]
        for round_ in range(5):
            for name in names:
                yield a.register_node(name, f"http://{name}")
            silent = names[round_::2]
            self.age(*silent)
            answers = yield defer.gatherResults(
                [store.declare_dead(30) for store in (a, b, a, b)])
            every = [name for answer in answers for name in answer]
            self.assertEqual(sorted(every), sorted(silent), answers)
            self.assertEqual((yield a.declare_dead(30)), {})
            dead = {n["name"] for n in (yield b.nodes()) if n["dead"]}
            self.assertEqual(dead, set(silent))
            self.assertIs((yield a.heartbeat(silent[0])), False)

    @defer.inlineCallbacks
    def test_a_dead_nodes_jobs_are_lost_once_with_their_last_stats(self):
        store = yield self.open()
        yield store.register_node("a", "http://a")
        yield store.register_node("b", "http://b")
        for jobid in ("a1", "a2", "b1", "waiting"):
            yield store.add(job(jobid))
        for jobid, node in (("a1", "a"), ("a2", "a"), ("b1", "b")):
            self.assertEqual((yield store.claim_next(node, ["shop"], 1.0)).id, jobid)
        yield store.mark_started("a1", 10)
        self.assertIs((yield store.save_stats("a1", {"items": 7})), True)
        self.assertIs((yield store.save_stats("waiting", {"items": 1})), False)
        self.assertEqual((yield store.get("a1")).stats, {"items": 7})
        self.age("a")
        lost = yield store.declare_dead(30, end_time=9.0)
        self.assertEqual({name: [r.id for r in records] for name, records in lost.items()},
                         {"a": ["a1", "a2"]})
        self.assertEqual(lost["a"][0].outcome, "lost")
        a1, a2 = (yield store.get("a1")), (yield store.get("a2"))
        self.assertEqual((a1.state, a1.outcome, a1.end_time, a1.stats, a1.pid),
                         ("finished", "lost", 9.0, {"items": 7}, 10))
        self.assertEqual(a1.reason, "node lost")
        self.assertIn("node a", a1.detail)
        self.assertEqual((a2.outcome, a2.stats), ("lost", None))
        self.assertEqual((yield store.get("b1")).state, "running")
        self.assertEqual((yield store.get("waiting")).state, "pending")
        self.assertEqual((yield store.mark_lost("a", 10.0)), [])
        lost = yield store.mark_lost("b", 11.0, reason="gone")
        self.assertEqual([(r.id, r.outcome, r.reason, r.detail) for r in lost],
                         [("b1", "lost", "node lost", "gone")])
        # Back after being declared dead: registering says so, and revives it.
        previous = yield store.register_node("a", "http://a", timeout=30)
        self.assertIs(previous["dead"], True)
        self.assertIs((yield store.heartbeat("a")), True)


    @defer.inlineCallbacks
    def test_a_job_lost_with_its_node_gets_its_retry_once(self):
        # Whichever node declares it dead writes the retry, in the same
        # transaction as the loss (IClusterStore.declare_dead, mark_lost).
        store, other = (yield self.open()), (yield self.open())
        yield store.register_node("far", "http://far")
        yield store.add(replace(job("far1"), policy={"retries": 1, "backoff": 30}))
        yield store.claim_next("far", ["shop"], 1.0)
        self.age("far")
        lost = yield defer.gatherResults([store.declare_dead(30, end_time=40.0),
                                          other.declare_dead(30, end_time=41.0)])
        ended = [r for found in lost for records in found.values() for r in records]
        self.assertEqual([(r.id, r.reason, r.retry.id, r.retry.attempt, r.retry.retry_of)
                          for r in ended], [("far1", "node lost", "far1.r1", 2, "far1")])
        self.assertTrue(70.0 <= ended[0].retry.not_before <= 74.0)
        pending, _, _ = yield other.jobs()
        self.assertEqual([r.id for r in pending], ["far1.r1"])
        self.assertEqual((yield store.mark_lost("far", 50.0)), [])


class MigrationTests(StoreCase):
    def tables(self):
        return sorted(r[0] for r in self.sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"))

    def version(self):
        return self.sql("SELECT version FROM schema_version")[0][0]

    @defer.inlineCallbacks
    def test_from_nothing_to_the_latest_then_nothing_more(self):
        from netweir_serve.store.postgres_migrations import POSTGRES_LATEST
        self.assertEqual(self.tables(), [])
        store = yield self.open()
        self.assertEqual(self.tables(),
                         ["audit", "chain_firings", "jobs", "nodes", "schedules", "schema_version",
                          "store_meta", "tokens"])
        self.assertEqual(self.version(), POSTGRES_LATEST)
        yield store.add(job("kept"))
        yield store.close()
        again = yield self.open()
        self.assertEqual(self.version(), POSTGRES_LATEST)
        self.assertEqual((yield again.get("kept")).state, "pending")

    @defer.inlineCallbacks
    def test_the_nodes_of_a_version_5_table_serve_nothing_until_they_register_again(self):
        import psycopg
        from netweir_serve.store import postgres
        from netweir_serve.store.postgres_migrations import POSTGRES_MIGRATIONS
        with psycopg.connect(postgres.conninfo_of(self.url), autocommit=True) as conn:
            conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
            conn.execute("INSERT INTO schema_version (version) VALUES (5)")
            for migration in POSTGRES_MIGRATIONS[:5]:
                for statement in migration.statements:
                    conn.execute(statement)
            conn.execute("INSERT INTO nodes (name, url, heartbeat, started)"
                         " VALUES ('old', 'http://old', now(), now())")
        store = yield self.open()
        self.assertEqual([(n["name"], n["projects"]) for n in (yield store.nodes())],
                         [("old", [])])
        yield store.register_node("old", "http://old", projects=["shop"])
        self.assertEqual([n["projects"] for n in (yield store.nodes())], [["shop"]])

    @defer.inlineCallbacks
    def test_migration_8_gives_every_old_end_its_code_and_keeps_its_sentence(self):
        import psycopg
        from netweir_serve.store import postgres
        from netweir_serve.store.postgres_migrations import POSTGRES_MIGRATIONS
        from .test_store_migration import OLD_ENDS
        with psycopg.connect(postgres.conninfo_of(self.url), autocommit=True) as conn:
            conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
            conn.execute("INSERT INTO schema_version (version) VALUES (7)")
            for migration in POSTGRES_MIGRATIONS:
                if migration.version <= 7:
                    for statement in migration.statements:
                        conn.execute(statement)
            for (jobid, outcome, status, reason), _ in OLD_ENDS:
                conn.execute(
                    "INSERT INTO jobs (key, id, project, project_key, spider, spider_file,"
                    " settings, arguments, priority, state, outcome, exit_status, created,"
                    " end_time, reason) VALUES (%s, %s, 'shop', 'shop', 'books', '/p/books.py',"
                    " '[]', '[]', 0, 'finished', %s, %s, 1.0, 2.0, %s)",
                    (jobid, jobid, outcome, status, reason))
        store = yield self.open()
        for old, expected in OLD_ENDS:
            found = yield store.get(old[0])
            self.assertEqual((found.reason, found.detail), expected, old)

    @defer.inlineCallbacks
    def test_migration_9_counts_old_runs_from_their_stats_and_calls_them_healthy(self):
        import json
        import psycopg
        from netweir_serve.store import postgres
        from netweir_serve.store.postgres_migrations import POSTGRES_MIGRATIONS
        from .test_store_migration import OLD_RUNS, check_old_runs_counted
        with psycopg.connect(postgres.conninfo_of(self.url), autocommit=True) as conn:
            conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
            conn.execute("INSERT INTO schema_version (version) VALUES (8)")
            for migration in POSTGRES_MIGRATIONS:
                if migration.version <= 8:
                    for statement in migration.statements:
                        conn.execute(statement)
            for (jobid, outcome, stats), _ in OLD_RUNS:
                conn.execute(
                    "INSERT INTO jobs (key, id, project, project_key, spider, spider_file,"
                    " settings, arguments, priority, state, outcome, exit_status, created,"
                    " start_time, end_time, stats) VALUES (%s, %s, 'shop', 'shop', 'books',"
                    " '/p/books.py', '[]', '[]', 0, 'finished', %s, 0, 1.0, 1.5, 2.0, %s)",
                    (jobid, jobid, outcome, json.dumps(stats) if stats is not None else None))
            conn.execute(
                "INSERT INTO jobs (key, id, project, project_key, spider, spider_file,"
                " settings, arguments, priority, state, created) VALUES ('waiting', 'waiting',"
                " 'shop', 'shop', 'books', '/p/books.py', '[]', '[]', 0, 'pending', 1.0)")
        store = yield self.open()
        yield check_old_runs_counted(self, store)
        indexes = {row[0] for row in self.sql(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename = 'jobs'")}
        self.assertLessEqual({"jobs_runs", "jobs_schedule_runs"}, indexes)

    def test_two_migrating_at_once_both_succeed_and_it_is_done_once(self):
        import psycopg
        from netweir_serve.store import postgres
        from netweir_serve.store.postgres_migrations import migrate_postgres
        conninfo = postgres.conninfo_of(self.url)
        go = threading.Barrier(3)
        applied, errors = [], []

        def migrate():
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    go.wait()
                    applied.append(migrate_postgres(conn))
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=migrate) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        from netweir_serve.store.postgres_migrations import POSTGRES_LATEST
        self.assertEqual(sorted(applied, key=len),
                         [[], [], list(range(1, POSTGRES_LATEST + 1))])

    @defer.inlineCallbacks
    def test_a_schema_from_a_newer_netweir_serve_is_refused(self):
        from netweir_serve.store.postgres import PostgresJobStore
        store = yield self.open()
        yield store.close()
        self.sql("UPDATE schema_version SET version = 99")
        error = self.assertRaises(NewerSchema, PostgresJobStore, self.url, reactor)
        self.assertIn("99", str(error))

    def test_the_versions_and_descriptions_are_sqlites(self):
        from netweir_serve.store.migrations import SQLITE_MIGRATIONS
        from netweir_serve.store.postgres_migrations import POSTGRES_MIGRATIONS
        # Every version SQLite has means the same change in PostgreSQL; 5
        # and 6, the nodes of a cluster, are PostgreSQL's alone.
        shared = [m for m in POSTGRES_MIGRATIONS if m.version not in (5, 6)]
        self.assertEqual([(m.version, m.what) for m in shared],
                         [(m.version, m.what) for m in SQLITE_MIGRATIONS])
        self.assertEqual([m.version for m in POSTGRES_MIGRATIONS],
                         sorted({m.version for m in POSTGRES_MIGRATIONS}))


class _Cuttable(portforward.ProxyFactory):
    """A TCP proxy to the server that the test can cut, as a network would."""

    def __init__(self, host, port):
        super().__init__(host, port)
        self.open_connections = []

    def buildProtocol(self, addr):
        proxy = super().buildProtocol(addr)
        self.open_connections.append(proxy)
        return proxy

    def cut(self):
        for proxy in self.open_connections:
            if proxy.transport is not None:
                proxy.transport.abortConnection()
            if proxy.peer is not None and proxy.peer.transport is not None:
                proxy.peer.transport.abortConnection()
        self.open_connections = []


class LostConnectionTests(StoreCase):
    @defer.inlineCallbacks
    def test_terminated_connections_are_replaced_and_the_listener_comes_back(self):
        a, b = (yield self.open()), (yield self.open())
        yield a.add(job("before"))
        heard = []
        a.on_notice(heard.append)
        yield self.terminate()
        # Reads and writes go on, each on a new connection.
        self.assertEqual((yield a.get("before")).state, "pending")
        yield a.add(job("after"))
        self.assertEqual((yield a.counts())["pending"], 2)
        # The listener says anything may have changed, and hears again.
        self.assertTrue((yield until(lambda: any(n.kind == notices.CHANGED for n in heard))))
        self.assertTrue(a.listening)
        self.assertTrue((yield until(lambda: b.listening)))
        yield b.add(job("heard"))
        self.assertTrue((yield until(lambda: any(n.jobid == "heard" for n in heard))))
        self.assertEqual(a.version, b.version)

    def terminate(self):
        # Every connection of the stores in this test's database, as a
        # restart of the server ends them.
        return deferLater(reactor, 0, self.sql,
                          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                          " AND application_name = 'netweir-serve'")

    @defer.inlineCallbacks
    def test_a_cut_fails_with_store_error_and_the_store_recovers(self):
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
        params = conninfo_to_dict(self.url)
        proxy = _Cuttable(params.get("host", "127.0.0.1"), int(params.get("port", 5432)))
        port = reactor.listenTCP(0, proxy, interface="127.0.0.1")
        number = port.getHost().port
        url = make_conninfo(self.url, host="127.0.0.1", hostaddr="127.0.0.1", port=number)
        a = yield self.open(url)
        b = yield self.open()
        yield a.add(job("one"))
        heard = []
        a.on_notice(heard.append)
        # The server goes away: connections end, and no new one is taken.
        yield port.stopListening()
        proxy.cut()
        failure = yield self.assertFailure(a.claim_next("n", ["shop"], 1.0), StoreError)
        self.assertIn("could not be written", failure.message)
        self.assertNotIn("password", failure.message)
        yield self.assertFailure(a.get("one"), StoreError)
        self.assertTrue((yield until(lambda: not a.listening)))
        yield b.add(job("meanwhile"))
        # Back: the store works again, and its listener is back within its
        # delays, saying anything may have changed.
        port = reactor.listenTCP(number, proxy, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.assertTrue((yield until(lambda: a.listening)))
        self.assertTrue(any(n.kind == notices.CHANGED for n in heard))
        self.assertEqual(a.version, b.version)
        claimed = yield a.claim_next("n", ["shop"], 1.0)
        self.assertEqual(claimed.id, "one")
        self.addCleanup(proxy.cut)

    @defer.inlineCallbacks
    def test_a_server_that_does_not_answer_is_a_store_error_with_a_sentence(self):
        from netweir_serve.store.postgres import PostgresJobStore
        listening = protocol.ServerFactory()
        port = reactor.listenTCP(0, listening, interface="127.0.0.1")
        number = port.getHost().port
        yield port.stopListening()
        url = f"postgresql://someone:secret@127.0.0.1:{number}/nowhere"
        error = self.assertRaises(StoreError, PostgresJobStore, url, reactor)
        self.assertIn(f"cannot connect to the job table at postgresql://someone@127.0.0.1:"
                      f"{number}/nowhere", error.message)
        self.assertNotIn("secret", error.message)


class OpenStoreTests(unittest.TestCase):
    def test_a_postgresql_url_opens_the_postgres_store(self):
        url = pg.fresh_url(self)
        store = open_store(self.mktemp(), reactor, url=url, reactor=reactor)
        self.addCleanup(store.close)
        self.assertIs(store.shared, True)
        self.assertEqual(type(store).__name__, "PostgresJobStore")

    def test_sqlite_urls_and_the_default(self):
        import os
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        for url, path in ((None, "jobs.db"), ("sqlite://", "jobs.db"),
                          ("sqlite://other.db", "other.db"),
                          (f"sqlite://{directory}/abs.db", "abs.db")):
            store = open_store(directory, reactor, url=url)
            self.addCleanup(store.close)
            self.assertIs(store.shared, False)
            self.assertTrue(os.path.exists(os.path.join(directory, path)), url)

    def test_any_other_url_is_refused_with_a_sentence(self):
        for url in ("mysql://u:pw@h/x", "sqlite:jobs.db", "jobs.db"):
            error = self.assertRaises(ValueError, open_store, "/d", reactor, url=url)
            self.assertIn("sqlite:///PATH", str(error))
            self.assertNotIn("pw", str(error))


class CommitTests(StoreCase):
    @defer.inlineCallbacks
    def test_a_connection_lost_as_it_commits_is_said_to_be_unknown(self):
        # A trigger run at COMMIT ends its own connection, as a server
        # going away at that moment would: the store cannot know whether
        # the change was made, says so, and does not try it again.
        from netweir_serve.store.postgres import CommitUnknown
        store = yield self.open()
        self.sql("""CREATE FUNCTION doom() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN PERFORM pg_terminate_backend(pg_backend_pid());
                    PERFORM pg_sleep(1); RETURN NULL; END $$""")
        self.sql("CREATE CONSTRAINT TRIGGER doom AFTER INSERT ON jobs DEFERRABLE"
                 " INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.id = 'doomed') EXECUTE"
                 " FUNCTION doom()")
        failure = yield self.assertFailure(store.add(job("doomed")), CommitUnknown)
        self.assertIn("may or may not have been made", failure.message)
        self.assertIsInstance(failure, StoreError)
        # Here it was not made (the trigger ended the transaction), and the
        # store goes on, on a new connection.
        self.assertIsNone((yield store.get("doomed")))
        yield store.add(job("fine"))
        self.assertEqual((yield store.counts())["pending"], 1)
