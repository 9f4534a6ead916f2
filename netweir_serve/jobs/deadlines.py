"""Deadlines: a running job's ``timeout`` and ``stall`` watch, and a pending
job's ``expire``, on one timer.

How it works. Every deadline of every job this node watches is an entry
in one heap, ordered by when it falls due on the reactor's clock (which
the entry points make monotonic, clocks.py), and the watch keeps exactly
one DelayedCall, at the earliest entry: adding a job whose deadline comes
first moves the call earlier, and ending the job of the earliest moves it
to the next. A heap entry is never searched for and removed: a job that
ends or moves on leaves its entries behind as stale (the watch's own
table says which entry is live), dropped when they reach the top, and the
heap is rebuilt from the live entries once the stale ones outnumber them.

- ``timeout``: due at the job's start time in the table plus the
  timeout. The table's times are wall time (the ``wall`` clock), so each
  is turned into the reactor's time once, when the job is watched: a step
  of the machine's clock afterwards moves no deadline. An adopted job
  (jobs/adoption.py) keeps its deadline, counted from the start time the
  table kept (one already past fires at once). When it falls due, the job
  is cancelled as cancel.json cancels it (``Launcher.cancel_once``: SIGTERM,
  items closed, checkpoint, the grace before the kill) with reason
  ``timeout``. The crawl is also given Netweir's own ``max_time`` at
  MAX_TIME_SHARE of the timeout (``timed_settings``), unless the job sets
  one, so a crawl that can stop itself does so first and ends
  ``finished`` (``finish_reason`` ``max_time``).
- ``stall``: progress is a change of the crawl's counters of pages, items
  and errors (PROGRESS_STATS) or a longer log. The launcher already reads
  each running job's stats file every second and tells of each new one
  with a "changed" event (the crawl rewrites it every 5 s); this watch
  compares the numbers then, and looks at the log's size (one ``stat``),
  so a stall is seen at the 5 s grain of the stats file. Its entry is not
  moved at each progress (that would be a heap entry per job every 5 s):
  when it falls due, the watch looks once more, and if there was progress
  since it was set, it is set again at the last progress plus the stall.
  Otherwise the job is cancelled with reason ``stalled``. The stall
  counts from the job's start here, and for an adopted job from its
  adoption: what it did while no service watched is not known.
- ``expire``: due at the job's ``created`` time plus the expiry (a
  retry's: its ``not_before``, the end of its backoff). It is
  dropped, never started (``expire_pending``, the scheduler's guarded
  ``IJobStore.cancel_pending``: only if it is still pending, so a claim
  that came first wins) and ends ``cancelled`` with reason ``expired``.
  On a shared table every node watches the pending jobs of the projects
  it serves, however queued (the other nodes' queued jobs come as job
  events marked elsewhere, and all of them are read from the table at
  start, again every few seconds until that read works, and when the
  LISTEN connection comes back), and the guarded write
  makes one of them drop the job: the others find it no longer pending
  and do nothing. A node's timeout and stall watch only the jobs it runs.

Times are counted in ``fired`` ({kind: n}) for /metrics.
"""

import heapq
import itertools

from twisted.internet import defer
from twisted.logger import Logger

from ..names import fold, setting_name
from ..store.records import PENDING, STALLED, TIMEOUT, StoreError
from ..reliability.policy import JobPolicy, format_duration

# The kinds of deadline, as /metrics names them.
TIMEOUT_KIND, STALL_KIND, EXPIRE_KIND = "timeout", "stall", "expire"
KINDS = (TIMEOUT_KIND, STALL_KIND, EXPIRE_KIND)

# Netweir's max_time, as a share of a job's timeout: the crawl stops itself
# (finish_reason max_time, outcome finished) before the service must.
MAX_TIME_SHARE = 0.95

# The stats whose change is progress: pages fetched (or served without a
# fetch), items, and errors (requests failed, exceptions in callbacks).
PROGRESS_STATS = ("fetched", "pages_served", "items", "failed", "callback_errors")

# Seconds before an expiry the table could not write is tried again.
EXPIRE_RETRY_SECONDS = 5.0
# Seconds before the pending jobs, unread at start, are read again.
PENDING_REREAD_SECONDS = 5.0


def max_time_setting(timeout):
    """Netweir's ``max_time`` (seconds, a float's text) for ``timeout``."""
    return f"{timeout * MAX_TIME_SHARE:g}"


