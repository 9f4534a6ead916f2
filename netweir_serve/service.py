"""makeService: every part of the daemon built and connected in one place."""

import os
import signal
import sys
import threading

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import server

from .dirlock import lock_directory
from .spiders.reader import SpiderInspector
from .jobs.files import delete_files, files_of, read_stats
from .jobs.store.sqlite import JobStore
from .jobs.launcher import Launcher, job_environment
from .jobs.poller import Poller
from .jobs.scheduler import Scheduler
from .web.api import Api
from .web.guard import GuardedResource
from .web.limits import limit
from .web.listings import listers
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

    def __init__(self, config, reactor, lock, store, launcher, poller, inspector, factory):
        self.config = config
        self.reactor = reactor
        self.lock = lock
        self.store = store
        self.launcher = launcher
        self.poller = poller
        self.inspector = inspector
        self.factory = factory
        self.port = None
        self._signals = 0

    def privilegedStartService(self):
        # Binding first, so a port in use fails before any job starts.
        self.port = self.reactor.listenTCP(self.config.port, self.factory,
                                           backlog=LISTEN_BACKLOG, interface=self.config.bind)
        super().privilegedStartService()

    def startService(self):
        super().startService()
        now = self.reactor.seconds()
        for record in self.store.mark_running_lost(
                now, lambda r: read_stats(files_of(self.config.directory, r).stats)):
            log.warn("job {jobid} was running when the service stopped: marked lost",
                     jobid=record.id)
        prune(self.store, self.config)
        address = self.port.getHost()
        log.info("netweir-serve listening on http://{host}:{port}/ with {dir};"
                 " projects: {projects}; {max_jobs} job(s) at once",
                 host=address.host, port=address.port, dir=self.config.directory,
                 projects=", ".join(f"{p.name}={p.path}" for p in self.config.projects) or "none",
                 max_jobs=self.config.max_jobs)
        for warning in self.config.warnings():
            log.warn("{warning}", warning=warning)
        # Importing netweir in the warm reader now, not on the first request.
        self.inspector.start()
        self.poller.start()

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        yield self.port.stopListening()
        self.poller.stop()
        running = self.store.counts()["running"]
        if running:
            log.info("stopping: cancelling {n} running job(s) and waiting for them",
                     n=running)
        yield self.launcher.stop()
        yield self.inspector.stop()
        self.store.close()
        log.info("netweir-serve stopped; waiting jobs stay queued for the next start")

    def install_signal_handlers(self):
        """Ctrl-C or SIGTERM once stops the service the careful way (jobs
        cancelled and awaited); again while it waits, kills the jobs at
        once so none is left unrecorded. Call once the reactor runs."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_stop_signal)

    def _on_stop_signal(self, signum, frame):
        self._signals += 1
        if self._signals == 1:
            self.reactor.callFromThread(self.reactor.stop)
        else:
            self.reactor.callFromThread(self._kill_now)

    def _kill_now(self):
        log.warn("stop asked again: killing running jobs now")
        self.launcher.kill_all()


def prune(store, config):
    """Forgets finished jobs past --keep, with their files."""
    for record in store.prune(config.keep):
        for path in delete_files(files_of(config.directory, record)):
            log.warn("could not delete {path} of forgotten job {jobid}",
                     path=path, jobid=record.id)


def makeService(config, reactor, python=sys.executable, grace=30.0, stats_interval=1.0,
                inspect_timeout=10.0, request_deadline=15.0, poll_interval=5.0,
                log_requests=False):
    """The whole daemon for ``config`` (a ServeConfig), on ``reactor``.

    Locks ``config.directory`` first; raises DirectoryBusy if another
    service holds it, before anything in it is touched."""
    lock = lock_directory(config.directory)
    store = JobStore(os.path.join(config.directory, "jobs.db"))
    poller = None

    def job_ended(record):
        prune(store, config)
        if poller is not None:
            poller.poll()

    launcher = Launcher(reactor, store, config.projects, config.directory, config.max_jobs,
                        job_ended, python=python, grace=grace, stats_interval=stats_interval)
    poller = Poller(store, launcher, reactor, interval=poll_interval)
    scheduler = Scheduler(store, launcher, reactor, wake=poller.poll, ended=job_ended)
    # Spider files may read the environment as they load: give them the one
    # jobs get, without the service's credentials.
    inspector = SpiderInspector(reactor, python=python, timeout=inspect_timeout,
                                env=job_environment(os.environ))
    api = Api(config.projects, store, scheduler, launcher, inspector, config.directory)
    root = Root(api, config.directory, pages=site_pages(api), listers=listers())
    site = QuietSite(GuardedResource(root, config.credentials, config.loopback_only),
                     requestFactory=ServeRequest, reactor=reactor)
    site.displayTracebacks = False
    site.log_requests = log_requests
    factory = limit(site, reactor, deadline=request_deadline)
    factory.noisy = False
    return ServeService(config, reactor, lock, store, launcher, poller, inspector, factory)
