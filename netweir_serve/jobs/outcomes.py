"""A job's outcome from how its crawl ended: one rule, wherever the end is seen."""


def outcome_of(record, exit_status, cancel_requested=None):
    """``cancelled`` when a cancel was asked, ``finished`` for exit status
    0, ``failed`` for any other (a signal, an exception, a failed check, or
    no status at all from a crawl that never ran)."""
    if record.cancel_requested if cancel_requested is None else cancel_requested:
        return "cancelled"
    return "finished" if exit_status == 0 else "failed"
