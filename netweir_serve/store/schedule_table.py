"""The recurring schedules' table, beside the jobs: IScheduleStore written
once for every backend.

A mixin of each job store (SQLiteJobStore, PostgresJobStore): a change of
a schedule is one of that store's transactions, so schedules and jobs share
one order of writes and one version, and on a shared store it sends a
SCHEDULE notice to the other nodes. The statements are written once, with
psycopg's named placeholders; a store runs them through
``_write_statements`` and ``_read_statements`` (each a Deferred of
``work(tx)``, ``tx`` having ``one``, ``all`` and ``changed``), in its own
dialect, and gives the columns with its converters (``_schedule_columns``,
columns.columns_of) and the error its database raises for a name taken
(``_name_taken``).

Every node's timetable wakes for the same schedules; the one whose
``claim_firing`` takes a due time fires it, and the others go on from the
row it wrote (IScheduleStore).
"""

from twisted.internet import defer

from ..names import fold
from .schedule_records import DuplicateSchedule, ScheduleRecord
from .chain_firings import ChainFiring
from .columns import (
    CLAIM_FIRING, SCHEDULE_COUNTS, SCHEDULE_FIELDS, SCHEDULE_SETTABLE, record_of)
from .notices import SCHEDULE

_NAMES = tuple(name for name, _ in SCHEDULE_FIELDS)
_SELECT = ", ".join(_NAMES)
# Every column of a schedule, in ScheduleRecord's order (for a RETURNING).
SCHEDULE_SELECT = _SELECT
_INSERTED = tuple(name for name in _NAMES if name != "seq")
_INSERT = (f"INSERT INTO schedules (key, project_key, {', '.join(_INSERTED)})"
           f" VALUES (%(key)s, %(project_key)s, {', '.join(f'%({n})s' for n in _INSERTED)})"
           f" RETURNING {_SELECT}")
# A schedule's jobs waiting take its new priority: claims take jobs by
# priority, then seq, so its buffered jobs keep leaving the queue in the
# order queued, and with the others' as the edit says. Its own jobs alone:
# not those of a deleted schedule of its name (queued before it was made).
_REPRIORITISED = ("UPDATE jobs SET priority = %(priority)s WHERE schedule = %(name)s"
                  " AND state = 'pending' AND created >= %(created)s RETURNING seq")
# With ``seq``: only that schedule, not a new one given its name since.
_WHOSE = "key = %(key)s AND (CAST(%(seq)s AS BIGINT) IS NULL OR seq = %(seq)s)"


