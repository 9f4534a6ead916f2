"""The job store's interfaces: what every backend (SQLite, PostgreSQL)
guarantees, as the contract tests (tests/test_store_contract.py) check on
both."""

from zope.interface import Attribute, Interface


class IJobStore(Interface):
    """The job table: every job the service knows, and its state.

    Every method returns a Deferred (a backend that answers at once uses
    ``defer.succeed``); ``version`` and ``shared`` are plain attributes. Job ids and project names compare ignoring case.
    Records are immutable values (JobRecord); every change is one
    transaction and moves ``version`` on. A write the backend cannot make
    fails with StoreError.

    What every backend guarantees (tests/test_store_contract.py holds each
    on every backend):

    * every call that changes a job or a schedule moves ``version`` on
      (but for a running job's saved stats, progress no listing shows)
      and, on a shared store, sends the other stores a notice of its kind
      (store.notices) in the same transaction; a call that changes
      nothing (a claim that finds no job, an end already recorded) moves
      nothing and tells nothing;
    * the first end recorded stands (``mark_finished``);
    * a job whose policy retries it gets its retry in the transaction that
      records its end, however it ends (``mark_finished``, ``recover``,
      ``IClusterStore.mark_lost`` and ``declare_dead``): never lost, never
      queued twice (store.retrying);
    * a claim is decided by the run policies (store.runpolicy), the same
      on every backend, and two claimers never take one job (``claim_next``);
    * a schedule's due time is fired once (IScheduleStore)."""

    shared = Attribute(
        "Whether other services (nodes) use this table too. A table that is"
        " not shared is settled whole at start: every job it shows running is"
        " stale, whatever node name claimed it.")

    location = Attribute(
        "Where the table is, as a log line may show it: the SQLite file's"
        " path, or a PostgreSQL URL without its password.")

    version = Attribute(
        "An int that changes whenever any job or schedule changes (added,"
        " claimed, started, ended, forgotten), for whichever service changed"
        " it, so answers built from the table can be cached. A running job's"
        " saved stats (IClusterStore.save_stats) do not move it: no listing"
        " shows them, and they are saved every few seconds per running job. Read at once, not"
        " a Deferred: dashboards poll answers cached on it. A shared backend"
        " keeps it current from the other nodes' notices, so it may trail"
        " their changes by the time a notice takes.")

    def add(record):
        """Adds a pending job (durably: it survives a power cut once the
        Deferred fires). Fails with DuplicateJob if its id (any case) exists.
        A job with ``schedule`` set adds 1 to that schedule's ``runs`` in the
        same transaction (the schedule of that name, any case, created no
        later than the job: a schedule added again under a deleted one's
        name does not count its jobs); a retry an end queues is not counted.
        Fires with the stored record."""

    def get(jobid):
        """The JobRecord with this id (any case), stats included, or None."""

    def claim_next(node, projects, now, max_per_spider=None, can_run=None):
        """Takes the pending job to start next (highest priority, then
        oldest) among those of ``projects`` (names, any case) that may run
        now (see store.runpolicy: none of its locks held by a running job, its
        spider under ``max_per_spider`` running jobs, and, for a retry, its
        ``not_before`` not after ``now``), marking it running on ``node``
        with start time ``now`` (a time of day), in one atomic step: two
        claimers never take the same job. ``can_run(record)``, where
        given, says whether this node can run a job at all (enforce the
        limits of its ``policy``): one it cannot is left for a node that
        can. Fires with the record, or None."""

    def next_retry(projects, after):
        """The earliest ``not_before`` later than ``after`` (epoch seconds)
        of the pending jobs of ``projects`` (names, any case), or None: when
        the next retry waiting for its time may be claimed."""

    def release_claim(jobid, node, claimed_at):
        """Puts a claimed job back in the queue, if it is still as the claim
        of ``node`` at ``claimed_at`` left it (running there, no process
        recorded): for a claim answered after its node began to stop, so a
        stop never loses a pending job. Fires with the pending record, or
        None when the job is no longer so (nothing changes then)."""

    def schedule_jobs(name):
        """(pending, running): how many jobs of schedule ``name`` wait or run.
        A schedule's name ignores case here too (the jobs hold it as spelt
        when each was queued)."""

    def runs(project, spider, schedule=None, limit=50, history=5):
        """(runs, history) of a spider (``schedule`` None) or of schedule
        ``schedule`` (its name in any case) run for that project and
        spider: ``runs`` the records (no stats) of its last ``limit``
        finished jobs, newest first (by end time); ``history`` the
        health.checks.RunCounts of the last ``history`` healthy runs, the
        ones its next run's drop and slower checks compare with."""

    def unfinished_schedule_jobs(name):
        """The ids of the jobs of schedule ``name`` (in any case) that wait or run, oldest
        first (for its overlap cancel_other and terminate_other)."""

    def mark_started(jobid, pid, proc_start=None):
        """Records the pid of a claimed job's process, and its identity
        (``_proctree.start_time``). Fires with the record."""

    def running(node=None):
        """The running jobs of ``node`` (None: of every node), stats included."""

    def mark_finished(jobid, outcome, end_time, exit_status=None, stats=None, reason=None,
                      detail=None):
        """Records how the job ended (outcome finished/failed/cancelled/lost),
        why (``reason``, a code of jobs.outcomes) and, if given, a sentence
        of it (``detail``). Fires with the ended record.

        The first end recorded stands: when the job has ended already (say
        another node declared it lost while this one was cut off from the
        table), or is unknown, nothing changes, no notice is sent, and the
        Deferred fires with None. A caller told None must not announce the
        end: it was announced where it was recorded.

        A run that ended ``finished`` is judged in the same transaction
        (health.checks): the record carries its ``items``, ``pages``,
        ``errors`` (from ``stats``), ``health`` ("healthy" or "degraded")
        and ``health_reasons``, compared, when its policy has a drop or
        slower check, with the last ``history`` healthy runs of its
        schedule (or, for a job no schedule queued, of its project and
        spider). Any other outcome has health None. Every way a job ends
        (cancel_pending, recover, the cluster's) is judged so."""

    def cancel_pending(jobid, end_time, reason="cancel.json"):
        """Ends the job as cancelled (with ``reason``: a user's cancel, or
        ``expired``) if it is still pending, atomically (a claim cannot slip
        in between). Fires with the ended record, or None when it was not
        pending."""

    def mark_cancel_requested(jobid, kill=False, reason="cancel.json"):
        """Records that a cancel was asked for a running job, and why
        (``reason``: the first cancel's stands), and with ``kill`` that it
        is to be killed now (``kill_requested``, which no later cancel
        takes back). The request is state, not an event: the
        node running the job carries out what the record asks, however it
        hears of it (a notice, or its own look at the table)."""

    def jobs(project=None):
        """(pending, running, finished) lists of JobRecords without stats, of
        one project (any case) or all: pending by start order, running by
        start time, finished most recent last."""

    def unfinished_jobs(project=None):
        """(pending, running) as ``jobs`` gives them."""

    def finished_rows(project=None, ids=None, make=tuple):
        """The finished jobs (of ``project``; among ``ids`` when given) as
        ``make(row)`` of each row of job_table.FINISHED_ROW's columns, made
        as they are read: what a listing kept in
        memory holds, catching up with the ends and prunes ``journal``
        names."""

    def listed_jobs(ids):
        """The records, as listings read them, of the jobs ``ids`` still kept."""

    journal = Attribute(
        "A store.journal.ChangeJournal: which finished jobs each version of"
        " the table ended or pruned, for listings kept in memory.")

    def counts():
        """A dict of how many jobs are pending, running and finished."""

    def tally():
        """How many jobs there are of each state, project and node: a dict
        of ``(state, project, node)`` to a count, ``node`` None for a job no
        node took. Counted by the table, no record read."""

    def recover(node, end_time, stats_of):
        """At start: every job still marked running on ``node`` is ended as
        lost, with the stats ``stats_of(record)`` returns, each with its
        retry as ``mark_finished`` makes one. Jobs of other nodes are left
        alone; ``node`` None means every node's (a table no other service
        shares). Fires with the ended records."""

    def prune(keep, node=None):
        """Forgets the oldest finished jobs past ``keep``; fires with their
        records. With ``node``, only that node's finished jobs and those no
        node ran are counted and forgotten (each node of a shared table
        keeps its own, and deletes their files from its --dir)."""

    def close():
        """Closes the table: writes still waiting (for a lock) fail with
        StoreError, and so do later calls."""


