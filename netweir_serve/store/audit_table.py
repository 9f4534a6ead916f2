"""The audit's table: IAuditStore written once for every backend.

A mixin of each job store (SQLiteJobStore, PostgresJobStore), as
token_table.TokenTable is, run the same way (``_write_statements``,
``_read_statements``; psycopg's named placeholders). A row is written
once and never changed; rows older than --keep-audit are pruned.
"""

import json
from dataclasses import replace

from ..names import fold
from .audit_records import AuditEntry
from .job_table import _among as projects_among

_COLUMNS = ("time", "who", "address", "endpoint", "project", "target", "change", "status")
_SELECT = ", ".join(("seq",) + _COLUMNS)
_INSERT = (f"INSERT INTO audit (project_key, {', '.join(_COLUMNS)}) VALUES (%(project_key)s,"
           f" {', '.join(f'%({n})s' for n in _COLUMNS)}) RETURNING seq")

# The most rows one listing gives.
MAX_LISTED = 1000


def _entry(row):
    seq, *values = row
    values = dict(zip(_COLUMNS, values))
    values["change"] = json.loads(values["change"]) if values["change"] else None
    values["time"] = float(values["time"])
    return AuditEntry(seq=seq, **values)


def audit_values(entry):
    """The parameters of ``entry``'s INSERT (``_INSERT``)."""
    values = {name: getattr(entry, name) for name in _COLUMNS}
    values["change"] = (json.dumps(entry.change, sort_keys=True, ensure_ascii=False)
                        if entry.change is not None else None)
    values["project_key"] = fold(entry.project) if entry.project is not None else None
    values["status"] = int(entry.status)
    return values


def insert_audit(tx, entry):
    """Writes ``entry`` in the transaction ``tx``; its seq. (For a write
    whose audit row goes in its own transaction.)"""
    return tx.one(_INSERT, audit_values(entry))[0]


class AuditTable:
    """IAuditStore's methods, for a job store (see the module)."""

    def add_audit(self, entry):
        return self._write_statements(
            lambda tx: replace(entry, seq=insert_audit(tx, entry)))

    def audit(self, projects=None, since=None, limit=100, every=False):
        """See IAuditStore.audit."""
        conditions, params = [], {"limit": max(1, min(int(limit), MAX_LISTED))}
        if projects is not None:
            among, names = projects_among(projects)
            if among is None:
                return self._read_statements(lambda tx: [])
            params.update(names)
            conditions.append(f"project_key {among}")
        elif not every:
            conditions.append("project_key IS NOT NULL")
        if since is not None:
            conditions.append("time >= %(since)s")
            params["since"] = since
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        return self._read_statements(lambda tx: [_entry(row) for row in tx.all(
            f"SELECT {_SELECT} FROM audit {where} ORDER BY time DESC, seq DESC"
            " LIMIT %(limit)s", params)])

    def prune_audit(self, before):
        """See IAuditStore.prune_audit."""
        return self._write_statements(lambda tx: len(tx.all(
            "DELETE FROM audit WHERE time < %(before)s RETURNING seq", {"before": before})))
