"""The tokens' table: ITokenStore written once for every backend.

A mixin of each job store (SQLiteJobStore, PostgresJobStore), as
schedule_table.ScheduleTable is, run the same way (``_write_statements``,
``_read_statements``; psycopg's named placeholders). Every change sends a
TOKEN notice, so the other nodes of a cluster read the tokens again at
once (a revocation takes effect everywhere within a second).

Each change takes ``audit``: a function of the TokenRecord changed (None
when there was none) giving the audit row (an AuditEntry) to write in the
same transaction, or None; a change is then never kept without its row,
nor its row without it.
"""

import json

from ..names import fold
from .audit_table import insert_audit
from .notices import TOKEN
from .token_records import DuplicateToken, TokenRecord

_COLUMNS = ("name", "role", "projects", "created", "last_used", "expires", "hash",
            "previous_hash", "previous_until")
_SELECT = ", ".join(_COLUMNS)
_BY_KEY = "key = %(key)s"


def _token(row):
    if row is None:
        return None
    values = dict(zip(_COLUMNS, row))
    values["projects"] = tuple(json.loads(values["projects"]))
    return TokenRecord(**values)


def _audited(tx, record, audit):
    """``record``, once the audit row ``audit`` gives for it (if any) is
    written in ``tx``."""
    entry = audit(record) if audit is not None else None
    if entry is not None:
        insert_audit(tx, entry)
    return record


class TokenTable:
    """ITokenStore's methods, for a job store (see the module)."""

    _name_taken = None       # the exception class of a unique key taken

    def add_token(self, record, audit=None):
        values = {name: getattr(record, name) for name in _COLUMNS}
        values.update(key=fold(record.name), projects=json.dumps(list(record.projects)))

        def insert(tx):
            try:
                row = tx.one(f"INSERT INTO tokens (key, {_SELECT}) VALUES (%(key)s, "
                             f"{', '.join(f'%({n})s' for n in _COLUMNS)}) RETURNING {_SELECT}",
                             values)
            except self._name_taken:
                raise DuplicateToken(record.name) from None
            tx.changed(TOKEN)
            return _audited(tx, _token(row), audit)

        return self._write_statements(insert)

    def tokens(self):
        return self._read_statements(lambda tx: [_token(row) for row in tx.all(
            f"SELECT {_SELECT} FROM tokens ORDER BY key", {})])

    def get_token(self, name):
        return self._read_statements(lambda tx: _token(tx.one(
            f"SELECT {_SELECT} FROM tokens WHERE {_BY_KEY}", {"key": fold(name)})))

    def revoke_token(self, name, audit=None):
        return self._write_statements(lambda tx: _audited(tx, self._token_changed(tx, tx.one(
            f"DELETE FROM tokens WHERE {_BY_KEY} RETURNING {_SELECT}", {"key": fold(name)})),
            audit))

    def rotate_token(self, name, new_hash, previous_until, audit=None):
        # The old hash stays valid until previous_until (None or a time
        # already past: not at all); a rotation during a grace ends the
        # grace of the secret before (only one previous secret is kept).
        return self._write_statements(lambda tx: _audited(tx, self._token_changed(tx, tx.one(
            "UPDATE tokens SET previous_hash = hash, previous_until = %(until)s,"
            f" hash = %(hash)s WHERE {_BY_KEY} RETURNING {_SELECT}",
            {"key": fold(name), "hash": new_hash, "until": previous_until})), audit))

    def tokens_used(self, used):
        """``used``: {name: epoch seconds}. A time earlier than the one kept
        changes nothing. No notice: a use is no change others must hear."""

        def touch(tx):
            for name, when in sorted(used.items()):
                tx.one("UPDATE tokens SET last_used = %(when)s WHERE key = %(key)s"
                       " AND (last_used IS NULL OR last_used < %(when)s) RETURNING key",
                       {"key": fold(name), "when": when})

        return self._write_statements(touch)

    @staticmethod
    def _token_changed(tx, row):
        if row is None:
            return None
        tx.changed(TOKEN)
        return _token(row)
