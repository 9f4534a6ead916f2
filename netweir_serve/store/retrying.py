"""A job's retry: decided and made by the write that records its end.

Written into the same transaction as the end (job_table.JobTable._ended),
so a crash never loses a retry and never queues one twice: either both
the end and its retry are in the table, or neither is, and an end already
recorded (the first end stands) changes nothing and queues nothing.
"""

from dataclasses import replace

from twisted.internet import defer

from ..names import fold, is_name, retry_id
from ..reliability.policy import JobPolicy
from .records import CANCELLED_BY_USER, PENDING, JobRecord


def retry_after(ended, jitter):
    """The pending JobRecord that retries ``ended`` (a job's record as its
    end left it: outcome, reason and end time set), or None when its policy
    does not retry it: no retries, an outcome and reason its ``retry_on``
    does not name, attempts used up, or a cancel a user asked (never
    retried, whatever the policy: it is how a user ends a chain).

    The retry is the same job again: spider, file, settings (so its path
    settings: a checkpoint resumes where the attempt stopped), arguments,
    priority, schedule, locks and upstream (a chain's job retried still
    follows the job whose end queued it); attempt one more, ``retry_of`` the first
    attempt's id, pending until ``not_before``, the end time plus the
    backoff (``jitter``, 0 to 1, adds up to 10 % to it)."""
    if ended.reason == CANCELLED_BY_USER:
        return None
    policy = JobPolicy.from_json(ended.policy)
    if not policy.retries_after(ended.outcome, ended.reason) or ended.attempt > policy.retries:
        return None
    first = ended.retry_of or ended.id
    attempt = ended.attempt + 1
    jobid = retry_id(first, attempt)
    if not is_name(jobid):
        # An id made before job ids left room for the suffix.
        return None
    end_time = ended.end_time if ended.end_time is not None else ended.created
    return JobRecord(
        id=jobid, project=ended.project, spider=ended.spider, spider_file=ended.spider_file,
        settings=ended.settings, arguments=ended.arguments, priority=ended.priority,
        state=PENDING, created=end_time, schedule=ended.schedule, locks=ended.locks,
        policy=ended.policy, attempt=attempt, retry_of=first, upstream=ended.upstream,
        queued_by=ended.queued_by,
        not_before=end_time + policy.backoff_wait(ended.attempt, jitter))


def with_written_retry(store, ended):
    """A Deferred of ``ended`` (an end this node recorded, as the table
    holds it) with ``retry`` set to the pending retry that end wrote, if
    there is one; read from ``store`` (IJobStore). For an end whose
    write's answer was lost (a broken connection at the commit, a failed
    answer): the write was made, its retry with it, but the record that
    carries the retry never came back. A retry already claimed or ended
    is not set: it was heard of since. Fails with the read's StoreError."""
    if ended.retry is not None:
        return defer.succeed(ended)
    first = ended.retry_of or ended.id
    retry = retry_id(first, (ended.attempt or 1) + 1)
    if not is_name(retry):
        return defer.succeed(ended)

    def found(record):
        if record is None or record.state != PENDING or fold(record.retry_of or "") != fold(first):
            return ended
        return replace(ended, retry=record)
    return store.get(retry).addCallback(found)
