"""Answers built from the job table, kept until its version moves on."""

from twisted.internet import defer
from twisted.python.failure import Failure

# Answers kept per cache at most: listjobs.json keeps one per project
# asked for, and a project is any name (one not served lists no jobs), so
# without a bound a client asking for names in turn would fill memory
# until the job table next changed. The oldest answer kept goes first.
MAX_ANSWERS = 64


class VersionCache:
    """Keeps answers by key while the store's ``version`` is the same, at
    most ``max_answers`` of them.

    ``store_of()`` gives the store (looked up when asked, so endpoints can
    be made before the store is); ``built()``, when given, is called each
    time an answer is built rather than kept (watching.builds)."""

    def __init__(self, store_of, max_answers=MAX_ANSWERS, built=None):
        self._store_of = store_of
        self._built = built
        self._max_answers = max_answers
        self._version = None
        self._answers = {}
        # Answers being built, by key: the Deferreds of those who asked
        # meanwhile. The store answers later than the call (on its thread),
        # and a listing of 20,000 jobs takes a while: clients asking while
        # it is built wait for that one build rather than each start one.
        self._building = {}

    def answer(self, key, build):
        """The answer for ``key``: the kept one while the table's version is
        the same (at once, no Deferred), else a Deferred of ``build()``."""
        version = self._store_of().version
        if version != self._version:
            self._answers.clear()
            self._building.clear()
            self._version = version
        if key in self._answers:
            return self._answers[key]
        # Each asker gets a Deferred of its own: one that goes away
        # (cancelled) stops neither the build nor the others' answers.
        answered = defer.Deferred()
        waiting = self._building.get(key)
        if waiting is not None:
            waiting.append(answered)
            return answered
        if self._built is not None:
            self._built()
        waiting = self._building[key] = [answered]
        build().addBoth(self._settle, version, key, waiting)
        return answered

    def _settle(self, outcome, version, key, waiting):
        if self._building.get(key) is waiting:
            del self._building[key]
        if not isinstance(outcome, Failure) and version == self._version:
            if key not in self._answers and len(self._answers) >= self._max_answers:
                del self._answers[next(iter(self._answers))]
            self._answers[key] = outcome
        for answered in waiting:
            if isinstance(outcome, Failure):
                answered.errback(outcome)
            else:
                answered.callback(outcome)
        return None
