"""How the core's refusals are answered: an HTTP status for each kind."""

from ..store.records import DuplicateJob, StoreError
from ..jobs.submit import SubmitRefused, UnknownProject
from ..store.schedule_records import DuplicateSchedule
from ..schedules.timetable import ScheduleRefused, UnknownSchedule
from ..jobs.checked import InspectError
from .params import ApiError

# Most specific first. InspectError: a spider file that cannot be listed,
# a sentence about the files.
_CODES = (
    (UnknownProject, 404), (UnknownSchedule, 404),
    (DuplicateJob, 409), (DuplicateSchedule, 409),
    (SubmitRefused, 400), (ScheduleRefused, 400), (InspectError, 400),
    (StoreError, 503),
)


def refused(failure):
    """An errback: the core's refusals as ApiErrors; anything else passes
    on (and is answered 500)."""
    for kind, code in _CODES:
        if failure.check(kind):
            error = failure.value
            raise ApiError(code, getattr(error, "message", None) or str(error))
    return failure