class ScheduleTable:
    """IScheduleStore's methods, for a job store (see the module)."""

    _schedule_columns = ()   # the Columns of SCHEDULE_FIELDS, as the store holds them
    _name_taken = None       # the exception class of a unique key taken

    def _schedule(self, row):
        return record_of(ScheduleRecord, self._schedule_columns, row) if row else None

    def _changed(self, tx, row):
        """The schedule a change wrote (``row``), its notice sent; or None."""
        if row is None:
            return None
        tx.changed(SCHEDULE)
        return self._schedule(row)

    def add_schedule(self, record):
        values = {c.name: c.to_db(getattr(record, c.name)) for c in self._schedule_columns}
        values.update(key=fold(record.name), project_key=fold(record.project))

        def insert(tx):
            try:
                row = tx.one(_INSERT, values)
            except self._name_taken:
                raise DuplicateSchedule(record.name) from None
            return self._changed(tx, row)

        return self._write_statements(insert)

    def get_schedule(self, name):
        return self._read_statements(lambda tx: self._schedule(tx.one(
            f"SELECT {_SELECT} FROM schedules WHERE key = %(key)s", {"key": fold(name)})))

    def schedules(self, project=None):
        where = "" if project is None else "WHERE project_key = %(project)s"
        return self._read_statements(lambda tx: [self._schedule(row) for row in tx.all(
            f"SELECT {_SELECT} FROM schedules {where} ORDER BY seq",
            {"project": None if project is None else fold(project)})])

    def update_schedule(self, name, seq=None, skipped_added=0, buffered_added=0,
                        caught_up_added=0, **changes):
        try:
            statement, values = self._update(
                name, seq, (skipped_added, buffered_added, caught_up_added), changes)
        except TypeError as e:
            return defer.fail(e)

        def update(tx):
            updated = self._changed(tx, tx.one(statement, values))
            if updated is not None and "priority" in changes:
                tx.all(_REPRIORITISED, {"priority": values["set_priority"],
                                        "name": updated.name, "created": updated.created})
            return updated

        return self._write_statements(update)

    def _update(self, name, seq, counts_added, changes):
        """(statement, values) of update_schedule (``counts_added`` those
        of SCHEDULE_COUNTS, in order); TypeError for a field it may not set."""
        added = dict(zip(SCHEDULE_COUNTS, counts_added))
        unknown = set(changes) - set(SCHEDULE_SETTABLE)
        if unknown:
            raise TypeError(f"not a settable field: {', '.join(sorted(unknown))}")
        columns = {c.name: c for c in self._schedule_columns}
        values = {f"set_{key}": columns[key].to_db(value) for key, value in changes.items()}
        assignments = [f"{key} = %(set_{key})s" for key in changes]
        # (runs: IJobStore.add counts each job, in its insert's transaction.)
        assignments += [f"{count} = {count} + %(add_{count})s" for count in SCHEDULE_COUNTS]
        values.update({f"add_{count}": int(n) for count, n in added.items()})
        values.update(key=fold(name), seq=seq)
        statement = (f"UPDATE schedules SET {', '.join(assignments)} WHERE {_WHOSE}"
                     f" RETURNING {_SELECT}")
        return statement, values

    def chain_firings(self):
        return self._read_statements(lambda tx: [ChainFiring(*row) for row in tx.all(
            "SELECT schedule_key, upstream, created FROM chain_firings"
            " ORDER BY created, schedule_key, upstream", {})])

    def settle_chain_firing(self, name, upstream, seq=None, skipped_added=0,
                            buffered_added=0, caught_up_added=0, **changes):
        try:
            statement, values = self._update(
                name, seq, (skipped_added, buffered_added, caught_up_added), changes)
        except TypeError as e:
            return defer.fail(e)

        def settle(tx):
            # Only the caller that takes the row records its job: two
            # nodes settling one firing write it once.
            taken = tx.one("DELETE FROM chain_firings WHERE schedule_key = %(key)s"
                           " AND upstream = %(upstream)s RETURNING schedule_key",
                           {"key": fold(name), "upstream": upstream})
            if taken is None:
                return None
            tx.changed(SCHEDULE)
            return self._changed(tx, tx.one(statement, values))

        return self._write_statements(settle)

    def claim_firing(self, name, seq, seen_next_due, next_due, due=None):
        return self._write_statements(lambda tx: self._changed(tx, tx.one(
            f"{CLAIM_FIRING} RETURNING {_SELECT}",
            {"next": next_due, "due": due, "key": fold(name), "seq": seq,
             "seen": seen_next_due})))

    def claim_firings(self, claims):
        values = [{"next": next_due, "due": due, "key": fold(name), "seq": seq,
                   "seen": seen_next_due}
                  for name, seq, seen_next_due, next_due, due in claims]

        def claim(tx):
            taken = [None] * len(values)
            # Row by row in the order of their keys: two nodes claiming the
            # same burst lock its rows in one order, so neither waits for
            # a row the other holds while holding one it wants (a
            # deadlock). Each write is claim_firing's own guarded one: the
            # node that comes second finds next_due moved on and takes none.
            for index in sorted(range(len(values)), key=lambda i: values[i]["key"]):
                taken[index] = self._changed(tx, tx.one(
                    f"{CLAIM_FIRING} RETURNING {_SELECT}", values[index]))
            return taken

        return self._write_statements(claim)

    def delete_schedule(self, name):
        def delete(tx):
            deleted = self._changed(tx, tx.one(
                f"DELETE FROM schedules WHERE key = %(key)s RETURNING {_SELECT}",
                {"key": fold(name)}))
            if deleted is not None:
                # The firings it was owed go with it, in its transaction: a
                # new schedule given its name must not make them.
                tx.all("DELETE FROM chain_firings WHERE schedule_key = %(key)s"
                       " RETURNING schedule_key", {"key": fold(name)})
            return deleted

        return self._write_statements(delete)
