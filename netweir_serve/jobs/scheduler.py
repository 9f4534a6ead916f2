"""Queueing checked jobs, and taking them out again."""

from zope.interface import implementer

from .interfaces import IScheduler
from .store.sqlite import FINISHED, PENDING, RUNNING, JobRecord
from ..names import new_job_id


@implementer(IScheduler)
class Scheduler:
    """IScheduler over a job store and a launcher.

    ``wake`` is called after a job is queued (the poller's ``poll``), so a
    job starts at once when a slot is free; ``ended`` is called with the
    record of a pending job cancelled here (for pruning)."""

    def __init__(self, store, launcher, clock, wake, ended):
        self._store = store
        self._launcher = launcher
        self._clock = clock
        self._wake = wake
        self._ended = ended

    def schedule(self, checked, jobid=None, priority=0.0):
        record = self._store.add(JobRecord(
            id=jobid or new_job_id(),
            project=checked.project,
            spider=checked.spider,
            spider_file=checked.spider_file,
            settings=tuple(checked.settings),
            arguments=tuple(checked.arguments),
            priority=float(priority),
            created=self._clock.seconds(),
        ))
        self._wake()
        return record

    def cancel(self, jobid, now=False):
        record = self._store.get(jobid)
        if record is None or record.state == FINISHED:
            return None
        if record.state == PENDING:
            ended = self._store.mark_finished(
                record.id, "cancelled", self._clock.seconds(),
                reason="cancelled before it started")
            self._ended(ended)
            return PENDING
        self._launcher.cancel(record.id, now=now)
        return RUNNING
