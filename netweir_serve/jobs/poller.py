"""Handing pending jobs to free slots."""

from twisted.internet import defer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from ..names import fold
from ..store.records import FINISHED, StoreError
from .events import CHANGED, ENDED, QUEUED
from .interfaces import IPoller

# How long (the reactor's seconds) a claim that failed is looked for in the
# table: its COMMIT may have reached the table with its answer lost, and a
# lost connection's last statement lands within moments if at all.
UNSURE_CLAIM_SECONDS = 60.0


@implementer(IPoller)
class Poller:
    """IPoller: while the launcher has a free slot, claims the next pending
    job of the served ``projects`` that may run (``max_per_spider``: at most
    that many running jobs of one spider) for ``node`` and launches it.

    A slot asks for work (as scrapyd's poller pulls from its queue): a
    round runs from a timer of its own, never inside the call that asked
    for it, and the calls that come while a round is due or under way make
    one more round, not one each. ``poll`` is called whenever a job is
    queued or a slot frees, so jobs start at once; the timer every
    ``interval`` seconds is only a safety net (a write that failed, a
    table changed from outside).

    A claim that fails may still have been made: its COMMIT reached the
    table and the answer was lost with the connection. The job would be
    running here with no process, deaf to cancel and kill. So the time a
    failed claim wrote (each claim's own: its token) is kept for a while,
    and each round first looks for a job running on this node, with no
    pid, claimed at such a time and unknown to the launcher: that claim was
    made, and the job is started now.

    A retry waits in the table until its ``not_before`` (a time of day):
    after a round that found nothing to claim, the poller asks the table
    for the earliest such time among its projects' pending jobs and keeps
    ONE timer on the reactor for it (however many retries wait), so a
    retry due in 1 s starts then, not at the next safety-net poll. The
    reactor's clock is monotonic and the table's times are the wall
    clock's: the delay is the time of day's distance to it."""

    log = Logger()

    def __init__(self, store, launcher, clock, node, projects, interval=5.0,
                 max_per_spider=None, wall=None, can_run=None):
        self._store = store
        # Whether this node may claim now (cluster.membership fences a node
        # out of touch with the table past its timeout): set by the wiring.
        self.may_claim = lambda: True
        self._launcher = launcher
        self._clock = clock
        # A claim's start time is a time of day (``clock`` times the loop).
        self._wall = clock if wall is None else wall
        self._node = node
        self._projects = tuple(projects)
        self._interval = interval
        self._max_per_spider = max_per_spider
        # Whether this node can run a job (enforce its limits): the claim
        # leaves the others for a node that can (IJobStore.claim_next).
        self._can_run = can_run
        self._timer = LoopingCall(self.poll)
        self._timer.clock = clock
        self._soon = None
        self._round = None
        self._busy = False
        self._again = False
        self._stopped = False
        # {claim time of a failed claim: when it failed (the clock's)}
        self._unsure = {}
        # The one timer for the earliest retry due, and its due time (wall).
        self._due_call = None
        self._due_at = None

    def subscribe(self, events):
        """Polls when a job may start: one was queued, one ended (a slot is
        free), or an end recorded late freed the locks of jobs it held back."""
        def heard(kind, record):
            if kind != CHANGED or record.state == FINISHED:
                self.poll()

        return events.subscribe(heard, kinds=(QUEUED, ENDED, CHANGED))

    def poll(self):
        if self._stopped:
            return
        if self._busy:
            self._again = True
        elif self._soon is None:
            self._soon = self._clock.callLater(0, self._start_round)

    def _start_round(self):
        self._soon = None
        self._busy = True
        self._round = self._claim_and_launch()
        self._round.addErrback(self._round_failed)
        # A round that finished at once (a store answering at once, as in
        # unit tests) is over after this line.
        self._round.addBoth(self._round_done)

    def _round_failed(self, failure):
        if failure.check(defer.CancelledError):
            return None  # stopped while a claim waited for the table
        self.log.failure("a round of starting jobs failed", failure)
        return None

    def _round_done(self, _):
        self._busy = False
        self._round = None
        if self._again:
            self._again = False
            self.poll()

    @defer.inlineCallbacks
    def _claim_and_launch(self):
        if self._unsure:
            try:
                yield self._launch_claims_made()
            except StoreError as e:
                self.log.warn("could not look for the jobs of claims whose answer was lost:"
                              " {why}", why=e.message)
                return
        while not self._stopped and self._launcher.slots_free() > 0:
            if not self.may_claim():
                return
            claimed_at = self._wall.seconds()
            try:
                record = yield self._store.claim_next(
                    self._node, self._projects, claimed_at, self._max_per_spider,
                    self._can_run)
            except StoreError as e:
                # Most likely nothing was claimed; if it was, the next round
                # finds it. The next poll (or the timer) tries again.
                self._unsure[claimed_at] = self._clock.seconds()
                self.log.warn("could not take the next job: {why}", why=e.message)
                return
            if record is None:
                yield self._arm_for_next_retry(claimed_at)
                return
            if self._stopped:
                # Answered after the stop began (it waited on PostgreSQL):
                # the job goes back to the queue, never claimed for nothing.
                yield self._release(record, claimed_at)
                return
            self._launch(record)

    @defer.inlineCallbacks
    def _arm_for_next_retry(self, now):
        """Arms the one timer for the earliest retry due after ``now``
        (a time of day), if there is one and no timer is armed for it
        already."""
        try:
            due = yield self._store.next_retry(self._projects, now)
        except StoreError as e:
            # The safety-net poll finds it (within its interval) all the same.
            self.log.warn("could not read when the next retry is due: {why}", why=e.message)
            return
        if due is None or self._stopped:
            return
        if self._due_call is not None and self._due_call.active():
            if self._due_at == due:
                return
            self._due_call.cancel()
        self._due_at = due
        self._due_call = self._clock.callLater(max(0.0, due - self._wall.seconds()),
                                               self._retry_due)

    def _retry_due(self):
        self._due_call = self._due_at = None
        self.poll()

    @defer.inlineCallbacks
    def _release(self, record, claimed_at):
        try:
            released = yield self._store.release_claim(record.id, self._node, claimed_at)
        except StoreError as e:
            self.log.warn("job {jobid} was claimed as the service stopped and could not be put"
                          " back in the queue: {why}", jobid=record.id, why=e.message)
            return
        if released is not None:
            self.log.info("job {jobid} was claimed as the service stopped: back in the queue",
                          jobid=record.id)

    def _launch(self, record):
        try:
            self._launcher.launch(record)
        except Exception:
            # launch ends the job itself on any error it expects; this
            # keeps an unexpected one to that job, not the queue.
            self.log.failure("job {jobid}: unexpected error launching it", jobid=record.id)

    @defer.inlineCallbacks
    def _launch_claims_made(self):
        """Starts the jobs that failed claims did claim (see the class)."""
        now = self._clock.seconds()
        for claimed_at, failed in list(self._unsure.items()):
            if now - failed > UNSURE_CLAIM_SECONDS:
                del self._unsure[claimed_at]
        if not self._unsure:
            return
        running = yield self._store.running(self._node)
        known = {fold(jobid) for jobid in self._launcher.running_ids()}
        for record in running:
            if (record.pid is None and record.start_time in self._unsure
                    and fold(record.id) not in known and not self._stopped
                    and self._launcher.slots_free() > 0):
                del self._unsure[record.start_time]
                self.log.warn("job {jobid} was claimed here though the claim's answer was"
                              " lost: starting it now", jobid=record.id)
                self._launch(record)

    def start(self):
        self._stopped = False
        started = self._timer.start(self._interval, now=True)
        started.addErrback(lambda f: self.log.failure("the poll timer failed", f))

    def stop(self):
        self._stopped = True
        if self._timer.running:
            self._timer.stop()
        if self._soon is not None and self._soon.active():
            self._soon.cancel()
        self._soon = None
        if self._due_call is not None and self._due_call.active():
            self._due_call.cancel()
        self._due_call = self._due_at = None
        if self._round is None:
            return defer.succeed(None)
        # A claim waiting for the table is not cancelled: cancelling the
        # Deferred would not stop PostgreSQL from making it, and the job
        # would be claimed by a node that starts nothing (lost at its next
        # start). Its answer is waited for, and a job it took goes back to
        # the queue (_claim_and_launch).
        waiting = defer.Deferred()
        self._round.addBoth(lambda result: waiting.callback(None) or result)
        return waiting
