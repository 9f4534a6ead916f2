"""health/checks.py: a finished run judged against its checks and the
runs before it (pure: counts in, health and reasons out)."""

from twisted.trial import unittest

from netweir_serve.health.checks import DEGRADED, HEALTHY, RunCounts, judge, medians_of
from netweir_serve.health.counts import counts_of
from netweir_serve.reliability.policy import JobPolicy


def runs(*items, pages=100, runtime=60.0):
    return [RunCounts(items=n, pages=pages, errors=0, runtime=runtime) for n in items]


class JudgeTests(unittest.TestCase):
    def test_no_check_is_healthy(self):
        self.assertEqual(judge(RunCounts(items=0, pages=0, errors=9), JobPolicy()),
                         (HEALTHY, ()))

    def test_min_items_and_pages_on_a_first_run(self):
        policy = JobPolicy(min_items=50, min_pages=10)
        self.assertEqual(judge(RunCounts(items=40, pages=3, errors=0), policy),
                         (DEGRADED, ("items 40 < min_items 50", "pages 3 < min_pages 10")))
        self.assertEqual(judge(RunCounts(items=50, pages=10, errors=0), policy), (HEALTHY, ()))

    def test_a_run_without_an_items_stat_has_no_items(self):
        self.assertEqual(judge(RunCounts(), JobPolicy(min_items=1)),
                         (DEGRADED, ("items 0 < min_items 1",)))

    def test_a_drop_below_the_median_names_it(self):
        history = runs(4000, 3900, 4100, 4000, 4200)
        policy = JobPolicy(items_drop=50)
        self.assertEqual(judge(RunCounts(items=40, pages=100, errors=0), policy, history),
                         (DEGRADED, ("items 40 < 50% of median 4000 over 5 runs",)))
        # Exactly half the median fell by 50 %, not more.
        self.assertEqual(judge(RunCounts(items=2000, pages=100), policy, history), (HEALTHY, ()))
        self.assertEqual(judge(RunCounts(items=1999, pages=100), policy, history)[0], DEGRADED)

    def test_pages_drop_and_fractions(self):
        history = runs(1, 1, 1, pages=200)
        self.assertEqual(
            judge(RunCounts(items=1, pages=100), JobPolicy(pages_drop=12.5), history),
            (DEGRADED, ("pages 100 < 87.5% of median 200 over 3 runs",)))

    def test_no_drop_check_before_three_runs(self):
        policy = JobPolicy(items_drop=10, slower=2)
        self.assertEqual(judge(RunCounts(items=0, runtime=1000.0), policy, runs(100, 100)),
                         (HEALTHY, ()))
        # Runs whose stats lacked the count are not among the three.
        history = runs(100, 100) + [RunCounts(items=None, runtime=60.0)]
        self.assertEqual(judge(RunCounts(items=0, runtime=10.0), policy, history),
                         (HEALTHY, ()))
        self.assertEqual(judge(RunCounts(items=0, runtime=200.0), policy, history),
                         (DEGRADED, ("runtime 200s > 2x median 60s over 3 runs",)))

    def test_max_errors_over_pages(self):
        policy = JobPolicy(max_errors=10)
        self.assertEqual(judge(RunCounts(pages=200, errors=20), policy), (HEALTHY, ()))
        self.assertEqual(judge(RunCounts(pages=200, errors=30), policy),
                         (DEGRADED, ("errors 30 = 15% of pages 200 > max_errors 10%",)))
        self.assertEqual(judge(RunCounts(pages=0, errors=3), policy),
                         (DEGRADED, ("errors 3 with no pages > max_errors 10%",)))
        self.assertEqual(judge(RunCounts(pages=0, errors=0), policy), (HEALTHY, ()))
        # No stats at all: nothing to judge errors by.
        self.assertEqual(judge(RunCounts(), policy), (HEALTHY, ()))

    def test_slower_than_the_median_runtime(self):
        history = runs(1, 1, 1, 1, runtime=10.0) + runs(1, runtime=50.0)
        policy = JobPolicy(slower=1.5)
        self.assertEqual(judge(RunCounts(runtime=15.0), policy, history), (HEALTHY, ()))
        self.assertEqual(judge(RunCounts(runtime=15.5), policy, history),
                         (DEGRADED, ("runtime 15.5s > 1.5x median 10s over 5 runs",)))
        # A run that never started has no runtime to compare.
        self.assertEqual(judge(RunCounts(), policy, history), (HEALTHY, ()))

    def test_every_failed_check_is_a_reason_in_order(self):
        policy = JobPolicy(min_items=10, items_drop=50, max_errors=1, slower=2)
        health, reasons = judge(RunCounts(items=5, pages=10, errors=5, runtime=500.0), policy,
                                runs(100, 100, 100))
        self.assertEqual(health, DEGRADED)
        self.assertEqual([r.split()[0] for r in reasons], ["items", "items", "errors", "runtime"])

    def test_medians_for_runs_json(self):
        self.assertEqual(medians_of(runs(1, 2, 30, 4, pages=7, runtime=2.5)),
                         {"items": 3, "pages": 7, "runtime": 2.5})
        self.assertEqual(medians_of(runs(1, 2)), {"items": None, "pages": None, "runtime": None})

    def test_medians_are_ints_when_whole_whatever_gave_them(self):
        # An even count of runs gives statistics.median a float: 3.0 is 3,
        # a half stays a half; a runtime is to the thousandth.
        medians = medians_of(runs(2, 4, 6, 8, runtime=10.0))
        self.assertEqual(medians, {"items": 5, "pages": 100, "runtime": 10})
        self.assertEqual([type(v) for v in medians.values()], [int, int, int])
        medians = medians_of(runs(1, 2, 3, 4, runtime=1.23456))
        self.assertEqual(medians, {"items": 2.5, "pages": 100, "runtime": 1.235})
        self.assertEqual(type(medians["items"]), float)


