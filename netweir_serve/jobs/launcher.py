"""Running jobs as ``netweir crawl`` processes, and watching them end.

Modelled on twisted.runner.procmon: the reactor is injected, every timer is
a ``callLater`` on it, and the job record stays in the job store; how a
crawl is started, signalled and watched is jobs.process, and this module
keeps the books: slots, stats, cancels, the grace period, ends.
"""

import os
import signal
import sys
from dataclasses import dataclass, field, replace

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from .. import _proctree
from ..names import fold, setting_name
from ..reliability.cgroups import CgroupError
from ..reliability.policy import JobPolicy
from .events import CHANGED, ENDED, QUEUED, RECORDED_LATE, STARTED
from .outcomes import end_of
from .files import files_of, read_exit_status, read_stats
from .interfaces import ILauncher
from .logstats import append_stats
from .process import (
    CANCEL_SIGNAL, KILL_SIGNAL, CrawlProtocol, StartRefused, crawl_command, job_environment,
    private_arguments, remove_quietly, run_mark, send_signal, watch_exit,
    write_private_file)
from ..store.records import (
    CANCELLED_BY_USER, FINISHED, LOST, NODE_LOST, NOT_STARTED, SERVICE_STOPPED, StoreError)
from ..store.retrying import retry_after, with_written_retry

# Seconds between tries to record a job's end the table could not take (a
# full disk): until it is recorded the job is listed as running and keeps
# its locks, so the jobs that share its checkpoint would wait for it.
END_RETRY_DELAY = 2.0
# What an end that could not be recorded (yet) gives its waiters' chain:
# the end is announced all the same, as the launcher knows it.
_UNRECORDED = object()
# Not recorded on a shared table: announced once it is (_end_not_recorded).
_HELD = object()

# Seconds cancel.json waits for the cancel of a running job to be in the
# table before it answers: a write takes a millisecond, and a service
# killed after the answer then finds the cancel at its restart; a table
# locked by another program holds the record back, not the answer (the job
# is being cancelled either way).
CANCEL_ANSWER_WAIT = 0.2

# Seconds the crawl's parent has to end everything once told to kill it;
# past them its whole process group is killed from here.
KILL_FALLBACK_SECONDS = 5.0

# A job's control group still holding a process just killed is removed
# again this often, this many times (a killed process leaves it as it exits).
GROUP_REMOVAL_DELAY = 0.1
GROUP_REMOVAL_TRIES = 50

# Netweir's own max_memory, as a share of a job's memory limit: the crawl
# stops itself cleanly (items closed, checkpoint recorded) before the
# kernel kills it. Netweir reads its peak resident memory at most once a
# second, so a crawl that grows fast still meets the kernel's limit.
MAX_MEMORY_SHARE = 0.85


def max_memory_setting(limit):
    """Netweir's ``max_memory`` (whole MiB) for a limit of ``limit`` bytes."""
    return max(1, int(limit * MAX_MEMORY_SHARE) >> 20)


def limited_settings(settings, memory):
    """The job's ``settings`` with ``max_memory`` at MAX_MEMORY_SHARE of
    ``memory`` (bytes) added, unless the job sets it itself."""
    if memory is None or any(setting_name(key) == "max_memory" for key, _ in settings):
        return tuple(settings)
    return tuple(settings) + (("max_memory", str(max_memory_setting(memory))),)