def timed_settings(settings, policy):
    """The job's ``settings`` ((key, value) pairs) with Netweir's
    ``max_time`` at MAX_TIME_SHARE of ``policy``'s timeout (a JobPolicy's
    JSON, as a record keeps it) added, unless the job sets one itself."""
    timeout = (policy or {}).get("timeout")
    if timeout is None or any(setting_name(key) == "max_time" for key, _ in settings):
        return tuple(settings)
    return tuple(settings) + (("max_time", max_time_setting(timeout)),)


def progress_of(stats):
    """What of ``stats`` (a crawl's, or None) is progress."""
    if not stats:
        return None
    return tuple(stats.get(name) for name in PROGRESS_STATS)


def waits_from(record):
    """When a pending job began to wait for a slot (a time of day): when it
    was queued, or a retry's ``not_before``. A retry is written with the
    end that caused it, then waits out its backoff, which is no delay of
    the queue's: counted from its writing, a retry whose backoff is longer
    than its expire would be dropped every time."""
    return record.created if record.not_before is None else max(record.created,
                                                               record.not_before)


class _Watch:
    """One deadline of one job: ``at``, on the reactor's clock."""

    __slots__ = ("kind", "key", "jobid", "at", "seconds", "progress", "log_size",
                 "last_progress")

    def __init__(self, kind, jobid, at, seconds):
        self.kind = kind
        self.key = fold(jobid)
        self.jobid = jobid
        self.at = at
        self.seconds = seconds
        # For a stall: what was last seen, and when it last changed.
        self.progress = None
        self.log_size = None
        self.last_progress = None


