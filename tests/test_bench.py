"""A smoke test of the benchmark's own logic (bench/): both services start,
one tiny figure is measured, both stop, and the table renders. Nothing
here asserts a timing."""

import math
import shutil
import tempfile
import unittest

from bench import figures
from bench import load as loadgen
from bench.run import SMOKE, Bench, report
from bench.services import NETWEIR_SERVE, OURS
from bench.table import BY_KEY, FIGURES, render, target_met


class SmokeTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="netweir-serve-bench-test-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_both_services_measured_stopped_and_tabled(self):
        bench = Bench(SMOKE, self.root, log=lambda message: None)
        try:
            bench.run()
        finally:
            bench.stop_all()
        for service in bench.services:
            self.assertIsNotNone(service.process.poll(), f"{service.name} still runs")
        self.assertEqual(sorted(s.name for s in bench.services), sorted([NETWEIR_SERVE, OURS]))
        for key in ("status_rps", "status_p99", "rss_idle"):
            for name in (NETWEIR_SERVE, OURS):
                value = bench.results[key][name]
                self.assertTrue(value > 0 and math.isfinite(value), (key, name, value))
        self.assertIn(OURS, bench.results["status_p99"]["stalled"])
        text = report(bench)
        lines = [line for line in text.splitlines() if line.startswith("|")]
        self.assertEqual(len(lines), 2 + len(FIGURES))
        self.assertIn(NETWEIR_SERVE, lines[0])
        self.assertIn(OURS, lines[0])
        status_row = next(line for line in lines if "daemonstatus.json" in line)
        cells = [c.strip() for c in status_row.strip("|").split("|")]
        self.assertRegex(cells[1], r"^[0-9,]+$")
        self.assertRegex(cells[2], r"^[0-9,]+$")
        self.assertRegex(cells[3], r"^[0-9.]+x$")
        self.assertIn(cells[5], ("yes", "NO"))


class WatchingTest(unittest.TestCase):
    """The figures of what watching costs, tiny, on netweir-serve alone."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="netweir-serve-bench-test-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_watched_status_and_metrics_render(self):
        bench = Bench(SMOKE, self.root, log=lambda message: None)
        try:
            bench.start_site()
            ours = next(s for s in bench.start_pair("w") if s.name == OURS)
            found = figures.watched_status(ours, 8, 0.3, 1, 5)
            self.assertEqual(found["streams_seen"], 5)
            for kind in ("unwatched", "watched"):
                self.assertGreater(found[kind], 0)
            idle = figures.Watchers(ours, 0, scrape_every=0)
            self.assertEqual(idle.open_streams(), 0)
            idle.stop()
            self.assertGreater(figures.time_metrics_render(ours)(), 0)
        finally:
            bench.stop_all()

    def test_watched_rows_compare_ours_with_ours(self):
        text = render({"status_unwatched_rps": {OURS: 1000.0},
                       "status_watched_rps": {OURS: 950.0}})
        row = next(line for line in text.splitlines() if "/events streams" in line)
        cells = [c.strip() for c in row.strip("|").split("|")]
        self.assertEqual((cells[1], cells[2], cells[3], cells[5]), ("-", "950", "0.95x", "yes"))
        text = render({"status_unwatched_rps": {OURS: 1000.0},
                       "status_watched_rps": {OURS: 850.0}})
        self.assertIn("| NO", next(line for line in text.splitlines() if "streams" in line))


class TableTest(unittest.TestCase):
    def test_targets(self):
        rps, p99, rss = BY_KEY["status_rps"], BY_KEY["status_p99"], BY_KEY["rss_idle"]
        self.assertTrue(target_met(rps, 100, 1000))
        self.assertFalse(target_met(rps, 100, 999))
        self.assertTrue(target_met(p99, 1500, 19.9, stalled=0))
        self.assertFalse(target_met(p99, 1500, 19.9, stalled=1))
        self.assertFalse(target_met(p99, 1500, 20.0, stalled=0))
        self.assertTrue(target_met(rss, 40.0, 48.0))
        self.assertFalse(target_met(rss, 40.0, 48.1))
        self.assertIsNone(target_met(rps, None, 5))

    def test_missing_and_unanswered_values_render(self):
        text = render({"status_p99": {NETWEIR_SERVE: math.inf, OURS: 3.0,
                                      "stalled": {NETWEIR_SERVE: 7, OURS: 0}}})
        self.assertIn(f"> {loadgen.DRAIN_SECONDS:g} s (7)", text)
        self.assertIn("3.0 ms (0)", text)


class LoadTest(unittest.TestCase):
    def test_percentile_counts_unfinished_requests_as_slowest(self):
        result = loadgen.LoadResult(latencies=[0.001] * 98, unfinished=2)
        self.assertEqual(result.percentile(50), 0.001)
        self.assertEqual(result.percentile(99), math.inf)
        self.assertIsNone(loadgen.LoadResult().percentile(99))

    def test_workers_spread_over_source_addresses(self):
        addresses = {loadgen.source_address(n) for n in range(64)}
        self.assertEqual(len(addresses), 64 // loadgen.PER_SOURCE)
        self.assertTrue(all(a.startswith("127.0.0.") for a in addresses))


if __name__ == "__main__":
    unittest.main()
