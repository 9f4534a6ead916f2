"""A schedule's streak of bad runs, kept in the transaction of each end.

``pause_after=N`` (a ScheduleRecord field) pauses a schedule after N runs
in a row ended badly. The streak (``failed_in_row``) is written by the
end of each of its jobs, in that end's transaction (JobTable._ended, after
its retry decision), so no way a job ends forgets it, whatever node
records the end: a run counts once, and only its final attempt (an end
that queued a retry is not counted; the retry's end is).

What counts: a run that ended ``failed``, or ``finished`` with health
``degraded``, adds one; a run that finished healthy sets the streak back
to 0; ``cancelled`` and ``lost`` leave it as it is (a cancel, the user's
or an overlap policy's, and a node's death say nothing of the spider or
the site: they neither break nor extend the streak).
"""

from dataclasses import replace

from ..names import fold
from .notices import SCHEDULE
from .schedule_table import SCHEDULE_SELECT

FAILED_OUTCOME = "failed"
FINISHED_OUTCOME = "finished"
DEGRADED = "degraded"
# The schedule of a job's: of its name, and made no later than the job.
_ITS = "created <= %(created)s"


def verdict(record):
    """"bad", "good" or None (does not count) for an ended job's run."""
    if record.outcome == FAILED_OUTCOME:
        return "bad"
    if record.outcome == FINISHED_OUTCOME:
        return "bad" if record.health == DEGRADED else "good"
    return None


def pause_note(count, record):
    """Why a schedule paused itself after ``record``, its last bad run."""
    how = record.outcome if record.health != DEGRADED else "degraded"
    if record.reason and how == FAILED_OUTCOME:
        how += f", {record.reason}"
    runs = "run" if count == 1 else "runs"
    return (f"paused after {count} {runs} in a row failed or degraded; the last: {record.id}"
            f" ({how})")


def counted(tx, record, columns, schedule_of):
    """``record`` (a job's final end) counted in its schedule's streak, in
    ``tx``; when that pauses the schedule, the record carries the paused
    ScheduleRecord as ``paused_schedule``. ``columns`` are the store's
    schedule Columns and ``schedule_of(row)`` makes a ScheduleRecord of a
    row of them."""
    judged = verdict(record) if record.schedule else None
    if judged is None:
        return record
    # Its schedule, not a later one given its name: a schedule made after
    # the job was (the old one deleted) owes it nothing.
    key = {"key": fold(record.schedule), "created": record.created}
    if judged == "good":
        # Only a streak under way is written: a healthy run after healthy
        # runs changes nothing, and moves no version.
        if tx.one("UPDATE schedules SET failed_in_row = 0 WHERE key = %(key)s"
                  f" AND {_ITS} AND failed_in_row != 0 RETURNING seq", key) is not None:
            tx.changed(SCHEDULE)
        return record
    row = tx.one("UPDATE schedules SET failed_in_row = failed_in_row + 1 WHERE key = %(key)s"
                 f" AND {_ITS} RETURNING failed_in_row, pause_after", key)
    if row is None:
        return record  # its schedule was deleted
    tx.changed(SCHEDULE)
    streak, pause_after = row
    if pause_after is None or streak < pause_after:
        return record
    # Guarded: of two ends written at once (two nodes), one pauses it.
    paused = tx.one(
        "UPDATE schedules SET paused = %(yes)s, note = %(note)s WHERE key = %(key)s"
        f" AND {_ITS} AND NOT paused RETURNING {SCHEDULE_SELECT}",
        {**key, "yes": {c.name: c for c in columns}["paused"].to_db(True),
         "note": pause_note(streak, record)})
    if paused is None:
        return record
    return replace(record, paused_schedule=schedule_of(paused))
