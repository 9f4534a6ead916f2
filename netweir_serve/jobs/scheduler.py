"""Queueing checked jobs, and taking them out again."""

from twisted.internet import defer
from zope.interface import implementer

from ..names import new_job_id
from .events import ENDED, QUEUED
from .interfaces import IScheduler
from ..store.records import EXPIRED, PENDING, RUNNING, JobRecord


@implementer(IScheduler)
class Scheduler:
    """IScheduler over a job store and a launcher; publishes "queued" for
    each job it adds and "ended" for each pending job it cancels."""

    def __init__(self, store, launcher, clock, events):
        self._store = store
        self._launcher = launcher
        self._clock = clock
        self._events = events

    def schedule(self, checked, jobid=None, priority=0.0, schedule=None, locks=(), policy=None,
                 upstream=None, by=None):
        added = self._store.add(JobRecord(
            id=jobid or new_job_id(),
            project=checked.project,
            spider=checked.spider,
            spider_file=checked.spider_file,
            settings=tuple(checked.settings),
            arguments=tuple(checked.arguments),
            priority=float(priority),
            created=self._clock.seconds(),
            schedule=schedule,
            locks=tuple(locks),
            policy=policy,
            upstream=upstream,
            queued_by=by,
        ))
        return added.addCallback(self._published, QUEUED)

    def _published(self, record, kind):
        self._events.publish(kind, record)
        return record

    @defer.inlineCallbacks
    def cancel(self, jobid, now=False):
        record = yield self._store.get(jobid)
        if record is not None and record.state == PENDING:
            ended = yield self._store.cancel_pending(record.id, self._clock.seconds())
            if ended is not None:
                self._published(ended, ENDED)
                return PENDING
            # Claimed between the two reads: it runs now, so stop it.
            record = yield self._store.get(jobid)
        if record is None or record.state != RUNNING:
            return None
        if self._launcher.cancel(record.id, now=now):
            yield self._launcher.cancel_recorded(record.id)
        else:
            # It runs on another node (a shared store): asked through the
            # table, in one write; its node does the cancelling, grace
            # period and kill included. A second cancel kills, as here.
            yield self._store.mark_cancel_requested(
                record.id, kill=now or record.cancel_requested)
        return RUNNING

    def expire(self, jobid):
        ended = self._store.cancel_pending(jobid, self._clock.seconds(), reason=EXPIRED)
        return ended.addCallback(lambda record: None if record is None
                                 else self._published(record, ENDED))
