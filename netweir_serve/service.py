"""makeService: every part of the daemon built and connected in one place."""

import os
import signal
import sqlite3
import threading

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import server

from .dirlock import DirectoryUnusable, lock_directory
from . import _proctree
from .jobs.adoption import settle_left_running
from .jobs.events import ENDED, QUEUED, JobEvents
from .jobs.launcher import Launcher
from .jobs.process import job_environment
from .jobs.poller import Poller
from .jobs.pruning import Pruner
from .jobs.scheduler import Scheduler
from .jobs.store import open_store
from .jobs.store.migrations import NewerSchema
from .jobs.submit import JobSubmitter
from .schedules.timetable import Timetable
from .spiders.reader import SpiderReader
from .web.api import Api
from .web.guard import GuardedResource
from .web.limits import limit
from .web.listings import listers
from .web.liststats import LogParserStats
from .web.pages import site_pages
from .web.request import ServeRequest
from .web.root import Root

log = Logger()

# Bursts of connections from dashboards and scripts wait in the kernel's
# queue instead of being refused.
LISTEN_BACKLOG = 1024


class QuietSite(server.Site):
    """A Site that logs each request at debug level (when ``log_requests``),
    never its headers."""

    noisy = False
    # Off unless debug logging is on: building an event the filter then
    # drops costs about a tenth of answering daemonstatus.json.
    log_requests = False

    def log(self, request):
        if not self.log_requests:
            return
        log.debug("{method} {path} {code}", method=request.method.decode("latin-1"),
                  path=request.path.decode("latin-1"), code=request.code)


class ServeService(service.Service):
    """The daemon: on start, settles what the last run left and starts jobs;
    on stop, stops listening, cancels running jobs and waits for them."""

    def __init__(self, config, reactor, lock, store, launcher, poller, pruner, reader,
                 timetable, factory):
        self.config = config
        self.reactor = reactor
        self.lock = lock
        self.store = store
        self.launcher = launcher
        self.poller = poller
        self.pruner = pruner
        self.reader = reader
        self.timetable = timetable
        self.factory = factory
        self.port = None
        self.started = None
        self._signals = 0
        self._handing_over = False

    def privilegedStartService(self):
        # No process of the same user may read this one's memory or
        # environment (the password in NETWEIR_SERVE_PASSWORD): not even
        # the spiders it runs.
        _proctree.make_undumpable()
        # Binding first, so a port in use fails before any job starts.
        self.port = self.reactor.listenTCP(self.config.port, self.factory,
                                           backlog=LISTEN_BACKLOG, interface=self.config.bind)
        super().privilegedStartService()

    def startService(self):
        super().startService()
        self.started = self._settle_then_start()

    @defer.inlineCallbacks
    def _settle_then_start(self):
        config = self.config
        try:
            # A table of this service's alone: its running jobs are all its
            # own, whatever host name claimed them (the host may have been
            # renamed).
            node = config.node if self.store.shared else None
            adopted, _ = yield settle_left_running(
                self.store, self.launcher, config.directory, node, self.reactor)
        except Exception:
            log.failure("could not settle the jobs the last run left running")
        else:
            if adopted:
                log.info("adopted {n} job(s) the last run left running", n=len(adopted))
        yield self.pruner.prune_now()
        address = self.port.getHost()
        log.info("netweir-serve listening on http://{host}:{port}/ with {dir};"
                 " projects: {projects}; {max_jobs} job(s) at once",
                 host=address.host, port=address.port, dir=config.directory,
                 projects=", ".join(f"{p.name}={p.path}" for p in config.projects) or "none",
                 max_jobs=config.max_jobs)
        for warning in config.warnings():
            log.warn("{warning}", warning=warning)
        # Importing netweir in the warm reader now, not on the first request.
        self.reader.start()
        self.poller.start()
        try:
            yield self.timetable.start()
        except Exception:
            log.failure("could not start the recurring schedules")

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        yield self.port.stopListening()
        if self.started is not None:
            yield self.started
        self.timetable.stop()
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
        return open_store(config.directory, reactor)
    except (sqlite3.Error, NewerSchema) as e:
        raise DirectoryUnusable(
            f"cannot use --dir {config.directory}: its job table"
            f" {os.path.join(config.directory, 'jobs.db')} cannot be opened: {e}") from None


def makeService(config, reactor):
    """The whole daemon for ``config`` (a ServeConfig), on ``reactor``.

    Locks ``config.directory`` first; raises DirectoryBusy if another
    service holds it, DirectoryUnusable if it or its job table cannot be
    used, before anything in it is touched."""
    lock = lock_directory(config.directory)
    store = _open_store(config, reactor)
    events = JobEvents()
    launcher = Launcher(reactor, store, events, config.projects, config.directory,
                        config.max_jobs, python=config.python, grace=config.grace,
                        stats_interval=config.stats_interval)
    poller = Poller(store, launcher, reactor, config.node, config.projects.names(),
                    interval=config.poll_interval, max_per_spider=config.max_jobs_per_spider)
    pruner = Pruner(store, config.directory, config.keep, reactor)
    # A queued job may start now; an ended one frees a slot and may take
    # the table past --keep.
    events.subscribe(lambda kind, record: poller.poll(), kinds=(QUEUED, ENDED))
    events.subscribe(pruner.request, kinds=(ENDED,))
    scheduler = Scheduler(store, launcher, reactor, events)
    # Spider files may read the environment as they load: give them the one
    # jobs get, without the service's credentials.
    reader = SpiderReader(reactor, python=config.python, timeout=config.reader_timeout,
                          env=job_environment(os.environ))
    submitter = JobSubmitter(config.projects, store, scheduler, reader, config.directory)
    timetable = Timetable(store, submitter, reactor, environ=os.environ)
    api = Api(config.projects, store, scheduler, launcher, reader, submitter, timetable,
              max_per_spider=config.max_jobs_per_spider)
    root = Root(api, config.directory, pages=site_pages(api), listers=listers(config.projects),
                log_files={b"stats.json": LogParserStats(store, launcher, config.directory,
                                                         reactor)})
    site = QuietSite(GuardedResource(root, config.credentials, config.loopback_only),
                     requestFactory=ServeRequest, reactor=reactor)
    site.displayTracebacks = False
    site.log_requests = config.log_level == "debug"
    factory = limit(site, reactor, deadline=config.request_deadline)
    factory.noisy = False
    return ServeService(config, reactor, lock, store, launcher, poller, pruner, reader,
                        timetable, factory)