class IScheduleStore(Interface):
    """The recurring schedules, beside the jobs (a ScheduleRecord each).
    Names compare ignoring case; every method returns a Deferred, and every
    change moves the job store's ``version`` on.

    A due time is fired once, however many timetables (nodes) share the
    table: a firing first takes its due time with ``claim_firing``, one
    guarded write, and only the one that won checks the spider, queues the
    job (``IJobStore.add`` counts it in ``runs``, in the insert's
    transaction) and records it (``update_schedule``)."""

    def add_schedule(record):
        """Adds a schedule; fails with DuplicateSchedule. Fires with the record."""

    def get_schedule(name):
        """The ScheduleRecord called ``name`` (any case), or None."""

    def schedules(project=None):
        """Every schedule, or those of one project (any case), oldest first."""

    def claim_firing(name, seq, seen_next_due, next_due, due=None):
        """Takes the firing of schedule ``name`` (``seq``: not a later one
        of the name) that was decided from its record with ``next_due``
        ``seen_next_due``: sets ``next_due``, and ``last_due`` to ``due``
        when given, in one write made only if the schedule is not paused,
        its ``next_due`` is still ``seen_next_due`` and ``due`` is later
        than its ``last_due``. Fires with the new record when this caller
        took it (it alone fires ``due``), or None when another firing (a
        node's) took it first or the schedule changed meanwhile."""

    def claim_firings(claims):
        """``claim_firing`` for many schedules at once, in one transaction
        (one commit for a burst of firings due together): ``claims`` is a
        list of ``(name, seq, seen_next_due, next_due, due)``. Fires with a
        list in the same order, each the new record or None, exactly as
        ``claim_firing`` would have answered it: on a shared table, of two
        nodes claiming the same due time in their batches one takes it."""

    def update_schedule(name, seq=None, skipped_added=0, buffered_added=0,
                        caught_up_added=0, **changes):
        """Sets the fields ``changes`` names (columns.SCHEDULE_SETTABLE: a
        firing's, a pause's, an edit's) and adds ``skipped_added``,
        ``buffered_added`` and ``caught_up_added`` to the counts, of the
        schedule ``name`` (and, given, ``seq``: not a later one of the same
        name). ``runs`` is not among them: IJobStore.add counts each job.
        A new ``priority`` is given, in the same transaction, to the
        schedule's pending jobs (those queued since it was added). Fires
        with the new record, or None if there is none."""

    def delete_schedule(name):
        """Forgets the schedule and the chain firings it was owed (in one
        write: a new schedule given its name makes none of them); fires
        with the record it had, or None."""

    def chain_firings():
        """The chain firings owed (store.chain_firings.ChainFiring: a
        schedule's folded name, the upstream job, when its end wrote it),
        oldest first. A job's final end writes one for every chain schedule
        (``kind`` "after") of its project whose upstream it is (its spider,
        or ``schedule:NAME`` of its schedule) and whose ``chain_on`` its end
        matches, in the transaction of the end, once: an end that queues a
        retry writes none, and no end writes one twice."""

    def settle_chain_firing(name, upstream, seq=None, skipped_added=0, **changes):
        """Deletes the firing of schedule ``name`` owed for job ``upstream``
        and, in the same transaction and only if it was still there, makes
        the changes ``update_schedule`` would make: whoever settles a
        firing first records it, and a second settling (another node,
        a restart) changes nothing. Fires with the new record, or None when
        the firing was gone (or the schedule is)."""


