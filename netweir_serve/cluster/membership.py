"""One node among several sharing a PostgreSQL job store.

A node registers under its name, URL and the projects it serves, writes a heartbeat every few
seconds, and, on each beat, declares dead every node silent past the
timeout: that node's running jobs are marked ``lost`` with their last known
stats in the same statement, once, whichever node sees it first (and
retried by that statement if its policy retries ``lost``; otherwise not
run again: a crawl may have had effects). Pending jobs belong to no node and are never lost. A node judges
the others only once its own beats have reached the table for a whole
timeout without a break: when the table itself was away (PostgreSQL
restarted, its network down), every node missed its beats, and the first
one back must not declare the rest dead for it.

A node that has had no beat through for FENCE_SHARE of its timeout
fences itself: it claims nothing more, and kills the crawls that their end
as ``lost`` would retry, before another node can have declared it dead and
queued those retries (which a third node could start while the crawl still
ran here). A node that finds itself declared dead (cut off from the
database longer than the timeout) ends the processes of its jobs, whose
ends are already recorded, and carries on: it registers again and takes
new work.

What other nodes change reaches this one as store notices: a job queued or
ended elsewhere wakes the poller, a cancel asked elsewhere of a job running
here is carried out here (with the grace period and the kill), a schedule
changed elsewhere is read again.
"""

from twisted.internet import defer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..jobs.events import CHANGED, ENDED
from ..store.records import FINISHED, RUNNING, StoreError
from ..store import notices

# Heartbeats per node timeout: a node is declared dead after missing about
# this many in a row.
BEATS_PER_TIMEOUT = 6
# The self-fence, as a share of the node timeout: a node whose last beat
# through was sent this long ago claims nothing more and kills the crawls
# a declaration of its death would retry. The others declare it dead no
# sooner than a whole timeout after that beat (the table stamps a beat no
# earlier than it was sent, and they judge from that stamp), so the kill
# comes at least a fifth of the timeout (1.2 s of the tests' 6 s, 6 s of
# the default 30 s) before any declaration: a kill is a signal sent at
# once, and the table's clock and this node's run at the same rate. The
# margin is not all: a node fences only 4.8 beats into a cut, so a beat or
# two lost to a busy moment never kills a crawl.
FENCE_SHARE = 0.8
# A running job's stats reach the table at most this often.
STATS_EVERY_SECONDS = 5.0


