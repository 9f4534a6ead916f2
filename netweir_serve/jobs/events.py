"""Job events: what the parts of the service hear when a job moves on.

One publisher, many subscribers (pruning and polling now; metrics, the
dashboard's stream and notifications next). A subscriber is called with
``(kind, record)`` in the publisher's call; one that raises is logged and
the others still hear the event.
"""

from twisted.logger import Logger

QUEUED = "queued"      # a pending job was added
STARTED = "started"    # its process started
CHANGED = "changed"    # its stats or its cancel request changed while it ran
ENDED = "ended"        # it finished (any outcome), pending or running
KINDS = (QUEUED, STARTED, CHANGED, ENDED)


class JobEvents:
    """The publisher."""

    log = Logger()

    def __init__(self):
        self._subscribers = []

    def subscribe(self, callback, kinds=KINDS):
        """Calls ``callback(kind, record)`` for each event of ``kinds``.
        Returns a function that unsubscribes it."""
        entry = (callback, frozenset(kinds))
        self._subscribers.append(entry)

        def unsubscribe():
            if entry in self._subscribers:
                self._subscribers.remove(entry)

        return unsubscribe

    def publish(self, kind, record):
        for callback, kinds in list(self._subscribers):
            if kind not in kinds:
                continue
            try:
                callback(kind, record)
            except Exception:
                self.log.failure("job {jobid}: a subscriber to {kind} failed",
                                 jobid=record.id, kind=kind)
