"""makeService: every part of the daemon built and connected in one place."""

import os
import signal
import sqlite3
import threading
from dataclasses import dataclass

from twisted.application import service
from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server

from . import _proctree
from .clocks import WallClock
from .cluster.jobs import ClusterJobs
from .cluster.membership import NodeMembership
from .dirlock import DirectoryUnusable, lock_directory
from .jobs.adoption import end_processes_of_lost_jobs, settle_left_running
from .jobs.core import build_job_core
from .jobs.events import CHANGED, ENDED, QUEUED, RECORDED_LATE, STARTED
from .jobs.history import StatsHistory
from .jobs.notify import Notifier
from .jobs.process import job_environment
from .jobs.submit import JobSubmitter
from .jobs.warm.starter import WarmStarter
from .listening import LOOPBACK, PUBLIC, ListenError, adopted_reach, open_endpoint
from .options import exposed_refusal
from .reliability.cgroups import JobGroups
from .jobs.deadlines import Deadlines
from .schedules.chains import Chains
from .schedules.timetable import Timetable
from .spiders.reader import SpiderReader
from .store import open_store
from .store.migrations import NewerSchema
from .store.records import NodeNameTaken, StoreError
from .watching.builds import ListingBuilds
from .watching.lag import ReactorLag, probe_interval
from .web.answer import name_node
from .web.api import Api
from .web.audit import AuditLog
from .web.elsewhere import Owners
from .web.events import EventHub, Events
from .access.throttle import LoginThrottle
from .access.tokens import KdfPool, TokenBook, TokenChecker
from .web.guard import GuardedResource
from .web.limits import ConnectionCaps, limit
from .web.listings import listers
from .web.liststats import LogParserStats
from .web.metrics import Metrics, ServiceMetrics
from .web.pages import site_pages
from .web.request import ServeRequest
from .web.root import Root
from .web.views import format_time, job_entry

# --keep-audit is in days.
DAY = 86400.0

log = Logger()

# Seconds between tries to settle the last run's jobs when the table
# cannot be written at start.
SETTLE_RETRY_SECONDS = 5.0

@dataclass
class Listening:
    """One endpoint the service listens on: its ``listener`` (the checked
    description), the ``endpoint`` and the ``factory`` to listen with, the
    ``tls`` files of an ssl: endpoint (else None), and its ``reach``."""

    listener: object
    endpoint: object
    factory: object
    tls: object
    reach: str
    port: object = None

    def shown(self):
        """Where it listens, for the log: a URL, or the socket's path."""
        address = self.port.getHost() if self.port is not None else None
        if getattr(address, "port", None) is None:
            name = getattr(address, "name", None)
            return f"unix:{name.decode() if isinstance(name, bytes) else name}" if name \
                else self.listener.shown()
        host = f"[{address.host}]" if ":" in address.host else address.host
        return f"{self.listener.scheme}://{host}:{address.port}/"


class CannotListen(Exception):
    """An endpoint could not be listened on; the message says which and why."""


class QuietSite(server.Site):
    """A Site that logs each request at debug level (when ``log_requests``),
    never its headers."""

    noisy = False
    # Off unless debug logging is on: building an event the filter then
    # drops costs about a tenth of answering daemonstatus.json.
    log_requests = False
    # The proxies whose X-Forwarded-For names the client (--trusted-proxy:
    # web/audit.client_address), each as web/audit.same_address gives it.
    trusted_proxies = frozenset()

    def log(self, request):
        if not self.log_requests:
            return
        log.debug("{method} {path} {code}", method=request.method.decode("latin-1"),
                  path=request.path.decode("latin-1"), code=request.code)


