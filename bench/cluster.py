"""Nodes sharing a PostgreSQL job table: the node rows of ``python -m bench``.

netweir serve has no cluster to compare with, so every figure here
compares netweir-serve with itself (one SQLite node is the baseline). On
the benchmark's site and projects (bench/site.py, bench/projects.py), with
a fresh PostgreSQL database per configuration on $NETWEIR_SERVE_BENCH_PG
(else $NETWEIR_SERVE_TEST_PG, else postgresql://postgres@127.0.0.1:5432/test;
the user needs CREATEDB; the databases are dropped at the end), it
measures:

- ``jobs``: N trivial jobs scheduled one after the other by one client
  through the first node, from the first schedule.json until none is
  pending or running, through one SQLite node and through 1, 2 and 3 nodes
  on PostgreSQL, all with SLOTS job slots in total (--max-jobs 6, 3 and 2
  per node), so that only the cost of the table and of spreading the work
  differs; and the same crawls run directly, SLOTS at a time, as the floor.
  Jobs per second, and the overhead per job: (time - direct time) / N.
  Reps are interleaved, the order turned each rep. Beside them, the CPU
  per job of the nodes' own processes, and of the local PostgreSQL
  server's processes (every process named ``postgres*`` this user may
  read in /proc: "-" when the server is elsewhere; whatever else the
  server does meanwhile counts too).
- ``cross``: schedule.json on a node whose only slot is held, to the moment
  the ``stamp`` spider's code runs on the other node (its own time.time());
  beside it, the same on an idle SQLite node and an idle PostgreSQL node
  alone. p50 and p99 (of few samples: the p99 is close to the maximum).
- ``lost``: a node running two jobs is killed with SIGKILL; the time until
  the other node's listjobs.json shows both ``lost``, with --node-timeout
  TIMEOUT (heartbeats every TIMEOUT/6 s: expect TIMEOUT plus up to a beat).
"""

import collections
import os
import secrets
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from urllib.parse import quote

from netweir_serve.cluster.membership import BEATS_PER_TIMEOUT

from . import figures
from .services import OURS, Service, commands, cpu_seconds, kill_leftovers, proc_stat, wait_until

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/test"
SLOTS = 6
NODE_COUNTS = (1, 2, 3)
KEEP = 1000
# A dead node's jobs are lost on the first beat of a live node after the
# timeout from its last beat: within the timeout and one beat, as a ratio.
LOST_WITHIN = 1 + 1 / BEATS_PER_TIMEOUT
# The participants of the schedule -> code figure.
CROSS = "busy -> idle node (PostgreSQL)"
ALONE_PG = "one PostgreSQL node, idle"
ALONE_SQLITE = "one SQLite node, idle"


@dataclass(frozen=True)
class Mode:
    name: str
    jobs: int            # jobs per configuration and rep
    reps: int
    samples: int         # stamp samples per configuration
    kills: int           # kill -9 samples
    timeout: float       # --node-timeout


FULL = Mode("full", jobs=60, reps=3, samples=30, kills=3, timeout=6.0)
QUICK = Mode("quick", jobs=30, reps=2, samples=15, kills=1, timeout=6.0)


class Unavailable(Exception):
    """No PostgreSQL server to make databases on (or no psycopg)."""


def server_url():
    return (os.environ.get("NETWEIR_SERVE_BENCH_PG") or os.environ.get("NETWEIR_SERVE_TEST_PG")
            or DEFAULT_SERVER)


class Databases:
    """Fresh databases on the server, dropped by ``drop_all``."""

    def __init__(self, server, log):
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict, make_conninfo
        except ImportError as e:
            raise Unavailable(f"psycopg is not installed ({e})") from None
        self._psycopg = psycopg
        self.log = log
        self._make = make_conninfo
        self._params = conninfo_to_dict
        self.server = server
        self.made = []
        params = conninfo_to_dict(server)
        self.shown = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}"

    def _admin(self):
        return self._psycopg.connect(self.server, autocommit=True, connect_timeout=5)

    def check(self):
        """Raises Unavailable unless the server answers."""
        try:
            with self._admin() as conn:
                conn.execute("SELECT 1")
        except self._psycopg.Error as e:
            why = " ".join(str(e).split())
            raise Unavailable(f"PostgreSQL at {self.shown} does not answer ({why})") from None

    def make(self, label):
        name = f"netweir_serve_bench_{os.getpid()}_{label}_{secrets.token_hex(3)}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        params = self._params(self._make(self.server, dbname=name))
        # A postgresql:// URL, as --jobs-db takes, with every key as a parameter.
        return "postgresql:///?" + "&".join(f"{k}={quote(str(v), safe='')}"
                                            for k, v in params.items())

    def drop_all(self):
        for name in self.made:
            try:
                with self._admin() as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except self._psycopg.Error as e:
                self.log(f"could not drop database {name}: {e}")
        self.made = []