class ReasonTextTests(unittest.TestCase):
    """The numbers of a reason: plain fixed point, at most one decimal for
    counts and shares, no ".0"; runtimes in seconds."""

    def test_a_large_median_is_written_out(self):
        history = runs(2_000_000, 2_000_000, 2_000_000)
        self.assertEqual(judge(RunCounts(items=1, pages=100), JobPolicy(items_drop=50), history),
                         (DEGRADED, ("items 1 < 50% of median 2000000 over 3 runs",)))
        history = runs(2_000_000.0, 2_000_000.0, 2_000_000.0)
        self.assertEqual(judge(RunCounts(items=1, pages=100), JobPolicy(items_drop=50), history)
                         [1], ("items 1 < 50% of median 2000000 over 3 runs",))

    def test_a_half_median_keeps_its_decimal(self):
        history = runs(123456, 123457, 123456, 123457)
        self.assertEqual(judge(RunCounts(items=1, pages=100), JobPolicy(items_drop=50), history)
                         [1], ("items 1 < 50% of median 123456.5 over 4 runs",))

    def test_a_share_shows_one_decimal_at_most(self):
        self.assertEqual(judge(RunCounts(pages=3, errors=1), JobPolicy(max_errors=10))[1],
                         ("errors 1 = 33.3% of pages 3 > max_errors 10%",))
        self.assertEqual(judge(RunCounts(pages=4_000_000, errors=4_000_000),
                               JobPolicy(max_errors=12.5))[1],
                         ("errors 4000000 = 100% of pages 4000000 > max_errors 12.5%",))

    def test_a_policys_own_numbers_as_given(self):
        history = runs(100, 100, 100, runtime=10.0)
        self.assertEqual(judge(RunCounts(items=1, pages=100, runtime=20.0),
                               JobPolicy(items_drop=12.25, slower=1.25), history)[1],
                         ("items 1 < 87.75% of median 100 over 3 runs",
                          "runtime 20s > 1.25x median 10s over 3 runs"))

    def test_runtimes_in_seconds(self):
        history = runs(1, 1, 1, runtime=0.125)
        self.assertEqual(judge(RunCounts(runtime=0.5), JobPolicy(slower=2), history)[1],
                         ("runtime 0.5s > 2x median 0.125s over 3 runs",))
        history = runs(1, 1, 1, runtime=1_000_000.0)
        self.assertEqual(judge(RunCounts(runtime=3_000_000.25), JobPolicy(slower=2), history)[1],
                         ("runtime 3000000.2s > 2x median 1000000s over 3 runs",))


class CountsTests(unittest.TestCase):
    """health.counts.counts_of: what a run's stats count, as a 64-bit
    column holds it."""

    def test_whole_counts_in_range(self):
        self.assertEqual(counts_of({"items": 4, "fetched": 9, "failed": 1, "callback_errors": 2}),
                         (4, 9, 3))
        self.assertEqual(counts_of({"items": 2 ** 63 - 1}), (2 ** 63 - 1, None, 0))

    def test_a_stat_out_of_range_is_no_count(self):
        self.assertEqual(counts_of({"items": 2 ** 63, "fetched": -1}), (None, None, 0))
        self.assertEqual(counts_of({"items": 2 ** 70, "failed": -5, "callback_errors": 2}),
                         (None, None, 2))
        self.assertEqual(counts_of({"items": True, "fetched": float("nan")}), (None, None, 0))

    def test_errors_stop_below_the_limit(self):
        self.assertEqual(counts_of({"failed": 2 ** 62, "callback_errors": 2 ** 62})[2],
                         2 ** 63 - 1)

    def test_stats_that_are_no_dict_count_nothing(self):
        self.assertEqual(counts_of([1, 2]), (None, None, None))
        self.assertEqual(counts_of(None), (None, None, None))
