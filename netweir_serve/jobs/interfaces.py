"""The parts a job passes through, as scrapyd names them.

schedule.json hands a checked job to the IScheduler, which records it in the
IJobStore and wakes the IPoller; the poller hands pending jobs to the
ILauncher while it has free slots; the launcher runs each as a process and
records how it ended. The web layer talks to these, never to SQLite or to
processes directly.
"""

from zope.interface import Attribute, Interface


class IJobStore(Interface):
    """The job table: every job the service knows, and its state.

    Job ids and project names compare ignoring case. Records are immutable
    values (JobRecord); every change is one transaction."""

    generation = Attribute(
        "An int that changes whenever any job's listing changes (added, started,"
        " ended, forgotten), so answers built from the table can be cached.")

    def add(record):
        """Adds a pending job. Raises DuplicateJob if its id (any case) exists."""

    def get(jobid):
        """The JobRecord with this id (any case), or None."""

    def next_pending():
        """The pending job to start next (highest priority, then oldest), or None."""

    def mark_running(jobid, pid, start_time):
        """Records that the job's process started. Returns the new record."""

    def mark_finished(jobid, outcome, end_time, exit_status=None, stats=None, reason=None):
        """Records how the job ended (outcome finished/failed/cancelled/lost)."""

    def mark_cancel_requested(jobid):
        """Records that a cancel was asked for a running job."""

    def jobs(project=None):
        """(pending, running, finished) lists of JobRecords, of one project
        (any case) or all: pending by start order, running by start time,
        finished most recent last."""

    def counts():
        """A dict of how many jobs are pending, running and finished."""

    def mark_running_lost(end_time, stats_of):
        """At start: every job still marked running is ended as lost, with
        the stats ``stats_of(record)`` returns. Returns the records."""

    def prune(keep):
        """Forgets the oldest finished jobs past ``keep``; returns their records."""


class IScheduler(Interface):
    """Queues checked jobs and takes them out again."""

    def schedule(checked, jobid=None, priority=0.0):
        """Records a pending job for ``checked`` and wakes the poller.
        Returns the JobRecord. Raises DuplicateJob."""

    def cancel(jobid, now=False):
        """Cancels a job: a pending one ends cancelled at once, a running one
        is asked to stop (killed at once when ``now``, or when it was
        already asked). Returns its previous state ('pending', 'running')
        or None when it is unknown or already finished."""


class IPoller(Interface):
    """Hands pending jobs to the launcher while it has room."""

    def poll():
        """Starts as many pending jobs as there are free slots, now."""


class ILauncher(Interface):
    """Runs jobs as processes, at most ``max_jobs`` at once."""

    def slots_free():
        """How many more jobs could start now."""

    def launch(record):
        """Starts the pending job ``record``. Whatever happens the job ends
        up recorded as running or, if it cannot start, finished as failed;
        a slot is held only while its process runs."""

    def cancel(jobid, now=False):
        """Asks the running job to stop (SIGTERM; the whole process group is
        killed after the grace period), or kills it at once when ``now`` or
        when a cancel was already asked. Returns False if it is not running."""

    def running_stats(jobid):
        """The latest stats read from a running job's stats file, or None."""

    def stop():
        """Cancels every running job and returns a Deferred that fires once
        they have all ended and been recorded."""

    def kill_all():
        """Kills every running job at once (a second Ctrl-C while stopping)."""
