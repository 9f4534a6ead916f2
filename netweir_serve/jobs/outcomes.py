"""A job's outcome and reason from how its crawl ended: one rule, wherever
the end is seen.

The four outcomes are scrapyd's clients' (``finished``, ``failed``,
``cancelled``, ``lost``); the reason says why, as a code an operator and a
retry policy can match: ``exit 0``, ``exit N``, ``signal N``, the cancels'
(``cancel.json``, ``service stopped``, ``timeout``, ``stalled``), a
pending job's ``expired``, ``memory`` (the kernel killed the crawl at its
limit), ``not started`` (the service could not start its process),
``node lost`` (its node was declared dead) and ``lost``.
"""

from ..store.records import (
    CANCEL_REASONS, CANCELLED_BY_USER, EXPIRED, LOST, MEMORY, NODE_LOST, NOT_STARTED)

REASONS = CANCEL_REASONS + (EXPIRED, MEMORY, NOT_STARTED, NODE_LOST, LOST)


def exit_reason(exit_status):
    """``exit N`` for a status, ``signal N`` for a crawl a signal ended
    (the OS's negative status), ``lost`` for none at all."""
    if exit_status is None:
        return LOST
    if exit_status < 0:
        return f"signal {-exit_status}"
    return f"exit {exit_status}"


def end_of(record, exit_status, cancel_reason=None, oom=False, not_started=False):
    """``(outcome, reason)`` of a job whose crawl ended with ``exit_status``.

    ``cancelled`` when a cancel was asked (``cancel_reason``, or the
    record's: the reason stays the one the first cancel gave, and a cancel
    whose reason is unknown is the user's); ``failed`` with reason
    ``memory`` when the kernel killed in its group at its memory limit
    (``oom``) and the crawl did not exit 0 (a worker killed while the
    crawl finished is not a failure); ``failed`` with ``not started`` when
    the crawl's parent says it never started (``not_started``);
    ``finished`` for exit status 0 and ``failed`` for any other status
    (a signal, an exception, a failed check, or none at all)."""
    if cancel_reason is not None or record.cancel_requested:
        return "cancelled", cancel_reason or record.reason or CANCELLED_BY_USER
    if not_started:
        return "failed", NOT_STARTED
    if oom and exit_status != 0:
        # An OOM kill of a worker the crawl survived is not its end.
        return "failed", MEMORY
    return ("finished" if exit_status == 0 else "failed"), exit_reason(exit_status)
