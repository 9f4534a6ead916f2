"""A job's check reused while the project's files stay as they were.

Checking a job means forking a reader that runs every spider file of the
project, eight readers at a time (reader.MAX_CONCURRENT_READS): a burst of
a thousand schedules of one spider due in the same second would wait for
a thousand readers, some seconds. Yet the answer depends only on what is
asked (project, spider, settings, arguments) and on the project's files,
so one reader answers them all:

- while a check is under way, the same check asked again waits for its
  answer (a firing burst asks it once);
- a check that passed is kept and given again for as long as the
  project's files are unchanged: the same names, and for each file the
  same mtime and size (``files_state``). Any file edited, added or removed
  anywhere in the project's folder means a new check.

Refusals and failures are not kept (a timeout, a reader that died): the
next request asks again. Two guards keep the shortcut honest where file
times cannot tell: a state whose newest file changed less than
RACY_SECONDS before it was read is never reused (a file written twice in
one tick of the file system's clock, at one size, would look unchanged:
git's "racily clean" entries), and a project folder holding more than
MAX_FILES entries is read afresh every time (its state would cost more to
take than it saves, and a file project in a big folder, a home directory,
must not be walked at every firing).

The state is taken on the reactor thread (stats of the project's files,
some microseconds each); requests in one turn of the reactor share it, as
a burst's firings mostly do.
"""

import collections
import hashlib
import os
import time

from twisted.internet import defer
from twisted.python.failure import Failure

# A file changed this recently (seconds, against the reactor's clock) may
# change again within the same mtime: its project's checks are not reused.
RACY_SECONDS = 2.0
# The most entries (files and folders) a project's state is taken of.
MAX_FILES = 1000
# Checks kept, the least recently used forgotten first: schedule.json with
# a new argument each time must not grow the daemon.
MAX_KEPT = 256
# Folders and files no spider imports or reads: bytecode the crawls write,
# and hidden ones (.git, a .venv) that would only make the walk long.
_SKIPPED = ("__pycache__",)


def files_state(folder, limit=MAX_FILES):
    """``(entries, newest)`` of every file and folder under ``folder``
    (recursively; symbolic links followed): each file as ``(relative path,
    mtime_ns, size)``, each folder as ``(relative path,)``, sorted; and
    the newest mtime (ns). None when there are more than ``limit`` entries
    or the folder cannot be read."""
    entries, newest = [], 0
    waiting = [""]
    while waiting:
        relative = waiting.pop()
        try:
            with os.scandir(os.path.join(folder, relative)) as found:
                listed = list(found)
        except OSError:
            return None
        for entry in listed:
            if entry.name.startswith(".") or entry.name in _SKIPPED:
                continue
            path = os.path.join(relative, entry.name)
            try:
                if entry.is_dir():
                    entries.append((path,))
                    waiting.append(path)
                    continue
                status = entry.stat()
            except OSError:
                # Gone between the listing and the stat: changing now.
                return None
            entries.append((path, status.st_mtime_ns, status.st_size))
            newest = max(newest, status.st_mtime_ns)
            if len(entries) > limit:
                return None
        if len(entries) > limit:
            return None
    return tuple(sorted(entries)), newest


def _digest(state):
    """``(digest, newest)`` of a files_state (or None): each check keeps a
    16-byte digest of the entries rather than the entries themselves, a
    thousand tuples for a big project, times the checks kept."""
    if state is None:
        return None
    entries, newest = state
    return hashlib.blake2b(repr(entries).encode(), digest_size=16).digest(), newest


class _Check:
    """One check of a key: under way (``flight``) or passed (``found``),
    as of the project's files ``state``."""

    def __init__(self, state):
        self.state = state
        self.found = None
        self.flight = None
        self.waiters = []


class CheckReuse:
    """Answers checks through ``ask(project, spider, settings, arguments,
    spelled)`` (a Deferred FoundSpider: the reader's own check), asking
    once for as long as the project's files are unchanged (see the
    module). ``clock`` (IReactorTime) ends each reactor turn's states;
    ``wall`` (``seconds()``, the time of day: the service's reactor counts
    monotonic seconds) is what a state's newest mtime is judged settled
    against, ``time.time`` if not given; ``state(folder)`` is
    ``files_state`` unless a test says otherwise.

    ``asked`` counts the checks sent to ``ask``, and ``reused`` those
    answered without one (for the tests and the benchmark)."""

    def __init__(self, clock, ask, wall=None, state=files_state):
        self._clock = clock
        self._now = time.time if wall is None else wall.seconds
        self._ask = ask
        self._state_of = state
        self._states = {}
        self._turn_ends = None
        self._checks = collections.OrderedDict()
        self.asked = 0
        self.reused = 0

    def check(self, project, spider, settings, arguments, spelled):
        """Deferred FoundSpider, as ``ask`` would answer (its failures too)."""
        state = self._settled_state(project)
        if state is None:
            self.asked += 1
            return self._ask(project, spider, settings, arguments, spelled)
        key = (project.name, project.path, spider, tuple(map(tuple, settings)),
               tuple(map(tuple, arguments)), tuple(sorted(spelled.items())))
        held = self._checks.get(key)
        if held is not None and held.state == state:
            self._checks.move_to_end(key)
            self.reused += 1
            if held.found is not None:
                return defer.succeed(held.found)
            return self._wait(key, held)
        held = _Check(state)
        self._checks[key] = held
        while len(self._checks) > MAX_KEPT:
            self._checks.popitem(last=False)
        self.asked += 1
        held.flight = defer.maybeDeferred(self._ask, project, spider, settings, arguments,
                                          spelled)
        waiting = self._wait(key, held)
        held.flight.addBoth(self._landed, key, held)
        return waiting

    def _wait(self, key, held):
        """A Deferred of the answer of ``held``'s flight; cancelled, it
        stops the flight only if nobody else waits for it."""
        def cancel(waiter):
            if waiter in held.waiters:
                held.waiters.remove(waiter)
            if not held.waiters and held.flight is not None:
                # Nobody waits: stop the reader (as a cancel always did),
                # and ask afresh next time.
                self._drop(key, held)
                held.flight.cancel()

        waiter = defer.Deferred(cancel)
        held.waiters.append(waiter)
        return waiter

    def _landed(self, result, key, held):
        held.flight = None
        waiters, held.waiters = held.waiters, []
        failed = isinstance(result, Failure)
        if failed:
            self._drop(key, held)
        else:
            held.found = result
        for waiter in waiters:
            if failed:
                waiter.errback(result)
            else:
                waiter.callback(result)
        # Handled here: every waiter was given the failure to handle.
        return None

    def _drop(self, key, held):
        if self._checks.get(key) is held:
            del self._checks[key]

    def _settled_state(self, project):
        """The state of ``project``'s files, taken once per reactor turn;
        None when it may not be relied on (see the module)."""
        folder = project.workdir
        if folder not in self._states:
            self._states[folder] = _digest(self._state_of(folder))
            if self._turn_ends is None:
                self._turn_ends = self._clock.callLater(0, self._end_turn)
        state = self._states[folder]
        if state is None:
            return None
        digest, newest = state
        if newest / 1e9 > self._now() - RACY_SECONDS:
            return None
        return digest

    def _end_turn(self):
        self._turn_ends = None
        self._states.clear()
