"""The recurring schedules' table, beside the jobs in the same PostgreSQL
database.

A mixin of PostgresJobStore, as sqlite_schedules is of SQLiteJobStore: it
uses that class's transactions, so a change of a schedule moves the same
version on and sends a SCHEDULE notice to the other nodes. Every node's
timetable wakes for the same schedules; the one whose ``claim_firing``
takes the due time fires it (IScheduleStore), and the others go on from
the row it wrote.
"""

import psycopg
from twisted.internet import defer

from ...names import fold
from ...schedules.records import DuplicateSchedule, ScheduleRecord
from .columns import (
    CLAIM_FIRING, POSTGRES_KINDS, SCHEDULE_FIELDS, SCHEDULE_SETTABLE, columns_of, counting,
    record_of, select_list, set_clauses, without)
from .notices import SCHEDULE

_COLUMNS = columns_of(SCHEDULE_FIELDS, POSTGRES_KINDS)
_INSERTED = without(_COLUMNS, "seq")
_SELECT = select_list(_COLUMNS)
_SETTABLE = {c.name: c for c in _COLUMNS if c.name in SCHEDULE_SETTABLE}


def _schedule(row):
    return record_of(ScheduleRecord, _COLUMNS, row)


def _changed(tx, row):
    """The schedule a change wrote (``row``), its notice sent; or None."""
    if row is None:
        return None
    tx.changed(SCHEDULE)
    return _schedule(row)


def _one(tx, name):
    row = tx.one(f"SELECT {_SELECT} FROM schedules WHERE key = %s", (fold(name),))
    return _schedule(row) if row else None


class PostgresScheduleTable:
    """IScheduleStore's methods, for PostgresJobStore."""

    def add_schedule(self, record):
        values = tuple(c.to_db(getattr(record, c.name)) for c in _INSERTED)
        marks = ", ".join("%s" for _ in _INSERTED)

        def insert(tx):
            try:
                row = tx.one(
                    f"INSERT INTO schedules (key, project_key, {select_list(_INSERTED)})"
                    f" VALUES (%s, %s, {marks}) RETURNING {_SELECT}",
                    (fold(record.name), fold(record.project)) + values)
            except psycopg.errors.UniqueViolation:
                raise DuplicateSchedule(record.name) from None
            tx.changed(SCHEDULE)
            return _schedule(row)

        return self._write(insert)

    def get_schedule(self, name):
        return self._read(lambda tx: _one(tx, name))

    def schedules(self, project=None):
        def listing(tx):
            if project is None:
                rows = tx.all(f"SELECT {_SELECT} FROM schedules ORDER BY seq")
            else:
                rows = tx.all(f"SELECT {_SELECT} FROM schedules WHERE project_key = %s"
                              " ORDER BY seq", (fold(project),))
            return [_schedule(row) for row in rows]

        return self._read(listing)

    def update_schedule(self, name, seq=None, runs_added=0, skipped_added=0, **changes):
        try:
            assignments, values = set_clauses(_SETTABLE, changes, "%s")
        except TypeError as e:
            return defer.fail(e)
        runs, counted = counting(changes, runs_added, skipped_added, "%s",
                                 "IS NOT DISTINCT FROM")
        # With ``seq``: only that schedule, not a new one given its name since.
        where, guard = ("key = %s", ()) if seq is None else ("key = %s AND seq = %s", (seq,))

        def update(tx):
            return _changed(tx, tx.one(
                f"UPDATE schedules SET {', '.join(assignments + runs)} WHERE {where}"
                f" RETURNING {_SELECT}", (*values, *counted, fold(name), *guard)))

        return self._write(update)

    def claim_firing(self, name, seq, seen_next_due, next_due, due=None):
        def claim(tx):
            return _changed(tx, tx.one(f"{CLAIM_FIRING} RETURNING {_SELECT}", {
                "next": next_due, "due": due, "key": fold(name), "seq": seq,
                "seen": seen_next_due}))

        return self._write(claim)

    def delete_schedule(self, name):
        def delete(tx):
            return _changed(tx, tx.one(
                f"DELETE FROM schedules WHERE key = %s RETURNING {_SELECT}", (fold(name),)))

        return self._write(delete)
