"""At start: the jobs the last service left running, adopted or settled.

For each job the table shows running (on this node): if its process is
still the very process that was started for it (same pid, same start time
since the same boot, so a reused pid is never taken for it), the launcher
adopts it and it runs on. If not, the crawl's parent wrote its exit status
when the crawl ended, and the job gets the outcome that status gives
(``cancelled`` if a cancel had been asked) with its end time and last
stats. The status file carries the mark of the run (process.run_mark), so
it is read even for a job whose pid the last service died before recording:
a file of this run is this run's end, and one of an earlier job of the same
id is not. Only a job with no status of its run at all (the machine went
down, its parent was killed, or it was claimed and never started) is
``lost``; and whatever is left of a lost job's processes (its parent killed
while no service ran, its crawl running on) is ended, found by the run's
mark in their environment, which every process the job started inherits.
"""

from twisted.internet import defer
from twisted.logger import Logger

from .. import _proctree
from .files import files_of, read_exit_status, read_stats
from .logstats import append_stats
from .outcomes import end_of
from .process import KILL_SIGNAL, RUN_MARK_VARIABLE, run_mark, send_signal
from ..store.records import FINISHED, LOST, NOT_STARTED, StoreError
from ..store.retrying import with_written_retry

log = Logger()


def end_leftovers(directory, records, kill_marked=_proctree.kill_marked):
    """Kills every process left of the runs of ``records`` (jobs recorded
    ended, whose parent is gone): those whose environment carries a run's
    mark. Returns the ids of the jobs that had some. A scan of /proc, at
    start only, when some job was settled."""
    marks = {run_mark(directory, r): r for r in records
             if r is not None and r.start_time is not None}
    ended = []
    for mark, pids in kill_marked(RUN_MARK_VARIABLE, list(marks)).items():
        record = marks[mark]
        log.warn("job {jobid} is recorded ended but {n} of its processes ran on (its parent"
                 " was killed while no service watched): killed {pids}", jobid=record.id,
                 n=len(pids), pids=" ".join(map(str, pids)))
        ended.append(record.id)
    return ended


@defer.inlineCallbacks
def end_processes_of_lost_jobs(store, node, directory, identify=_proctree.start_time,
                               signal_process=send_signal, kill_marked=_proctree.kill_marked):
    """A node that comes back after the others declared it dead finds its
    running jobs recorded lost: the processes still running for them are
    ended (their parent kills the crawl and all it started; without a
    parent, what is left is found by the run's mark), and nothing more is
    recorded. Fires with the ids of the jobs whose processes went."""
    ended = []
    lost = [r for r in (yield store.jobs())[2] if r.node == node and r.outcome == "lost"]
    for record in lost:
        if record.pid is None:
            continue
        if record.proc_start is not None and identify(record.pid) == record.proc_start:
            log.warn("job {jobid} was recorded lost while this node was away; ending its"
                     " processes", jobid=record.id)
            signal_process(record.pid, KILL_SIGNAL, False)
            ended.append(record.id)
    orphaned = [r for r in lost if r.id not in ended]
    ended.extend(end_leftovers(directory, orphaned, kill_marked))
    return ended


@defer.inlineCallbacks
def settle_left_running(store, launcher, directory, node, clock, identify=_proctree.start_time,
                        kill_marked=_proctree.kill_marked):
    """Adopts or ends every job ``store`` shows running on ``node`` (None:
    on any node), and kills what is left of the processes of those it ends.
    Fires with ``(adopted, ended)`` lists of records."""
    adopted, ended = [], []
    for record in (yield store.running(node)):
        if record.pid is not None and record.proc_start is not None \
                and identify(record.pid) == record.proc_start:
            try:
                launcher.adopt(record)
            except ProcessLookupError:
                pass  # it ended a moment ago: settled below
            else:
                adopted.append(record)
                continue
        settled = yield _settle(store, directory, record, clock)
        if settled is None:
            # Ended meanwhile by another node (IJobStore.mark_finished: the
            # first end stands), which announced it.
            continue
        ended.append(settled)
        launcher.settled(settled)
    if ended:
        end_leftovers(directory, ended, kill_marked)
    launcher.sweep_groups()
    return adopted, ended


def _status_of_this_run(directory, record):
    """The status the parent of this run of ``record`` wrote, or None. A
    file with the run's mark is this run's, whether or not its pid was
    recorded; one with another mark is an earlier job's of the same id. A
    file with no mark (a parent of an older version) is taken as before:
    only for a job whose process was recorded as started."""
    written = read_exit_status(files_of(directory, record).status)
    if written is None:
        return None
    run = written.pop("run", None)
    if run is None:
        return written if record.pid is not None else None
    return written if run == run_mark(directory, record) else None


def _settle(store, directory, record, clock):
    files = files_of(directory, record)
    stats = read_stats(files.stats) or record.stats
    written = _status_of_this_run(directory, record)
    if written is None:
        detail = ("the service stopped while the job ran, and it left no exit status"
                  if record.pid is not None
                  else "the service stopped before the job's process started")
        log.warn("job {jobid} was running when the service stopped: marked lost",
                 jobid=record.id)
        return _record_end(store, record.id, dict(
            outcome="lost", end_time=clock.seconds(), stats=stats, reason=LOST, detail=detail))
    not_started = written.get("not_started")
    outcome, reason = end_of(record, written["exit_status"], oom=bool(written.get("oom")),
                             not_started=not_started)
    detail = not_started if reason == NOT_STARTED else None
    end_time = written["end_time"]
    try:
        append_stats(files.log, stats, outcome, end_time)
    except OSError:
        pass
    log.info("job {jobid} ended while no service watched it: {outcome} (exit status"
             " {status})", jobid=record.id, outcome=outcome, status=written["exit_status"])
    return _record_end(store, record.id, dict(
        outcome=outcome, end_time=end_time, exit_status=written["exit_status"], stats=stats,
        reason=reason, detail=detail))


def _record_end(store, jobid, end):
    """Records ``end`` of ``jobid``: a Deferred of the ended record (its
    retry on it), or None when another node's end stood first."""
    recorded = store.mark_finished(jobid, **end)
    recorded.addErrback(_recorded_after_all, store, jobid, end)
    return recorded


@defer.inlineCallbacks
def _recorded_after_all(failure, store, jobid, end):
    # A write whose answer was lost (PostgreSQL's CommitUnknown: the
    # connection broke at the commit) may have been made. Tried again
    # later, the settle would no longer find the job running, and neither
    # its end nor its retry would ever be announced: the table is read,
    # and an end there that is this one is this settle's, retry and all.
    failure.trap(StoreError)
    try:
        stored = yield store.get(jobid)
    except StoreError:
        return failure
    if stored is None or stored.state != FINISHED or (stored.outcome, stored.end_time) != (
            end["outcome"], end["end_time"]):
        return failure
    log.info("job {jobid}: its end was recorded though the answer was lost", jobid=jobid)
    try:
        stored = yield with_written_retry(store, stored)
    except StoreError as e:
        log.warn("job {jobid}: could not look for the retry its end queued: {why}; the"
                 " poller's next poll finds it", jobid=jobid, why=e.message)
    return stored
