"""The other nodes' jobs, heard as store notices and published as job
events.

Each notice another node's change sends names one job (queued, claimed,
started, a cancel asked, stats saved, ended): the job's record is read
from the table and published on the JobEvents as the same event a local
job gives, marked ``elsewhere`` (jobs/events.py), with the node it runs on
in its record. Only while someone wants them (``wanted()``: an /events
stream is open): otherwise nothing is read. Reads are coalesced per job:
notices heard while a read of the job is under way make one more read once
it is done, not one each. A read that a local event of the same job
overtook is not published (it may be older than the event) and the job is
read once more. This node's own jobs are told by its own events, except an
end recorded elsewhere (this node was declared dead meanwhile), which its
launcher never tells. A CHANGED notice (the LISTEN connection is back:
anything may have changed unheard) calls ``resync()``.

The notices of the kinds in ``always`` (job event kinds) are read and
published even while nobody watches: the deadline watch must hear of the
pending jobs other nodes queue, to expire them (jobs/deadlines.py);
one read per queued job per node.
"""

from twisted.internet import defer
from twisted.logger import Logger

from ..jobs.events import CHANGED, ENDED, KINDS, QUEUED, STARTED
from ..store.records import FINISHED, PENDING, StoreError
from ..store import notices
from ..names import fold

log = Logger()

# The store notices about one job, and the job event each is published as.
EVENT_OF_NOTICE = {
    notices.QUEUED: QUEUED, notices.CLAIMED: STARTED, notices.STARTED: STARTED,
    notices.CANCEL: CHANGED, notices.STATS: CHANGED, notices.ENDED: ENDED,
}


class _Reading:
    """A read of one job's record under way."""

    def __init__(self, kind):
        self.kind = kind         # the event the notices heard so far make
        self.again = False       # notices heard meanwhile: read once more
        self.overtaken = False   # a local event of the job was published meanwhile


class ClusterJobs:
    """Publishes on ``events`` (JobEvents) what the other nodes sharing
    ``store`` (IClusterStore's ``on_notice``, IJobStore's ``get``) do to
    jobs; ``node`` is this node's name; ``always``, the event kinds read
    whether or not ``wanted()``."""

    def __init__(self, store, events, node, wanted, resync, always=()):
        self._store = store
        self._events = events
        self._node = node
        self._wanted = wanted
        self._resync = resync
        self._always = frozenset(always)
        self._reads = {}          # folded job id: _Reading

    def start(self):
        """Listens; returns the function that stops it."""
        stops = [self._events.subscribe(self._local_event, kinds=KINDS),
                 self._store.on_notice(self.heard)]
        return lambda: [stop() for stop in stops]

    def _local_event(self, kind, record):
        reading = self._reads.get(fold(record.id))
        if reading is not None:
            reading.overtaken = reading.again = True

    def _wants(self, kind):
        return kind in self._always or self._wanted()

    def heard(self, notice):
        """A change another node made (a notices.StoreNotice)."""
        if notice.kind == notices.CHANGED:
            if self._always or self._wanted():
                self._resync()
        elif notice.kind in EVENT_OF_NOTICE and notice.jobid:
            kind = EVENT_OF_NOTICE[notice.kind]
            if not self._wants(kind):
                return
            if notice.node == self._node and notice.kind != notices.ENDED:
                return
            self._read(notice.jobid, kind)

    def _read(self, jobid, kind):
        key = fold(jobid)
        reading = self._reads.get(key)
        if reading is not None:
            reading.again = True
            reading.kind = kind
            return
        self._reads[key] = reading = _Reading(kind)
        read = defer.maybeDeferred(self._store.get, jobid)
        read.addCallback(self._read_done, reading)
        read.addErrback(self._not_published, jobid)
        read.addBoth(self._read_over, key, jobid, reading)

    def _read_done(self, record, reading):
        if record is None or reading.overtaken or not self._wants(reading.kind):
            return
        # The record says where the job is now; the notices, while it runs,
        # whether it has just started.
        if record.state == PENDING:
            kind = QUEUED
        elif record.state == FINISHED:
            kind = ENDED
        else:
            kind = STARTED if reading.kind == STARTED else CHANGED
        self._events.publish(kind, record, elsewhere=True)

    @staticmethod
    def _not_published(failure, jobid):
        if failure.check(StoreError):
            log.warn("job {jobid}: could not read what another node changed: {why}",
                     jobid=jobid, why=failure.value.message)
        else:
            log.failure("job {jobid}: could not publish what another node changed",
                        failure, jobid=jobid)

    def _read_over(self, _, key, jobid, reading):
        if self._reads.get(key) is reading:
            del self._reads[key]
        if reading.again and self._wants(reading.kind):
            self._read(jobid, reading.kind)