class ITokenStore(Interface):
    """The service's tokens (a token_records.TokenRecord each), beside the
    jobs, so every node of a cluster shares them. Names compare ignoring
    case; every method returns a Deferred. Only hashes are kept, never a
    secret. A change (add, revoke, rotate) is announced to the other nodes
    (a TOKEN notice) in its transaction."""

    def add_token(record):
        """The TokenRecord added; fails with DuplicateToken for a name taken."""

    def tokens():
        """Every TokenRecord, in the order of their folded names."""

    def get_token(name):
        """The TokenRecord named ``name``, or None."""

    def revoke_token(name, audit=None):
        """Deletes the token; the TokenRecord it was, or None if there was none."""

    def rotate_token(name, new_hash, previous_until, audit=None):
        """Gives the token ``new_hash``; its hash until now stays valid
        until ``previous_until`` (epoch seconds; None: not at all). The new
        TokenRecord, or None if there is no such token."""

    def tokens_used(used):
        """Records ``{name: time}`` as the tokens' ``last_used``, never
        moving one back. Tokens that do not exist are skipped."""


class IAuditStore(Interface):
    """The audit of every write (an audit_records.AuditEntry each), beside
    the jobs, so every node of a cluster writes and lists the same one.
    Every method returns a Deferred."""

    def add_audit(entry):
        """The AuditEntry written (its ``seq`` set), in a transaction of its
        own: committed when the Deferred fires."""

    def audit(projects=None, since=None, limit=100, every=False):
        """The AuditEntries newest first (by time, then by seq), at most
        ``limit`` (1 to 1000): of ``projects`` (names, any case) if given;
        else of every project, and with ``every`` the rows of no project
        (the tokens' changes) too. ``since`` (epoch seconds): only rows
        from then on."""

    def prune_audit(before):
        """Deletes the rows older than ``before`` (epoch seconds); how many."""


