"""What a schedule's overlap policy does with a new job while its last one
waits or runs: one pure decision, for every way a schedule queues a job
(Timetable.queue_job: a firing, a run asked now, a backfill, a chain's).

The policies are Temporal's schedules' (plus ``skip``'s old behaviour,
which is Temporal's default, and ``allow``, its ALLOW_ALL):

- ``skip``: nothing, while a job of the schedule waits or runs;
- ``buffer_one`` (``queue``, its first name here): one job waits behind
  the running one; a firing while one waits already is skipped;
- ``buffer_all``: every firing waits, and they run one after another in
  the order queued;
- ``cancel_other``: the jobs that wait or run are cancelled (a running one
  gets SIGTERM and its grace period), and the new one starts once they
  have ended;
- ``terminate_other``: the same, but a running one is killed at once;
- ``allow``: the new job runs beside the others.

"Waits behind" is the schedule's lock (jobs.policies.schedule_lock): a
pending job holding it does not start while another job holding it runs,
and pending jobs leave the queue in order. Every job a schedule queues
holds it, whatever its policy, except under ``allow``: a job queued under
``skip`` (nothing else of the schedule was waiting or running then) holds
it too, so the jobs queued after it (a backfill's, a run asked now, a
firing after an edit to another policy) wait for it to end.
"""

from dataclasses import dataclass

from .times import QUEUE_LIKE

LOCKED = QUEUE_LIKE + ("buffer_all", "cancel_other", "terminate_other")


@dataclass(frozen=True)
class OverlapPlan:
    """What to do with a schedule's new job: ``skip`` it; else queue it,
    holding the schedule's lock when ``locked``, after cancelling the
    schedule's unfinished jobs when ``cancel`` (killing them at once when
    ``kill``). ``buffered``: it will wait behind another job."""

    skip: bool = False
    locked: bool = False
    buffered: bool = False
    cancel: bool = False
    kill: bool = False


def plan_for(overlap, pending, running):
    """The OverlapPlan of a new job of a schedule with ``overlap`` while
    ``pending`` of its jobs wait and ``running`` run."""
    busy = pending + running > 0
    if overlap == "skip":
        return OverlapPlan(skip=busy, locked=True)
    if overlap in QUEUE_LIKE and pending:
        return OverlapPlan(skip=True)
    if overlap in ("cancel_other", "terminate_other"):
        return OverlapPlan(locked=True, cancel=busy, kill=busy and overlap == "terminate_other")
    if overlap in LOCKED:
        return OverlapPlan(locked=True, buffered=busy)
    return OverlapPlan()
