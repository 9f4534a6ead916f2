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
    # A chain (``kind`` "after", ``rule`` the upstream: a spider's name, or
    # "schedule:NAME"): the ends of an upstream job that fire it, of
    # finished, healthy, degraded and failed.
    chain_on: tuple = ()
    # Seconds after each due time its jobs start (a fixed part of this, by
    # its name's hash); 0 for none.
    jitter: float = 0.0
    # It pauses itself after this many runs in a row ended failed or
    # degraded (``failed_in_row`` counts them); None: never. ``note`` says
    # why it is paused (its own pause's reason, or a user's).
    pause_after: int = None
    note: str = None
    failed_in_row: int = 0
    # Firings queued behind a running job (overlap buffer_one/buffer_all),
    # and runs made up for at start (misfire=once).
    buffered: int = 0
    caught_up: int = 0
    seq: int = None
