"""Forgetting finished jobs past --keep, with their files, and the audit's
rows older than --keep-audit."""

from twisted.internet import defer
from twisted.logger import Logger

from .events import ENDED
from .files import delete_files, files_of

# How often the audit is pruned besides at start and after a job's end:
# one indexed DELETE, so that a service no job ends on forgets too.
AUDIT_PRUNED_EVERY = 3600.0


class Pruner:
    """Forgets the oldest finished jobs past ``keep`` and deletes their
    files, on a timer of its own: ``request`` may be called from anywhere
    (a job's end, a request handler) and never deletes files in its
    caller's call stack; requests made before it runs make one pruning.
    Once stopped it prunes no more: later requests are ignored.

    With ``node`` (a shared job table), it forgets only that node's jobs
    (and those no node ran): their files are in this node's ``directory``,
    and no other node could delete them.

    With ``keep_audit`` (seconds), it also forgets the audit's rows older
    than that (``wall`` tells the time of day): whenever it prunes, and
    every AUDIT_PRUNED_EVERY seconds."""

    log = Logger()

    def __init__(self, store, directory, keep, clock, node=None, keep_audit=None, wall=None):
        self._store = store
        self._keep_audit = keep_audit
        self._wall = wall if wall is not None else clock
        self._audit_timer = None
        self._node = node
        self._directory = directory
        self._keep = keep
        self._clock = clock
        self._soon = None
        self._stopped = False

    def subscribe(self, events):
        """Prunes after every job's end (the table may be past --keep)."""
        return events.subscribe(self.request, kinds=(ENDED,))

    def request(self, *_):
        if self._soon is None and not self._stopped:
            self._soon = self._clock.callLater(0, self._prune)

    def _prune(self):
        self._soon = None
        self.prune_now()

    def prune_now(self):
        """Prunes at once (at start); Deferred that fires when done (at
        once, having done nothing, once stopped)."""
        if self._stopped:
            return defer.succeed(None)
        pruned = self._store.prune(self._keep, node=self._node)
        pruned.addCallbacks(self._delete_files, self._failed)
        if self._keep_audit is None:
            return pruned
        audit = self._prune_audit()
        return defer.gatherResults([pruned, audit]).addCallback(lambda _: None)

    def _prune_audit(self):
        if self._audit_timer is not None and self._audit_timer.active():
            self._audit_timer.cancel()
        self._audit_timer = self._clock.callLater(AUDIT_PRUNED_EVERY, self._prune_audit)
        before = self._wall.seconds() - self._keep_audit
        return self._store.prune_audit(before).addErrback(
            lambda f: self.log.failure("could not forget the audit's rows past --keep-audit", f))

    def _delete_files(self, records):
        for record in records:
            for path in delete_files(files_of(self._directory, record)):
                self.log.warn("could not delete {path} of forgotten job {jobid}",
                              path=path, jobid=record.id)

    def _failed(self, failure):
        self.log.failure("could not forget finished jobs past --keep", failure)

    def stop(self):
        """Cancels a pruning not yet begun, and every later request. A
        pruning under way finishes."""
        self._stopped = True
        for timer in (self._soon, self._audit_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self._soon = self._audit_timer = None
