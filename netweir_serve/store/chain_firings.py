"""The chain schedules' outbox: a firing owed, written with the end that
owes it.

A chain schedule (``kind`` "after") runs its spider after each job of its
upstream (a spider of its project, or ``schedule:NAME``'s jobs) that ends
as its ``chain_on`` asks. The end of such a job writes one row of
``chain_firings`` per chain it fires, in the transaction that records the
end (JobTable._ended): the end and its firings are in the table together
or not at all, so a crash never loses a firing, and the primary key
(schedule, upstream job) with ``ON CONFLICT DO NOTHING`` never writes one
twice. Whoever queues the chain's job (schedules.chains, on any node)
deletes the row in the transaction that counts the job
(IScheduleStore.settle_chain_firing).
"""

from dataclasses import dataclass, replace

from ..names import fold
from .columns import SCHEDULE_FIELDS
from .notices import SCHEDULE
from .records import CANCELLED_OUTCOME, EXPIRED, FINISHED_OUTCOME, STALLED, TIMEOUT

CHAIN_KIND = "after"
# ``rule`` of a chain after another schedule's jobs (else a spider's name).
SCHEDULE_PREFIX = "schedule:"
# The ends a chain may fire on (``chain_on``).
CHAIN_ENDS = ("finished", "healthy", "degraded", "failed")
# The outcomes ``failed`` stands for: a crawl that failed, and one whose
# end nobody saw (lost).
FAILED_OUTCOMES = ("failed", "lost")
# The cancels ``failed`` stands for too: the service's own deadlines gave
# up on the job (it ran too long, stopped making progress, or waited
# pending past its expiry), which is a run that went wrong, as a failure
# is. A cancel a person asked (cancel.json) or a service stopping under
# the job fires nothing: nobody's crawl failed.
FAILED_CANCELS = (TIMEOUT, STALLED, EXPIRED)


@dataclass(frozen=True)
class ChainFiring:
    """One row of the outbox: schedule ``schedule_key`` (its folded name)
    owes a job for the end of job ``upstream``, written at ``created``."""

    schedule_key: str
    upstream: str
    created: float


def ends_as(record):
    """The chain ends (CHAIN_ENDS) the end of job ``record`` is."""
    if record.outcome == FINISHED_OUTCOME:
        return ("finished",) + ((record.health,) if record.health else ())
    if record.outcome in FAILED_OUTCOMES or (
            record.outcome == CANCELLED_OUTCOME and record.reason in FAILED_CANCELS):
        return ("failed",)
    return ()


def follows(schedule, record):
    """Whether chain ``schedule`` (a ScheduleRecord) is after job
    ``record``: its spider's, or its schedule's (both of its project)."""
    if schedule.kind != CHAIN_KIND or fold(schedule.project) != fold(record.project):
        return False
    upstream = schedule.rule or ""
    if upstream.startswith(SCHEDULE_PREFIX):
        return record.schedule is not None and (
            fold(upstream[len(SCHEDULE_PREFIX):]) == fold(record.schedule))
    return fold(upstream) == fold(record.spider)


_CHAINS_OF = (f"SELECT {', '.join(name for name, _ in SCHEDULE_FIELDS)} FROM schedules"
              " WHERE project_key = %(project)s AND kind = %(kind)s ORDER BY seq")
_OWE = ("INSERT INTO chain_firings (schedule_key, upstream, created)"
        " VALUES (%(key)s, %(upstream)s, %(created)s)"
        " ON CONFLICT (schedule_key, upstream) DO NOTHING RETURNING schedule_key")


def write_owed(tx, ended, read_schedule):
    """``ended`` (the record of a job's final end, in transaction ``tx``)
    with ``chain_firings`` set to the names of the chain schedules whose
    firing its end wrote to the outbox (a SCHEDULE notice sent if any).
    ``read_schedule(row)`` makes a ScheduleRecord of a row of the
    schedules' columns (SCHEDULE_FIELDS), as the store reads one."""
    ends = ends_as(ended)
    if not ends:
        return ended
    chains = [read_schedule(row) for row in tx.all(
        _CHAINS_OF,
        {"project": fold(ended.project), "kind": CHAIN_KIND})]
    owed = []
    for chain in chains:
        if not follows(chain, ended) or not set(chain.chain_on) & set(ends):
            continue
        # A paused chain is owed the firing too: it is dropped as a skip
        # when its row is read (schedules.chains), as its timer's would be.
        if tx.one(_OWE, {"key": fold(chain.name), "upstream": ended.id,
                         "created": ended.end_time or ended.created}) is not None:
            owed.append(chain.name)
    if owed:
        tx.changed(SCHEDULE)
    return replace(ended, chain_firings=tuple(owed))
