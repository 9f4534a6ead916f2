"""Running jobs as ``netweir crawl`` processes, and watching them end.

Modelled on twisted.runner.procmon: the reactor is injected, every timer is
a ``callLater`` on it, and the job record stays in the job store; the
process protocol only reports what happened.
"""

import os
import shutil
import signal
import sys
from dataclasses import dataclass, field, replace

from twisted.internet import defer
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from zope.interface import implementer

from . import datapaths
from .events import CHANGED, ENDED, STARTED
from .files import files_of, read_stats
from .interfaces import ILauncher
from .logstats import append_stats
from .records import FINISHED
from ..names import fold

# What the job's environment must never see: the service's credentials.
SECRET_PREFIX = "NETWEIR_SERVE_"

# Where a crawl ends up in a session of its own: setsid(1) execs in place
# (our child is never a group leader), so the pid we watch is the crawl's.
_SETSID = shutil.which("setsid")
_SETSID_FALLBACK = "import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[1:])"

# Seconds between tries to record a job's end the table could not take (a
# full disk): until it is recorded the job is listed as running and keeps
# its locks, so the jobs that share its checkpoint would wait for it.
END_RETRY_DELAY = 2.0


class StartRefused(Exception):
    """A job that cannot start; the message goes in its log."""


def crawl_command(python, record, files, data_dir):
    """The argv of the crawl for ``record``. Path settings are resolved in
    ``data_dir`` again here: the directory may have changed since the job
    was checked (a symlink put there meanwhile)."""
    argv = [python, "-m", "netweir", "crawl", record.spider_file,
            f"--spider={record.spider}", f"--output={files.items}",
            f"--stats={files.stats}"]
    for key, value in record.settings:
        if key in datapaths.PATH_SETTINGS:
            try:
                value = datapaths.prepare(data_dir, key, value)
            except ValueError as e:
                raise StartRefused(str(e)) from None
        argv.append(f"--set={key}={value}")
    argv.extend(f"-a{name}={value}" for name, value in record.arguments)
    return argv


def in_own_session(argv):
    if _SETSID:
        return [_SETSID] + argv
    return [argv[0], "-S", "-c", _SETSID_FALLBACK] + argv


