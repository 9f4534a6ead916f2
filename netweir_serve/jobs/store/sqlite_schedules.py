"""The recurring schedules' table, beside the jobs in the same SQLite file.

A mixin of SQLiteJobStore: it uses that class's write queue and reads, so
schedules and jobs share one file, one order of writes and one version.
"""

import sqlite3

from twisted.internet import defer

from ...names import fold
from ...schedules.records import DuplicateSchedule, ScheduleRecord
from .columns import (
    CLAIM_FIRING, SCHEDULE_FIELDS, SCHEDULE_SETTABLE, SQLITE_KINDS, columns_of, counting, record_of, select_list, set_clauses, without)


_COLUMNS = columns_of(SCHEDULE_FIELDS, SQLITE_KINDS)
_INSERTED = without(_COLUMNS, "seq")
_SELECT = select_list(_COLUMNS)
_SETTABLE = {c.name: c for c in _COLUMNS if c.name in SCHEDULE_SETTABLE}
_CLAIM_FIRING = CLAIM_FIRING.replace("%(", ":").replace(")s", "")


def _schedule(row):
    return record_of(ScheduleRecord, _COLUMNS, row)


def _one(db, name):
    row = db.execute(f"SELECT {_SELECT} FROM schedules WHERE key = ?", (fold(name),)).fetchone()
    return _schedule(row) if row else None


class ScheduleTable:
    """IScheduleStore's methods, for SQLiteJobStore."""

    def add_schedule(self, record):
        values = tuple(c.to_db(getattr(record, c.name)) for c in _INSERTED)
        marks = ", ".join("?" for _ in _INSERTED)

        def insert(db):
            try:
                db.execute(
                    f"INSERT INTO schedules (key, project_key, {select_list(_INSERTED)})"
                    f" VALUES (?, ?, {marks})",
                    (fold(record.name), fold(record.project)) + values)
            except sqlite3.IntegrityError:
                raise DuplicateSchedule(record.name) from None
            return _one(db, record.name)

        return self._write(insert)

    def get_schedule(self, name):
        return self._read(lambda db: _one(db, name))

    def schedules(self, project=None):
        def listing(db):
            if project is None:
                rows = db.execute(f"SELECT {_SELECT} FROM schedules ORDER BY seq")
            else:
                rows = db.execute(f"SELECT {_SELECT} FROM schedules WHERE project_key = ?"
                                  " ORDER BY seq", (fold(project),))
            return [_schedule(row) for row in rows]

        return self._read(listing)

    def update_schedule(self, name, seq=None, runs_added=0, skipped_added=0, **changes):
        try:
            assignments, values = set_clauses(_SETTABLE, changes, "?")
        except TypeError as e:
            return defer.fail(e)
        runs, counted = counting(changes, runs_added, skipped_added, "?", "IS")
        # With ``seq``: only that schedule, not a new one given its name since.
        where, guard = ("key = ?", ()) if seq is None else ("key = ? AND seq = ?", (seq,))

        def update(db):
            cursor = db.execute(
                f"UPDATE schedules SET {', '.join(assignments + runs)} WHERE {where}",
                (*values, *counted, fold(name), *guard))
            if cursor.rowcount == 0:
                return None
            return _one(db, name)

        return self._write(update)

    def claim_firing(self, name, seq, seen_next_due, next_due, due=None):
        def claim(db):
            cursor = db.execute(_CLAIM_FIRING, {"next": next_due, "due": due, "key": fold(name),
                                                "seq": seq, "seen": seen_next_due})
            return _one(db, name) if cursor.rowcount else None

        return self._write(claim)

    def delete_schedule(self, name):
        def delete(db):
            found = _one(db, name)
            if found is not None:
                db.execute("DELETE FROM schedules WHERE key = ?", (fold(name),))
            return found

        return self._write(delete)
