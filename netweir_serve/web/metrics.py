"""GET /metrics: the service in Prometheus' text format.

Rendered on the reactor thread, through prometheus_client's
``generate_latest`` on a ``CollectorRegistry`` of the service's own (never
the global one): ``ServiceMetrics`` is a custom collector that reads what
the service knows, beside prometheus_client's process, platform and GC
collectors. prometheus_client's own ``MetricsResource`` is not used: it
is WSGI, and runs collectors on a thread.

What ``ServiceMetrics`` counts it hears from the job events and the
Timetable's changes, since the service started (counters start at 0 at
each start, as Prometheus expects of a restarted process): what this
process did, so that with several nodes sharing a job table the sum over
the nodes is the cluster's, each job counted by one node. The jobs in each
state, and a shared table's nodes, come from the table (the same on every
node), read again only when its version has moved on. No label carries a
job id: labels are project, spider, state, outcome, reason, result, kind
and node, all of them few (a reason is a code: ``exit N`` takes the
crawl's few exit statuses).
"""

from collections import defaultdict

# prometheus_client is not imported here: it is about 1 MB of an idle
# daemon's memory (it brings wsgiref, gzip, ssl and its own thirty modules),
# and nothing needs it before the first scrape. It is imported where a
# render uses it: the first /metrics answer pays its import once (about
# 10 ms), and no job event ever does (ServiceMetrics only counts them).
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.resource import Resource

from .. import __version__
from ..health.checks import DEGRADED
from ..jobs.events import ENDED, QUEUED, RECORDED_LATE, STARTED
from ..names import fold
from ..watching.builds import ListingBuilds
from ..watching.lag import LAG_BUCKETS
from .answer import write_error
from .deferred import render_result
from .pages import refuse_leaf

log = Logger()

PREFIX = "netweir_serve"