class ServeService(service.Service):
    """The daemon: on start, settles what the last run left and starts jobs;
    on stop, stops listening, cancels running jobs and waits for them."""

    def __init__(self, config, reactor, lock, store, launcher, poller, pruner, reader,
                 timetable, listening):
        self.config = config
        self.reactor = reactor
        self.lock = lock
        self.store = store
        self.launcher = launcher
        self.poller = poller
        self.pruner = pruner
        self.reader = reader
        self.timetable = timetable
        self.listening = list(listening)
        self.started = None
        self._signals = 0
        self._handing_over = False
        self._settle_retry = None
        # Set (by makeService) when the job table is shared with other nodes.
        self.membership = None
        # watching.lag.ReactorLag, set by makeService: runs while the service does.
        self.reactor_lag = None
        # jobs.deadlines.Deadlines, set by makeService: watches while
        # the service runs.
        self.deadlines = None
        # jobs.warm.starter.WarmStarter, set by makeService: its warm
        # process runs while the service does (None: every start cold).
        self.starter = None
        # The time of day (clocks.py); makeService sets the one it gave the parts.
        self.wall = reactor
        # schedules.chains.Chains, set by makeService: makes the chains'
        # firings once the schedules are loaded.
        self.chains = None
        # Why the service could not start, once it has stopped for it.
        self.failure = None

    def node_url(self):
        """Where the other nodes reach this one when --node-url is not given:
        its first TCP or TLS listening address, as bound (give --node-url
        with a name other machines resolve when it listens on all
        interfaces)."""
        for place in self.listening:
            address = place.port.getHost() if place.port is not None else None
            if getattr(address, "port", None) is None:
                continue
            host = address.host
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            host = f"[{host}]" if ":" in host else host
            return f"{place.listener.scheme}://{host}:{address.port}"
        return None

    def privilegedStartService(self):
        # No process of the same user may read this one's memory or
        # environment (the password in NETWEIR_SERVE_PASSWORD): not even
        # the spiders it runs.
        _proctree.make_undumpable()
        # Binding first, so a port in use fails before any job starts.
        for place in self.listening:
            try:
                place.port = _listen_now(place)
            except Exception as e:
                for opened in self.listening:
                    if opened.port is not None:
                        opened.port.stopListening()
                where = (f"{self.config.bind}:{self.config.port}" if not self.config.listeners
                         else place.listener.description)
                raise CannotListen(f"cannot listen on {where}:"
                                   f" {getattr(e, 'socketError', None) or e}") from None
        super().privilegedStartService()

    def startService(self):
        super().startService()
        if self.reactor_lag is not None:
            self.reactor_lag.start()
        self.started = self._settle_then_start()

    @defer.inlineCallbacks
    def _settle_left_running(self):
        """Adopts or ends the jobs the last run left running; tried again
        every few seconds while the table cannot be written (their locks
        and slots would otherwise be held all this run)."""
        # A table of this service's alone: its running jobs are all its own,
        # whatever host name claimed them (the host may have been renamed).
        node = self.config.node if self.store.shared else None
        try:
            if self.store.shared:
                yield end_processes_of_lost_jobs(self.store, node, self.config.directory)
            adopted, _ = yield settle_left_running(
                self.store, self.launcher, self.config.directory, node, self.wall)
        except Exception:
            log.failure("could not settle the jobs the last run left running; trying"
                        " again in {s:g} s", s=SETTLE_RETRY_SECONDS)
            self._settle_retry = self.reactor.callLater(
                SETTLE_RETRY_SECONDS, self._settle_left_running)
        else:
            if adopted:
                log.info("adopted {n} job(s) the last run left running", n=len(adopted))

    def _job_table(self):
        """The job table as the start-up line names it: with a shared one,
        which node this is, since every node's log looks alike otherwise."""
        if self.membership is None:
            return self.store.location
        return (f"{self.store.location}, shared, as node {self.membership.name}"
                f" at {self.membership.url}")

    @defer.inlineCallbacks
    def _settle_then_start(self):
        config = self.config
        if self.membership is not None:
            try:
                yield self.membership.start()
            except NodeNameTaken as e:
                # Another live node has the name: this one must not take
                # its jobs for its own. Nothing has started yet.
                self.failure = str(e)
                log.error("{why}", why=self.failure)
                self.reactor.stop()
                return
        yield self._settle_left_running()
        if self.deadlines is not None:
            yield self.deadlines.start()
        yield self.pruner.prune_now()
        log.info("netweir-serve listening on {places} with {dir}; job table {table};"
                 " projects: {projects}; {max_jobs} job(s) at once",
                 places=", ".join(p.shown() for p in self.listening), dir=config.directory,
                 table=self._job_table(),
                 projects=", ".join(f"{p.name}={p.path}" for p in config.projects) or "none",
                 max_jobs=config.max_jobs)
        for warning in config.warnings([p.reach for p in self.listening]):
            log.warn("{warning}", warning=warning)
        # Importing netweir in the warm reader now, not on the first request,
        # and in the warm process jobs start from.
        self.reader.start()
        if self.starter is not None:
            self.starter.start()
        self.poller.start()
        try:
            yield self.timetable.start()
        except Exception:
            log.failure("could not start the recurring schedules")
        if self.chains is not None:
            # Firings owed from before (a kill between an end and its
            # chain's job) are made now; later ones as ends come.
            yield self.chains.start()

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        yield defer.gatherResults([defer.maybeDeferred(p.port.stopListening)
                                   for p in self.listening if p.port is not None])
        if self.started is not None:
            yield self.started
        if self._settle_retry is not None and self._settle_retry.active():
            self._settle_retry.cancel()
        self.timetable.stop()
        if self.chains is not None:
            yield self.chains.stop()
        if self.membership is not None:
            self.membership.stop()
        if self.reactor_lag is not None:
            self.reactor_lag.stop()
        if self.deadlines is not None:
            # Stopping cancels the running jobs itself (or hands them over).
            self.deadlines.stop()
        yield self.poller.stop()
        self.pruner.stop()
        running = self.launcher.running_count()
        if self._handing_over:
            yield self.launcher.hand_over()
        else:
            if running:
                log.info("stopping: cancelling {n} running job(s) and waiting for them",
                         n=running)
            yield self.launcher.stop()
        if self.starter is not None:
            # After the launcher: the ends of the jobs it started come
            # through it. Jobs handed over run on without it.
            yield self.starter.stop()
        yield self.reader.stop()
        yield self.store.close()
        if self._handing_over:
            log.info("netweir-serve stopped for a handover: {n} running job(s) left running"
                     " for the next start on {dir} to adopt", n=running,
                     dir=self.config.directory)
        else:
            log.info("netweir-serve stopped; waiting jobs stay queued for the next start")

    def install_signal_handlers(self):
        """Ctrl-C or SIGTERM once stops the service the careful way (jobs
        cancelled and awaited); again while it waits, kills the jobs at
        once so none is left unrecorded. SIGUSR1 stops it for a handover:
        running jobs go on running, for the next start to adopt. Call once
        the reactor runs."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_stop_signal)
        signal.signal(signal.SIGUSR1, self._on_handover_signal)
        signal.signal(signal.SIGHUP, self._on_reload_signal)

    def _on_reload_signal(self, signum, frame):
        self.reactor.callFromThread(self.reload_tls)

    def reload_tls(self):
        """Reads every ssl: endpoint's key and certificate files again, for
        the connections that follow (SIGHUP); a file that does not load is
        logged and the one before kept. Returns how many reloaded."""
        places = [p for p in self.listening if p.tls is not None]
        if not places:
            log.info("SIGHUP: no ssl: endpoint, nothing to reload")
        return sum(bool(p.tls.reload()) for p in places)

    def _on_stop_signal(self, signum, frame):
        self._signals += 1
        if self._signals == 1:
            self.reactor.callFromThread(self.reactor.stop)
        elif not self._handing_over:
            self.reactor.callFromThread(self._kill_now)

    def _on_handover_signal(self, signum, frame):
        if self._signals:
            return  # already stopping
        self._signals += 1
        self._handing_over = True
        self.reactor.callFromThread(self._log_handover)
        self.reactor.callFromThread(self.reactor.stop)

    def _log_handover(self):
        log.info("SIGUSR1: stopping for a handover; running jobs keep running")

    def _kill_now(self):
        log.warn("stop asked again: killing running jobs now")
        self.launcher.kill_all()


def _open_store(config, reactor):
    try:
        return open_store(config.directory, reactor, url=config.jobs_db, reactor=reactor)
    except (StoreError, ValueError) as e:
        # The PostgreSQL server does not answer, psycopg is missing.
        raise DirectoryUnusable(f"cannot use --jobs-db: {getattr(e, 'message', e)}") from None
    except (sqlite3.Error, NewerSchema) as e:
        raise DirectoryUnusable(
            f"cannot use --dir {config.directory}: its job table"
            f" {os.path.join(config.directory, 'jobs.db')} cannot be opened: {e}") from None


def makeService(config, reactor, wall=None):
    """The whole daemon for ``config`` (a ServeConfig), on ``reactor``.

    Locks ``config.directory`` first; raises DirectoryBusy if another
    service holds it, DirectoryUnusable if it or its job table cannot be
    used, before anything in it is touched."""
    lock = lock_directory(config.directory)
    # Answers say which node answered: --node-name (the host name by default).
    name_node(config.node)
    store = _open_store(config, reactor)
    # The reactor's clock times intervals (the entry points make it
    # monotonic); what is recorded or shown as a time of day reads this.
    wall = WallClock() if wall is None else wall
    # What this machine lets jobs be limited by (memory=, cpu=): read once.
    groups = JobGroups.detect(config.directory)
    if groups.refusals:
        # Said once, at start; a job asking for such a limit is refused.
        log.info("job limits: {limits}", limits=groups.describe())
    # The environment of every job, and of the spider files the reader
    # loads (they may read it as they load): the service's, without its
    # secrets (jobs.process.job_environment).
    job_env = job_environment(os.environ, secrets=config.secrets())
    # Jobs' parents forked from a warm process (jobs/warm), two at once
    # at most before the next spare is forked.
    starter = (WarmStarter(reactor, config.python, job_env, config.directory,
                           spares=min(2, config.max_jobs)) if config.warm_starts else None)
    core = build_job_core(store, reactor, config.projects, config.directory, config.max_jobs,
                          config.node, wall=wall, keep=config.keep,
                          keep_audit=config.keep_audit * DAY, python=config.python,
                          grace=config.grace, stats_interval=config.stats_interval,
                          poll_interval=config.poll_interval,
                          max_per_spider=config.max_jobs_per_spider, groups=groups,
                          environ=job_env, starter=starter)
    reader = SpiderReader(reactor, python=config.python, timeout=config.reader_timeout,
                          env=job_env, wall=wall)
    submitter = JobSubmitter(config.projects, store, core.scheduler, reader, config.directory,
                             rules=config.policies, enforceable=groups.refusal)
    def serves(project):
        return config.projects.get(project) is not None

    deadlines = Deadlines(reactor, wall, core.launcher, core.scheduler.expire, serves=serves,
                          store=store)
    _hear_deadlines(core.events, deadlines)
    watching = _watching(config, reactor, store, core, wall, deadlines)
    timetable = Timetable(store, submitter, reactor, local_zone=config.local_zone,
                          on_change=watching.schedule_changed,
                          on_change_elsewhere=watching.hub.schedule_changed, wall=wall,
                          cancel=core.scheduler.cancel)
    _hear_pauses(core.events, timetable)
    watching.show_schedules(timetable)
    root = _resource_tree(config, reactor, store, core, reader, submitter, timetable,
                          watching, wall, groups)
    tokens = _tokens(store, reactor, wall)
    # An /events stream of a token revoked meanwhile ends within a second.
    watching.hub.admission = tokens[0].still_admits
    serve = ServeService(config, reactor, lock, store, core.launcher, core.poller, core.pruner,
                         reader, timetable, _listening(config, reactor, root, tokens))
    serve.wall = wall
    serve.deadlines = deadlines
    serve.starter = starter
    serve.chains = Chains(store, timetable, reactor, serves)
    core.events.subscribe(lambda kind, record: serve.chains.ended(record),
                          kinds=(ENDED, RECORDED_LATE))
    if store.shared:
        serve.membership = NodeMembership(store, core.launcher, core.poller, timetable, reactor,
                                          config.node, config.node_url or serve.node_url,
                                          config.node_timeout,
                                          projects=config.projects.names(), wall=wall)
        serve.membership.subscribe(core.events)
        core.poller.may_claim = serve.membership.may_claim
    serve.reactor_lag = ReactorLag(reactor, watching.metrics.reactor_lag,
                                   interval=probe_interval(os.environ))
    watching.metrics.largest_lag = serve.reactor_lag.take_largest
    return serve


@dataclass
class _Watching:
    """The parts that watch jobs for people: the stats over time, the
    /events hub, /metrics and the count of listings built."""

    history: StatsHistory
    hub: EventHub
    metrics: ServiceMetrics
    listing_builds: ListingBuilds

    def schedule_changed(self, record):
        self.hub.schedule_changed(record)
        self.metrics.schedule_changed(record)

    def show_schedules(self, timetable):
        self.hub.show_schedules(timetable)
        timetable.schedules().addCallbacks(
            self.metrics.seed_schedules,
            lambda f: log.failure("could not read the schedules for /metrics", f))


def _hear_pauses(events, timetable):
    """A job's end that paused its schedule (pause_after, written by the
    store in the end's transaction) stops the schedule's timer here; other
    nodes hear the schedule's change as any other (a SCHEDULE notice)."""
    def ended(kind, record):
        if record.paused_schedule is not None:
            timetable.heard_paused(record.paused_schedule)

    events.subscribe(ended, kinds=(ENDED, RECORDED_LATE))


