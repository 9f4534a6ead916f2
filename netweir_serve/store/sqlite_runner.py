"""Where the SQLite store's statements run, and how their results come back.

``SQLiteThread`` is the service's: one thread of the store's own runs every
statement, one after the other in the order they were asked for, so the
reactor never waits on the file (a listing of 20,000 jobs, a prune, an
fsync) and there is still one writer. Results come back to the reactor
thread through ``callFromThread``.

``Inline`` runs each statement at once on the calling thread: for unit
tests driven by a ``Clock`` with no running reactor, where the store must
answer before the call returns.

Both take tasks (callables of no argument that catch their own errors) by
``submit`` and hand functions back to the reactor by ``deliver``.
"""

import collections
import queue
import threading

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()


class Inline:
    """Runs each task on the calling thread, at once."""

    def __init__(self):
        self._tasks = collections.deque()
        self._running = False

    def submit(self, task):
        # A task's delivery may ask for more work (a callback writing
        # again): that waits until the task under way has ended, as it
        # would behind the store's thread, rather than nesting in it.
        self._tasks.append(task)
        if self._running:
            return
        self._running = True
        try:
            while self._tasks:
                self._tasks.popleft()()
        finally:
            self._running = False

    def deliver(self, function, *args):
        function(*args)

    def stop(self):
        return defer.succeed(None)


_STOP = object()


class SQLiteThread:
    """One thread of its own, started at once, running the tasks submitted
    in order; ``deliver`` calls back on ``reactor``'s thread."""

    def __init__(self, reactor, name="netweir-serve-sqlite"):
        self._reactor = reactor
        self._tasks = queue.SimpleQueue()
        self._stopped = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, task):
        self._tasks.put(task)

    def deliver(self, function, *args):
        self._reactor.callFromThread(function, *args)

    def stop(self):
        """Ends the thread once the tasks submitted before have run; a
        Deferred that fires (on the reactor thread) when it has."""
        if self._stopped is None:
            self._stopped = defer.Deferred()
            self._tasks.put(_STOP)
        return self._stopped

    def _run(self):
        while True:
            task = self._tasks.get()
            if task is _STOP:
                break
            try:
                task()
            except BaseException as e:  # a task's own bug: said, and the thread goes on
                self.deliver(_report, e)
        # Daemon, so an exit without a close does not hang on this thread;
        # the last thing it does is say it has ended.
        self.deliver(self._stopped.callback, None)


def _report(error):
    log.failure("a statement of the job table failed outside its request",
                failure=Failure(error))