def job_environment(environ):
    env = {k: v for k, v in environ.items() if not k.startswith(SECRET_PREFIX)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def exit_status_of(reason):
    """The exit status in ``reason`` (a negative signal number if killed)."""
    value = reason.value
    if getattr(value, "signal", None) is not None:
        return -value.signal
    return getattr(value, "exitCode", None)


class CrawlProtocol(ProcessProtocol):
    """Reports the end of one crawl process to ``ended(jobid, reason)``."""

    def __init__(self, jobid, ended):
        self.jobid = jobid
        self._ended = ended

    def processEnded(self, reason):
        self._ended(self.jobid, reason)


@dataclass
class RunningJob:
    """What the launcher keeps about a job while its process runs."""

    record: object
    files: object
    pid: int
    stats: dict = None
    stats_changed: int = None
    cancel_requested: bool = False
    stats_call: object = None
    kill_call: object = None
    ended: list = field(default_factory=list)


def send_signal(pid, signum, group):
    """Signals the process ``pid``, or its whole process group; a process
    that is already gone is not an error."""
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@implementer(ILauncher)
class Launcher:
    """ILauncher for ``netweir crawl`` jobs.

    Publishes on ``events``: "started" once a job's process runs, "changed"
    when its stats or its cancel request change, "ended" with the finished
    record of every job that ends here (a slot is free by then).
    """

    log = Logger()

    def __init__(self, reactor, store, events, projects, directory, max_jobs,
                 python=sys.executable, grace=30.0, stats_interval=1.0,
                 environ=None, signal_process=send_signal):
        self._reactor = reactor
        self._store = store
        self._events = events
        self._projects = projects
        self._directory = directory
        self._max_jobs = max_jobs
        self._python = python
        self._grace = grace
        self._stats_interval = stats_interval
        self._environ = os.environ if environ is None else environ
        self._signal = signal_process
        self._running = {}
        # {job key: waiters} of jobs whose process ended and whose end is
        # being recorded: they keep their slot until it is (or failed to be).
        self._ending = {}
        self._stopping = False

    # -- starting --------------------------------------------------------------

    def slots_free(self):
        if self._stopping:
            return 0
        return max(0, self._max_jobs - len(self._running) - len(self._ending))

    def launch(self, record):
        # ``record`` is claimed: the table says running, without a pid. If
        # the service dies before the pid is recorded, the next start finds
        # it so and marks it lost; it is never pending again, never run twice.
        files = files_of(self._directory, record)
        try:
            argv, workdir = self._prepare(record, files)
            pid = self._spawn(record, argv, workdir, files)
        except (StartRefused, OSError) as e:
            self._fail_to_start(record, files, str(e))
            return
        except Exception as e:
            # Whatever else refuses the start, the job must end and the
            # poller's loop go on.
            self.log.failure("job {jobid}: unexpected error starting it", jobid=record.id)
            self._fail_to_start(record, files, f"{type(e).__name__}: {e}")
            return
        job = RunningJob(record=replace(record, pid=pid), files=files, pid=pid)
        self._running[fold(record.id)] = job
        job.stats_call = self._reactor.callLater(self._stats_interval, self._poll_stats, job)
        self.log.info("job {jobid} started: {project}/{spider}, pid {pid}",
                      jobid=record.id, project=record.project, spider=record.spider, pid=pid)
        recorded = self._store.mark_started(record.id, pid)
        recorded.addCallbacks(self._started, self._not_recorded, callbackArgs=(job,),
                              errbackArgs=(record.id, "its process id"))

    def _started(self, record, job):
        if record is not None and record.state != FINISHED:
            job.record = record
        self._events.publish(STARTED, job.record)

    def _not_recorded(self, failure, jobid, what):
        # The job goes on; the table is behind until its next change.
        self.log.failure("job {jobid}: could not record {what}", failure, jobid=jobid, what=what)

    def _prepare(self, record, files):
        project = self._projects.get(record.project)
        if project is None:
            raise StartRefused(f"project {record.project!r} is no longer served")
        if not os.path.isfile(record.spider_file):
            raise StartRefused(f"the spider's file {record.spider_file} is gone")
        data_dir = os.path.join(self._directory, "data", project.name)
        argv = crawl_command(self._python, record, files, data_dir)
        for path in files.all():
            os.makedirs(os.path.dirname(path), exist_ok=True)
        os.makedirs(data_dir, exist_ok=True)
        return argv, project.workdir

    def _spawn(self, record, argv, workdir, files):
        opened = []
        try:
            log_fd = os.open(files.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                             0o644)
            opened.append(log_fd)
            null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(null_fd)
            command = in_own_session(argv)
            process = self._reactor.spawnProcess(
                CrawlProtocol(record.id, self._process_ended), command[0], command,
                env=job_environment(self._environ), path=workdir,
                childFDs={0: null_fd, 1: log_fd, 2: log_fd})
        finally:
            for fd in opened:
                os.close(fd)
        return process.pid

    def _fail_to_start(self, record, files, reason):
        self.log.warn("job {jobid} could not start: {reason}", jobid=record.id, reason=reason)
        try:
            os.makedirs(os.path.dirname(files.log), exist_ok=True)
            with open(files.log, "a", encoding="utf-8") as f:
                f.write(f"netweir-serve: the job could not start: {reason}\n")
        except OSError:
            pass
        now = self._reactor.seconds()
        self._ending[fold(record.id)] = []
        recorded = self._store.mark_finished(record.id, "failed", now, reason=reason)
        recorded.addErrback(self._end_not_recorded, record.id,
                            dict(outcome="failed", end_time=now, reason=reason))
        recorded.addCallback(self._ended, replace(record, state=FINISHED, outcome="failed",
                                                  end_time=now, reason=reason))

    # -- watching --------------------------------------------------------------

    def _poll_stats(self, job):
        # The crawl replaces its stats file every 5 s; looking every second
        # keeps what jobstats.json shows within a second of the file, and
        # the file is read again only when it was replaced.
        try:
            changed = os.stat(job.files.stats).st_mtime_ns
        except OSError:
            changed = None
        if changed is not None and changed != job.stats_changed:
            stats = read_stats(job.files.stats)
            if stats is not None:
                job.stats, job.stats_changed = stats, changed
                self._events.publish(CHANGED, job.record)
        job.stats_call = self._reactor.callLater(self._stats_interval, self._poll_stats, job)

    def running_count(self):
        """How many jobs run here now."""
        return len(self._running)

    def running_stats(self, jobid):
        job = self._running.get(fold(jobid))
        return job.stats if job else None

    def _process_ended(self, jobid, reason):
        job = self._running.pop(fold(jobid))
        # Processes the crawl started (workers, a spider's own children) may
        # outlive it; the group is the crawl's alone, so nothing in it is
        # anyone else's.
        self._signal(job.pid, signal.SIGKILL, True)
        for call in (job.stats_call, job.kill_call):
            if call is not None and call.active():
                call.cancel()
        self._ending[fold(jobid)] = job.ended
        status = exit_status_of(reason)
        stats = read_stats(job.files.stats) or job.stats
        outcome = "cancelled" if job.cancel_requested else (
            "finished" if status == 0 else "failed")
        now = self._reactor.seconds()
        try:
            # ScrapydWeb reads a crawl's numbers from the end of its log.
            append_stats(job.files.log, stats, outcome, now)
        except OSError as e:
            self.log.warn("job {jobid}: could not append its stats to its log: {e}",
                          jobid=jobid, e=e)
        self.log.info("job {jobid} ended: {outcome} (exit status {status})",
                      jobid=job.record.id, outcome=outcome, status=status)
        recorded = self._store.mark_finished(job.record.id, outcome, now,
                                             exit_status=status, stats=stats)
        # A full disk, say: the table still says running until a later try
        # records it (or the next start settles it). The slot is free and
        # every waiter hears of the end all the same.
        recorded.addErrback(self._end_not_recorded, job.record.id,
                            dict(outcome=outcome, end_time=now, exit_status=status,
                                 stats=stats))
        recorded.addCallback(self._ended, replace(
            job.record, state=FINISHED, outcome=outcome, end_time=now, exit_status=status,
            stats=stats))

    def _end_not_recorded(self, failure, jobid, end):
        self.log.failure("job {jobid}: could not record how it ended", failure, jobid=jobid)
        self._record_end_later(jobid, end)
        return None

    def _record_end_later(self, jobid, end):
        if not self._stopping:
            self._reactor.callLater(END_RETRY_DELAY, self._record_end_again, jobid, end)

    def _record_end_again(self, jobid, end):
        if self._stopping:
            return
        recorded = self._store.mark_finished(jobid, **end)
        recorded.addCallbacks(
            lambda _: self.log.info("job {jobid}: its end is recorded now", jobid=jobid),
            lambda _: self._record_end_later(jobid, end))

    def _ended(self, record, known):
        # The service hears of it before whoever waits for the job
        # (stopping closes the store).
        waiters = self._ending.pop(fold(known.id))
        self._events.publish(ENDED, record if record is not None else known)
        for d in waiters:
            d.callback(record)

    # -- stopping --------------------------------------------------------------

    def cancel(self, jobid, now=False):
        job = self._running.get(fold(jobid))
        if job is None:
            return False
        if now or job.cancel_requested:
            self._kill(job)
            return True
        job.cancel_requested = True
        job.record = replace(job.record, cancel_requested=True)
        recorded = self._store.mark_cancel_requested(job.record.id)
        recorded.addErrback(self._not_recorded, job.record.id, "the cancel request")
        self._events.publish(CHANGED, job.record)
        self.log.info("job {jobid}: cancel asked, stopping it", jobid=job.record.id)
        self._signal(job.pid, signal.SIGTERM, False)
        job.kill_call = self._reactor.callLater(self._grace, self._kill, job)
        return True

    def _kill(self, job):
        if job.kill_call is not None and job.kill_call.active():
            job.kill_call.cancel()
        job.kill_call = None
        job.cancel_requested = True
        self.log.info("job {jobid}: killing it and every process it started",
                      jobid=job.record.id)
        self._signal(job.pid, signal.SIGKILL, True)

    def stop(self):
        self._stopping = True
        waits = []
        for waiters in self._ending.values():
            d = defer.Deferred()
            waiters.append(d)
            waits.append(d)
        for job in list(self._running.values()):
            d = defer.Deferred()
            job.ended.append(d)
            waits.append(d)
            if not job.cancel_requested:
                self.cancel(job.record.id)
        return defer.gatherResults(waits).addCallback(lambda _: None)

    def kill_all(self):
        for job in list(self._running.values()):
            self._kill(job)