class NodeMembership:
    """This node's part in the cluster: registration, heartbeats, dead
    nodes, and what the other nodes' notices ask of it."""

    log = Logger()

    def __init__(self, store, launcher, poller, timetable, clock, name, url, timeout,
                 projects=(), wall=None):
        self._store = store
        self._launcher = launcher
        self._poller = poller
        self._timetable = timetable
        # ``clock`` (the reactor's, monotonic) times the beats and how long
        # this node has been in touch; ``wall`` gives the time of day the
        # jobs of a dead node are recorded ended at.
        self._clock = clock
        self._wall = clock if wall is None else wall
        self.name = name
        self.url = url
        self._timeout = timeout
        # The projects this node takes jobs of: the others' listings say
        # when no live node serves a pending job's project.
        self._projects = tuple(projects)
        self._beat = LoopingCall(self._heartbeat)
        self._beat.clock = clock
        self._stats_saved = {}
        self._beating = None
        # Since when this node's beats have reached the table without a break.
        self._in_touch_since = None
        # When this node last knew itself live in the table (a beat that
        # found it so, or its registration): the fence (``may_claim``).
        self._live_at = None
        # The timer of the fence, FENCE_SHARE of the timeout after _live_at.
        self._fence_call = None

    @defer.inlineCallbacks
    def start(self):
        """Registers the node (fails with NodeNameTaken when a live node of
        another URL has the name), then beats and listens."""
        if callable(self.url):
            self.url = self.url()
        previous = yield self._store.register_node(self.name, self.url, timeout=self._timeout,
                                                   projects=self._projects)
        self._say_rejoined(previous)
        self._in_touch_since = self._live_at = self._clock.seconds()
        self._arm_fence()
        self._store.on_notice(self._heard)
        started = self._beat.start(max(0.5, self._timeout / BEATS_PER_TIMEOUT), now=False)
        started.addErrback(lambda f: self.log.failure("the heartbeat loop failed", f))

    def stop(self):
        if self._beat.running:
            self._beat.stop()
        if self._fence_call is not None and self._fence_call.active():
            self._fence_call.cancel()

    def may_claim(self):
        """Whether this node may claim jobs: not once it has been out of
        touch with the table for FENCE_SHARE of its timeout, when the
        others may soon declare it dead and its jobs lost (a fence, as
        Nomad's clients stop taking work when they cannot reach the
        servers; its crawls a retry would repeat are killed then too). A
        beat that reaches the table again (registering anew if it was
        declared dead) lifts it."""
        return (self._live_at is not None
                and self._clock.seconds() - self._live_at < FENCE_SHARE * self._timeout)

    def subscribe(self, events):
        """Saves running jobs' stats to the table as they change (the other
        nodes show them, and a dead node's jobs keep them)."""
        events.subscribe(self._stats_changed, kinds=(CHANGED,))
        events.subscribe(lambda kind, record: self._stats_saved.pop(record.id, None),
                         kinds=(ENDED,))

    # -- heartbeats --------------------------------------------------------------

    def _heartbeat(self):
        if self._beating is not None:
            return None  # the last beat still waits for the database
        self._beating = self._beat_once()
        self._beating.addBoth(self._beaten)
        return None

    def _beaten(self, result):
        self._beating = None
        if isinstance(result, Failure):
            # A StoreError is said where it happens; anything else is a bug.
            self.log.failure("node {name}: a heartbeat failed", result, name=self.name)

    @defer.inlineCallbacks
    def _beat_once(self):
        try:
            # The table stamps the beat as it starts: the fence counts from
            # when it was sent, not from when its answer came back.
            sent_at = self._clock.seconds()
            alive = yield self._store.heartbeat(self.name)
            beaten_at = self._clock.seconds()
            if self._in_touch_since is None:
                self._in_touch_since = beaten_at
            if not alive:
                yield self._declared_dead()
            fenced = not self.may_claim()
            self._live_at = sent_at
            self._arm_fence()
            if fenced:
                self._poller.poll()  # the fence is lifted: claim again now
            if self._launcher.running_count():
                # A backstop to the notices: a cancel or kill asked while
                # they could not be heard is carried out within a beat.
                yield self._carry_out_requests()
            if beaten_at - self._in_touch_since < self._timeout:
                # In touch again only lately: if the table itself was away
                # (a restart of PostgreSQL, its network), every node missed
                # its beats, and none is dead for it. The others are judged
                # once they have had a whole timeout to beat again.
                return
            declared_at = self._wall.seconds()
            dead = yield self._store.declare_dead(
                self._timeout, declared_at,
                f"its node stopped answering for {self._timeout:g} s")
        except StoreError as e:
            # Cut off from the database: crawls run on, nothing new is
            # claimed (the poller's claims fail too), and the beat tries again.
            self._in_touch_since = None
            self.log.warn("node {name}: cannot reach the job table: {why}", name=self.name,
                          why=e.message)
            return
        if dead:
            self._poller.poll()
        for name, lost in dead.items():
            self.log.warn("node {dead} is silent past {s:g} s: declared dead; {jobs}",
                          dead=name, s=self._timeout, jobs=_lost_jobs([r.id for r in lost]))
            # Ended by that statement, here: announced by this node, once
            # (metrics, --notify, /events), as a job settled at start is.
            for record in lost:
                self._launcher.settled(record)

    # -- the fence -----------------------------------------------------------

    def _arm_fence(self):
        """(Re)sets the one timer of the fence: FENCE_SHARE of the timeout
        after the last beat through was sent."""
        delay = max(0.0, self._live_at + FENCE_SHARE * self._timeout - self._clock.seconds())
        if self._fence_call is not None and self._fence_call.active():
            self._fence_call.reset(delay)
        else:
            self._fence_call = self._clock.callLater(delay, self._fence)

    def _fence(self):
        """No beat through for FENCE_SHARE of the timeout: the crawls a
        declaration of this node's death would retry are killed now, before
        any other node can declare it (their end is that declaration's to
        record, or this node's once back if none came). Said once a cut:
        the timer is armed again only by a beat that gets through."""
        silent = self._clock.seconds() - self._live_at
        running = self._launcher.running_ids()
        fenced = self._launcher.fence(
            self._wall.seconds(),
            f"its node {self.name} was cut off from the job table for {silent:.1f} s"
            " and ended it itself, so that its retry never runs beside it")
        kept = sorted(set(running) - set(fenced))
        said = []
        if fenced:
            said.append(f"killed the crawls of job(s) {', '.join(sorted(fenced))}, which"
                        " their end as lost would retry")
        if kept:
            said.append(f"job(s) {', '.join(kept)} run on (no retry would repeat them)")
        ended = "; ".join(said) or "it runs no crawl"
        self.log.warn("node {name}: no heartbeat through to the job table for {s:.1f} s"
                      " (--node-timeout {timeout:g} s): it claims nothing until one gets"
                      " through; {ended}", name=self.name, s=silent, timeout=self._timeout,
                      ended=ended)

    def _say_rejoined(self, previous):
        """A node the others declared dead is back under its name: said
        once, here, since its jobs of then were recorded lost meanwhile."""
        if previous is not None and previous["dead"]:
            self.log.warn("node {name} rejoins the cluster at {url}: the other nodes had"
                          " declared it dead, and its jobs running then are recorded lost",
                          name=self.name, url=self.url)

    @defer.inlineCallbacks
    def _declared_dead(self):
        """Another node declared this one dead while it was cut off: its
        jobs are recorded lost, so their processes go, unrecorded again."""
        dropped = []
        for jobid in self._launcher.running_ids():
            record = yield self._store.get(jobid)
            if record is None or record.state == FINISHED:
                self._launcher.drop(jobid)
                dropped.append(jobid)
        self.log.warn("node {name} was declared dead while cut off from the job table:"
                      " {ended}; it rejoins and takes new work", name=self.name,
                      ended=(f"ended the processes of job(s) {', '.join(dropped)}"
                             " (recorded lost)" if dropped else "it ran no job"))
        yield self._store.register_node(self.name, self.url, projects=self._projects)

    # -- what the others say -------------------------------------------------------

    def _heard(self, notice):
        if notice.kind == notices.CANCEL and notice.node == self.name and notice.jobid:
            self._carry_out_requests(notice.jobid)
        elif notice.kind == notices.CHANGED:
            # Heard again after the LISTEN connection dropped: a cancel or
            # kill asked meanwhile was not heard, so the table is asked.
            self._carry_out_requests()
        elif notice.kind == notices.SCHEDULE:
            reloaded = self._timetable.reload()
            reloaded.addErrback(lambda f: self.log.failure("could not read the schedules", f))
        if notice.kind in (notices.QUEUED, notices.ENDED, notices.NODE, notices.CHANGED):
            self._poller.poll()

    def _carry_out_requests(self, jobid=None):
        """Does what the table asks of the jobs running here (of ``jobid``
        alone, when a notice named it): a cancel or a kill asked on another
        node is state in the job's record (``cancel_requested``,
        ``kill_requested``), so whichever way this node hears of it (a
        notice, the LISTEN connection back, its own look at every beat) it
        does the same, once."""
        done = self._read_requests(jobid)
        done.addErrback(lambda f: self.log.failure(
            "could not carry out the cancels asked of this node's jobs", f))
        return done

    @defer.inlineCallbacks
    def _read_requests(self, jobid):
        try:
            if jobid is None:
                # One read of this node's running jobs, not one per job.
                records = yield self._store.running(self.name)
            else:
                records = [(yield self._store.get(jobid))]
        except StoreError as e:
            self.log.warn("node {name}: could not read whether a cancel was asked: {why}",
                          name=self.name, why=e.message)
            return
        for record in records:
            done = self._launcher.carry_out(record) if record is not None else None
            if done is not None:
                self.log.info("job {jobid}: {done} asked through the job table",
                              jobid=record.id, done=done)

    def _stats_changed(self, kind, record):
        if record.state != RUNNING:
            return
        now = self._clock.seconds()
        if now - self._stats_saved.get(record.id, 0.0) < STATS_EVERY_SECONDS:
            return
        stats = self._launcher.running_stats(record.id)
        if stats is None:
            return
        self._stats_saved[record.id] = now
        saved = self._store.save_stats(record.id, stats)
        saved.addErrback(lambda f: self.log.warn(
            "job {jobid}: could not save its stats: {why}", jobid=record.id,
            why=getattr(f.value, "message", f.value)))


def _lost_jobs(ids):
    """The jobs a dead node's declaration ended, as its log line says."""
    if not ids:
        return "it ran no job"
    return f"its running job(s) {', '.join(sorted(ids))} marked lost"
