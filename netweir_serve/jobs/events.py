"""Job events: what the parts of the service hear when a job moves on.

One publisher, many subscribers (polling, pruning, the stats history,
metrics, /events, notifications, the cluster's stats saves). A subscriber
is called with ``(kind, record)`` in the publisher's call; one that raises
is logged and the others still hear the event.

With a shared job table, what the other nodes do to their jobs is
published too (by cluster/jobs.py, from the store's notices), marked as
happening elsewhere: only subscribers that ask for it hear those events
(/events shows every node's jobs), so that what this node counts, records
and notifies stays its own.
"""

from twisted.logger import Logger

QUEUED = "queued"      # a pending job was added
STARTED = "started"    # its process started
CHANGED = "changed"    # its stats or its cancel request changed while it ran
ENDED = "ended"        # it finished (any outcome), pending or running
KINDS = (QUEUED, STARTED, CHANGED, ENDED)
# An end announced (ENDED) before the table took it, its write having
# failed (a full disk) on a table of this node's own, is recorded now,
# with what only the table's write gives it: its health, the schedule it
# paused, its chain firings. No new end: not among KINDS, so only a
# subscriber that asks for it hears it (--notify-on degraded, the
# degraded and paused counters, a pause's timer, the chains).
RECORDED_LATE = "recorded late"


class JobEvents:
    """The publisher."""

    log = Logger()

    def __init__(self):
        self._subscribers = []

    def subscribe(self, callback, kinds=KINDS, elsewhere=False):
        """Calls ``callback(kind, record)`` for each event of ``kinds``
        of this node's jobs, and, with ``elsewhere``, of the other nodes'
        too. Returns a function that unsubscribes it."""
        entry = (callback, frozenset(kinds), elsewhere)
        self._subscribers.append(entry)

        def unsubscribe():
            if entry in self._subscribers:
                self._subscribers.remove(entry)

        return unsubscribe

    def publish(self, kind, record, elsewhere=False):
        """Tells the subscribers of ``kind``; ``elsewhere``: the change was
        made by another node sharing the job table."""
        for callback, kinds, hears_elsewhere in list(self._subscribers):
            if kind not in kinds or (elsewhere and not hears_elsewhere):
                continue
            try:
                callback(kind, record)
            except Exception:
                self.log.failure("job {jobid}: a subscriber to {kind} failed",
                                 jobid=record.id, kind=kind)