def _hear_deadlines(events, deadlines):
    """The deadline watch hears this node's job events, and (a subscriber
    of the other nodes' too) the pending jobs every node queues: a local
    event comes to both, which the watch takes twice harmlessly."""
    heard = {QUEUED: deadlines.queued, STARTED: deadlines.started,
             CHANGED: deadlines.changed, ENDED: deadlines.ended}
    events.subscribe(lambda kind, record: heard[kind](record))
    events.subscribe(lambda kind, record: deadlines.elsewhere(record),
                     kinds=(QUEUED, STARTED, ENDED), elsewhere=True)


def _watching(config, reactor, store, core, wall, deadlines):
    """The watching parts, each subscribed to the job events; --notify too."""
    launcher = core.launcher
    history = StatsHistory(config.directory, launcher.running_stats, wall)
    history.subscribe(core.events)
    hub = EventHub(reactor, launcher.running_stats)
    hub.subscribe(core.events)
    if store.shared:
        # The other nodes' jobs as job events too, read while /events is watched.
        # Queued jobs are read whoever watches: the deadline watch expires
        # the pending jobs of every node (jobs/deadlines.py).
        ClusterJobs(store, core.events, config.node, wanted=hub.streams,
                    resync=lambda: _resync(hub, deadlines), always=(QUEUED,)).start()
    listing_builds = ListingBuilds()
    metrics = ServiceMetrics(store, launcher.slots_free, config.max_jobs, hub.streams,
                             nodes=store.nodes if store.shared else None,
                             listing_builds=listing_builds, deadlines=deadlines.fired)
    metrics.subscribe(core.events)
    Notifier(reactor, config.notify, job_entry, config.node, outcomes=config.notify_on,
             secret=config.notify_secret, timeout=config.notify_timeout,
             show_time=format_time).subscribe(core.events)
    return _Watching(history, hub, metrics, listing_builds)