class Node(Service):
    """netweir-serve as bench/services.Service starts it, plus ``args``."""

    def __init__(self, name, directory, projects, max_jobs, args=(), python=sys.executable):
        super().__init__(name, commands(python)[OURS], directory, projects, max_jobs=max_jobs,
                         keep=KEEP)
        self.args = list(args)

    def argv(self):
        return super().argv() + self.args

    def kill9(self):
        """SIGKILL to the daemon alone: its crawls run on."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._log.close()

    def listing(self):
        return self.get("listjobs.json")

    def state_of(self, jobid):
        listing = self.listing()
        for state in ("pending", "running", "finished"):
            for entry in listing[state]:
                if entry["id"].lower() == jobid.lower():
                    return state, entry
        return None, None


def postgres_cpu():
    """CPU seconds used so far by the processes named postgres* (a local
    server's), or None when there are none to read."""
    total, seen = 0.0, False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not proc_stat(entry)[0].startswith("postgres"):
                continue
            total += cpu_seconds(entry)
        except (OSError, ValueError):
            continue
        seen = True
    return total if seen else None


class ClusterBench:
    """The node figures, on the benchmark's ``projects`` (whose site runs),
    with nodes and databases of their own under ``root``. Raises
    Unavailable at once when there is no PostgreSQL server."""

    def __init__(self, mode, root, projects, python=sys.executable, log=None):
        self.mode = mode
        self.root = root
        self.projects = projects
        self.python = python
        self.log = log or (lambda message: None)
        self.nodes = []
        self.databases = Databases(server_url(), self.log)
        self.databases.check()
        self.results = {}

    # -- processes ---------------------------------------------------------------

    def node(self, label, name, max_jobs, jobs_db=None, projects=("one",), start=True):
        args = []
        if jobs_db is not None:
            args = ["--jobs-db", jobs_db, "--node-name", name,
                    "--node-timeout", f"{self.mode.timeout:g}"]
        node = Node(name, os.path.join(self.root, f"{label}-{name}"),
                    {p: self.projects[p] for p in projects}, max_jobs, args, self.python)
        self.nodes.append(node)
        if start:
            node.start()
        return node

    def stop_all(self):
        for node in self.nodes:
            try:
                node.stop()
            except Exception as e:
                self.log(f"stopping {node.name}: {e}")
        kill_leftovers(self.root)
        self.databases.drop_all()

    # -- the figures -------------------------------------------------------------------

    def run(self):
        self.measure_jobs()
        self.measure_cross()
        self.measure_lost()

    def measure_jobs(self):
        m = self.mode
        configs = {"sqlite": [self.node("jobs-sqlite", "s0", SLOTS)]}
        for count in NODE_COUNTS:
            url = self.databases.make(f"n{count}")
            configs[f"pg{count}"] = [self.node(f"jobs-pg{count}", f"n{n}", SLOTS // count, url)
                                     for n in range(count)]
        self.log(f"{m.jobs} trivial jobs per run, {SLOTS} slots in all, {m.reps} rep(s):"
                 f" direct, {', '.join(configs)}")
        times = collections.defaultdict(list)
        cpu = collections.defaultdict(list)
        server_cpu = collections.defaultdict(list)
        spread = collections.defaultdict(collections.Counter)
        not_finished = collections.Counter()
        order = ["direct", *configs]
        scratch = os.path.join(self.root, "direct")
        for rep in range(m.reps):
            turned = order[rep % len(order):] + order[:rep % len(order)]
            for name in turned:
                if name == "direct":
                    took = figures.run_direct(self.python, self.projects["one"], m.jobs, SLOTS,
                                              scratch)
                else:
                    entry = configs[name][0]
                    before = sum(cpu_seconds(n.pid) for n in configs[name])
                    server_before = postgres_cpu()
                    took, bad = figures.run_through(entry, m.jobs)
                    cpu[name].append(sum(cpu_seconds(n.pid) for n in configs[name])
                                     - before)
                    server_after = postgres_cpu()
                    if server_before is not None and server_after is not None:
                        server_cpu[name].append(server_after - server_before)
                    not_finished[name] += bad
                    finished = entry.listing()["finished"][-m.jobs:]
                    spread[name].update(entry.name if name == "sqlite" else e.get("node")
                                        for e in finished)
                times[name].append(took)
                self.log(f"  {name:7} {m.jobs} jobs in {took:.2f} s")
        direct = statistics.median(times["direct"])
        rows = {}
        for name, nodes in configs.items():
            took = statistics.median(times[name])
            rows[name] = {
                "nodes": len(nodes), "store": "SQLite" if name == "sqlite" else "PostgreSQL",
                "max_jobs": SLOTS // len(nodes), "seconds": took,
                "jobs_per_s": m.jobs / took, "overhead_ms": (took - direct) / m.jobs * 1000,
                "cpu_ms": statistics.median(cpu[name]) / m.jobs * 1000,
                "server_cpu_ms": (statistics.median(server_cpu[name]) / m.jobs * 1000
                                  if server_cpu[name] else None),
                "spread": dict(sorted(spread[name].items())),
                "not_finished": not_finished[name], "reps": times[name],
            }
        for name, row in rows.items():
            row["vs_sqlite_ms"] = (row["seconds"] - rows["sqlite"]["seconds"]) / m.jobs * 1000
        self.results["jobs"] = {"direct_s": direct, "direct_jobs_per_s": m.jobs / direct,
                                "configs": rows}
        for nodes in configs.values():
            for node in nodes:
                node.stop()

    def _stamp(self, via, on=None):
        """Seconds from just before schedule.json on ``via`` to the stamp
        spider's code; checks the job ran on ``on`` (a node name)."""
        stampfile = os.path.join(self.root, "stamps", f"stamp-{uuid.uuid4().hex}")
        os.makedirs(os.path.dirname(stampfile), exist_ok=True)
        started = time.time()
        jobid = via.schedule("one", "stamp", stampfile=stampfile)
        wait_until(lambda: os.path.exists(stampfile), 30, "the stamp spider to run",
                   interval=0.001)
        with open(stampfile) as f:
            stamped = float(f.read())
        entry = wait_until(lambda: (lambda s, e: e if s == "finished" else None)(
            *via.state_of(jobid)), 60, "the stamp job to end", interval=0.01)
        if on is not None and entry.get("node") != on:
            raise RuntimeError(f"the stamp job ran on {entry.get('node')}, not {on}")
        return stamped - started

    def measure_cross(self):
        m = self.mode
        url = self.databases.make("cross")
        busy = self.node("cross", "busy", 1, url)
        blocker = busy.schedule("one", "blocker")
        wait_until(lambda: busy.state_of(blocker)[0] == "running", 60, "the blocker to run")
        idle = self.node("cross", "idle", 2, url)
        alone_pg = self.node("alone", "pg", 2, self.databases.make("alone"))
        alone_sqlite = self.node("alone", "sqlite", 2)
        participants = [
            (CROSS, lambda: self._stamp(busy, "idle")),
            (ALONE_PG, lambda: self._stamp(alone_pg)),
            (ALONE_SQLITE, lambda: self._stamp(alone_sqlite)),
        ]
        self.log(f"schedule -> spider's code, {m.samples} samples each")
        samples = collections.defaultdict(list)
        for _, (name, measure) in figures.rounds(participants, m.samples):
            samples[name].append(measure())
        self.results["cross"] = {
            name: {"p50": statistics.median(v), "p99": figures.percentile(v, 99), "samples": v}
            for name, v in samples.items()}
        for name, r in self.results["cross"].items():
            self.log(f"  {name}: p50 {r['p50'] * 1000:.1f} ms, p99 {r['p99'] * 1000:.1f} ms")
        busy.cancel("one", blocker)
        for node in (busy, idle, alone_pg, alone_sqlite):
            node.stop()

    def measure_lost(self):
        m = self.mode
        url = self.databases.make("lost")
        # The watcher serves another project: the victim's jobs are its own.
        watcher = self.node("lost", "watcher", 2, url, projects=("ten",))
        victim = self.node("lost", "victim", 2, url, start=False)
        self.log(f"kill -9 -> lost, --node-timeout {m.timeout:g}, {m.kills} sample(s)")
        found = []
        for _ in range(m.kills):
            victim.start()
            jobs = [victim.schedule("one", "blocker") for _ in range(2)]
            wait_until(lambda: all(watcher.state_of(j)[0] == "running" for j in jobs), 60,
                       "the victim's jobs to run")
            time.sleep(1)  # a heartbeat or two after the start
            killed = time.monotonic()
            victim.kill9()
            entries = wait_until(
                lambda: (lambda states: states if all(s == "finished" for s, _ in states)
                         else None)([watcher.state_of(j) for j in jobs]),
                m.timeout * 4 + 30, "the jobs to be lost", interval=0.02)
            took = time.monotonic() - killed
            outcomes = {e["outcome"] for _, e in entries}
            if outcomes != {"lost"}:
                raise RuntimeError(f"the killed node's jobs ended {outcomes}, not lost")
            found.append(took)
            self.log(f"  lost after {took:.2f} s")
        victim.start()  # ends the lost jobs' crawls
        self.results["lost"] = {"timeout": m.timeout, "median": statistics.median(found),
                                "samples": found}
        for node in (victim, watcher):
            node.stop()


def table_values(results):
    """The benchmark table's node figures from ``results``: {figure key:
    value} (bench/table.py: the nodes_* rows; jobs/s, ms and s)."""
    values = {}
    for name, row in results["jobs"]["configs"].items():
        values[f"nodes_jps_{name}"] = row["jobs_per_s"]
        values[f"nodes_overhead_{name}"] = row["overhead_ms"]
    for suffix, participant in (("", CROSS), ("_base", ALONE_SQLITE)):
        for p in ("p50", "p99"):
            values[f"nodes_cross{suffix}_{p}"] = results["cross"][participant][p] * 1000
    values["nodes_timeout"] = results["lost"]["timeout"]
    values["nodes_lost"] = results["lost"]["median"]
    return values


def notes(results):
    """What the table leaves out, as lines under it."""
    jobs = results["jobs"]
    lines = []
    for name, row in jobs["configs"].items():
        server = ("" if row.get("server_cpu_ms") is None
                  else f", PostgreSQL's {row['server_cpu_ms']:.1f} ms")
        spread = ", ".join(f"{k} {v}" for k, v in row["spread"].items())
        count = "one" if row["nodes"] == 1 else row["nodes"]
        lines.append(f"nodes: {count} {row['store']} node{'s' * (row['nodes'] > 1)},"
                     f" --max-jobs {row['max_jobs']} each: CPU per job, the nodes'"
                     f" {row['cpu_ms']:.1f} ms"
                     f"{server}; jobs per node {spread}"
                     + (f"; {row['not_finished']} not finished" if row["not_finished"] else ""))
    lines.append(f"nodes: the same crawls run directly, {SLOTS} at a time:"
                 f" {jobs['direct_jobs_per_s']:.2f} jobs/s (overhead per job is against them).")
    alone = results["cross"][ALONE_PG]
    lines.append(f"nodes: schedule -> code on {ALONE_PG}: p50 {alone['p50'] * 1000:.1f} ms,"
                 f" p99 {alone['p99'] * 1000:.1f} ms.")
    lost = results["lost"]
    lines.append(f"nodes: kill -9 -> lost, each kill: "
                 + ", ".join(f"{s:.2f} s" for s in lost["samples"])
                 + f" (--node-timeout {lost['timeout']:g}, a heartbeat every"
                 f" {lost['timeout'] / BEATS_PER_TIMEOUT:g} s).")
    return lines
