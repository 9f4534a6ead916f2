"""Recurring schedules: the use cases (add, pause, resume, delete) and the
one timer that fires them.

The timer is a single ``callLater`` on the injected clock, set for the
earliest due schedule and set again after every change: no timer per
schedule and no polling loop, so a thousand idle schedules cost nothing
between their due times. A firing queues its job through the job core's
JobSubmitter exactly as schedule.json would (the spider is checked again:
it may have changed), with the id ``NAME-YYYYMMDDTHHMMSSZ`` of its due time,
so that whatever happens twice (a restart, a retried write, another node)
the store's duplicate check lets one job through. Every firing is written
to the schedule's row before the next one is considered, so counts and the
next due time survive a restart or a ``kill -9``. A firing takes its due
time before anything else (IScheduleStore.claim_firing): on a cluster,
where every node's timer wakes for it, only the node that took it checks
the spider and queues the job. The schedules one wake finds due take their
due times together, in one write (claim_firings): a thousand due in the
same second cost one commit, and their checks of one spider one reader
(spiders.reuse).
"""

import math
import secrets
from dataclasses import dataclass, replace

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..jobs import policies
from ..store.records import DuplicateJob, Refusal
from ..jobs.submit import JobRequest, SubmitRefused
from ..reliability.policy import JobPolicy
from ..names import MAX_JOB_ID_LENGTH, fold, name_problem
from . import chains, edits, times
from .overlap import plan_for
from ..store.schedule_records import DuplicateSchedule, ScheduleRecord

# A schedule's jobs are named NAME-YYYYMMDDTHHMMSSZ: 17 more characters,
# which must still pass the name rule.
MAX_SCHEDULE_NAME = MAX_JOB_ID_LENGTH - len("-20260101T000000Z")

# The most jobs one backfillschedule.json queues.
MAX_BACKFILL = 100

# After a firing that failed for want of the job table (locked, full), the
# schedule is tried again this much later rather than at once.
RETRY_SECONDS = 5.0

# The timer runs on the reactor's clock (monotonic) and due times are times
# of day: the timer looks at the wall clock at least this often, so a clock
# stepped forward makes a run late by no more than this (within the minute
# a run may be late, times.due_now). Stepped back, a wake finds nothing due
# yet and sets the timer again for the rest.
WALL_CHECK_SECONDS = 30.0


class ScheduleRefused(Refusal):
    """A schedule request that cannot be met; ``message`` says why."""


class UnknownSchedule(ScheduleRefused):
    """No schedule of that name in that project."""

    @classmethod
    def named(cls, project, name):
        return cls(f"no schedule {name!r} in project {project!r}")


@dataclass(frozen=True)
class ScheduleRequest:
    """addschedule.json's parameters, as given (None where absent)."""

    project: str
    spider: str
    cron: str = None
    every: str = None
    tz: str = None
    name: str = None
    overlap: str = None
    misfire: str = None
    settings: tuple = ()
    arguments: tuple = ()
    priority: float = 0.0
    # Its jobs' policy values (reliability.policy.JobPolicy), or None.
    policy: object = None
    # A chain's upstream (a spider, or schedule:NAME) in place of cron and
    # every, and the ``on`` parameters as given (schedules.chains).
    after: str = None
    on: tuple = ()
    jitter: str = None
    pause_after: str = None


def rule_of_record(record):
    """The times.Rule a stored schedule fires by; None for a chain, which
    fires when its upstream's jobs end (schedules.chains)."""
    if record.kind == chains.CHAIN_KIND:
        return None
    if record.kind == "cron":
        return times.rule_of(cron=record.rule, tz=record.tz)
    return times.rule_of(every=record.rule, tz=record.tz)


@dataclass(frozen=True)
class _ChainRule:
    """What a chain stores in place of a times.Rule: its upstream as
    ``rule`` and the zone its times are shown in; it has no due times."""

    text: str
    zone_name: str
    kind: str = chains.CHAIN_KIND

    def first_due(self, anchor):
        return None


def _chain_times(request, local_zone):
    """The _ChainRule of a chain request before its upstream is checked;
    refused (ScheduleRefused) when it also asks for times."""
    for given, what in ((request.cron, "cron"), (request.every, "every"),
                        (request.misfire, "misfire")):
        if given is not None:
            raise ScheduleRefused(f"parameter '{what}': a chain (after=) runs when its"
                                  f" upstream's jobs end, not at times: give one of them")
    if not request.after:
        raise ScheduleRefused("parameter 'after' is empty")
    zone_name, _ = times.parse_zone(local_zone if request.tz is None else request.tz)
    return _ChainRule(text=request.after, zone_name=zone_name)