def _resync(hub, deadlines):
    """Changes of other nodes may have gone unheard (LISTEN was lost)."""
    if hub.streams():
        hub.resync()
    deadlines.resync()


def site_resources(api, watching):
    """{path segment: resource} of the pages and streams beside the API
    (every path the root serves is in access.endpoints' table)."""
    return {**site_pages(api), b"events": Events(watching.hub),
            b"metrics": Metrics(watching.metrics)}


def _resource_tree(config, reactor, store, core, reader, submitter, timetable, watching,
                   wall, groups):
    """The twisted.web resource tree every endpoint serves."""
    api = Api(config.projects, store, core.scheduler, core.launcher, reader, submitter,
              timetable, max_per_spider=config.max_jobs_per_spider, history=watching.history,
              owners=Owners(store, config.node, reactor) if store.shared else None,
              listing_builds=watching.listing_builds, limits=groups.available(),
              build_aside=lambda f, *args: threads.deferToThreadPool(
                  reactor, reactor.getThreadPool(), f, *args), wall=wall,
              audit=AuditLog(store, wall, reactor), node=config.node)
    return Root(api, config.directory, pages=site_resources(api, watching),
                listers=listers(config.projects),
                log_files={b"stats.json": LogParserStats(store, core.launcher,
                                                         config.directory, wall)})


