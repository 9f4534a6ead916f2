"""The parts a job passes through, as scrapyd names them.

``jobs.submit`` checks a job and hands it to the IScheduler, which records
it in the IJobStore and publishes "queued"; the IPoller, woken by that,
claims pending jobs from the store while the ILauncher has free slots, and
the launcher runs each claimed job as a process and records how it ended.
The web layer talks to these, never to SQLite or to processes directly.
"""

from zope.interface import Interface


class IScheduler(Interface):
    """Queues checked jobs and takes them out again."""

    def schedule(checked, jobid=None, priority=0.0, schedule=None, locks=(), policy=None,
                 upstream=None, by=None):
        """Records a pending job for ``checked`` (queued by recurring
        schedule ``schedule``, holding ``locks`` while it runs, with
        ``policy``, JobPolicy.to_json() of its effective policy; for a
        chain schedule's job, ``upstream`` the job whose end queued it;
        ``by`` who queued it, its ``queued_by``) and publishes "queued". Fires with the JobRecord; fails with DuplicateJob."""

    def cancel(jobid, now=False):
        """Cancels a job: a pending one ends cancelled at once, a running one
        is asked to stop (killed at once when ``now``, or when it was
        already asked). Fires with its previous state ('pending',
        'running'), or None when it is unknown or already finished."""

    def expire(jobid):
        """Drops a pending job at its expiry, if it is still pending (the
        store's guarded cancel_pending, reason ``expired``), and publishes
        "ended". Fires with the ended record, or None when it was no
        longer pending (claimed, or dropped by another node)."""


class IPoller(Interface):
    """Hands pending jobs to the launcher while it has room."""

    def poll():
        """Asks for a round of claiming and launching soon (coalesced: many
        calls before it runs make one round, and never inside the caller's
        own call stack)."""

    def start():
        """Starts the safety-net timer and polls once."""

    def stop():
        """Stops polling; fires once a round under way has finished."""


class ILauncher(Interface):
    """Runs claimed jobs as processes, at most ``max_jobs`` at once."""

    def slots_free():
        """How many more jobs could start now."""

    def launch(record):
        """Starts the claimed job ``record``. Whatever happens the job ends up
        running or, if it cannot start, finished as failed; a slot is held
        only while its process runs."""

    def cancel(jobid, now=False, reason="cancel.json"):
        """Asks the running job to stop (SIGTERM; the whole process group is
        killed after the grace period), or kills it at once when ``now`` or
        when a cancel was already asked. ``reason`` is why (the job ends
        cancelled with it; the first cancel's reason stands). Returns False
        if it is not running here."""

    def cancel_once(jobid, reason):
        """Asks the running job to stop as ``cancel`` does, with
        ``reason``, unless a cancel is already under way (then nothing: it
        never becomes a kill). Returns whether it asked."""

    def cancel_recorded(jobid, within=0.2):
        """A Deferred firing with None once the cancel or kill last asked of
        the job here is written in the table (or its write failed, which is
        logged), or after ``within`` seconds: cancel.json answers then, so
        that a service killed right after it answered finds the cancel at
        its restart, and a locked table delays the record, not the answer."""

    def running_stats(jobid):
        """The latest stats read from a running job's stats file, or None."""

    def log_size(jobid):
        """The size of a running job's log now, or None (not running here,
        or no log yet): how the stall watch sees a crawl that logs."""

    def running_count():
        """How many jobs run here now."""

    def stop():
        """Cancels every running job and returns a Deferred that fires once
        they have all ended and their ends were recorded (or failed to be)."""

    def kill_all():
        """Kills every running job at once (a second Ctrl-C while stopping)."""

    def adopt(record):
        """Takes over a running job an earlier service left running, whose
        process is still the one it started."""

    def settled(record):
        """Announces ("ended") a job whose end this node recorded without
        watching it: at start (jobs.adoption), or as lost when this node
        declared the node that ran it dead (cluster.membership); and
        ("queued") the retry its end queued, if any (``record.retry``)."""

    def running_ids():
        """The ids of the jobs running here."""

    def sweep_groups():
        """Removes the control groups of this DIR's jobs that no longer run
        (at start, once the last run's jobs are adopted or settled)."""

    def carry_out(record):
        """Does what the table's ``record`` of a job running here asks and
        has not been done here yet (its ``cancel_requested``, then its
        ``kill_requested``, which skips what is left of the grace period);
        "cancel", "kill" or None for nothing done."""

    def drop(jobid):
        """Kills a job running here whose end another node has already
        recorded (this node was declared dead meanwhile): its slot is freed
        and nothing more is recorded of it. False if it does not run here."""

    def fence(end_time, detail):
        """Kills the jobs running here that an end as lost (``node lost``)
        would retry, their slots freed, their end (lost at ``end_time``,
        with ``detail``) recorded once the table takes it unless another
        node's is there first; the ids of those jobs (this node is cut off
        from a shared table: see cluster.membership)."""

    def hand_over():
        """Lets go of every running job without stopping it, for the next
        start to adopt; a Deferred of how many."""


class ISpiderReader(Interface):
    """Reads a project's spider files in processes of their own."""

    def start():
        """Starts the warm reader now, not at the first request."""

    def listSpiders(project):
        """Deferred sorted list of the project's spider names; fails with
        InspectError saying why not."""

    def checkJob(project, spider, settings, arguments, spelled=None):
        """Deferred jobs.checked.FoundSpider when the job can run with
        ``settings`` (normalised, path settings already resolved by the job
        core: jobs.checked.check_job); fails with InspectError."""

    def stop():
        """Deferred that fires once no reader process is left."""
