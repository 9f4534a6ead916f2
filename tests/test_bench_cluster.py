"""bench/cluster.py's rows of the benchmark's table and its notes, on
made-up measurements (the figures themselves need PostgreSQL and a minute:
``python -m bench --quick --only nodes``), and what the run does when no
PostgreSQL server answers."""

import os
import shutil
import tempfile

from twisted.trial import unittest

from bench import cluster, figures
from bench.modes import SMOKE
from bench.run import Bench
from bench.services import OURS
from bench.table import render


def config(store, nodes, seconds, spread):
    return {"store": store, "nodes": nodes, "max_jobs": cluster.SLOTS // nodes,
            "seconds": seconds, "jobs_per_s": 60 / seconds,
            "overhead_ms": (seconds - 5.0) / 60 * 1000,
            "vs_sqlite_ms": (seconds - 6.0) / 60 * 1000, "spread": spread,
            "cpu_ms": 9.0 if store == "SQLite" else 14.5,
            "server_cpu_ms": 0.3 if store == "SQLite" else None,
            "not_finished": 0, "reps": [seconds]}


RESULTS = {
    "jobs": {"direct_s": 5.0, "direct_jobs_per_s": 12.0, "configs": {
        "sqlite": config("SQLite", 1, 6.0, {"s0": 60}),
        "pg1": config("PostgreSQL", 1, 6.3, {"n0": 60}),
        "pg2": config("PostgreSQL", 2, 6.5, {"n0": 30, "n1": 30}),
        "pg3": config("PostgreSQL", 3, 6.6, {"n0": 20, "n1": 21, "n2": 19}),
    }},
    "cross": {cluster.CROSS: {"p50": 0.121, "p99": 0.152},
              cluster.ALONE_PG: {"p50": 0.118, "p99": 0.140},
              cluster.ALONE_SQLITE: {"p50": 0.110, "p99": 0.160}},
    "lost": {"timeout": 6.0, "median": 6.5, "samples": [6.5, 6.6]},
}


def row(text, start):
    line = next(line for line in text.splitlines() if line.startswith(f"| {start}"))
    return [c.strip() for c in line.strip("|").split("|")]


class TableTests(unittest.TestCase):
    def test_rows_compare_each_configuration_with_the_sqlite_node(self):
        values = cluster.table_values(RESULTS)
        text = render({key: {OURS: value} for key, value in values.items()})
        self.assertEqual(row(text, "nodes: jobs/s, one SQLite node")[1:4],
                         ["-", "10.00", "-"])
        self.assertEqual(row(text, "nodes: jobs/s, 3 nodes")[2:4], ["9.09", "0.91x"])
        self.assertEqual(row(text, "nodes: overhead per job, 2 nodes")[2:4],
                         ["25.0 ms", "1.50x"])
        self.assertEqual(row(text, "nodes: schedule on a busy node -> code on another (p50)")
                         [2:4], ["121 ms", "1.10x"])
        self.assertEqual(row(text, "nodes: schedule on a busy node -> code on another (p99)")
                         [2:4], ["152 ms", "0.95x"])
        lost = row(text, "nodes: kill -9")
        self.assertEqual(lost[2:4] + lost[5:], ["6.50 s", "1.08x", "yes"])

    def test_lost_later_than_a_beat_after_the_timeout_misses(self):
        results = {**RESULTS, "lost": {**RESULTS["lost"], "median": 7.1}}
        values = cluster.table_values(results)
        text = render({key: {OURS: value} for key, value in values.items()})
        self.assertEqual(row(text, "nodes: kill -9")[5], "NO")

    def test_notes(self):
        lines = cluster.notes(RESULTS)
        self.assertIn("nodes: one SQLite node, --max-jobs 6 each: CPU per job, the nodes' 9.0"
                      " ms, PostgreSQL's 0.3 ms; jobs per node s0 60", lines)
        self.assertIn("nodes: 3 PostgreSQL nodes, --max-jobs 2 each: CPU per job, the nodes'"
                      " 14.5 ms; jobs per node n0 20, n1 21, n2 19", lines)
        self.assertIn("nodes: kill -9 -> lost, each kill: 6.50 s, 6.60 s (--node-timeout 6,"
                      " a heartbeat every 1 s).", lines)

    def test_percentiles(self):
        self.assertEqual(figures.percentile([3, 1, 2], 50), 2)
        self.assertAlmostEqual(figures.percentile(list(range(101)), 99), 99)
        self.assertEqual(figures.percentile([7], 99), 7)
        self.assertIsNone(figures.percentile([], 50))


class NoServerTests(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="netweir-serve-bench-test-")
        self.addCleanup(shutil.rmtree, self.root, True)
        previous = os.environ.get("NETWEIR_SERVE_BENCH_PG")
        self.addCleanup(lambda: os.environ.__setitem__("NETWEIR_SERVE_BENCH_PG", previous)
                        if previous is not None else os.environ.pop("NETWEIR_SERVE_BENCH_PG"))
        # A port nothing listens on: the connection is refused at once.
        os.environ["NETWEIR_SERVE_BENCH_PG"] = "postgresql://postgres@127.0.0.1:1/test"

    def test_the_node_rows_are_left_out_with_a_note(self):
        bench = Bench(SMOKE, self.root, log=lambda message: None, groups=["nodes"])
        bench.measure_nodes()
        self.assertEqual(bench.results, {})
        self.assertEqual(len(bench.notes), 1)
        self.assertTrue(bench.notes[0].startswith("nodes: not measured: PostgreSQL at"
                                                  " 127.0.0.1:1 does not answer"), bench.notes)
        self.assertEqual(row(render(bench.results), "nodes: kill -9")[1:4], ["-", "-", "-"])
