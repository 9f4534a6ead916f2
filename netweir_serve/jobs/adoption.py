"""At start: the jobs the last service left running, adopted or settled.

For each job the table shows running (on this node): if its process is
still the very process that was started for it (same pid, same start time
since the same boot, so a reused pid is never taken for it), the launcher
adopts it and it runs on. If not, the crawl's parent wrote its exit status
when the crawl ended, and the job gets the outcome that status gives
(``cancelled`` if a cancel had been asked) with its end time and last
stats; only a job with no status at all (the machine went down, or it was
claimed and never started) is ``lost``.
"""

from twisted.internet import defer
from twisted.logger import Logger

from .. import _proctree
from .files import files_of, read_exit_status, read_stats
from .logstats import append_stats
from .outcomes import outcome_of
from .process import KILL_SIGNAL, send_signal

log = Logger()


@defer.inlineCallbacks
def end_processes_of_lost_jobs(store, node, identify=_proctree.start_time,
                               signal_process=send_signal):
    """A node that comes back after the others declared it dead finds its
    running jobs recorded lost: the processes still running for them are
    ended (their parent kills the crawl and all it started), and nothing
    more is recorded. Fires with the ids of the jobs whose processes went."""
    ended = []
    finished = (yield store.jobs())[2]
    for record in finished:
        if record.node != node or record.outcome != "lost" or record.pid is None:
            continue
        if record.proc_start is not None and identify(record.pid) == record.proc_start:
            log.warn("job {jobid} was recorded lost while this node was away; ending its"
                     " processes", jobid=record.id)
            signal_process(record.pid, KILL_SIGNAL, False)
            ended.append(record.id)
    return ended


@defer.inlineCallbacks
def settle_left_running(store, launcher, directory, node, clock, identify=_proctree.start_time):
    """Adopts or ends every job ``store`` shows running on ``node`` (None:
    on any node). Fires with ``(adopted, ended)`` lists of records."""
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
        ended.append(settled)
        launcher.settled(settled)
    return adopted, ended


def _settle(store, directory, record, clock):
    files = files_of(directory, record)
    stats = read_stats(files.stats) or record.stats
    written = read_exit_status(files.status) if record.pid is not None else None
    if written is None:
        reason = ("the service stopped while the job ran, and it left no exit status"
                  if record.pid is not None
                  else "the service stopped before the job's process started")
        log.warn("job {jobid} was running when the service stopped: marked lost",
                 jobid=record.id)
        return store.mark_finished(record.id, "lost", clock.seconds(), stats=stats,
                                   reason=reason)
    outcome = outcome_of(record, written["exit_status"])
    end_time = written["end_time"]
    try:
        append_stats(files.log, stats, outcome, end_time)
    except OSError:
        pass
    log.info("job {jobid} ended while no service watched it: {outcome} (exit status"
             " {status})", jobid=record.id, outcome=outcome, status=written["exit_status"])
    return store.mark_finished(record.id, outcome, end_time,
                               exit_status=written["exit_status"], stats=stats)
