"""GET /metrics: the service in Prometheus' text format.

Rendered on the reactor thread, through prometheus_client's
``generate_latest`` on a ``CollectorRegistry`` of the service's own (never
the global one): ``ServiceMetrics`` is a custom collector that reads what
the service knows, beside prometheus_client's process, platform and GC
collectors. prometheus_client's own ``MetricsResource`` is not used: it
is WSGI, and runs collectors on a thread.

What ``ServiceMetrics`` counts it hears from the job events and the
Timetable's changes, since the service started (counters start at 0 at
each start, as Prometheus expects of a restarted process). The jobs in
each state come from the job table, read again only when its version has
moved on. No label carries a job id: labels are project, spider, state,
outcome and result, all of them few.
"""

from collections import defaultdict

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.resource import Resource

from .. import __version__
from ..jobs.events import ENDED, STARTED
from ..jobs.records import STATES
from ..names import fold
from .answer import write_error
from .deferred import render_result
from .pages import refuse_method

log = Logger()

PREFIX = "netweir_serve"

# The text format generate_latest writes, by the name every scraper knows
# (Prometheus 2 and 3, VictoriaMetrics, the OpenTelemetry collector);
# prometheus_client's CONTENT_TYPE_LATEST says version=1.0.0 since 0.22.
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

# From a second to a day: a trivial crawl, a small one, hourly jobs, nightly ones.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200,
                    86400)


class Histogram:
    """Observations in buckets, per label values."""

    def __init__(self, bounds=DURATION_BUCKETS):
        self.bounds = tuple(float(b) for b in bounds)
        self._series = {}

    def observe(self, labels, value):
        counts, total = self._series.get(labels, ([0] * (len(self.bounds) + 1), 0.0))
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        self._series[labels] = (counts, total + value)

    def family(self, name, documentation, label_names):
        family = HistogramMetricFamily(name, documentation, labels=label_names)
        for labels, (counts, total) in sorted(self._series.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(self.bounds + (float("inf"),), counts):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(labels), buckets, total)
        return family


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