class Deadlines:
    """The deadline watch of one node.

    ``reactor`` times the deadlines (``callLater``, ``seconds``: monotonic
    in the service); ``wall`` gives the time of day the table's times are
    in. ``launcher`` (ILauncher) cancels a running job unless it is
    being cancelled already (``cancel_once(jobid, reason)``) and tells its
    last stats (``running_stats``) and the size of its log
    (``log_size``); ``expire_pending(jobid)`` drops a pending
    job if it still is (IScheduler.expire: a Deferred of the ended record,
    or None); ``serves(project)`` says whether this node serves a project
    (whose pending jobs it expires); ``store`` (IJobStore), when given, is
    read for the pending jobs at ``start`` and ``resync``.

    Hear the job events through ``queued``, ``started``, ``changed``,
    ``ended`` (this node's jobs) and ``elsewhere`` (another node's).
    """

    log = Logger()

    def __init__(self, reactor, wall, launcher, expire_pending, serves, store=None):
        self._reactor = reactor
        self._wall = wall
        self._launcher = launcher
        self._expire_pending = expire_pending
        self._serves = serves
        self._store = store
        self._watches = {}        # (kind, folded job id): _Watch
        self._heap = []           # (at, seq, _Watch), stale ones included
        self._seq = itertools.count()
        self._call = None
        # The read of the pending jobs tried again after it failed at start.
        self._reread = None
        self._firing = False
        self._stopped = False
        self.fired = dict.fromkeys(KINDS, 0)

    # -- hearing ---------------------------------------------------------------

    def queued(self, record):
        """A job was queued (here, or elsewhere) or found pending."""
        if record.state != PENDING or not self._serves(record.project):
            return
        expire = JobPolicy.from_json(record.policy).expire
        if expire is not None:
            self._watch(EXPIRE_KIND, record.id, self._due(waits_from(record) + expire), expire)

    def started(self, record):
        """A job started here, or was adopted: its running deadlines are
        set (none while a cancel is under way: its grace and kill stand)."""
        self._unwatch(EXPIRE_KIND, record.id)
        if record.cancel_requested:
            self.ended(record)
            return
        policy = JobPolicy.from_json(record.policy)
        if policy.timeout is not None and record.start_time is not None:
            self._watch(TIMEOUT_KIND, record.id, self._due(record.start_time + policy.timeout),
                        policy.timeout)
        if policy.stall is not None:
            now = self._reactor.seconds()
            watch = self._watch(STALL_KIND, record.id, now + policy.stall, policy.stall)
            self._look(watch, now)
            watch.last_progress = now

    def changed(self, record):
        """A running job of this node changed: new stats (progress, maybe),
        or a cancel asked (its deadlines are over)."""
        if record.cancel_requested:
            self._unwatch(TIMEOUT_KIND, record.id)
            self._unwatch(STALL_KIND, record.id)
            return
        watch = self._watches.get((STALL_KIND, fold(record.id)))
        if watch is not None:
            self._look(watch, self._reactor.seconds())

    def ended(self, record):
        """A job ended, whichever way: nothing of it is watched any more."""
        for kind in KINDS:
            self._unwatch(kind, record.id)

    def elsewhere(self, record):
        """Another node queued, started or ended a job (this node's events
        may come here too): only its expiry is this node's business."""
        if record.state == PENDING:
            self.queued(record)
        else:
            self._unwatch(EXPIRE_KIND, record.id)

    # -- starting and stopping ---------------------------------------------------

    def start(self):
        """Watches the pending jobs the table holds (queued before this
        start, or by other nodes). Fires once they are read and those
        already past their expiry (the service was down) are dropped (or
        found claimed): call it before the poller starts, so that no claim
        comes before their drops (on PostgreSQL the drops wait for a
        connection of the pool, as a claim would). A failure to read them
        is logged, and the read tried again every PENDING_REREAD_SECONDS
        until it works: on SQLite nothing else would read them again."""
        self._stopped = False
        read = self._read_pending()
        read.addCallback(self._read_at_start)
        return read

    def _read_at_start(self, read):
        if not read:
            self._read_later()
            return None
        return self._fire_due()

    def _read_later(self):
        if not self._stopped:
            self._reread = self._reactor.callLater(PENDING_REREAD_SECONDS, self._read_again)

    def _read_again(self):
        self._reread = None
        if self._stopped:
            return
        read = self._read_pending(quietly=True)
        read.addCallback(lambda done: self.log.info(
            "read the pending jobs to watch their expiry") if done else self._read_later())

    def _fire_due(self):
        """Fires the deadlines already due; a Deferred of the drops that
        asks (each handles its own failure)."""
        drops = []
        if self._heap and self._heap[0][0] <= self._reactor.seconds():
            if self._call is not None and self._call.active():
                self._call.cancel()
            drops = self._fire()
        return defer.gatherResults(drops).addCallback(lambda _: None)

    def resync(self):
        """Reads the pending jobs again: changes may have gone unheard."""
        return self._read_pending().addCallback(lambda _: None)

    def _read_pending(self, quietly=False):
        """Watches the pending jobs the table holds: a Deferred of whether
        they could be read (a failure is logged, unless ``quietly``)."""
        if self._store is None:
            return defer.succeed(True)
        # The unfinished jobs alone: a table of 100,000 finished ones would
        # be read (and kept in memory's high-water mark) for nothing.
        read = defer.maybeDeferred(getattr(self._store, "unfinished_jobs", self._store.jobs))
        read.addCallback(lambda lists: [self.queued(r) for r in lists[0]])
        read.addCallback(lambda _: True)

        def failed(failure):
            if not quietly:
                self.log.failure("could not read the pending jobs to watch their expiry;"
                                 " trying again every {s:g} s", failure,
                                 s=PENDING_REREAD_SECONDS)
            return False
        return read.addErrback(failed)

    def stop(self):
        self._stopped = True
        if self._reread is not None and self._reread.active():
            self._reread.cancel()
        self._reread = None
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def watching(self):
        """How many deadlines are watched."""
        return len(self._watches)

    def due_at(self, kind, jobid):
        """When the ``kind`` deadline of ``jobid`` falls due on the
        reactor's clock, or None."""
        watch = self._watches.get((kind, fold(jobid)))
        return None if watch is None else watch.at

    # -- the heap and its one timer --------------------------------------------------

    def _due(self, wall_time):
        # The table's time of day, on the reactor's clock, once.
        return self._reactor.seconds() + (wall_time - self._wall.seconds())

    def _watch(self, kind, jobid, at, seconds):
        watch = self._watches.get((kind, fold(jobid)))
        if watch is not None and watch.at == at and kind != STALL_KIND:
            return watch  # heard twice (a local event is heard elsewhere too)
        watch = _Watch(kind, jobid, at, seconds)
        self._watches[(kind, watch.key)] = watch
        self._push(watch)
        return watch

    def _push(self, watch):
        heapq.heappush(self._heap, (watch.at, next(self._seq), watch))
        if len(self._heap) > 2 * len(self._watches) + 64:
            self._heap = [(w.at, next(self._seq), w) for w in self._watches.values()]
            heapq.heapify(self._heap)
        self._arm()

    def _unwatch(self, kind, jobid):
        if self._watches.pop((kind, fold(jobid)), None) is not None:
            self._arm()

    def _live(self, entry):
        at, _, watch = entry
        return self._watches.get((watch.kind, watch.key)) is watch and watch.at == at

    def _arm(self):
        """The one DelayedCall, at the earliest live deadline (or none)."""
        if self._firing:
            return  # _fire arms once it is done
        heap = self._heap
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        if not heap or self._stopped:
            if self._call is not None and self._call.active():
                self._call.cancel()
            self._call = None
            return
        at = heap[0][0]
        if self._call is not None and self._call.active():
            if self._call.getTime() != at:
                self._call.reset(max(0.0, at - self._reactor.seconds()))
            return
        self._call = self._reactor.callLater(max(0.0, at - self._reactor.seconds()), self._fire)

    def _fire(self):
        self._call = None
        now = self._reactor.seconds()
        drops = []  # the expiries' Deferreds, for start to wait on
        due = []
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            if self._live(entry):
                due.append(entry[2])
        self._firing = True
        try:
            for watch in due:
                if self._watches.get((watch.kind, watch.key)) is not watch:
                    # Gone with an earlier one of this firing: a job's
                    # timeout and stall due together, and the first
                    # cancel's "changed" event ends the other.
                    continue
                try:
                    dropped = self._fell_due(watch, now)
                except Exception:
                    self.log.failure("job {jobid}: its {kind} deadline failed",
                                     jobid=watch.jobid, kind=watch.kind)
                else:
                    if dropped is not None:
                        drops.append(dropped)
        finally:
            self._firing = False
        self._arm()
        return drops

    def _fell_due(self, watch, now):
        if watch.kind == STALL_KIND:
            self._look(watch, now)
            again = watch.last_progress + watch.seconds
            if again > now:
                # Progress since it was set: set again from the last.
                watch.at = again
                self._push(watch)
                return
        self._watches.pop((watch.kind, watch.key), None)
        if watch.kind == EXPIRE_KIND:
            return self._expire(watch)
        self._cancel(watch)
        return None

    # -- what a deadline does ----------------------------------------------------------

    def _look(self, watch, now):
        """Notes progress of a stall-watched job: new counters, a longer log."""
        progress = progress_of(self._launcher.running_stats(watch.jobid))
        size = self._launcher.log_size(watch.jobid)
        if watch.last_progress is None or progress != watch.progress \
                or (size is not None and size != watch.log_size):
            watch.progress, watch.log_size, watch.last_progress = progress, size, now

    def _cancel(self, watch):
        reason = TIMEOUT if watch.kind == TIMEOUT_KIND else STALLED
        # Its other deadline goes with the cancel's "changed" event. A job
        # already being cancelled (its event not heard yet) is left to
        # that cancel's grace and reason: a second cancel would kill it.
        if not self._launcher.cancel_once(watch.jobid, reason):
            return
        self.fired[watch.kind] += 1
        if watch.kind == TIMEOUT_KIND:
            self.log.warn("job {jobid}: still running at its timeout ({seconds}); cancelling"
                          " it", jobid=watch.jobid, seconds=format_duration(watch.seconds))
        else:
            self.log.warn("job {jobid}: no new page, item or error and no new log line for"
                          " {seconds} (its stall); cancelling it", jobid=watch.jobid,
                          seconds=format_duration(watch.seconds))

    def _expire(self, watch):
        dropped = defer.maybeDeferred(self._expire_pending, watch.jobid)
        dropped.addCallback(self._expired, watch)
        dropped.addErrback(self._not_expired, watch)
        return dropped

    def _expired(self, record, watch):
        if record is None:
            return  # claimed first, or dropped by another node
        self.fired[EXPIRE_KIND] += 1
        self.log.warn("job {jobid}: still pending at its expiry ({seconds} after it was"
                      " {queued}); dropped, never started", jobid=watch.jobid,
                      seconds=format_duration(watch.seconds),
                      queued="due" if record.not_before is not None else "queued")

    def _not_expired(self, failure, watch):
        if failure.check(StoreError):
            self.log.warn("job {jobid}: could not drop it at its expiry: {why}; trying again"
                          " in {s:g} s", jobid=watch.jobid, why=failure.value.message,
                          s=EXPIRE_RETRY_SECONDS)
            if not self._stopped and (EXPIRE_KIND, watch.key) not in self._watches:
                self._watch(EXPIRE_KIND, watch.jobid,
                            self._reactor.seconds() + EXPIRE_RETRY_SECONDS, watch.seconds)
            return
        self.log.failure("job {jobid}: could not drop it at its expiry", failure,
                         jobid=watch.jobid)