def _tokens(store, reactor, wall):
    """(TokenBook, TokenChecker) of the job table's tokens; the KDF of a
    check runs in threads of its own (about 50 ms each: access.tokens.KdfPool)."""
    book = TokenBook(store, reactor, wall)
    checker = TokenChecker(book, reactor, kdf_aside=KdfPool(reactor))
    return book, checker


def _listening(config, reactor, root, tokens=None):
    """A Listening for each endpoint of ``config``, each with a guard and
    a site of its own (a loopback endpoint checks Host, a TLS one knows
    its origin is https), all sharing one resource tree and one set of
    connection caps. Raises ListenError for an endpoint that cannot be
    made, or a systemd socket other machines reach without a password."""
    caps = ConnectionCaps()
    # One count of wrong credentials per address, whichever endpoint.
    throttle = LoginThrottle(reactor, limit=config.max_auth_failures)
    found = []
    for listener in config.endpoints:
        endpoint, tls = open_endpoint(listener, reactor)
        reach = adopted_reach(endpoint, listener)
        if reach == PUBLIC and not (config.authenticated or config.insecure_no_auth):
            raise ListenError(exposed_refusal(f"--listen {listener.description}"))
        guard = GuardedResource(root, config.credentials, loopback_only=reach == LOOPBACK,
                                checkers=config.checkers, tokens=tokens,
                                may_be_open=reach != PUBLIC or config.insecure_no_auth,
                                throttle=throttle)
        site = QuietSite(guard, requestFactory=ServeRequest, reactor=reactor)
        site.displayTracebacks = False
        site.log_requests = config.log_level == "debug"
        site.trusted_proxies = frozenset(config.trusted_proxies)
        factory = limit(site, reactor, deadline=config.request_deadline, caps=caps, tls=tls)
        factory.noisy = False
        found.append(Listening(listener, endpoint, factory, tls, reach))
    return found


def _listen_now(place):
    """Listens on ``place``'s endpoint at once (TCP, Unix and adopted
    sockets listen in the call); returns the port or raises why not."""
    outcome = []
    place.endpoint.listen(place.factory).addBoth(outcome.append)
    if not outcome:
        raise CannotListen(f"{place.listener.description} did not listen at once")
    if isinstance(outcome[0], Failure):
        outcome[0].raiseException()
    return outcome[0]
