"""Chain schedules: a spider run after each job of another that ends so.

A chain is a schedule of ``kind`` "after" whose ``rule`` names its
upstream: a spider of its project, or ``schedule:NAME`` for the jobs of
another schedule of its project. The end of an upstream job writes the
firing it owes to the job table's outbox in the transaction of the end
(store.chain_firings); ``Chains`` here reads the outbox and queues each
firing's job through the timetable (``Timetable.queue_job``: the overlap
policy applies) with the id ``NAME-after-UPSTREAMJOBID`` and the spider
argument ``upstream_job``, then deletes the row and counts the job in one
transaction (IScheduleStore.settle_chain_firing). The id is the duplicate
guard and the settle the count's: whatever restarts or nodes come between
the end, the queueing and the count, a firing queues one job, counted once.

Loops are refused when a chain is added (find_loop); two chains added at
once can each pass that check, so a firing whose upstream line (read back
through the jobs' ``upstream``) holds a job of its own chain queues
nothing: the row is settled with the schedule's error saying so.

The outbox is read right after a local end that wrote to it, at start,
and every SWEEP_SECONDS, so a firing left by a node killed between an end
and its queueing is made by whichever node sweeps next.
"""

import hashlib
from dataclasses import dataclass

from twisted.internet import defer, task
from twisted.logger import Logger

from ..names import MAX_JOB_ID_LENGTH, fold
from ..store.chain_firings import CHAIN_ENDS, CHAIN_KIND, SCHEDULE_PREFIX

# The spider argument that tells a chain's job which upstream job it follows.
UPSTREAM_ARGUMENT = "upstream_job"
# The ends a chain fires on when ``on`` is not given.
DEFAULT_ON = ("healthy",)
# How often every node reads the outbox for firings nobody made.
SWEEP_SECONDS = 30.0
# The hexadecimal digits of the upstream's hash in an id too long otherwise.
_HASH_DIGITS = 16
# How many jobs back a firing's upstream line is read for a loop: a line
# longer than this is not a loop's first turn, and the walk stays short.
LOOP_STEPS = 50


class ChainError(ValueError):
    """A chain that cannot be added; the message names the parameter."""


def parse_on(values):
    """The ends a chain fires on, from the ``on`` parameters (each one end
    or several, comma-separated), in CHAIN_ENDS order; DEFAULT_ON for none.
    Raises ChainError for an end not known."""
    given = [part.strip().lower() for value in values for part in value.split(",")]
    given = [part for part in given if part]
    unknown = [part for part in given if part not in CHAIN_ENDS]
    if unknown:
        raise ChainError(f"parameter 'on': {unknown[0]!r} is not an end: use one or more of"
                         f" {', '.join(CHAIN_ENDS)}")
    return tuple(end for end in CHAIN_ENDS if end in given) or DEFAULT_ON


def chain_job_id(name, upstream):
    """The id of the job chain ``name`` queues after job ``upstream``:
    ``NAME-after-UPSTREAM``; when that is longer than a job id may be, the
    longest part of ``NAME-after-`` that leaves room, then 16 hex digits of
    a hash of both names (so a firing always gets the same id)."""
    jobid = f"{name}-after-{upstream}"
    if len(jobid) <= MAX_JOB_ID_LENGTH:
        return jobid
    digest = hashlib.sha256(f"{fold(name)}\n{fold(upstream)}".encode()).hexdigest()
    return f"{name}-after-"[:MAX_JOB_ID_LENGTH - _HASH_DIGITS] + digest[:_HASH_DIGITS]


@dataclass(frozen=True)
class _Link:
    """What loop finding needs of a schedule: its name, spider and upstream
    (None for one fired by its times)."""

    name: str
    spider: str
    upstream: str = None

    def runs_after(self, other):
        """Whether a job of ``other`` ending can queue a job of this one."""
        if self.upstream is None:
            return False
        if self.upstream.startswith(SCHEDULE_PREFIX):
            return fold(self.upstream[len(SCHEDULE_PREFIX):]) == fold(other.name)
        return fold(self.upstream) == fold(other.spider)


def find_loop(name, spider, upstream, schedules):
    """The names of a loop the chain ``name`` (of ``spider``, after
    ``upstream``) would close among ``schedules`` (its project's
    ScheduleRecords), as [name, ..., name], or None. A chain's job ends as
    its spider's and its schedule's, so each chain after it runs next."""
    new = _Link(name, spider, upstream)
    links = [new] + [_Link(r.name, r.spider, r.rule if r.kind == CHAIN_KIND else None)
                     for r in schedules if fold(r.name) != fold(name)]
    path = [new]
    seen = set()

    def walk(link):
        for after in links:
            if not after.runs_after(link):
                continue
            if after is new:
                return path + [new]
            if after.name in seen:
                continue
            seen.add(after.name)
            path.append(after)
            found = walk(after)
            if found:
                return found
            path.pop()
        return None

    loop = walk(new)
    return None if loop is None else [link.name for link in loop]


def describe_loop(names, schedules, spider, upstream):
    """``a (spider x) after b (spider y) after a``: a loop as a refusal says it."""
    spiders = {fold(r.name): r.spider for r in schedules}
    spiders[fold(names[0])] = spider
    return " after ".join([f"{n} (spider {spiders[fold(n)]})" for n in names[:-1]]
                          + [names[-1]])


