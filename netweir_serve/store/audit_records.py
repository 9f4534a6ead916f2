"""A row of the audit (store.audit_table keeps them; web/audit.py and
access.commands write them)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class AuditEntry:
    """One write, as it was asked and answered. Immutable.

    ``time`` epoch seconds; ``who`` the token's or user's name (the OS
    user's for the ``token`` command; None on a service open to all);
    ``address`` the client's (None for the command); ``endpoint`` the
    path (``schedule.json``) or the command (``token add``); ``project``
    the project it named (None for a token's change); ``target`` the job
    id, schedule name or token name; ``change`` what changed, a dict with
    no secret in it (or None); ``status`` the answer's HTTP status."""

    time: float
    who: str = None
    address: str = None
    endpoint: str = ""
    project: str = None
    target: str = None
    change: dict = None
    status: int = 200
    seq: int = None
