"""Forgetting finished jobs past --keep, with their files."""

from twisted.internet import defer
from twisted.logger import Logger

from .events import ENDED
from .files import delete_files, files_of


class Pruner:
    """Forgets the oldest finished jobs past ``keep`` and deletes their
    files, on a timer of its own: ``request`` may be called from anywhere
    (a job's end, a request handler) and never deletes files in its
    caller's call stack; requests made before it runs make one pruning.
    Once stopped it prunes no more: later requests are ignored.

    With ``node`` (a shared job table), it forgets only that node's jobs
    (and those no node ran): their files are in this node's ``directory``,
    and no other node could delete them."""

    log = Logger()

    def __init__(self, store, directory, keep, clock, node=None):
        self._store = store
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
        return pruned.addCallbacks(self._delete_files, self._failed)

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
        if self._soon is not None and self._soon.active():
            self._soon.cancel()
        self._soon = None