# A schedule's counts (ScheduleRecord fields) that /metrics adds up by
# project, and the ServiceMetrics counter of each.
_SCHEDULE_COUNTS = {"skipped": "skips", "buffered": "buffers", "caught_up": "catch_ups"}

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
        from prometheus_client.core import HistogramMetricFamily  # at a render (above)

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

    ``store`` is the IJobStore (its ``tally()`` and ``version``);
    ``slots_free()`` and ``max_jobs`` say how much room there is;
    ``streams()`` how many /events streams are open (or None); ``nodes()``,
    for a shared table, IClusterStore.nodes (or None); ``listing_builds``
    (watching.builds.ListingBuilds) counts the listings built from the
    table, this collector's own reads included; ``reactor_lag``, a
    Histogram with no labels that watching.lag.ReactorLag fills;
    ``deadlines``, {kind: n} of the deadlines that fired (the deadline
    watch's ``fired``, which it keeps current)."""

    def __init__(self, store, slots_free, max_jobs, streams=None, nodes=None,
                 listing_builds=None, reactor_lag=None, deadlines=None):
        self._store = store
        self._listing_builds = listing_builds if listing_builds is not None else ListingBuilds()
        self._built = self._listing_builds.counter("/metrics")
        self.reactor_lag = reactor_lag if reactor_lag is not None else Histogram(LAG_BUCKETS)
        self._slots_free = slots_free
        self._max_jobs = max_jobs
        self._streams = streams
        self._nodes = nodes
        self._deadlines = deadlines
        # watching.lag.ReactorLag.take_largest, once the service has one.
        self.largest_lag = None
        self._by_state = {}
        self._node_up = {}
        self._version = None
        self.ended = defaultdict(int)            # (project, spider, outcome, reason)
        self.items = defaultdict(int)            # (project, spider)
        self.degraded = defaultdict(int)         # (project, spider)
        self.requests = defaultdict(int)         # (project, spider, result)
        self.duration = Histogram()              # (project, spider)
        self.queue_wait = Histogram()            # (project,)
        self.firings = defaultdict(int)          # (project,)
        self.retries = defaultdict(int)          # (project, spider)
        self.skips = defaultdict(int)            # (project,)
        self.buffers = defaultdict(int)          # (project,)
        self.catch_ups = defaultdict(int)        # (project,)
        self.pauses = defaultdict(int)           # (project,): pause_after reached
        # {count: {schedule key: its count}}: what each had when last seen,
        # so the counters grow by what changed here.
        self._seen = {count: {} for count in _SCHEDULE_COUNTS}

    # -- hearing -------------------------------------------------------------------

    def subscribe(self, events):
        return events.subscribe(self.job_heard, kinds=(QUEUED, STARTED, ENDED, RECORDED_LATE))

    def job_heard(self, kind, record):
        if kind == QUEUED:
            if record.attempt > 1:
                # A retry, queued by an end recorded here (with it, in one
                # transaction: counted once in the cluster).
                self.retries[(record.project, record.spider)] += 1
                return
            # Queued here: every node's timer fires the schedule, and the
            # one whose job got in counts it.
            if record.schedule is not None:
                self.firings[(record.project,)] += 1
            return
        if kind == STARTED:
            if record.start_time is not None and record.created:
                self.queue_wait.observe((record.project,),
                                        max(0.0, record.start_time - record.created))
            return
        if record.paused_schedule is not None:
            # Paused by this end, in its transaction: counted once.
            self.pauses[(record.project,)] += 1
        key = (record.project, record.spider)
        if kind == RECORDED_LATE:
            # Its end was counted when it was announced; its health, known
            # only now, is counted now.
            if record.health == DEGRADED:
                self.degraded[key] += 1
            return
        self.ended[key + (record.outcome or "unknown", record.reason or "")] += 1
        if record.health == DEGRADED:
            self.degraded[key] += 1
        if record.start_time is not None and record.end_time is not None:
            self.duration.observe(key, max(0.0, record.end_time - record.start_time))
        stats = record.stats or {}
        self.items[key] += _number(stats.get("items"))
        self.requests[key + ("fetched",)] += _number(stats.get("fetched"))
        self.requests[key + ("failed",)] += _number(stats.get("failed"))

    def seed_schedules(self, records):
        """What the schedules had skipped, buffered and caught up before
        the service started, so that only what happens from now on is
        counted."""
        for record in records:
            for count, seen in self._seen.items():
                seen.setdefault(fold(record.name), getattr(record, count))

    def schedule_changed(self, record):
        """A schedule changed here (its firings are counted as their jobs
        are queued)."""
        key = fold(record.name)
        for count, seen in self._seen.items():
            before, now = seen.get(key, 0), getattr(record, count)
            if now > before:
                getattr(self, _SCHEDULE_COUNTS[count])[(record.project,)] += now - before
            seen[key] = max(before, now)

    # -- rendering -----------------------------------------------------------------

    def refresh(self):
        """Deferred that fires once the jobs by state (and the nodes) are
        current."""
        version = self._store.version
        if version == self._version:
            return defer.succeed(None)
        self._built()
        reads = [self._store.tally()]
        if self._nodes is not None:
            reads.append(self._nodes())
        read = defer.gatherResults(reads, consumeErrors=True)
        read.addErrback(lambda f: f.value.subFailure)
        return read.addCallback(self._count, version)

    def _count(self, read, version):
        counts = defaultdict(int)
        for (state, project, node), n in read[0].items():
            # The node that runs or ran it; a pending job has none yet.
            counts[(state, project, node or "")] += n
        if len(read) > 1:
            self._node_up = {node["name"]: 0 if node["dead"] else 1 for node in read[1]}
        self._by_state, self._version = dict(counts), version

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily  # at a render (above)

        p = PREFIX
        info = GaugeMetricFamily(f"{p}_info", "netweir-serve's version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        jobs = GaugeMetricFamily(f"{p}_jobs", "Jobs in the job table, by state, project and"
                                 " node (none while pending)", labels=["state", "project", "node"])
        for labels, n in sorted(self._by_state.items()):
            jobs.add_metric(list(labels), n)
        yield jobs
        if self._nodes is not None:
            up = GaugeMetricFamily(f"{p}_node_up", "Nodes sharing the job table: 1 while live,"
                                   " 0 once declared dead", labels=["node"])
            for name, n in sorted(self._node_up.items()):
                up.add_metric([name], n)
            yield up
        yield GaugeMetricFamily(f"{p}_slots_free", "Jobs that could start now",
                                value=self._slots_free())
        yield GaugeMetricFamily(f"{p}_max_jobs", "Jobs that run at once at most (--max-jobs)",
                                value=self._max_jobs)
        if self._streams is not None:
            yield GaugeMetricFamily(f"{p}_event_streams", "Open /events streams",
                                    value=self._streams())
        yield self._counter(f"{p}_jobs_ended", "Jobs ended since the service started, by"
                            " outcome and reason", ["project", "spider", "outcome", "reason"],
                            self.ended)
        # A counter of its own rather than a label of jobs_ended: the
        # series scrapers already keep stay as they were.
        yield self._counter(f"{p}_jobs_degraded", "Jobs ended finished but degraded (below"
                            " their run health checks) since the service started",
                            ["project", "spider"], self.degraded)
        if self._deadlines is not None:
            yield self._counter(f"{p}_deadlines", "Deadlines that fired since the service"
                                " started: jobs cancelled at their timeout or stall, pending"
                                " jobs dropped at their expiry", ["kind"],
                                {(kind,): n for kind, n in self._deadlines.items()})
        yield self.duration.family(f"{p}_job_duration_seconds", "Time from a job's start to"
                                   " its end", ["project", "spider"])
        yield self.queue_wait.family(f"{p}_job_queue_wait_seconds", "Time a job waited in"
                                     " the queue before it started", ["project"])
        yield self._counter(f"{p}_job_items", "Items of the jobs ended since the service"
                            " started (their final stats)", ["project", "spider"], self.items)
        yield self._counter(f"{p}_job_requests", "Requests of the jobs ended since the"
                            " service started (their final stats: fetched, failed)",
                            ["project", "spider", "result"], self.requests)
        yield self._counter(f"{p}_retries", "Retries queued since the service started (a"
                            " job's end its policy retries)", ["project", "spider"],
                            self.retries)
        yield self._counter(f"{p}_schedule_firings", "Jobs queued by recurring schedules",
                            ["project"], self.firings)
        yield self._counter(f"{p}_schedule_skips", "Runs of recurring schedules skipped"
                            " (overlap)", ["project"], self.skips)
        yield self._counter(f"{p}_schedule_buffers", "Jobs of recurring schedules queued"
                            " behind a job of theirs that waited or ran (overlap"
                            " buffer_one, buffer_all)", ["project"], self.buffers)
        yield self._counter(f"{p}_schedule_catch_ups", "Runs of recurring schedules made"
                            " up for after they were missed (misfire=once)", ["project"],
                            self.catch_ups)
        yield self._counter(f"{p}_schedule_pauses", "Recurring schedules that paused"
                            " themselves (pause_after runs in a row failed or degraded)",
                            ["project"], self.pauses)
        yield self._counter(f"{p}_listing_builds", "Listings built from the job table"
                            " rather than answered from a cache, by endpoint", ["endpoint"],
                            {(name,): n for name, n in self._listing_builds.counts.items()})
        yield self.reactor_lag.family(f"{p}_reactor_lag_seconds", "How late a timer asked"
                                      " to run every 100 ms ran: the reactor's stalls", [])
        if self.largest_lag is not None:
            yield GaugeMetricFamily(f"{p}_reactor_lag_largest_seconds", "The largest of"
                                    " those since the last render of /metrics: the worst"
                                    " stall between two scrapes", value=self.largest_lag())

    @staticmethod
    def _counter(name, documentation, label_names, values):
        from prometheus_client.core import CounterMetricFamily  # at a render (above)

        family = CounterMetricFamily(name, documentation, labels=label_names)
        for labels, n in sorted(values.items()):
            family.add_metric(list(labels), n)
        return family


def metrics_registry(collector):
    """A registry of the service's own: ``collector`` and the process,
    platform and garbage collector metrics of prometheus_client."""
    # Imported at the first render (Metrics._write), or by a test.
    from prometheus_client import CollectorRegistry
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class Metrics(Resource):
    """The /metrics resource; without a ``registry``, it makes
    ``metrics_registry(collector)`` at the first scrape."""

    isLeaf = True

    def __init__(self, collector, registry=None):
        super().__init__()
        self.collector = collector
        self.registry = registry

    def render(self, request):
        refused = refuse_leaf(request)
        if refused is not None:
            return refused
        return render_result(request, self.collector.refresh(),
                             lambda _: self._write(request), lambda f: self._failed(f, request))

    def _write(self, request):
        # The first scrape imports prometheus_client (see the top).
        from prometheus_client import generate_latest

        if self.registry is None:
            self.registry = metrics_registry(self.collector)
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
