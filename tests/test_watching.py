"""The service watching itself: the reactor's lateness (watching.lag) and
the listings built from the job table (watching.builds), on a Clock and
through a real daemon's /metrics."""

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.watching.builds import ListingBuilds
from netweir_serve.watching.lag import (
    INTERVAL_SECONDS, LAG_BUCKETS, PROBE_VARIABLE, ReactorLag, probe_interval)
from netweir_serve.web.cache import VersionCache
from netweir_serve.web.metrics import Histogram

from .processes import wait_until
from .test_metrics import samples, value
from .test_jobs import CrawlTestCase


def observed(histogram):
    """[(bound, count in that bucket alone)] of a label-less Histogram."""
    counts, _ = histogram._series[()]
    return [(bound, n) for bound, n in zip(histogram.bounds + (float("inf"),), counts) if n]


class ReactorLagTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.lag = ReactorLag(self.clock, Histogram(LAG_BUCKETS), interval=0.1)
        self.lag.start()
        self.addCleanup(self.lag.stop)

    def test_ticks_on_time_are_not_late(self):
        for _ in range(10):
            self.clock.advance(0.1)
        self.assertEqual(observed(self.lag.histogram), [(0.001, 10)])

    def test_a_stall_is_the_lateness_of_the_tick_it_held_back(self):
        self.clock.advance(0.1)
        # The reactor held for 1.3 s: the tick due at 0.2 runs at 1.4, once.
        self.clock.advance(1.3)
        self.assertEqual(observed(self.lag.histogram), [(0.001, 1), (2.5, 1)])
        _, total = self.lag.histogram._series[()]
        self.assertAlmostEqual(total, 1.2)
        # The next is planned from when that one ran, not from the missed ones.
        self.clock.advance(0.1)
        self.assertEqual(observed(self.lag.histogram), [(0.001, 2), (2.5, 1)])

    def test_stopped_it_plans_nothing(self):
        self.lag.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_the_largest_lateness_is_the_worst_since_last_asked(self):
        self.clock.advance(0.1)
        self.clock.advance(0.4)   # the tick due at 0.2 runs 0.3 late
        self.clock.advance(0.15)  # the next, 0.05 late
        self.assertAlmostEqual(self.lag.take_largest(), 0.3)
        self.assertEqual(self.lag.take_largest(), 0.0)
        self.clock.advance(0.12)
        self.assertAlmostEqual(self.lag.take_largest(), 0.02)

    def test_the_benchmarks_probe_ticks_as_often_as_its_variable_asks(self):
        self.assertEqual(probe_interval({}), INTERVAL_SECONDS)
        self.assertEqual(probe_interval({PROBE_VARIABLE: "0.001"}), 0.001)
        self.assertEqual(probe_interval({PROBE_VARIABLE: "0"}), INTERVAL_SECONDS)
        self.assertEqual(probe_interval({PROBE_VARIABLE: "often"}), INTERVAL_SECONDS)
        self.assertEqual(probe_interval({PROBE_VARIABLE: "0.00001"}), 0.0005)


class Store:
    version = 1


class BuildsTests(unittest.TestCase):
    def test_a_build_is_counted_only_when_the_cache_misses(self):
        builds, store = ListingBuilds(), Store()
        cache = VersionCache(lambda: store, built=builds.counter("listjobs.json"))
        build = lambda: defer.succeed("answer")
        for _ in range(3):
            cache.answer(None, build)
        self.assertEqual(builds.counts, {"listjobs.json": 1})
        cache.answer("other project", build)
        store.version = 2
        cache.answer(None, build)
        self.assertEqual(builds.counts, {"listjobs.json": 3})


class SharedBuildTests(unittest.TestCase):
    """A store that answers later (its own thread, PostgreSQL): those who
    ask while an answer is built wait for that one build."""

    def test_askers_during_a_build_share_it_and_one_gone_leaves_the_others(self):
        builds, store, started = ListingBuilds(), Store(), []

        def build():
            started.append(defer.Deferred())
            return started[-1]

        cache = VersionCache(lambda: store, built=builds.counter("listjobs.json"))
        first, gone, last = (cache.answer(None, build) for _ in range(3))
        self.assertEqual((len(started), builds.counts), (1, {"listjobs.json": 1}))
        gone.cancel()
        self.failureResultOf(gone, defer.CancelledError)
        started[0].callback("answer")
        self.assertEqual((self.successResultOf(first), self.successResultOf(last)),
                         ("answer", "answer"))
        # Kept: the next asker is answered at once, with no build.
        self.assertEqual(cache.answer(None, build), "answer")
        self.assertEqual(len(started), 1)

    def test_a_failed_build_fails_its_askers_and_is_not_kept(self):
        store, started = Store(), []

        def build():
            started.append(defer.Deferred())
            return started[-1]

        cache = VersionCache(lambda: store)
        first, second = cache.answer(None, build), cache.answer(None, build)
        started[0].errback(RuntimeError("the table is gone"))
        for answered in (first, second):
            self.failureResultOf(answered, RuntimeError)
        cache.answer(None, build)
        self.assertEqual(len(started), 2)


class LiveTests(CrawlTestCase):
    def scrape(self, daemon):
        status, _, body = daemon.call("GET", "/metrics")
        self.assertEqual(status, 200, body)
        return samples(body.decode())

    def test_metrics_show_the_builds_and_the_reactors_lateness(self):
        daemon = self.daemon()
        for _ in range(5):
            for path in ("listjobs.json", "daemonstatus.json", "jobs"):
                self.assertEqual(daemon.call("GET", path)[0], 200)
        first = self.scrape(daemon)
        for endpoint in ("listjobs.json", "daemonstatus.json", "/jobs", "/metrics"):
            self.assertEqual(value(first, "netweir_serve_listing_builds_total",
                                   endpoint=endpoint), 1, endpoint)
        # Changes of the table: the listing is built again when asked after
        # them, then answered from the cache until the next change.
        daemon.wait_state(daemon.must_schedule("shop", "books"), "finished")
        daemon.call("GET", "listjobs.json")
        built = value(self.scrape(daemon), "netweir_serve_listing_builds_total",
                      endpoint="listjobs.json")
        self.assertGreaterEqual(built, 2)
        for _ in range(3):
            daemon.call("GET", "listjobs.json")
        again = self.scrape(daemon)
        self.assertEqual(value(again, "netweir_serve_listing_builds_total",
                               endpoint="listjobs.json"), built)
        self.assertEqual(value(again, "netweir_serve_listing_builds_total",
                               endpoint="daemonstatus.json"), 1)
        # The lag timer ticks ten times a second from the start.
        wait_until(lambda: value(self.scrape(daemon),
                                 "netweir_serve_reactor_lag_seconds_count") >= 10, 10,
                   "ten ticks of the lag timer")
        found = self.scrape(daemon)
        self.assertEqual(value(found, "netweir_serve_reactor_lag_seconds_bucket", le="+Inf"),
                         value(found, "netweir_serve_reactor_lag_seconds_count"))
        # The worst of them since the last scrape: a lateness, so not negative.
        largest = ("netweir_serve_reactor_lag_largest_seconds", ())
        self.assertIn(largest, found)
        self.assertGreaterEqual(found[largest], 0)