class Chains:
    """Makes the chain firings the outbox holds: each queued through
    ``timetable`` (a Timetable) and settled in ``store`` (IScheduleStore),
    on ``clock``'s sweep. Fed the local ends (``ended``). ``serves(project)``
    says whether this node serves a project: a firing of a chain of a
    project it does not serve is left in the outbox for a node that does
    (nodes may serve different projects)."""

    log = Logger()

    def __init__(self, store, timetable, clock, serves, sweep_seconds=SWEEP_SECONDS):
        self._store = store
        self._timetable = timetable
        self._clock = clock
        self._serves = serves
        # The firings left for another node, said once each in the log.
        self._left = set()
        self._sweep_seconds = sweep_seconds
        self._sweep = None
        self._running = False
        # The pass under way, and the waiters of one to follow it.
        self._pass = None
        self._again = []

    def start(self):
        """Reads the outbox now and every sweep from now on; call once the
        timetable has started (it must know the chains). Fires once the
        first pass is done."""
        self._running = True
        self._sweep = task.LoopingCall(self._swept)
        self._sweep.clock = self._clock
        self._sweep.start(self._sweep_seconds, now=False)
        return self.process()

    def stop(self):
        """Makes no more firings; fires once the one under way, if any, is
        done (before the store closes under it)."""
        self._running = False
        if self._sweep is not None and self._sweep.running:
            self._sweep.stop()
        self._sweep = None
        if self._pass is None:
            return defer.succeed(None)
        done = defer.Deferred()
        self._again.append(done)
        return done

    def ended(self, record):
        """A job ended here: its firings, if its end wrote any, are made now."""
        if self._running and record.chain_firings:
            self.process()

    def _swept(self):
        self.process()

    def process(self):
        """Makes every firing the outbox holds. Coalesced: a call while a
        pass is under way makes one more pass after it. Fires once a pass
        begun after the call is done; never fails (each firing's failure is
        logged and its row left for the next pass)."""
        done = defer.Deferred()
        if self._pass is None:
            self._pass = [done]
            self._pass_now()
        else:
            self._again.append(done)
        return done

    def _pass_now(self):
        self._one_pass().addBoth(self._passed)

    def _passed(self, result):
        waiters, self._pass = self._pass, None
        if self._again and self._running:
            self._pass, self._again = self._again, []
            self._pass_now()
        elif not self._running:
            # Stopped: no pass follows; whoever waits for one hears now.
            waiters, self._again = waiters + self._again, []
        for waiter in waiters:
            waiter.callback(None)

    @defer.inlineCallbacks
    def _one_pass(self):
        try:
            firings = yield self._store.chain_firings()
        except Exception:
            self.log.failure("could not read the chain firings owed")
            return
        owed = {(f.schedule_key, f.upstream) for f in firings}
        self._left &= owed
        for firing in firings:
            if not self._running:
                return
            try:
                yield self._make(firing)
            except Exception:
                self.log.failure("chain {name}: its firing after job {upstream} failed;"
                                 " trying again later", name=firing.schedule_key,
                                 upstream=firing.upstream)

    @defer.inlineCallbacks
    def _make(self, firing):
        record = yield self._store.get_schedule(firing.schedule_key)
        if record is None or record.kind != CHAIN_KIND:
            # Deleted (or replaced by a schedule of its name that is no
            # chain): nothing owes the firing any more.
            yield self._settle(firing, None)
            return
        if not self._serves(record.project):
            # Another node's to make: this one could only refuse the job.
            if (firing.schedule_key, firing.upstream) not in self._left:
                self._left.add((firing.schedule_key, firing.upstream))
                self.log.info("chain {name}: its run after job {upstream} is left to a node"
                              " that serves project {project}", name=record.name,
                              upstream=firing.upstream, project=record.project)
            return
        if record.paused:
            self.log.info("chain {name} is paused: skipped its run after job {upstream}",
                          name=record.name, upstream=firing.upstream)
            yield self._settle(firing, record, skipped_added=1)
            return
        if not self._timetable.holds(record):
            # Added or changed on another node, not heard of here yet.
            yield self._timetable.reload()
            if not self._timetable.holds(record):
                return  # changed again meanwhile: the next pass sees
        loop = yield self._loop_through(record, firing.upstream)
        if loop is not None:
            why = f"would loop: {loop}"
            self.log.error("chain {name}: queued no job after job {upstream}: {why}",
                           name=record.name, upstream=firing.upstream, why=why)
            yield self._settle(firing, record, error=why)
            return
        changes = yield self._timetable.queue_job(
            record, chain_job_id(record.name, firing.upstream),
            arguments=((UPSTREAM_ARGUMENT, firing.upstream),), upstream=firing.upstream)
        yield self._settle(firing, record, **changes)

    @defer.inlineCallbacks
    def _loop_through(self, record, upstream):
        """How a job of chain ``record`` after job ``upstream`` would close
        a loop (a job this chain queued is in ``upstream``'s line: ``job U
        comes after its own job X: U after ... after X``), or None.

        Two chains added at once (on two nodes, say) each pass the check at
        add against a table without the other, and may make a loop: this
        guard holds then. The line is read back through each job's stored
        ``upstream`` (a retry keeps its attempt's), at most LOOP_STEPS
        jobs; a job pruned since ends it."""
        line = []
        jobid = upstream
        for _ in range(LOOP_STEPS):
            job = yield self._store.get(jobid)
            if job is None:
                return None
            line.append(job.id)
            if job.schedule is not None and fold(job.schedule) == fold(record.name):
                if len(line) == 1:
                    return f"job {upstream} is its own"
                return f"job {upstream} comes after its own job {job.id}: {' after '.join(line)}"
            if job.upstream is None:
                return None
            jobid = job.upstream
        return None

    @defer.inlineCallbacks
    def _settle(self, firing, record, **changes):
        seq = None if record is None else record.seq
        updated = yield self._store.settle_chain_firing(
            firing.schedule_key, firing.upstream, seq=seq, **changes)
        if updated is not None:
            self._timetable.keep(updated)
