"""A smoke test of the benchmark's own logic (bench/): both services start,
one tiny figure is measured, both stop, and the table renders. Nothing
here asserts a timing."""

import math
import os
import shutil
import tempfile
import unittest

from bench import figures, schedules
from bench import load as loadgen
from bench.modes import FULL, QUICK, SMOKE, labels
from bench.run import Bench, report
from bench.services import NETWEIR_SERVE, OURS
from bench.table import BY_KEY, FIGURES, render, rows, target_met


class BenchCase(unittest.TestCase):
    """A scratch directory, and quiet smoke-sized benchmarks in it, each
    stopped at the end."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="netweir-serve-bench-test-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def make_bench(self):
        bench = Bench(SMOKE, self.root, log=lambda message: None)
        self.addCleanup(bench.stop_all)
        return bench


class SmokeTest(BenchCase):
    def test_both_services_measured_stopped_and_tabled(self):
        bench = self.make_bench()
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


class WatchingTest(BenchCase):
    """The figures of what watching costs, tiny, on netweir-serve alone."""

    def test_watched_status_and_metrics_render(self):
        bench = self.make_bench()
        bench.start_site()
        pair = bench.start_pair("w")
        theirs, ours = pair
        found = figures.watched_status(ours, 8, 0.3, 1, 5)
        self.assertEqual(found["streams_seen"], 5)
        for kind in ("unwatched", "watched"):
            self.assertGreater(found[kind], 0)
        idle = figures.Watchers(ours, 0, scrape_every=0)
        self.assertEqual(idle.open_streams(), 0)
        idle.stop()
        self.assertGreater(figures.time_metrics_render(ours)(), 0)
        self.assertGreater(figures.time_listjobs_render(theirs)(), 0)

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
        self.assertTrue(target_met(p99, 1500, 19.9, extra=0))
        self.assertFalse(target_met(p99, 1500, 19.9, extra=1))
        self.assertFalse(target_met(p99, 1500, 20.0, extra=0))
        self.assertTrue(target_met(rss, 40.0, 44.0))
        self.assertFalse(target_met(rss, 40.0, 44.1))
        self.assertIsNone(target_met(rps, None, 5))
        self.assertTrue(target_met(BY_KEY["bigfile_rss"], 37.0, 43.0, extra=4.9))
        self.assertFalse(target_met(BY_KEY["bigfile_rss"], 37.0, 43.0, extra=5.1))

    def test_new_rows(self):
        text = render({
            "metrics_huge": {NETWEIR_SERVE: 400.0, OURS: 40.0},
            "bigfile_rss": {NETWEIR_SERVE: 37.9, OURS: 42.9,
                            "growth": {NETWEIR_SERVE: 0.0, OURS: 0.25}},
            "sched_idle_cpu": {NETWEIR_SERVE: 2.3, OURS: 1.1},
            "nodes_overhead_sqlite": {OURS: -2.0}, "nodes_overhead_pg1": {OURS: 4.0},
        }, {"huge": "10,000"})

        def cells(start):
            line = next(line for line in text.splitlines() if line.startswith(f"| {start}"))
            return [c.strip() for c in line.strip("|").split("|")]

        self.assertEqual(cells("/metrics after a change, 10,000")[1:4],
                         ["400 ms", "40.0 ms", "0.10x"])
        self.assertEqual(cells("files: 500 MB")[1:],
                         ["37.9 MB (+0.0)", "42.9 MB (+0.2)", "1.13x", "growth <= 5 MB", "yes"])
        self.assertEqual(cells("schedules: CPU per idle hour")[1:],
                         ["2.30 s", "1.10 s", "0.48x", "<= 1x", "yes"])
        # An overhead below the direct crawls' is noise around zero: no ratio.
        self.assertEqual(cells("nodes: overhead per job, 1 node")[2:4], ["4.0 ms", "-"])

    def test_missing_and_unanswered_values_render(self):
        text = render({"status_p99": {NETWEIR_SERVE: math.inf, OURS: 3.0,
                                      "stalled": {NETWEIR_SERVE: 7, OURS: 0}}})
        self.assertIn(f"> {loadgen.DRAIN_SECONDS:g} s (7)", text)
        self.assertIn("3.0 ms (0)", text)


class FilesAndSchedulesTest(BenchCase):
    """The job file and schedule figures, tiny, on both services."""

    def test_files_and_schedules_measured_on_both(self):
        bench = self.make_bench()
        bench.start_site()
        pair = bench.start_pair("f")
        bench.measure_files(pair)
        bench.stop_pair(pair)
        bench.schedules_pair()
        for key in ("file_rps", "file_cpu", "bigfile_rss", "sched_late_p50", "sched_late_p99",
                    "sched_idle_cpu"):
            for name in (NETWEIR_SERVE, OURS):
                value = bench.results[key][name]
                self.assertTrue(value >= 0 and math.isfinite(value), (key, name, value))
        for name in (NETWEIR_SERVE, OURS):
            self.assertEqual(len(bench.details["sched_late_p50"][name]["samples"]),
                             SMOKE.schedules)
            self.assertEqual(bench.details["bigfile_rss"][name]["ok"], SMOKE.fetchers)
            self.assertGreater(bench.results["file_rps"][name], 0)
        self.assertEqual(bench.notes, [])

    def test_due_time_of_a_schedule_job(self):
        self.assertEqual(schedules.due_of("late0-0003-20261201T135145Z"), 1796133105.0)


class StallTest(BenchCase):
    """The reactor stall figure, on a toy table (SMOKE's 200 + 200 jobs)."""

    def test_both_tables_filled_and_the_burst_measured(self):
        bench = self.make_bench()
        bench.start_site()
        bench.measure_stall()
        values = bench.results["stall_burst"]
        for name in (NETWEIR_SERVE, OURS):
            self.assertTrue(values[name] >= 0 and math.isfinite(values[name]), (name, values))
        ours = bench.details["stall_burst"][OURS]
        self.assertEqual(ours["errors"], [])
        self.assertGreater(ours["burst_seconds"], 0)
        for service in bench.services:
            self.assertIsNotNone(service.process.poll(), f"{service.name} still runs")
        self.assertTrue(any(note.startswith("stall: ") for note in bench.notes))


class DeadlinesTest(BenchCase):
    """The deadline figure, at the smoke run's size, and its row."""

    def test_every_deadline_measured_with_one_timer_and_tabled(self):
        bench = self.make_bench()
        bench.measure_deadlines()
        self.assertEqual(bench.results["deadline_error"][OURS], 0.0)
        self.assertEqual(bench.results["deadline_error"]["timers"], {OURS: 1})
        found = bench.details["deadline_error"]
        self.assertEqual(found["deadlines"], SMOKE.deadline_jobs)
        self.assertEqual(sum(found["by_reason"].values()), SMOKE.deadline_jobs)
        self.assertTrue(all(found["by_reason"].values()), found["by_reason"])
        line = next(line for line in render(bench.results, labels(SMOKE)).splitlines()
                    if line.startswith("| deadlines: "))
        self.assertEqual([c.strip() for c in line.strip("|").split("|")][1:],
                         ["-", "0.0 ms (1)", "-", "< 1 ms, 1 timer", "yes"])
        self.assertTrue(any(note.startswith("deadlines: ") for note in bench.notes))


class WaveTest(BenchCase):
    """Issue 28's wave figures (bench/wave.py) at the smoke run's sizes, and
    their rows."""

    KEYS = ("health_none_p50", "health_all_p50", "health_none_p99", "health_all_p99",
            "auth_basic", "auth_token_cached", "auth_token_first", "audit_off", "audit_on")

    def test_every_figure_measured_and_tabled(self):
        from bench import wave
        bench = self.make_bench()
        wave.measure(bench)
        for key in self.KEYS:
            value = bench.results[key][OURS]
            self.assertTrue(value > 0 and math.isfinite(value), (key, value))
        health, first, audit = (wave.SIZES["smoke"][i] for i in (0, 2, 3))
        for kind in ("none", "all"):
            self.assertEqual(len(bench.details["health_none_p50"][kind]["samples"]), health)
        web = bench.details["auth_basic"]
        self.assertEqual(len(web["token_first"]["samples"]), first)
        # Every audited write left its row, and no unaudited one did.
        self.assertEqual(web["audit_rows"], audit)
        self.assertEqual(len(web["unaudited"]["samples"]), audit)
        lines = [line for line in render(bench.results, labels(SMOKE)).splitlines()
                 if line.startswith(("| health: ", "| auth: ", "| audit: "))]
        self.assertEqual(len(lines), len(self.KEYS))
        for line in lines:
            cells = [c.strip() for c in line.strip("|").split("|")]
            self.assertEqual(cells[1], "-")
            self.assertRegex(cells[2], r"^[0-9,.]+ (us|ms)$")
            self.assertRegex(cells[3], r"^-$" if cells[4] == "(baseline)" else r"^[0-9.]+x$")
        self.assertEqual(sum(note.startswith("wave: ") for note in bench.notes), 2)

    def test_the_policy_figure_gives_every_key(self):
        """The policy row's jobs carry every policy key there is, the run
        health checks (issue 25) with history=100 among them, at values a
        trivial run passes."""
        from netweir_serve.reliability.policy import HEALTH_KEYS, KEYS, JobPolicy
        self.assertEqual(sorted(k[1:] for k in figures.EVERY_POLICY_KEY), sorted(KEYS))
        policy = JobPolicy.parse(figures.EVERY_POLICY_KEY, prefix="_")
        self.assertEqual(policy.history, 100)
        self.assertTrue(all(getattr(policy, key) is not None for key in HEALTH_KEYS))


class ConsoleTest(BenchCase):
    """The console's first-paint figure (bench/console.py) at the smoke
    run's size: 200 finished jobs, two loads a page, in Debian's chromium.
    ScrapydWeb is measured when its cached venv exists (a full or quick
    run makes it; the smoke size never installs it), else a note says so."""

    def test_seeded_table_reads_back_through_the_store(self):
        from twisted.internet.task import Clock

        from bench.console import seed_ours
        from netweir_serve.store.sqlite import SQLiteJobStore
        seed_ours(self.root, 50, "/nowhere/spiders.py")
        store = SQLiteJobStore(os.path.join(self.root, "jobs.db"), Clock())
        self.addCleanup(store.close)
        listed = []
        store.jobs().addCallback(listed.append)
        pending, running, finished = listed[0]
        self.assertEqual((len(pending), len(running)), (0, 0))
        # Most recent last: in the order they were seeded.
        self.assertEqual([j.id for j in finished], [f"seed{n:06d}" for n in range(50)])
        self.assertEqual({j.outcome for j in finished}, {"finished", "failed", "cancelled"})
        self.assertEqual({j.spider for j in finished}, {"trivial", "stamp"})
        self.assertTrue(all(j.start_time < j.end_time for j in finished))
        got = []
        store.get("seed000011").addCallback(got.append)
        self.assertEqual((got[0].reason, got[0].stats["item_scraped_count"]), ("exit 0", 11))

    def test_pages_measured_in_chromium_and_tabled(self):
        from .browser import browser_or_skip
        browser_or_skip(self)
        bench = self.make_bench()
        bench.start_site()
        bench.measure_console()
        for service in bench.services:
            self.assertIsNotNone(service.process.poll(), f"{service.name} still runs")
        found = bench.details["console_fcp"]
        keys = ["console_fcp", "console_plain"]
        if found["console"]["rows_seen"]:
            keys.append("console_rows")
        else:  # main's placeholder jobs.js: no rows, no time for them
            self.assertNotIn(OURS, bench.results["console_rows"])
        for key in keys:
            value = bench.results[key][OURS]
            self.assertTrue(0 < value and math.isfinite(value), (key, value))
        self.assertEqual(len(found["console"]["samples"]), SMOKE.console_loads)
        # /jobs is drawn by the server: its rows are there to be seen.
        self.assertTrue(found["plain_ours"]["rows_seen"])
        # A cell (or more) of each of the 200 jobs.
        self.assertGreaterEqual(found["plain_ours"]["samples"][0]["count"], 200)
        if not found["console"]["rows_seen"]:  # main's placeholder jobs.js
            self.assertTrue(any("showed no row" in note for note in bench.notes), bench.notes)
        if NETWEIR_SERVE in bench.results["console_fcp"]:
            self.assertGreater(bench.results["console_rows"][NETWEIR_SERVE], 0)
            self.assertTrue(found["scrapydweb"]["rows_seen"])
        else:
            self.assertTrue(any(note.startswith("console: ScrapydWeb 1.6.0 not measured")
                                for note in bench.notes), bench.notes)
        lines = render(bench.results, labels(SMOKE)).splitlines()
        row = next(line for line in lines if line.startswith("| console: first paint of /"))
        self.assertIn("200 finished", row)
        self.assertRegex([c.strip() for c in row.strip("|").split("|")][2], r"^[0-9.,]+ ms$")


class DocsTest(unittest.TestCase):
    def test_the_latest_table_in_the_docs_has_every_row(self):
        """docs/performance.md's latest table (the first table of its
        section) is a full or a quick run's: a row for every figure, in the
        order of the table."""
        path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "performance.md")
        with open(path, encoding="utf-8") as f:
            section = f.read().split("\n## The latest table\n", 1)[1].split("\n## ", 1)[0]
        # The section's first table: the lines from its first row to the
        # first line that is not a row.
        lines = section[section.index("\n|") + 1:].split("\n\n", 1)[0].splitlines()
        documented = [line.strip("|").split("|")[0].strip() for line in lines[2:]]
        expected = {mode.name: [row[0] for row in rows({}, labels(mode))[1:]]
                    for mode in (FULL, QUICK)}
        if documented != expected["full"]:
            self.assertEqual(documented, expected["quick"])


class DeadlinesFigureTest(unittest.TestCase):
    def test_the_watch_cancels_every_job_on_one_timer(self):
        """bench/deadlines.py drives the real watch: every job is cancelled,
        each with the reason worked out beside it, and one timer at most."""
        from bench import deadlines
        found = deadlines.measure(40)
        self.assertEqual(found["deadlines"], 40)
        self.assertEqual(found["timers"], 1)
        self.assertEqual(sum(found["by_reason"].values()), 40)


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