class _Claims:
    """The due times one wake of the timer takes: each firing asks for its
    own (``claim``), and ``send`` takes them all in one write
    (IScheduleStore.claim_firings), each firing then hearing its answer as
    ``claim_firing`` would have given it."""

    def __init__(self):
        self._asked = []

    def claim(self, claim):
        """Deferred record (or None: not taken) of ``claim``, a tuple of
        claim_firing's arguments, once ``send`` has been answered."""
        answer = defer.Deferred()
        self._asked.append((claim, answer))
        return answer

    def send(self, store):
        asked, self._asked = self._asked, []
        if not asked:
            return
        sent = defer.maybeDeferred(store.claim_firings, [claim for claim, _ in asked])

        def answered(taken):
            for (_, answer), record in zip(asked, taken):
                # A firing cancelled meanwhile (its schedule paused or
                # deleted) has had its answer: CancelledError.
                if not answer.called:
                    answer.callback(record)

        def failed(failure):
            # Each firing says its failure and is tried again later.
            for _, answer in asked:
                if not answer.called:
                    answer.errback(failure)

        sent.addCallbacks(answered, failed)


class Timetable:
    """The service's recurring schedules.

    ``store`` provides IScheduleStore and IJobStore (schedule_jobs, get);
    ``submitter`` is the JobSubmitter; ``clock`` an IReactorTime, for the
    timer; ``wall`` the wall clock (``seconds()``) due times follow (by
    default ``clock``);
    ``local_zone`` the zone a schedule added without ``tz`` runs in (the
    service's local zone, read once with the options). ``on_change(record)`` is called
    after a schedule is added, changed by a firing, paused, resumed or
    deleted here (for the dashboard's events and the metrics);
    ``on_change_elsewhere(record)`` after ``reload`` found one another node
    added, changed or deleted (for the dashboard's events). ``cancel`` is
    IScheduler.cancel (``cancel(jobid, now=False)``), for the overlap
    policies cancel_other and terminate_other."""

    log = Logger()

    def __init__(self, store, submitter, clock, local_zone="UTC", on_change=None,
                 on_change_elsewhere=None, wall=None, cancel=None):
        self._store = store
        self._cancel = cancel
        self._submitter = submitter
        self._clock = clock
        self._wall = clock if wall is None else wall
        self._wake_at = None
        self._local_zone = local_zone
        self._on_change = on_change or (lambda record: None)
        self._on_change_elsewhere = on_change_elsewhere or (lambda record: None)
        # The waiters of the reload under way, and of the one to follow it.
        self._reloading = None
        self._reload_after = []
        self._schedules = {}
        self._rules = {}
        # {schedule key: the Deferred of its firing under way}
        self._firing = {}
        self._retry_at = {}
        self._timer = None
        self._running = False

    # -- starting and stopping -------------------------------------------------

    @defer.inlineCallbacks
    def start(self):
        """Loads the schedules and settles what came due while the service
        was down (misfire=once: one job for all the runs missed; skip:
        none), then sets the timer. Fires when that is done."""
        for record in (yield self._store.schedules()):
            self._remember(record)
        try:
            now = self._wall.seconds()
            # The timer is set only once every schedule has caught up: set
            # earlier (by a firing that ended), it would wake for a schedule
            # not caught up yet and, as a timer allows a minute late, run
            # what misfire=skip says is missed.
            for key in list(self._schedules):
                record = self._schedules.get(key)
                if record is None:
                    continue
                try:
                    yield self._count_unrecorded_job(record)
                except Exception:
                    # Its next firing goes on from its row as it is.
                    self.log.failure("schedule {name}: could not count the job queued"
                                     " before the last stop", name=record.name)
                record = self._schedules.get(key)
                if record is not None and not record.paused and key in self._rules:
                    # A failure is the firing's own: logged, tried again later.
                    yield self._fire(record, now, times.catch_up)
        finally:
            # Whatever went wrong with one schedule, the others fire.
            self._running = True
            self._arm()

    @defer.inlineCallbacks
    def _count_unrecorded_job(self, record):
        # A service killed between queueing a firing's job and recording it
        # left the job of ``last_due`` (the due time its firing took) out of
        # ``last_job`` (its insert counted it in ``runs``): record it. (A
        # table written before firings took their due time first shows such
        # a job as that of ``next_due``, not taken: take that due time as
        # fired too.)
        for due in (record.last_due, record.next_due):
            if due is None:
                continue
            jobid = times.job_id_for(record.name, due)
            if record.last_job == jobid or (yield self._store.get(jobid)) is None:
                continue
            if due != record.last_due:
                rule = self._rules.get(fold(record.name))
                upcoming = rule.next_after(due, record.anchor) if rule is not None else due
                record = yield self._store.claim_firing(record.name, record.seq, due,
                                                        upcoming, due)
            if record is not None:
                yield self._update(record, last_job=jobid, error=None)
            return

    def reload(self):
        """Reads the schedules again (another node added, changed or deleted
        one): the timer then serves the table as it is, and
        ``on_change_elsewhere`` hears of each schedule found added, changed
        or deleted. Coalesced: calls while a read is under way make one
        more read once it is done, not one each (reads answered out of
        order would leave an older table in place). Fires once a read
        begun after the call is done."""
        done = defer.Deferred()
        if self._reloading is None:
            self._reloading = [done]
            self._reload_now()
        else:
            self._reload_after.append(done)
        return done

    def _reload_now(self):
        self._read_again().addBoth(self._reloaded)

    def _reloaded(self, result):
        waiters, self._reloading = self._reloading, None
        if self._reload_after:
            self._reloading, self._reload_after = self._reload_after, []
            self._reload_now()
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(None)

    @defer.inlineCallbacks
    def _read_again(self):
        stored = {fold(r.name): r for r in (yield self._store.schedules())}
        changed = []
        for key, record in list(self._schedules.items()):
            if key not in stored or stored[key].seq != record.seq:
                self._forget(record)
                if key not in stored:
                    changed.append(record)
        for key, record in stored.items():
            # One firing here says itself what it changed, once it is done.
            if key not in self._firing:
                if self._schedules.get(key) != record:
                    changed.append(record)
                self._remember(record)
        self._arm()
        for record in changed:
            self._on_change_elsewhere(record)

    def stop(self):
        self._running = False
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _remember(self, record):
        key = fold(record.name)
        self._schedules[key] = record
        try:
            rule = rule_of_record(record)
        except times.RuleError as e:
            # A zone taken out of the system's tzdata since, say.
            self._rules.pop(key, None)
            self.log.error("schedule {name} cannot fire: {why}", name=record.name, why=e)
            return
        if rule is None:
            self._rules.pop(key, None)  # a chain: no timer wakes for it
        else:
            self._rules[key] = rule

    def _stop_firing(self, key):
        """Cancels the firing under way of schedule ``key``, if any: its
        job is not queued (a reader's check in flight is stopped)."""
        firing = self._firing.pop(key, None)
        if firing is not None:
            firing.cancel()

    def _forget(self, record):
        key = fold(record.name)
        self._stop_firing(key)
        self._schedules.pop(key, None)
        self._rules.pop(key, None)
        self._retry_at.pop(key, None)

    # -- the one timer ---------------------------------------------------------

    def _wake_time(self, key, record):
        if record.paused or key in self._firing or key not in self._rules:
            return None
        if record.next_due is None:
            return None
        starts = record.next_due + times.jitter_offset(record.name, record.jitter)
        return max(starts, self._retry_at.get(key, starts))

    def _arm(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self._wake_at = None
        if not self._running:
            return
        wakes = [w for w in (self._wake_time(k, r) for k, r in self._schedules.items())
                 if w is not None]
        if wakes:
            now = self._wall.seconds()
            self._wake_at = max(min(wakes), now)
            delay = self._wake_at - now
            self._timer = self._clock.callLater(min(delay, WALL_CHECK_SECONDS), self._wake)

    def _wake(self):
        self._timer = None
        now = self._wall.seconds()
        # Every schedule due at this wake is claimed in one write: a burst
        # of a thousand costs one commit, not a thousand in a row.
        claims = _Claims()
        for key, record in list(self._schedules.items()):
            wake = self._wake_time(key, record)
            if wake is not None and wake <= now:
                self._fire(record, now, times.due_now, claims)
        claims.send(self._store)
        self._arm()

    def _arm_for(self, key):
        """Sets the timer again after the firing of schedule ``key`` ended,
        if that schedule now wakes before the timer would: the others'
        wake times did not move, and a whole ``_arm`` is a pass over every
        schedule (after each firing of a burst of a thousand, a million)."""
        record = self._schedules.get(key)
        wake = None if record is None else self._wake_time(key, record)
        if wake is None:
            return
        if self._timer is None or not self._timer.active() or wake < self._wake_at:
            self._arm()

    def next_wake(self):
        """The due time (epoch seconds) the timer waits for, or None: for
        tests and the benchmark, which check that one timer serves every
        schedule."""
        return self._wake_at if self._timer is not None else None

    # -- firing ----------------------------------------------------------------

    def _fire(self, record, now, decide, claims=None):
        key = fold(record.name)
        self._firing[key] = fired = self._settle(record, now, decide, claims)

        def failed(failure):
            if failure.check(defer.CancelledError):
                return None  # deleted or paused while it fired
            self._retry_at[key] = self._wall.seconds() + RETRY_SECONDS
            self.log.failure("schedule {name}: its firing failed; trying again in {s:g} s",
                             failure, name=record.name, s=RETRY_SECONDS)

        def done(_):
            if self._firing.get(key) is fired:
                del self._firing[key]
            self._arm_for(key)

        fired.addCallbacks(lambda _: self._retry_at.pop(key, None), failed)
        fired.addBoth(done)
        return fired

    def _current(self, record):
        """The schedule as it is now, if it is still ``record``'s (not
        deleted, nor replaced by a new one of its name) and not paused."""
        current = self._schedules.get(fold(record.name))
        if current is None or current.seq != record.seq or current.paused:
            return None
        return current

    @defer.inlineCallbacks
    def _settle(self, record, now, decide, claims=None):
        record = self._current(record)
        if record is None:
            return
        rule = self._rules[fold(record.name)]
        # A schedule with jitter lives on its due times moved by its offset:
        # what is due is what has started by now.
        now -= times.jitter_offset(record.name, record.jitter)
        due, next_due = decide(rule, record.anchor, record.next_due, record.last_due, now,
                               record.misfire)
        if due is None and next_due == record.next_due:
            return
        # The due time is taken first, in one guarded write: of the nodes
        # whose timers woke for it, only the one that took it checks the
        # spider and queues the job (IScheduleStore.claim_firing). A
        # timer's wake claims its burst together (``claims``, a _Claims).
        claim = (record.name, record.seq, record.next_due, next_due, due)
        claimed = yield (self._store.claim_firing(*claim) if claims is None
                         else claims.claim(claim))
        if claimed is None:
            yield self._taken_elsewhere(record)
            return
        # Held as the row is now, said once the firing is done.
        self._keep(claimed, announce=False)
        changes = {} if due is None else (yield self._queue(claimed, due))
        grace = 0.0 if decide is times.catch_up else times.GRACE
        if due is not None and changes.get("last_job") and now - due > grace:
            # A run made up for (misfire=once), at start or after a long stall.
            changes["caught_up_added"] = 1
        if changes:
            yield self._update(claimed, **changes)
        else:
            self._keep(claimed)

    @defer.inlineCallbacks
    def _taken_elsewhere(self, record):
        # Another node fired it (or it changed meanwhile): go on from the
        # row as it is now, as a reload would.
        current = yield self._store.get_schedule(record.name)
        held = self._schedules.get(fold(record.name))
        if current is None or held is None or current.seq != record.seq or current == held:
            return  # deleted or replaced (a reload says so), or heard already
        self._remember(current)
        self._on_change_elsewhere(current)

    def _queue(self, record, due):
        """Queues the job of ``record`` for ``due``; the schedule's changes."""
        return self.queue_job(record, times.job_id_for(record.name, due))

    @defer.inlineCallbacks
    def queue_job(self, record, jobid, arguments=(), upstream=None, overlap=None,
                  current=True):
        """Queues a job of schedule ``record`` called ``jobid`` (a firing's,
        a run asked now, a chain's), as its overlap policy allows, with
        ``arguments`` (pairs) after the schedule's own and, for a chain's,
        the ``upstream`` job that owes it. Fires with the schedule's
        changes (for ``update_schedule``): the job as its ``last_job`` (and
        ``buffered_added`` when it waits behind another), a skip, or the
        error that queued nothing; the job is counted in ``runs`` by the
        insert that queues it (IJobStore.add), never here. The id is the
        duplicate guard: a job of that id queued before (a restart, another
        node) is not queued again. ``overlap`` in place of the schedule's
        own (a backfill's buffer_all); schedules.overlap says what each
        does. With ``current`` (a firing's), nothing is queued once the
        schedule is paused or deleted meanwhile; a run asked by name (now,
        a backfill) is queued while it exists."""
        if (yield self._store.get(jobid)) is not None:
            return self._queued_before(record, jobid)
        pending, running = yield self._store.schedule_jobs(record.name)
        plan = plan_for(overlap or record.overlap, pending, running)
        if plan.skip and (yield self._store.get(jobid)) is not None:
            # The job seen waiting is this very one, queued meanwhile by
            # another node making the same firing: counted, not a skip.
            return self._queued_before(record, jobid)
        if plan.skip:
            self.log.info("schedule {name}: skipped the run {jobid}, its last job is"
                          " still {state}", name=record.name, jobid=jobid,
                          state="pending" if pending else "running")
            return {"skipped_added": 1}
        request = JobRequest(
            project=record.project, spider=record.spider, settings=record.settings,
            arguments=tuple(record.arguments) + tuple(arguments), jobid=jobid,
            priority=record.priority, schedule=record.name,
            schedule_locks=(policies.schedule_lock(record.name),) if plan.locked else (),
            policy=JobPolicy.from_json(record.policy), upstream=upstream)
        try:
            if plan.cancel:
                if not self._may_queue(record, current):
                    return {}
                # The new job checked first: one that cannot be queued (the
                # spider gone, say) must not cost the running one its run.
                yield self._submitter.check(request)
                yield self._cancel_others(record, jobid, plan.kill)
            if not self._may_queue(record, current):
                return {}  # deleted or paused while its firing was looked at
            job = yield self._submitter.submit(request)
        except DuplicateJob:
            return {"last_job": jobid, "error": None}
        except SubmitRefused as e:
            self.log.warn("schedule {name}: queued no job {jobid}: {why}",
                          name=record.name, jobid=jobid, why=e.message)
            return {"error": e.message}
        self.log.info("schedule {name} queued job {jobid}", name=record.name, jobid=job.id)
        changes = {"last_job": job.id, "error": None}
        if plan.buffered:
            changes["buffered_added"] = 1
        return changes

    @staticmethod
    def _queued_before(record, jobid):
        # Queued before a restart (or by another node): not again, and
        # counted already (by its insert).
        if record.last_job == jobid:
            return {}
        return {"last_job": jobid, "error": None}

    def _may_queue(self, record, current):
        # A run asked by name (now, a backfill) read the schedule from the
        # table as it was asked: this node may not have heard of it yet.
        return not current or self._current(record) is not None

    @defer.inlineCallbacks
    def _cancel_others(self, record, jobid, kill):
        """Cancels (``kill``: kills at once) the jobs of ``record`` that
        wait or run, for its new job ``jobid``; on a cluster, one running
        on another node is asked through the table (IScheduler.cancel). A
        cancel that fails is logged: the new job still waits for the lock."""
        for other in (yield self._store.unfinished_schedule_jobs(record.name)):
            if fold(other) == fold(jobid):
                continue  # the new job itself, queued meanwhile by another node
            try:
                was = yield self._cancel(other, now=kill)
            except Exception:
                self.log.failure("schedule {name}: could not cancel job {other} for {jobid}",
                                 name=record.name, other=other, jobid=jobid)
                continue
            if was is not None:
                self.log.info("schedule {name}: {how} its job {other} ({was}) for {jobid}",
                              name=record.name, how="killed" if kill and was == "running"
                              else "cancelled", other=other, was=was, jobid=jobid)

    @defer.inlineCallbacks
    def _update(self, record, **changes):
        # Only this schedule's row: a firing of one deleted meanwhile must
        # not write into a new schedule given its name.
        updated = yield self._store.update_schedule(record.name, seq=record.seq, **changes)
        self._keep(updated)
        return updated

    def holds(self, record):
        """Whether the timetable holds ``record`` as its schedule's (not
        deleted or replaced since, as it last read the table) and it may
        queue jobs (not paused)."""
        return self._current(record) is not None

    def keep(self, updated):
        """Takes ``updated`` (a schedule's record a chain's firing wrote) as
        the schedule's, and says so (``on_change``)."""
        self._keep(updated)

    def _keep(self, updated, announce=True):
        """Takes ``updated``, written here, as the schedule's record, and
        says so, unless the schedule was deleted or replaced meanwhile."""
        current = self._schedules.get(fold(updated.name)) if updated is not None else None
        if current is not None and current.seq == updated.seq:
            self._schedules[fold(updated.name)] = updated
            if announce:
                self._on_change(updated)

    # -- the use cases -----------------------------------------------------------

    def schedules(self, project=None):
        """Deferred list of ScheduleRecords, oldest first."""
        return self._store.schedules(project)

    def has(self, name):
        """Whether schedule ``name`` exists (False once it is deleted)."""
        return fold(name) in self._schedules

    def zone_of(self, record):
        """The tzinfo a schedule's times are shown in (its own zone, also
        once it is deleted; UTC for a zone the system no longer knows)."""
        rule = self._rules.get(fold(record.name))
        if rule is not None:
            return rule.zone
        try:
            return times.parse_zone(record.tz)[1]
        except times.RuleError:
            return times.parse_zone("UTC")[1]

    @defer.inlineCallbacks
    def add(self, request):
        """Checks ``request`` as schedule.json checks a job and stores the
        schedule. Fires with the ScheduleRecord; fails with ScheduleRefused,
        DuplicateSchedule, SubmitRefused (project, spider, settings,
        arguments) or StoreError."""
        project = self._submitter.project(request.project)
        name = request.name or secrets.token_hex(8)
        problem = name_problem("schedule name", name)
        if problem is None and len(name) > MAX_SCHEDULE_NAME:
            problem = (f"schedule name is longer than {MAX_SCHEDULE_NAME} characters"
                       " (its jobs' ids add the due time to it)")
        if problem:
            raise ScheduleRefused(f"parameter 'name': {problem}")
        try:
            if request.after is None:
                if request.on:
                    raise ScheduleRefused("parameter 'on' is for a chain: give it with after=")
                rule = times.rule_of(cron=request.cron, every=request.every,
                                     tz=self._local_zone if request.tz is None else request.tz)
            else:
                rule = _chain_times(request, self._local_zone)
            overlap = times.parse_policy("overlap", request.overlap or "skip")
            misfire = times.parse_policy("misfire", request.misfire or "once")
            chain_on = chains.parse_on(request.on) if request.after is not None else ()
            jitter = times.parse_jitter(request.jitter) if request.jitter is not None else 0
            pause_after = edits.parse_pause_after(request.pause_after)
        except (times.RuleError, chains.ChainError) as e:
            raise ScheduleRefused(str(e)) from None
        if request.after is not None and chains.UPSTREAM_ARGUMENT in dict(request.arguments):
            raise ScheduleRefused(
                f"parameter {chains.UPSTREAM_ARGUMENT!r}: a chain's jobs get it, set to the"
                " upstream job's id; it cannot be one of the schedule's own arguments")
        if (yield self._store.get_schedule(name)) is not None:
            raise DuplicateSchedule(name)
        checked = yield self._submitter.check(JobRequest(
            project=project.name, spider=request.spider, settings=tuple(request.settings),
            arguments=tuple(request.arguments), priority=request.priority))
        if request.after is not None:
            rule = yield self._chain_rule(rule, project.name, name, checked.spider,
                                          request.after)
        # Its jobs could not run here: refused now, not at every firing.
        own = request.policy or JobPolicy()
        self._submitter.policy_of(project.name, checked.spider, own)
        anchor = float(math.floor(self._wall.seconds()))
        record = yield self._store.add_schedule(ScheduleRecord(
            name=name, project=project.name, spider=checked.spider, kind=rule.kind,
            rule=rule.text, tz=rule.zone_name, overlap=overlap, misfire=misfire,
            settings=tuple(request.settings), arguments=tuple(request.arguments),
            priority=float(request.priority), anchor=anchor, next_due=rule.first_due(anchor),
            created=self._wall.seconds(), policy=own.to_json(), chain_on=chain_on,
            jitter=float(jitter), pause_after=pause_after))
        self._remember(record)
        self.log.info("schedule {name} added: {project}/{spider} {kind}={rule} ({tz})",
                      name=record.name, project=record.project, spider=record.spider,
                      kind=record.kind, rule=record.rule, tz=record.tz)
        self._arm()
        self._on_change(record)
        return record

    @defer.inlineCallbacks
    def _chain_rule(self, rule, project, name, spider, after):
        """``rule`` (a chain's _ChainRule) with its upstream checked and
        named as stored: a spider of ``project`` (as its class names it), or
        schedule:NAME of one of its schedules. Refused when that upstream
        does not exist, or when the chain would close a loop."""
        if after.startswith(chains.SCHEDULE_PREFIX):
            upstream = yield self._store.get_schedule(after[len(chains.SCHEDULE_PREFIX):])
            if upstream is None or fold(upstream.project) != fold(project):
                raise ScheduleRefused(f"parameter 'after': no schedule"
                                      f" {after[len(chains.SCHEDULE_PREFIX):]!r} in project"
                                      f" {project!r}")
            text = chains.SCHEDULE_PREFIX + upstream.name
        else:
            try:
                found = yield self._submitter.check(JobRequest(project=project, spider=after))
            except SubmitRefused as e:
                raise ScheduleRefused(f"parameter 'after': {e.message}") from None
            text = found.spider
        siblings = yield self._store.schedules(project)
        loop = chains.find_loop(name, spider, text, siblings)
        if loop is not None:
            raise ScheduleRefused(
                f"parameter 'after': a chain after {text} would make a loop: "
                + chains.describe_loop(loop, siblings, spider, text))
        return _ChainRule(text=text, zone_name=rule.zone_name)

    @defer.inlineCallbacks
    def _own(self, project, name):
        record = yield self._store.get_schedule(name)
        if record is None or fold(record.project) != fold(project):
            raise UnknownSchedule.named(project, name)
        return record

    @defer.inlineCallbacks
    def delete(self, project, name):
        """Forgets schedule ``name`` of ``project``; jobs it queued stay as
        they are. Fires with the record it had; UnknownSchedule if none."""
        record = yield self._own(project, name)
        yield self._store.delete_schedule(record.name)
        self._forget(record)
        self._arm()
        self.log.info("schedule {name} deleted", name=record.name)
        self._on_change(record)
        return record

    @defer.inlineCallbacks
    def pause(self, project, name, note=None):
        """Stops schedule ``name`` firing until resumed, with ``note`` (why,
        for listschedules.json; a paused one takes the new note); fires
        with the record."""
        record = yield self._own(project, name)
        if record.paused:
            if note is None or note == record.note:
                return record
            return (yield self._update(record, note=note))
        self._stop_firing(fold(record.name))
        updated = yield self._update(record, paused=True, note=note)
        self._arm()
        self.log.info("schedule {name} paused", name=record.name)
        return updated

    @defer.inlineCallbacks
    def resume(self, project, name):
        """Fires schedule ``name`` again from its next due time after now
        (the runs due while it was paused are not made up for). Its note
        goes, and its streak of bad runs starts again from 0 (pause_after
        counts the runs after the resume)."""
        record = yield self._own(project, name)
        if not record.paused:
            return record
        rule = self._rules.get(fold(record.name))
        next_due = record.next_due
        if rule is not None:
            next_due = rule.next_after(self._wall.seconds(), record.anchor)
        updated = yield self._update(record, paused=False, next_due=next_due, note=None,
                                     failed_in_row=0)
        self._arm()
        self.log.info("schedule {name} resumed", name=record.name)
        return updated

    @defer.inlineCallbacks
    def edit(self, project, name, given):
        """Changes the parameters ``given`` ({name: value}, edits.EDITABLE;
        values as addschedule.json's parameters give them) of schedule
        ``name``; the others, its counts, and whether it is paused stay.
        Its next due time is computed afresh. Checked as ``add`` checks (the
        spider again, through the submitter); nothing is stored on a
        refusal. Fires with the new record; fails as ``add`` does, or with
        UnknownSchedule."""
        record = yield self._own(project, name)
        try:
            changes = edits.edit_changes(record, given, self._wall.seconds(), rule_of_record)
        except times.RuleError as e:
            raise ScheduleRefused(str(e)) from None
        edited = replace(record, **changes)
        if edited.kind == chains.CHAIN_KIND and chains.UPSTREAM_ARGUMENT in dict(
                edited.arguments):
            raise ScheduleRefused(
                f"parameter {chains.UPSTREAM_ARGUMENT!r}: a chain's jobs get it, set to the"
                " upstream job's id; it cannot be one of the schedule's own arguments")
        checked = yield self._submitter.check(JobRequest(
            project=record.project, spider=record.spider, settings=edited.settings,
            arguments=edited.arguments, priority=edited.priority))
        if given.get("after") is not None:
            # Checked and named as add names it, a loop refused.
            rule = yield self._chain_rule(_ChainRule(text=given["after"], zone_name=edited.tz),
                                          record.project, record.name, record.spider,
                                          given["after"])
            changes["rule"] = rule.text
        self._submitter.policy_of(record.project, checked.spider,
                                  JobPolicy.from_json(edited.policy))
        updated = yield self._store.update_schedule(record.name, seq=record.seq, **changes)
        if updated is None:
            raise UnknownSchedule.named(project, name)
        if fold(updated.name) in self._schedules:
            self._remember(updated)
        self._arm()
        self.log.info("schedule {name} edited: {keys}", name=updated.name,
                      keys=", ".join(sorted(given)))
        self._on_change(updated)
        return updated

    @defer.inlineCallbacks
    def run_now(self, project, name):
        """Queues one job of schedule ``name`` now, as a firing would (its
        overlap applies), named after the current time
        (``NAME-YYYYMMDDTHHMMSSZ``); a paused schedule runs too (asked by
        name). Fires with ``(record, jobid, changes)``: the job's id and
        what happened (``queued``: True, ``skipped_added``, or ``error``:
        why no job could be queued, with nothing written)."""
        record = yield self._own(project, name)
        jobid = times.job_id_for(record.name, self._wall.seconds())
        if (yield self._store.get(jobid)) is not None:
            return record, jobid, {}
        changes = yield self.queue_job(record, jobid, overlap=None, current=False)
        if changes.get("error"):
            # Refused (the spider is gone, say): the caller hears why, and
            # the schedule's own error stays its firings'.
            return record, jobid, changes
        # Not its last_job: that is its last firing's (a restart records a
        # firing's job by it).
        queued = changes.pop("last_job", None) is not None
        updated = (yield self._update(record, **changes)) if changes else record
        return (updated or record), jobid, dict(changes, queued=True) if queued else changes

    @defer.inlineCallbacks
    def backfill(self, project, name, start_text, end_text):
        """Queues a job of schedule ``name`` for each of its due times in
        [``start_text``, ``end_text``) (ISO 8601 times, ``from`` and ``to``;
        without an offset, in the schedule's zone), each named after its due time
        as its firing would be, so a due time already queued (a backfill
        repeated, or a firing that ran) is not queued again. Every job
        queued holds the schedule's lock (overlap buffer_all, whatever the
        schedule's own): they run one after another, oldest first, after
        any job of it already waiting or running. Fires with ``(record,
        queued, already)``: the ids queued, and the due times whose job
        existed. ScheduleRefused for a reversed range, one ending later
        than now, more than MAX_BACKFILL due times, or a chain (it has no
        due times); nothing is queued then."""
        record = yield self._own(project, name)
        if record.kind == chains.CHAIN_KIND:
            raise ScheduleRefused(f"schedule {record.name!r} is a chain (after="
                                  f"{record.rule}): it runs when its upstream's jobs end and"
                                  " has no due times to backfill")
        zone = self.zone_of(record)
        try:
            start = times.parse_instant("from", start_text, zone)
            end = times.parse_instant("to", end_text, zone)
        except times.RuleError as e:
            raise ScheduleRefused(str(e)) from None
        if end <= start:
            raise ScheduleRefused(f"parameter 'to': {end_text!r} is not later than 'from'"
                                  f" {start_text!r} (the range is [from, to))")
        if end > self._wall.seconds():
            # The due times to come are the timer's: backfilled, their jobs
            # would run at once, and their firings count them again.
            raise ScheduleRefused(f"parameter 'to': {end_text!r} is later than now: a"
                                  " backfill is for due times passed")
        try:
            rule = rule_of_record(record)
        except times.RuleError as e:
            raise ScheduleRefused(f"schedule {record.name!r} has no due times to backfill:"
                                  f" {e}") from None
        dues = times.dues_between(rule, record.anchor, start, end, MAX_BACKFILL)
        if len(dues) > MAX_BACKFILL:
            raise ScheduleRefused(
                f"parameter 'to': the range holds more than {MAX_BACKFILL} due times;"
                " backfill it in parts")
        queued, already, buffered = [], [], 0
        for due in dues:
            jobid = times.job_id_for(record.name, due)
            if (yield self._store.get(jobid)) is not None:
                already.append(due)
                continue
            changes = yield self.queue_job(record, jobid, overlap="buffer_all", current=False)
            if changes.get("error"):
                # The jobs queued before it stay (each counted by its
                # insert): so do their buffered counts.
                if buffered:
                    yield self._update(record, buffered_added=buffered)
                raise ScheduleRefused(f"backfill stopped at {jobid}: {changes['error']}"
                                      + (f" ({len(queued)} queued before it)" if queued
                                         else ""))
            if changes.get("last_job"):
                queued.append(jobid)
                buffered += changes.get("buffered_added", 0)
        updated = record
        if queued:
            # Read back with the runs their inserts counted.
            updated = (yield self._update(record, buffered_added=buffered)) or record
        self.log.info("schedule {name}: backfilled {n} job(s), {m} due time(s) queued before",
                      name=record.name, n=len(queued), m=len(already))
        return updated, queued, already

    def heard_paused(self, record):
        """A job's end paused schedule ``record`` (its pause_after: the
        store did it, in the end's transaction): its firings stop here now."""
        key = fold(record.name)
        held = self._schedules.get(key)
        if held is None or held.seq != record.seq:
            return
        self._stop_firing(key)
        self._schedules[key] = record
        self._arm()
        self.log.warn("schedule {name} paused itself: {note}", name=record.name,
                      note=record.note)
        self._on_change(record)
