"""Which finished jobs each version of the job table changed, for a
listing kept in memory that is brought up to date rather than read again.

The store records every version it sees made: its own writes (with the
notices the write's transaction gave, ``tx.changed``) and, on a shared
table, the other nodes' (their notices, heard on the LISTEN connection).
A listing kept at version V asks ``finished_since(V)``: the ids of the
jobs that ended or were pruned since, or None when that cannot be known
(a version it never saw: a write whose Deferred was cancelled, notices
missed while the LISTEN connection was down, versions older than it
keeps), and the listing reads everything again, as it did before.

Only ends and prunes matter: a finished job changes no more, and the
unfinished ones are few (a listing reads them whole every time).
"""

from .notices import ENDED, PRUNED

# Versions remembered: enough for a listing asked every few seconds on a
# busy table; one older than these is read again whole.
KEPT_VERSIONS = 4096

FINISHING = (ENDED, PRUNED)


class ChangeJournal:
    def __init__(self, kept=KEPT_VERSIONS):
        self._kept = kept
        self._changes = {}      # version -> set of job ids ended or pruned
        self._oldest = None     # versions before this one are not known

    def record(self, version, notices):
        """``version`` was made with ``notices`` ((kind, jobid, node)
        tuples); a version may be recorded in several calls (a shared
        table's notices come one by one)."""
        ids = self._changes.setdefault(version, set())
        for kind, jobid, _ in notices:
            if kind in FINISHING:
                # A prune or an end without a job id cannot be followed.
                ids.add(jobid if jobid is not None else _UNKNOWN)
        if self._oldest is None:
            self._oldest = version
        if version < self._oldest:
            del self._changes[version]  # from before what was missed
            return
        while len(self._changes) > self._kept:
            # Versions are recorded about in order: the oldest goes, found
            # without sorting them all at every write.
            while self._oldest not in self._changes:
                self._oldest += 1
            del self._changes[self._oldest]
            self._oldest += 1

    def forget(self, version):
        """Changes up to ``version`` may have been missed (the LISTEN
        connection came back at it): only later ones can be followed."""
        self._changes.clear()
        self._oldest = version + 1

    def finished_since(self, version, now):
        """The ids of the jobs ended or pruned in the versions after
        ``version`` up to ``now``; None when one of them is not known."""
        if now == version:
            return set()
        if self._oldest is None or version + 1 < self._oldest or now < version:
            return None
        ids = set()
        for made in range(version + 1, now + 1):
            changed = self._changes.get(made)
            if changed is None or _UNKNOWN in changed:
                return None
            ids |= changed
        return ids


class _Unknown:
    def __repr__(self):
        return "<a job not named>"


_UNKNOWN = _Unknown()
