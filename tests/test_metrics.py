"""GET /metrics, read with prometheus_client's own parser: the collector
fed by events, and a real daemon before and after jobs end with each
outcome."""

import collections

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer
from twisted.trial import unittest

from netweir_serve.jobs.events import ENDED, QUEUED, RECORDED_LATE, STARTED, JobEvents
from netweir_serve.store.records import FINISHED, PENDING, RUNNING, STATES, JobRecord, StoreError
from netweir_serve.store.schedule_records import ScheduleRecord
from netweir_serve.web.metrics import ServiceMetrics, metrics_registry
from prometheus_client import generate_latest

from .test_jobs import CrawlTestCase


def samples(text):
    """{(name, sorted label pairs): value} of a /metrics text."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found, name, **labels):
    return found.get((name, tuple(sorted(labels.items()))), 0)


def job(**changes):
    fields = dict(id="j1", project="shop", spider="books", spider_file="/x.py")
    fields.update(changes)
    return JobRecord(**fields)


class FakeStore:
    def __init__(self):
        self.version = 1
        self.lists = ([], [], [])
        self.reads = 0

    def tally(self):
        # What the real stores count in SQL, from the lists.
        self.reads += 1
        counts = collections.Counter()
        for state, records in zip(STATES, self.lists):
            counts.update((state, r.project, r.node) for r in records)
        return defer.succeed(dict(counts))


class CollectorTests(unittest.TestCase):
    def setUp(self):
        self.store = FakeStore()
        self.events = JobEvents()
        self.metrics = ServiceMetrics(self.store, lambda: 3, 4, lambda: 2)
        self.metrics.subscribe(self.events)
        self.registry = metrics_registry(self.metrics)

    def render(self):
        self.metrics.refresh()
        return samples(generate_latest(self.registry).decode())

    def test_counts_each_outcome_durations_waits_items_and_requests(self):
        self.events.publish(STARTED, job(state=RUNNING, created=100.0, start_time=103.0))
        ends = (("finished", "exit 0"), ("failed", "exit 1"), ("cancelled", "timeout"),
                ("lost", "lost"))
        for n, (outcome, reason) in enumerate(ends):
            self.events.publish(ENDED, job(
                id=f"j{n}", state=FINISHED, outcome=outcome, reason=reason, start_time=100.0,
                end_time=100.0 + 10 ** n, stats={"items": 5, "fetched": 7, "failed": 1}))
        found = self.render()
        for outcome, reason in ends:
            self.assertEqual(value(found, "netweir_serve_jobs_ended_total", project="shop",
                                   spider="books", outcome=outcome, reason=reason), 1)
        self.assertEqual(value(found, "netweir_serve_job_items_total", project="shop",
                               spider="books"), 20)
        self.assertEqual(value(found, "netweir_serve_job_requests_total", project="shop",
                               spider="books", result="fetched"), 28)
        self.assertEqual(value(found, "netweir_serve_job_requests_total", project="shop",
                               spider="books", result="failed"), 4)
        duration = "netweir_serve_job_duration_seconds"
        self.assertEqual(value(found, duration + "_count", project="shop", spider="books"), 4)
        self.assertEqual(value(found, duration + "_sum", project="shop", spider="books"), 1111)
        self.assertEqual(value(found, duration + "_bucket", project="shop", spider="books",
                               le="1.0"), 1)
        self.assertEqual(value(found, duration + "_bucket", project="shop", spider="books",
                               le="1800.0"), 4)
        self.assertEqual(value(found, duration + "_bucket", project="shop", spider="books",
                               le="86400.0"), 4)
        wait = "netweir_serve_job_queue_wait_seconds"
        self.assertEqual(value(found, wait + "_sum", project="shop"), 3)
        self.assertEqual(value(found, wait + "_bucket", project="shop", le="5.0"), 1)
        self.assertEqual(value(found, "netweir_serve_slots_free"), 3)
        self.assertEqual(value(found, "netweir_serve_max_jobs"), 4)
        self.assertEqual(value(found, "netweir_serve_event_streams"), 2)
        self.assertIn("process_cpu_seconds_total", {name for name, _ in found})
        self.assertIn("python_info", {name for name, _ in found})

    def test_degraded_runs_by_project_and_spider(self):
        for n, health in enumerate(("healthy", "degraded", "degraded", None)):
            self.events.publish(ENDED, job(id=f"d{n}", state=FINISHED,
                                           outcome="finished" if health else "failed",
                                           reason="exit 0", health=health))
        self.events.publish(ENDED, job(id="n", spider="news", state=FINISHED,
                                       outcome="finished", health="degraded"))
        found = self.render()
        self.assertEqual(value(found, "netweir_serve_jobs_degraded_total", project="shop",
                               spider="books"), 2)
        self.assertEqual(value(found, "netweir_serve_jobs_degraded_total", project="shop",
                               spider="news"), 1)

    def test_an_end_recorded_late_counts_its_health_and_not_its_end_again(self):
        # Announced (ENDED) before the table took it, with no health yet.
        self.events.publish(ENDED, job(id="late", state=FINISHED, outcome="finished",
                                       reason="exit 0"))
        self.events.publish(RECORDED_LATE, job(id="late", state=FINISHED, outcome="finished",
                                               reason="exit 0", health="degraded"))
        found = self.render()
        self.assertEqual(value(found, "netweir_serve_jobs_degraded_total", project="shop",
                               spider="books"), 1)
        self.assertEqual(value(found, "netweir_serve_jobs_ended_total", project="shop",
                               spider="books", outcome="finished", reason="exit 0"), 1)

    def test_jobs_by_state_project_and_node_read_once_per_version(self):
        self.store.lists = ([job(id="a"), job(id="b", project="news")],
                            [job(id="c", state=RUNNING, node="n1")],
                            [job(id="d", state=FINISHED, node="n2"),
                             job(id="e", state=FINISHED, node="n2"),
                             job(id="f", state=FINISHED)])
        found = self.render()
        jobs = {labels: n for (name, labels), n in found.items() if name == "netweir_serve_jobs"}
        # A pending job (or one cancelled before it started) has no node:
        # node="", which Prometheus reads as no node label at all.
        self.assertEqual(jobs, {
            (("node", ""), ("project", "news"), ("state", PENDING)): 1,
            (("node", ""), ("project", "shop"), ("state", PENDING)): 1,
            (("node", "n1"), ("project", "shop"), ("state", RUNNING)): 1,
            (("node", "n2"), ("project", "shop"), ("state", FINISHED)): 2,
            (("node", ""), ("project", "shop"), ("state", FINISHED)): 1})
        # A table of one node's own: no nodes to show.
        self.assertNotIn("netweir_serve_node_up", {name for name, _ in found})
        self.render()
        self.assertEqual(self.store.reads, 1)
        self.store.version = 2
        self.render()
        self.assertEqual(self.store.reads, 2)

    def test_a_shared_tables_nodes_live_and_dead_read_once_per_version(self):
        read = []

        def nodes():
            read.append(1)
            return defer.succeed([{"name": "n1", "dead": False}, {"name": "n2", "dead": True}])

        metrics = ServiceMetrics(self.store, lambda: 1, 1, nodes=nodes)
        registry = metrics_registry(metrics)
        metrics.refresh()
        found = samples(generate_latest(registry).decode())
        self.assertEqual(value(found, "netweir_serve_node_up", node="n1"), 1)
        self.assertEqual((("netweir_serve_node_up", (("node", "n2"),)) in found,
                          value(found, "netweir_serve_node_up", node="n2")), (True, 0))
        metrics.refresh()
        self.assertEqual(len(read), 1)
        self.store.version = 2
        metrics.refresh()
        self.assertEqual(len(read), 2)

    def test_a_failed_read_of_the_nodes_fails_the_refresh(self):
        metrics = ServiceMetrics(self.store, lambda: 1, 1,
                                 nodes=lambda: defer.fail(StoreError("no table")))
        failure = self.failureResultOf(metrics.refresh(), StoreError)
        self.assertEqual(failure.value.message, "no table")
        # Read again at the next scrape, the version not taken as read.
        self.failureResultOf(metrics.refresh(), StoreError)

    def test_schedule_firings_as_their_jobs_are_queued_here_and_skips_from_now_on(self):
        # Each node's timer fires a schedule; the node whose job got in
        # heard "queued" and counts the firing. The row's runs (which every
        # node that recorded the due time sees grow) count nothing.
        record = ScheduleRecord(name="hourly", project="shop", spider="books", kind="every",
                                rule="1h", tz="UTC", runs=5, skipped=1)
        self.metrics.seed_schedules([record])
        from dataclasses import replace
        self.events.publish(QUEUED, job(id="hourly-1", schedule="hourly"))
        self.events.publish(QUEUED, job(id="hourly-2", schedule="hourly"))
        self.events.publish(QUEUED, job(id="by-hand"))
        self.metrics.schedule_changed(replace(record, runs=7, skipped=2))
        self.metrics.schedule_changed(replace(record, runs=7, skipped=2, paused=True))
        self.metrics.schedule_changed(replace(record, name="new", runs=1, skipped=0))
        found = self.render()
        self.assertEqual(value(found, "netweir_serve_schedule_firings_total", project="shop"), 2)
        self.assertEqual(value(found, "netweir_serve_schedule_skips_total", project="shop"), 1)

    def test_buffers_catch_ups_and_self_pauses_from_now_on(self):
        from dataclasses import replace
        record = ScheduleRecord(name="b", project="shop", spider="books", kind="every",
                                rule="1h", tz="UTC", buffered=4, caught_up=2)
        self.metrics.seed_schedules([record])
        self.metrics.schedule_changed(replace(record, buffered=6, caught_up=2))
        self.metrics.schedule_changed(replace(record, buffered=6, caught_up=3))
        self.metrics.schedule_changed(replace(record, name="new", buffered=1, caught_up=0))
        self.events.publish(ENDED, replace(job(id="b-1", schedule="b"), outcome="failed",
                                           paused_schedule=replace(record, paused=True)))
        self.events.publish(ENDED, replace(job(id="b-2", schedule="b"), outcome="failed"))
        found = self.render()
        self.assertEqual(value(found, "netweir_serve_schedule_buffers_total", project="shop"), 3)
        self.assertEqual(value(found, "netweir_serve_schedule_catch_ups_total", project="shop"),
                         1)
        self.assertEqual(value(found, "netweir_serve_schedule_pauses_total", project="shop"), 1)

    def test_no_label_carries_a_job_id(self):
        self.store.lists = ([job(id="secret-id-1")], [], [])
        self.events.publish(ENDED, job(id="secret-id-2", state=FINISHED, outcome="finished",
                                       start_time=1.0, end_time=2.0))
        text = generate_latest(self.registry).decode()
        self.metrics.refresh()
        text += generate_latest(self.registry).decode()
        self.assertNotIn("secret-id", text)


class DeadlineCountTests(unittest.TestCase):
    def test_the_deadlines_that_fired_by_kind(self):
        fired = {"timeout": 0, "stall": 0, "expire": 0}
        metrics = ServiceMetrics(FakeStore(), lambda: 1, 1, deadlines=fired)
        registry = metrics_registry(metrics)
        fired.update(timeout=2, expire=1)
        metrics.refresh()
        found = samples(generate_latest(registry).decode())
        counted = {kind: value(found, "netweir_serve_deadlines_total", kind=kind)
                   for kind in fired}
        self.assertEqual(counted, {"timeout": 2, "stall": 0, "expire": 1})
        # Without a deadline watch (as the tests' own collectors), none.
        bare = ServiceMetrics(FakeStore(), lambda: 1, 1)
        bare.refresh()
        self.assertNotIn("netweir_serve_deadlines_total",
                         {name for name, _ in samples(generate_latest(
                             metrics_registry(bare)).decode())})


class LiveMetricsTests(CrawlTestCase):
    def scrape(self, daemon):
        status, headers, body = daemon.call("GET", "/metrics")
        self.assertEqual(status, 200, body)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version="))
        return samples(body.decode())

    def test_before_and_after_jobs_end_with_each_outcome(self):
        daemon = self.daemon("--max-jobs", "2")
        before = self.scrape(daemon)
        self.assertEqual(value(before, "netweir_serve_slots_free"), 2)
        self.assertFalse([k for k in before if k[0] == "netweir_serve_jobs_ended_total"])
        self.assertGreater(value(before, "process_resident_memory_bytes"), 0)

        finished = daemon.must_schedule("shop", "books")
        failed = daemon.must_schedule("shop", "failing")
        for jobid in (finished, failed):
            daemon.wait_state(jobid, "finished")
        slow = daemon.must_schedule("shop", "slow", delay="0.1")
        daemon.wait_state(slow, "running")
        during = self.scrape(daemon)
        node = daemon.get("daemonstatus.json")[1]["node_name"]
        self.assertEqual(value(during, "netweir_serve_jobs", state="running", project="shop",
                               node=node), 1)
        self.assertEqual(value(during, "netweir_serve_slots_free"), 1)
        daemon.post("cancel.json", {"project": "shop", "job": slow})
        daemon.wait_state(slow, "finished")
        after = self.scrape(daemon)
        for spider, outcome, reason in (("books", "finished", "exit 0"),
                                        ("failing", "failed", "exit 1"),
                                        ("slow", "cancelled", "cancel.json")):
            self.assertEqual(value(after, "netweir_serve_jobs_ended_total", project="shop",
                                   spider=spider, outcome=outcome, reason=reason), 1,
                             (spider, outcome))
            self.assertEqual(value(after, "netweir_serve_job_duration_seconds_count",
                                   project="shop", spider=spider), 1)
        self.assertEqual(value(after, "netweir_serve_job_items_total", project="shop",
                               spider="books"), 30)
        self.assertEqual(value(after, "netweir_serve_job_requests_total", project="shop",
                               spider="books", result="fetched"), 30)
        self.assertEqual(value(after, "netweir_serve_job_queue_wait_seconds_count",
                               project="shop"), 3)
        self.assertEqual(value(after, "netweir_serve_jobs", state="finished", project="shop",
                               node=node), 3)
        self.assertNotIn("netweir_serve_node_up", {name for name, _ in after})
        self.assertEqual(value(after, "netweir_serve_slots_free"), 2)
        self.assertFalse([k for k in after if any(v in (finished, failed, slow)
                                                  for _, v in k[1])])

    def test_behind_the_same_auth(self):
        daemon = self.daemon(env={"NETWEIR_SERVE_USERNAME": "me",
                                  "NETWEIR_SERVE_PASSWORD": "pw"}, auth=("me", "pw"))
        self.assertEqual(daemon.call("GET", "/metrics")[0], 200)
        daemon.auth = None
        self.assertEqual(daemon.call("GET", "/metrics")[0], 401)
        self.assertEqual(daemon.call("GET", "/events")[0], 401)
