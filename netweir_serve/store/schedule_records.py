"""A recurring schedule as the store holds it."""

from dataclasses import dataclass


class DuplicateSchedule(ValueError):
    """A schedule with this name (compared ignoring case) exists."""

    def __init__(self, name):
        super().__init__(f"a schedule named {name!r} already exists (names ignore case)")
        self.name = name


@dataclass(frozen=True)
class ScheduleRecord:
    """One schedule. Immutable: a change makes a new one.

    ``kind`` is "cron" or "every" and ``rule`` its text as shown; ``tz`` the
    zone's name; ``anchor`` when it was added (an every rule's grid starts
    there); ``next_due`` when it fires next, ``last_due`` the due time it
    fired last (whether it queued a job, skipped or failed), epoch seconds.
    ``runs`` counts the jobs it queued, ``skipped`` the firings its overlap
    policy skipped; ``error`` says why its last firing queued nothing."""

    name: str
    project: str
    spider: str
    kind: str
    rule: str
    tz: str
    overlap: str = "skip"
    misfire: str = "once"
    settings: tuple = ()
    arguments: tuple = ()
    priority: float = 0.0
    paused: bool = False
    anchor: float = 0.0
    next_due: float = None
    last_due: float = None
    last_job: str = None
    runs: int = 0
    skipped: int = 0
    error: str = None
    created: float = 0.0
    # The schedule's own policy for its jobs (JobPolicy.to_json()), or None.
    policy: dict = None
    seq: int = None