class IClusterStore(Interface):
    """The nodes sharing one job table (the PostgreSQL backend), and what
    the others need of a node's running jobs. Times are the database's
    clock, never a node's; every method returns a Deferred. Node names are
    compared exactly."""

    def register_node(name, url, timeout=None, projects=()):
        """Records node ``name``, reached at ``url`` and serving
        ``projects`` (names), as alive and started now (again, if it was
        known, even declared dead). With ``timeout``
        (seconds), fails with NodeNameTaken, changing nothing, when a node
        of that name at another URL was heard within it and not declared
        dead. Fires with what was known of the name before (a dict as
        ``nodes`` gives; ``dead`` True if it was declared dead meanwhile,
        its jobs lost), or None."""

    def heartbeat(name):
        """Says node ``name`` is alive now. Fires with False when it is not
        registered or was declared dead (its running jobs are lost: it must
        end them and register again), True otherwise. Moves no version."""

    def declare_dead(timeout_seconds, end_time=None, reason=None):
        """Marks dead every live node silent for more than
        ``timeout_seconds``; fires with a dict, by name sorted, of the nodes
        newly marked, each returned exactly once however many nodes ask at
        the same time. With ``end_time``, their running jobs are ended lost
        in the same transaction, as ``mark_lost`` does, and each node's
        value is the list of the JobRecords so ended (else empty lists)."""

    def nodes():
        """Every node known, by name: dicts of name, url, heartbeat and
        started (epoch seconds), dead (bool), age (seconds since its
        heartbeat, by the database's clock) and projects (the folded names
        of the projects it serves, sorted)."""

    def mark_lost(node, end_time, reason=None):
        """Ends every job still running on ``node`` as lost at
        ``end_time``, keeping the stats last saved for it, each with its
        retry as ``mark_finished`` makes one; fires with the ended records
        (none for a job already ended, so exactly once)."""

    def save_stats(jobid, stats):
        """Saves a running job's latest stats (a dict), for the other nodes'
        answers and for a loss; fires with False when it no longer runs."""

    def on_notice(callback):
        """Calls ``callback(notice)`` (a store.notices.StoreNotice: its
        ``kind``, ``version``, ``jobid``, ``node``) on the reactor thread for
        every change another node makes, as soon as it is heard. Returns a
        function that stops the calls. (Not a Deferred.)"""