@dataclass
class RunningJob:
    """What the launcher keeps about a job while its process runs."""

    record: object
    files: object
    pid: int
    stats: dict = None
    stats_changed: int = None
    cancel_requested: bool = False
    # Why the cancel was asked (outcomes: cancel.json, timeout...): the
    # first reason given stands, as in the table.
    cancel_reason: str = None
    killed: bool = False
    # The write of the last cancel or kill asked here (its failure logged):
    # what cancel.json waits for before it answers (cancel_recorded).
    request_written: object = None
    stats_call: object = None
    kill_call: object = None
    fallback_call: object = None
    # The pidfd (or poll) watching a job adopted from an earlier service.
    watch: object = None
    ended: list = field(default_factory=list)


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
                 environ=None, signal_process=send_signal, watch_process=watch_exit,
                 identify=_proctree.start_time, wall=None, groups=None, starter=None):
        self._reactor = reactor
        # The time of day for the ends it records (the reactor's clock,
        # monotonic, times the grace, the kill and the stats loop).
        self._wall = reactor if wall is None else wall
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
        self._watch = watch_process
        self._identify = identify
        # The jobs' control groups (reliability/cgroups.JobGroups), for
        # their memory and cpu limits; None where none can be made.
        self._groups = groups
        # What starts a job's parent (jobs/warm: forked from a warm
        # process); None: the reactor, a fresh interpreter each time.
        self._starter = starter
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
        private = os.path.join(self._directory, "run", record.id + ".json")
        try:
            command, workdir = self._prepare(record, files, private)
            pid = self._spawn(record, command, workdir, files)
        except (StartRefused, OSError) as e:
            remove_quietly(private)
            self._remove_group(record.id)
            self._fail_to_start(record, files, str(e))
            return
        except Exception as e:
            # Whatever else refuses the start, the job must end and the
            # poller's loop go on.
            remove_quietly(private)
            self._remove_group(record.id)
            self.log.failure("job {jobid}: unexpected error starting it", jobid=record.id)
            self._fail_to_start(record, files, f"{type(e).__name__}: {e}")
            return
        job = self._watch_stats(RunningJob(record=replace(record, pid=pid), files=files,
                                           pid=pid))
        self.log.info("job {jobid} started: {project}/{spider}, pid {pid}",
                      jobid=record.id, project=record.project, spider=record.spider, pid=pid)
        recorded = self._store.mark_started(record.id, pid, self._identify(pid))
        recorded.addCallbacks(self._started, self._start_not_recorded, callbackArgs=(job,),
                              errbackArgs=(job,))

    def _watch_stats(self, job):
        self._running[fold(job.record.id)] = job
        job.stats_call = self._reactor.callLater(self._stats_interval, self._poll_stats, job)
        return job

    def adopt(self, record):
        """Takes over the running job ``record`` that an earlier service
        started and left running (its parent process is still the one it
        started: the caller checked its identity). It holds a slot, its
        stats are read, it can be cancelled, and its end is recorded as any
        job's. Raises ProcessLookupError if its process has just ended."""
        files = files_of(self._directory, record)
        key = fold(record.id)
        job = RunningJob(record=record, files=files, pid=record.pid,
                         cancel_requested=record.cancel_requested,
                         cancel_reason=(record.reason or CANCELLED_BY_USER)
                         if record.cancel_requested else None)
        job.watch = self._watch(self._reactor, record.pid, record.proc_start,
                                lambda: self._process_ended(record.id, None))
        self._watch_stats(job)
        if record.kill_requested:
            # A kill was asked of the last service: it is carried out now.
            job.kill_call = self._reactor.callLater(0, self._kill, job)
        elif job.cancel_requested:
            # Asked of the last service, whose grace timer went with it: the
            # kill comes once this one's grace is over.
            job.kill_call = self._reactor.callLater(self._grace, self._kill, job)
        self.log.info("job {jobid} adopted: still running, pid {pid}", jobid=record.id,
                      pid=record.pid)
        self._events.publish(STARTED, record)
        return self._running[key]

    def settled(self, record):
        """Announces the end of a job that ended while no service watched
        it, now recorded at start (jobs.adoption): metrics, notifications
        and the poller hear of it as of any job's end, and of its retry.
        Its control group, if its parent could not remove it, goes."""
        self._remove_group(record.id)
        self._announce_end(record)

    def _announce_end(self, record):
        self._events.publish(ENDED, record)
        self._announce_retry(record)

    def _announce_retry(self, record):
        """The retry the end of ``record`` queued with it, if any, is a
        queued job like any: "queued" (the poller arms its timer for it)."""
        retry = record.retry
        if retry is None:
            self._say_retry_refused(record)
            return
        self.log.info("job {jobid} ({outcome}, {reason}): retry {retry} queued, attempt"
                      " {attempt}, due in {wait:.0f} s", jobid=record.id,
                      outcome=record.outcome, reason=record.reason, retry=retry.id,
                      attempt=retry.attempt, wait=retry.not_before - (record.end_time or 0))
        self._events.publish(QUEUED, retry)

    def _say_retry_refused(self, record):
        """An end whose policy asks for a retry that the table did not
        queue: its id was taken already (a user's job named JOBID.r1 with
        jobid=, before such ids were refused), and the chain ends here."""
        if record.state != FINISHED or record.outcome is None:
            return
        wanted = retry_after(record, 0.0)
        if wanted is not None:
            self.log.warn("job {jobid} ({outcome}, {reason}): its policy asks for a retry, but"
                          " the retry's id {retry} is taken by another job: no retry is queued",
                          jobid=record.id, outcome=record.outcome, reason=record.reason,
                          retry=wanted.id)

    def _started(self, record, job):
        if self._running.get(fold(job.record.id)) is not job:
            # It ended (or was dropped or handed over) before the table
            # answered: a "started" now would watch a job that is gone.
            return
        if record is not None and record.state != FINISHED:
            # The table's row, as written before any cancel asked since:
            # the job's own cancel state stands (else its deadlines would
            # be set again, and their cancel would kill it).
            job.record = replace(record, cancel_requested=job.cancel_requested,
                                 kill_requested=job.killed or record.kill_requested,
                                 reason=job.record.reason if job.cancel_requested
                                 else record.reason)
        self._events.publish(STARTED, job.record)

    def _start_not_recorded(self, failure, job):
        # The job runs all the same (the table catches up at its end): it
        # is announced as started, with the start time of its claim, so
        # that its deadlines are watched and the listing hears of it.
        self._not_recorded(failure, job.record.id, "its process id")
        self._started(None, job)

    def _not_recorded(self, failure, jobid, what):
        # The job goes on; the table is behind until its next change.
        self.log.failure("job {jobid}: could not record {what}", failure, jobid=jobid, what=what)

    def _prepare(self, record, files, private):
        project = self._projects.get(record.project)
        if project is None:
            raise StartRefused(f"project {record.project!r} is no longer served")
        if not os.path.isfile(record.spider_file):
            raise StartRefused(f"the spider's file {record.spider_file} is gone")
        data_dir = os.path.join(self._directory, "data", project.name)
        policy = JobPolicy.from_json(record.policy)
        groups = self._make_group(record, policy)
        arguments = private_arguments(
            replace(record, settings=limited_settings(record.settings, policy.memory)),
            data_dir)
        for path in files.all():
            os.makedirs(os.path.dirname(path), exist_ok=True)
        os.makedirs(data_dir, exist_ok=True)
        # A status file left by an earlier job of the same id (forgotten
        # since) must not be taken for this one's.
        remove_quietly(files.status)
        write_private_file(private, arguments)
        return crawl_command(self._python, record, files, private, groups), project.workdir

    def _make_group(self, record, policy):
        """The directories of the control group made for ``record``'s
        limits (none without one)."""
        if policy.memory is None and policy.cpu is None:
            return []
        if self._groups is None:
            raise StartRefused("its memory or cpu limit cannot be enforced: this service"
                               " makes no control groups")
        try:
            return self._groups.create(record.id, memory=policy.memory, cpu=policy.cpu)
        except CgroupError as e:
            # The machine changed since the job was queued (a hierarchy
            # unmounted, a delegation taken back): never run it unlimited.
            raise StartRefused(e.message) from None

    def _remove_group(self, jobid, tries=GROUP_REMOVAL_TRIES):
        """Removes ``jobid``'s control group, if it has one, killing what
        is left in it (the parent removes it itself unless it was killed).
        A process just killed leaves its group a moment later: tried again
        every GROUP_REMOVAL_DELAY seconds, ``tries`` times in all."""
        if self._groups is None:
            return
        left = self._groups.remove(jobid)
        if not left:
            return
        if tries > 1 and not self._stopping:
            self._reactor.callLater(GROUP_REMOVAL_DELAY, self._remove_group, jobid, tries - 1)
        else:
            self.log.warn("job {jobid}: could not remove its control group {groups}; the next"
                          " start removes it", jobid=jobid, groups=" ".join(left))

    def _oom_killed(self, jobid, written):
        """Whether the kernel killed in ``jobid``'s group for memory: as the
        parent wrote it, or, if it wrote nothing, as the group says."""
        if written is not None:
            return written.get("oom", False)
        return self._groups is not None and self._groups.oom_killed(jobid)

    def sweep_groups(self):
        """At start, once the last run's jobs are adopted or settled: the
        control groups of this DIR's jobs that no longer run are removed."""
        if self._groups is None:
            return
        removed = self._groups.sweep(self.running_ids())
        if removed:
            self.log.info("removed {n} control group(s) the last run left: {names}",
                          n=len(removed), names=" ".join(removed))

    def _spawn(self, record, command, workdir, files):
        opened = []
        try:
            # Never through a link planted where the log goes.
            log_fd = os.open(files.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
                             | os.O_NOFOLLOW, 0o644)
            opened.append(log_fd)
            null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(null_fd)
            process = self._spawner(record).spawnProcess(
                CrawlProtocol(record.id, self._process_ended), command[0], command,
                env=job_environment(self._environ, run_mark(self._directory, record)),
                path=workdir,
                childFDs={0: null_fd, 1: log_fd, 2: log_fd})
        finally:
            for fd in opened:
                os.close(fd)
        return process.pid

    def _spawner(self, record):
        """The starter for ``record``'s parent: a job with a memory limit
        starts cold, as what it shares with a warm process is charged to
        the service's control group, not its own (jobs/warm)."""
        if self._starter is None or JobPolicy.from_json(record.policy).memory is not None:
            return self._reactor
        return self._starter

    def _fail_to_start(self, record, files, why):
        self.log.warn("job {jobid} could not start: {why}", jobid=record.id, why=why)
        try:
            os.makedirs(os.path.dirname(files.log), exist_ok=True)
            with open(files.log, "a", encoding="utf-8") as f:
                f.write(f"netweir-serve: the job could not start: {why}\n")
        except OSError:
            pass
        end = dict(outcome="failed", end_time=self._wall.seconds(), reason=NOT_STARTED,
                   detail=why)
        self._ending[fold(record.id)] = []
        recorded = self._store.mark_finished(record.id, **end)
        recorded.addErrback(self._end_not_recorded, record.id, end)
        recorded.addCallback(self._ended, replace(record, state=FINISHED, **end))

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

    def carry_out(self, record):
        """Does what ``record`` (the table's) asks of the job running here
        that has not been done yet: a cancel, or a kill (without the grace
        period left). Returns what it did: "cancel", "kill" or None."""
        job = self._running.get(fold(record.id))
        if job is None:
            return None
        if record.kill_requested and not job.killed:
            self._kill(job)
            return "kill"
        if record.cancel_requested and not job.cancel_requested:
            self.cancel(record.id, reason=record.reason or CANCELLED_BY_USER)
            return "cancel"
        return None

    def running_ids(self):
        """The ids of the jobs running here."""
        return [job.record.id for job in self._running.values()]

    def drop(self, jobid):
        """Kills a job whose end another node has already recorded (this
        node was declared dead meanwhile): its processes go and its slot is
        freed, and nothing more is recorded of it."""
        job = self._running.pop(fold(jobid), None)
        if job is None:
            return False
        self.log.warn("job {jobid}: recorded lost by another node; killing what is left of it",
                      jobid=jobid)
        self._let_go(job)
        return True

    def fence(self, end_time, detail):
        """Kills the jobs running here that their end as ``lost`` (reason
        ``node lost``) would retry, and returns their ids: this node has
        been cut off from the shared table so long that another node may
        soon declare it dead and queue those retries, which a third node
        could start while these crawls still ran. Their slots are freed.
        Their end (lost, at ``end_time``, with ``detail``) is recorded once
        the table is back, unless another node recorded one first (its
        declaration stands, and so this one is dropped): when the table was
        away for every node, none declares this one dead, and the end is
        this node's to record. The crawls no retry would repeat run on, as
        before: the declaration's kill waits for this node to be back."""
        fenced = []
        for key, job in list(self._running.items()):
            end = dict(outcome="lost", end_time=end_time, exit_status=None,
                       stats=job.stats, reason=NODE_LOST, detail=detail)
            if retry_after(replace(job.record, state=FINISHED, **end), 0.0) is None:
                continue
            del self._running[key]
            self._let_go(job)
            # Held as any end the table could not take: announced once
            # recorded here, never if another node's is there first.
            self._record_end_later(job.record.id, end, held=True)
            fenced.append(job.record.id)
        return fenced

    def _let_go(self, job):
        """Kills ``job`` (out of ``_running`` already) without recording
        its end (``drop``, ``fence``): its timers stop, its processes and
        control group go, and whoever waits for its end waits no more."""
        for call in (job.stats_call, job.kill_call, job.fallback_call):
            if call is not None and call.active():
                call.cancel()
        if job.watch is not None:
            job.watch.stop()
        self._signal(job.pid, KILL_SIGNAL, False)
        self._reactor.callLater(KILL_FALLBACK_SECONDS, self._kill_dropped, job.record.id,
                                job.pid)
        # Its process's end finds it no longer running here, and records
        # nothing: the private settings file goes now (its control group
        # with the fallback kill), and a stop waiting for it waits no more.
        remove_quietly(os.path.join(self._directory, "run", job.record.id + ".json"))
        for d in job.ended:
            d.callback(None)

    def _kill_dropped(self, jobid, pid):
        """The fallback kill of a dropped job; its control group goes too,
        as no end of it will be handled here. Unless the same id runs here
        again meanwhile: the group is then the new run's."""
        self._signal(pid, signal.SIGKILL, True)
        if fold(jobid) not in self._running:
            self._remove_group(jobid)

    def running_stats(self, jobid):
        job = self._running.get(fold(jobid))
        return job.stats if job else None

    def log_size(self, jobid):
        job = self._running.get(fold(jobid))
        if job is None:
            return None
        try:
            return os.stat(job.files.log).st_size
        except OSError:
            return None

    def _process_ended(self, jobid, parent_status):
        """The job's parent has ended: ``parent_status`` is its own exit
        status when it was this service's child (None for an adopted job).
        The crawl's own status and end time come from the file the parent
        wrote; without it (the parent was killed), from the parent."""
        job = self._running.pop(fold(jobid), None)
        if job is None:
            # Handed over (SIGUSR1) and ended before this service left: the
            # next start reads its status file.
            return
        # Nothing the crawl started outlives it: the parent ended it all; its
        # group is killed too in case the parent itself was killed.
        self._signal(job.pid, signal.SIGKILL, True)
        for call in (job.stats_call, job.kill_call, job.fallback_call):
            if call is not None and call.active():
                call.cancel()
        if job.watch is not None:
            job.watch.stop()
        remove_quietly(os.path.join(self._directory, "run", job.record.id + ".json"))
        self._ending[fold(jobid)] = job.ended
        written = read_exit_status(job.files.status)
        oom = self._oom_killed(job.record.id, written)
        self._remove_group(job.record.id)
        now = self._wall.seconds()
        if written is not None:
            status, end_time = written["exit_status"], written["end_time"]
        else:
            status, end_time = parent_status, now
        stats = read_stats(job.files.stats) or job.stats
        detail = None
        if written is None and parent_status is None and not job.cancel_requested:
            # An adopted job whose parent left no status: killed from outside,
            # or the machine went down under it.
            outcome, reason = "lost", LOST
            detail = "its process ended without leaving an exit status"
        else:
            not_started = (written or {}).get("not_started")
            outcome, reason = end_of(
                job.record, status, job.cancel_reason if job.cancel_requested else None,
                oom=oom, not_started=not_started)
            if reason == NOT_STARTED:
                detail = not_started
        try:
            # ScrapydWeb reads a crawl's numbers from the end of its log.
            append_stats(job.files.log, stats, outcome, end_time)
        except OSError as e:
            self.log.warn("job {jobid}: could not append its stats to its log: {e}",
                          jobid=jobid, e=e)
        self.log.info("job {jobid} ended: {outcome} ({reason})",
                      jobid=job.record.id, outcome=outcome, reason=reason)
        end = dict(outcome=outcome, end_time=end_time, exit_status=status, stats=stats,
                   reason=reason, detail=detail)
        recorded = self._store.mark_finished(job.record.id, **end)
        # A full disk, say: the table still says running until a later try
        # records it (or the next start settles it). The slot is free and
        # every waiter hears of the end all the same.
        recorded.addErrback(self._end_not_recorded, job.record.id, end)
        recorded.addCallback(self._ended, replace(job.record, state=FINISHED, **end))

    def _end_not_recorded(self, failure, jobid, end):
        self.log.failure("job {jobid}: could not record how it ended", failure, jobid=jobid)
        # On a table of its own the end is announced now (a full disk must
        # not hide it) and recorded when it can be. On a shared one, another
        # node may record this job's end first (it declares this node dead
        # while it is cut off): announced only once this end is recorded,
        # so that no end is announced twice (--notify, metrics, /events).
        held = self._store.shared
        self._record_end_later(jobid, end, held)
        return _HELD if held else _UNRECORDED

    def _record_end_later(self, jobid, end, held):
        if not self._stopping:
            self._reactor.callLater(END_RETRY_DELAY, self._record_end_again, jobid, end, held)

    def _record_end_again(self, jobid, end, held):
        if self._stopping:
            return
        recorded = self._store.mark_finished(jobid, **end)
        recorded.addCallbacks(self._end_recorded_late, self._end_still_not_recorded,
                              callbackArgs=(jobid, end, held),
                              errbackArgs=(jobid, end, held))
        recorded.addErrback(lambda f: self.log.failure(
            "job {jobid}: could not tell of its end recorded late", f, jobid=jobid))

    def _end_still_not_recorded(self, failure, jobid, end, held):
        if failure.check(StoreError):
            # The table is still out of reach: the first failure was logged
            # (_end_not_recorded); trying every END_RETRY_DELAY s says no more.
            self._record_end_later(jobid, end, held)
            return
        # Not the table's refusal but a fault of ours: trying again would
        # only fail again, unseen, forever. Said once; the next start
        # settles the job (jobs.adoption).
        self.log.failure("job {jobid}: could not record how it ended; not trying again",
                         failure, jobid=jobid)

    @defer.inlineCallbacks
    def _end_recorded_late(self, record, jobid, end, held):
        if record is None:
            # An end was recorded meanwhile: this node's own, when the write
            # that failed was committed after all (its answer lost), or
            # another node's (it declared the job lost), which stands.
            try:
                record = yield self._store.get(jobid)
            except StoreError as e:
                self.log.warn("job {jobid}: could not read the end recorded meanwhile: {why}",
                              jobid=jobid, why=e.message)
                # Tried again: the write finds the end there again, then reads it.
                self._record_end_later(jobid, end, held)
                return
            if record is None or (record.outcome, record.end_time) != (
                    end["outcome"], end["end_time"]):
                self.log.warn("job {jobid}: its end was recorded elsewhere meanwhile; this"
                              " node's is dropped", jobid=jobid)
                return
            # This node's own: the retry written with it came back with no
            # answer; it is read, so that it is announced as any retry is.
            try:
                record = yield with_written_retry(self._store, record)
            except StoreError as e:
                self.log.warn("job {jobid}: could not look for the retry its end queued: {why};"
                              " the poller's next poll finds it", jobid=jobid, why=e.message)
        self.log.info("job {jobid}: its end is recorded now", jobid=record.id)
        # Its locks are free only now: the jobs that waited for them may
        # start. Held, the end itself is told now, once; its retry, made
        # only now, either way.
        self._events.publish(ENDED if held else CHANGED, record)
        if not held:
            # Announced already, without what the table's write added.
            self._events.publish(RECORDED_LATE, record)
        self._announce_retry(record)

    def _ended(self, record, known):
        # The service hears of it before whoever waits for the job
        # (stopping closes the store).
        waiters = self._ending.pop(fold(known.id))
        if record is None:
            self._end_stood(known)
        elif record is _UNRECORDED:
            self._events.publish(ENDED, known)
        elif record is not _HELD:
            self._announce_end(record)
        for d in waiters:
            d.callback(None if record in (_UNRECORDED, _HELD) else record)

    def _end_stood(self, known):
        # The first end recorded stands (IJobStore.mark_finished): another
        # node ended the job (lost) while this one was cut off from the
        # table, and announced it. This end is dropped, not announced
        # again; what is said is that the slot it held is free.
        self.log.warn("job {jobid} ended here ({outcome}), but its end was recorded"
                      " elsewhere first; that one stands", jobid=known.id,
                      outcome=known.outcome)
        stored = self._store.get(known.id)
        stored.addCallback(lambda record: self._events.publish(CHANGED, record)
                           if record is not None else None)
        stored.addErrback(lambda f: self.log.failure(
            "job {jobid}: could not read the end recorded first", f, jobid=known.id))

    # -- stopping --------------------------------------------------------------

    def cancel_recorded(self, jobid, within=CANCEL_ANSWER_WAIT):
        """A Deferred firing with None once the cancel or kill last asked of
        ``jobid`` here is in the table, or its write failed (logged by then),
        or ``within`` seconds have passed, whichever comes first."""
        job = self._running.get(fold(jobid))
        written = job.request_written if job is not None else None
        if written is None or written.called:
            return defer.succeed(None)
        done = defer.Deferred()
        waited = self._reactor.callLater(within, lambda: done.called or done.callback(None))

        def heard(result):
            if waited.active():
                waited.cancel()
            if not done.called:
                done.callback(None)
            return result

        written.addBoth(heard)
        return done

    def cancel_once(self, jobid, reason):
        """Asks the running job to stop as ``cancel`` does, with
        ``reason``, unless a cancel is already under way: then nothing (a
        deadline never turns a user's cancel into a kill). Returns whether
        it asked."""
        job = self._running.get(fold(jobid))
        if job is None or job.cancel_requested:
            return False
        return self.cancel(jobid, reason=reason)

    def cancel(self, jobid, now=False, reason=CANCELLED_BY_USER):
        job = self._running.get(fold(jobid))
        if job is None:
            return False
        if job.cancel_reason is None:
            job.cancel_reason = reason
        if now or job.cancel_requested:
            self._kill(job)
            return True
        job.cancel_requested = True
        job.record = replace(job.record, cancel_requested=True,
                             reason=job.record.reason or job.cancel_reason)
        recorded = self._store.mark_cancel_requested(job.record.id, reason=job.cancel_reason)
        recorded.addErrback(self._not_recorded, job.record.id, "the cancel request")
        job.request_written = recorded
        self._events.publish(CHANGED, job.record)
        self.log.info("job {jobid}: cancel asked ({reason}), stopping it", jobid=job.record.id,
                      reason=job.cancel_reason)
        # The parent passes it to the crawl.
        self._signal(job.pid, CANCEL_SIGNAL, False)
        job.kill_call = self._reactor.callLater(self._grace, self._kill, job)
        return True

    def _kill(self, job):
        if job.kill_call is not None and job.kill_call.active():
            job.kill_call.cancel()
        job.kill_call = None
        if not job.killed:
            job.cancel_requested = job.killed = True
            if job.cancel_reason is None:
                job.cancel_reason = CANCELLED_BY_USER
            recorded = self._store.mark_cancel_requested(job.record.id, kill=True,
                                                         reason=job.cancel_reason)
            recorded.addErrback(self._not_recorded, job.record.id, "the kill request")
            job.request_written = recorded
        self.log.info("job {jobid}: killing it and every process it started",
                      jobid=job.record.id)
        # The parent kills the crawl and everything it started, in whatever
        # session; should the parent not manage, its group goes from here.
        self._signal(job.pid, KILL_SIGNAL, False)
        if job.fallback_call is None:
            job.fallback_call = self._reactor.callLater(
                KILL_FALLBACK_SECONDS, self._signal, job.pid, signal.SIGKILL, True)

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
                self.cancel(job.record.id, reason=SERVICE_STOPPED)
        return defer.gatherResults(waits).addCallback(lambda _: None)

    def kill_all(self):
        for job in list(self._running.values()):
            self._kill(job)

    def hand_over(self):
        """Lets go of every running job without stopping it (the SIGUSR1
        handover): timers stopped, processes left to run for the next
        service to adopt. Ends recorded meanwhile are waited for. Returns
        a Deferred that fires when that is done."""
        self._stopping = True
        for job in self._running.values():
            for call in (job.stats_call, job.kill_call, job.fallback_call):
                if call is not None and call.active():
                    call.cancel()
            if job.watch is not None:
                job.watch.stop()
        count = len(self._running)
        self._running.clear()
        waits = []
        for waiters in self._ending.values():
            d = defer.Deferred()
            waiters.append(d)
            waits.append(d)
        self.log.info("handing over {n} running job(s) to the next start", n=count)
        return defer.gatherResults(waits).addCallback(lambda _: count)
