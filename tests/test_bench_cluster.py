"""bench/cluster.py's arithmetic and table, on made-up measurements (the
benchmark itself needs PostgreSQL and minutes: ``python -m bench.cluster``)."""

from twisted.trial import unittest

from bench import cluster


def config(store, nodes, seconds, spread):
    return {"store": store, "nodes": nodes, "max_jobs": cluster.SLOTS // nodes,
            "seconds": seconds, "jobs_per_s": 60 / seconds,
            "overhead_ms": (seconds - 5.0) / 60 * 1000,
            "vs_sqlite_ms": (seconds - 6.0) / 60 * 1000, "spread": spread,
            "cpu_ms": 9.0 if store == "SQLite" else 14.5,
            "server_cpu_ms": 0.3 if store == "SQLite" else 4.5,
            "not_finished": 0, "reps": [seconds]}


RESULTS = {
    "jobs": {"direct_s": 5.0, "direct_jobs_per_s": 12.0, "configs": {
        "sqlite": config("SQLite", 1, 6.0, {"s0": 60}),
        "pg3": config("PostgreSQL", 3, 6.6, {"n0": 20, "n1": 21, "n2": 19}),
    }},
    "cross": {"busy -> idle node (PostgreSQL)": {"p50": 0.121, "p99": 0.152}},
    "lost": {"timeout": 6.0, "median": 6.5, "samples": [6.5, 6.6]},
}


class RenderTests(unittest.TestCase):
    def test_the_tables(self):
        text = cluster.render(RESULTS)
        self.assertIn("| SQLite | 1 | 6 | 10.00 | 16.7 ms | - | 9.0 ms | 0.3 ms | s0 60 |", text)
        self.assertIn("| PostgreSQL | 3 | 2 | 9.09 | 26.7 ms | +10.0 ms | 14.5 ms | 4.5 ms"
                      " | n0 20, n1 21, n2 19 |", text)
        self.assertIn("| (crawls run directly, 6 at a time) | - | - | 12.00 |", text)
        self.assertIn("| busy -> idle node (PostgreSQL) | 121.0 ms | 152.0 ms |", text)
        self.assertIn("| --node-timeout 6 | 6.50 s | 6.50 s, 6.60 s |", text)

    def test_no_local_server_no_figure(self):
        results = {**RESULTS, "jobs": {**RESULTS["jobs"], "configs": {
            "sqlite": {**RESULTS["jobs"]["configs"]["sqlite"], "server_cpu_ms": None}}}}
        self.assertIn("| 9.0 ms | - | s0 60 |", cluster.render(results))

    def test_percentiles(self):
        self.assertEqual(cluster.percentile([3, 1, 2], 50), 2)
        self.assertAlmostEqual(cluster.percentile(list(range(101)), 99), 99)
        self.assertEqual(cluster.percentile([7], 99), 7)
        self.assertIsNone(cluster.percentile([], 50))