class ServiceMetrics:
    """The custom collector, and the subscriber that feeds it.

    ``store`` is the IJobStore (its ``jobs()`` and ``version``);
    ``slots_free()`` and ``max_jobs`` say how much room there is;
    ``streams()`` how many /events streams are open (or None)."""

    def __init__(self, store, slots_free, max_jobs, streams=None):
        self._store = store
        self._slots_free = slots_free
        self._max_jobs = max_jobs
        self._streams = streams
        self._by_state = {}
        self._version = None
        self.ended = defaultdict(int)            # (project, spider, outcome)
        self.items = defaultdict(int)            # (project, spider)
        self.requests = defaultdict(int)         # (project, spider, result)
        self.duration = Histogram()              # (project, spider)
        self.queue_wait = Histogram()            # (project,)
        self.firings = defaultdict(int)          # (project,)
        self.skips = defaultdict(int)            # (project,)
        self._schedules = {}                     # schedule key: (runs, skipped)

    # -- hearing -------------------------------------------------------------------

    def subscribe(self, events):
        return events.subscribe(self.job_heard, kinds=(STARTED, ENDED))

    def job_heard(self, kind, record):
        if kind == STARTED:
            if record.start_time is not None and record.created:
                self.queue_wait.observe((record.project,),
                                        max(0.0, record.start_time - record.created))
            return
        key = (record.project, record.spider)
        self.ended[key + (record.outcome or "unknown",)] += 1
        if record.start_time is not None and record.end_time is not None:
            self.duration.observe(key, max(0.0, record.end_time - record.start_time))
        stats = record.stats or {}
        self.items[key] += _number(stats.get("items"))
        self.requests[key + ("fetched",)] += _number(stats.get("fetched"))
        self.requests[key + ("failed",)] += _number(stats.get("failed"))

    def seed_schedules(self, records):
        """What the schedules had run and skipped before the service
        started, so that only what happens from now on is counted."""
        for record in records:
            self._schedules.setdefault(fold(record.name), (record.runs, record.skipped))

    def schedule_changed(self, record):
        key = fold(record.name)
        runs, skipped = self._schedules.get(key, (0, 0))
        if record.runs > runs:
            self.firings[(record.project,)] += record.runs - runs
        if record.skipped > skipped:
            self.skips[(record.project,)] += record.skipped - skipped
        self._schedules[key] = (max(runs, record.runs), max(skipped, record.skipped))

    # -- rendering -----------------------------------------------------------------

    def refresh(self):
        """Deferred that fires once the jobs by state are current."""
        version = self._store.version
        if version == self._version:
            return defer.succeed(None)
        return self._store.jobs().addCallback(self._count, version)

    def _count(self, jobs, version):
        counts = defaultdict(int)
        for state, records in zip(STATES, jobs):
            for record in records:
                counts[(state, record.project)] += 1
        self._by_state, self._version = dict(counts), version

    def collect(self):
        p = PREFIX
        info = GaugeMetricFamily(f"{p}_info", "netweir-serve's version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        jobs = GaugeMetricFamily(f"{p}_jobs", "Jobs in the job table, by state and project",
                                 labels=["state", "project"])
        for (state, project), n in sorted(self._by_state.items()):
            jobs.add_metric([state, project], n)
        yield jobs
        yield GaugeMetricFamily(f"{p}_slots_free", "Jobs that could start now",
                                value=self._slots_free())
        yield GaugeMetricFamily(f"{p}_max_jobs", "Jobs that run at once at most (--max-jobs)",
                                value=self._max_jobs)
        if self._streams is not None:
            yield GaugeMetricFamily(f"{p}_event_streams", "Open /events streams",
                                    value=self._streams())
        yield self._counter(f"{p}_jobs_ended", "Jobs ended since the service started, by"
                            " outcome", ["project", "spider", "outcome"], self.ended)
        yield self.duration.family(f"{p}_job_duration_seconds", "Time from a job's start to"
                                   " its end", ["project", "spider"])
        yield self.queue_wait.family(f"{p}_job_queue_wait_seconds", "Time a job waited in"
                                     " the queue before it started", ["project"])
        yield self._counter(f"{p}_job_items", "Items of the jobs ended since the service"
                            " started (their final stats)", ["project", "spider"], self.items)
        yield self._counter(f"{p}_job_requests", "Requests of the jobs ended since the"
                            " service started (their final stats: fetched, failed)",
                            ["project", "spider", "result"], self.requests)
        yield self._counter(f"{p}_schedule_firings", "Jobs queued by recurring schedules",
                            ["project"], self.firings)
        yield self._counter(f"{p}_schedule_skips", "Runs of recurring schedules skipped"
                            " (overlap)", ["project"], self.skips)

    @staticmethod
    def _counter(name, documentation, label_names, values):
        family = CounterMetricFamily(name, documentation, labels=label_names)
        for labels, n in sorted(values.items()):
            family.add_metric(list(labels), n)
        return family


def metrics_registry(collector):
    """A registry of the service's own: ``collector`` and the process,
    platform and garbage collector metrics of prometheus_client."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class Metrics(Resource):
    """The /metrics resource."""

    isLeaf = True

    def __init__(self, collector, registry):
        super().__init__()
        self.collector = collector
        self.registry = registry

    def render(self, request):
        if request.postpath:
            return write_error(request, 404, f"no such endpoint: {request.path.decode('latin-1')}")
        refused = refuse_method(request)
        if refused is not None:
            return refused
        return render_result(request, self.collector.refresh(),
                             lambda _: self._write(request), lambda f: self._failed(f, request))

    def _write(self, request):
        body = generate_latest(self.registry)
        request.setHeader(b"content-type", CONTENT_TYPE)
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"content-length", str(len(body)).encode("ascii"))
        return b"" if request.method == b"HEAD" else body

    @staticmethod
    def _failed(failure, request):
        log.failure("could not render /metrics", failure)
        return write_error(request, 503, "the job table could not be read; see the"
                           " service's log")
