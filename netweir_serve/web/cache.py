"""Answers built from the job table, kept until its version moves on."""


class VersionCache:
    """Keeps answers by key while the store's ``version`` is the same.

    ``store_of()`` gives the store (looked up when asked, so endpoints can
    be made before the store is)."""

    def __init__(self, store_of):
        self._store_of = store_of
        self._version = None
        self._answers = {}

    def answer(self, key, build):
        """The answer for ``key``: the kept one while the table's version is
        the same (at once, no Deferred), else a Deferred of ``build()``."""
        version = self._store_of().version
        if version != self._version:
            self._answers.clear()
            self._version = version
        if key in self._answers:
            return self._answers[key]
        return build().addCallback(self._keep, version, key)

    def _keep(self, answer, version, key):
        if version == self._version:
            self._answers[key] = answer
        return answer
