"""The recurring schedules' endpoints: add, edit, list, delete, pause,
resume, run now and backfill."""

from twisted.python.failure import Failure

from ..names import fold
from ..reliability.policy import KEYS as POLICY_KEYS, whole_number
from ..schedules.edits import TEXT_PARAMETERS
from ..schedules.times import RuleError, iso_time, jitter_offset, upcoming
from ..schedules.timetable import ScheduleRequest, UnknownSchedule, rule_of_record
from ..schedules.words import in_words
from ..access.roles import identity_of
from .endpoint import ApiEndpoint
from .params import ApiError
from .refusals import refused
from .views import schedule_entry

# Parameters of addschedule.json that are not spider arguments: a spider
# argument of a schedule cannot take one of these names.
# The policy keys (timeout, retries, memory...) are the schedule's jobs' policy.
ADDSCHEDULE_PARAMETERS = ("project", "spider", "setting", "priority", "cron", "every", "tz",
                          "name", "overlap", "misfire", "jobid", "after", "on", "_version",
                          "jitter", "pause_after") + POLICY_KEYS
# editschedule.json's: addschedule.json's (``spider`` is refused: a
# schedule of another spider is another schedule).
EDITSCHEDULE_PARAMETERS = ADDSCHEDULE_PARAMETERS
# The longest note pauseschedule.json takes.
MAX_NOTE = 500
# The most due times listschedules.json's ``upcoming`` lists a schedule.
MAX_UPCOMING = 20


def hidden_schedule(request, project, name):
    """Raises, for a project ``request``'s identity cannot see, what the
    timetable answers for a schedule that does not exist."""
    if not identity_of(request).sees(project):
        refused(Failure(UnknownSchedule.named(project, name)))


class _ScheduleEndpoint(ApiEndpoint):
    """An endpoint that answers with one schedule (listschedules.json's
    entry, its times in its zone): a write, audited (web/audit.py)."""

    audited = True
    audit_target = ("name", "name")

    def _entry(self, record):
        return schedule_entry(record, self.api.timetable.zone_of(record))


class AddSchedule(_ScheduleEndpoint):
    methods = (b"POST",)

    def answer(self, params, request):
        project = self.api.project(params, request=request)
        if params.get("jobid") is not None:
            raise ApiError(400, "addschedule.json takes no jobid: a schedule's jobs are"
                                " named NAME-YYYYMMDDTHHMMSSZ after their due time")
        wanted = ScheduleRequest(
            project=project.name,
            spider=params.name("spider"),
            cron=params.get("cron"),
            every=params.get("every"),
            tz=params.get("tz"),
            name=params.get("name"),
            overlap=params.get("overlap"),
            misfire=params.get("misfire"),
            settings=tuple(params.settings()),
            arguments=_arguments(params, ADDSCHEDULE_PARAMETERS),
            priority=params.priority(),
            policy=_policy(params),
            after=params.get("after"),
            # Repeated, comma-separated, or both (schedules.chains.parse_on).
            on=tuple(params.all("on")),
            jitter=params.get("jitter"),
            pause_after=params.get("pause_after"),
        )
        added = self.api.timetable.add(wanted)
        return added.addCallbacks(self._entry, refused)


def _arguments(params, taken):
    """The spider arguments: every parameter the endpoint does not take."""
    return tuple((k, v) for k, v in params.pairs if k not in taken
                 and not (k.startswith("_") and k[1:] in POLICY_KEYS))


class EditSchedule(_ScheduleEndpoint):
    """editschedule.json: ``project``, ``name`` and the parameters to change,
    as addschedule.json takes them; the others stay (schedules.edits)."""

    methods = (b"POST",)

    def answer(self, params, request):
        project = params.name("project")
        name = params.name("name", "schedule name")
        if params.get("spider") is not None:
            raise ApiError(400, "parameter 'spider' cannot be edited: a schedule of another"
                                " spider is another schedule (delschedule.json, then"
                                " addschedule.json)")
        if params.get("jobid") is not None:
            raise ApiError(400, "editschedule.json takes no jobid: a schedule's jobs are"
                                " named NAME-YYYYMMDDTHHMMSSZ after their due time")
        given = {key: params.get(key) for key in TEXT_PARAMETERS
                 if params.get(key) is not None}
        if params.get("after") is not None:
            given["after"] = params.get("after")
        if params.all("on"):
            # Repeated, comma-separated, or both (schedules.chains.parse_on).
            given["on"] = tuple(params.all("on"))
        if params.all("setting"):
            given["settings"] = tuple(params.settings())
        arguments = _arguments(params, EDITSCHEDULE_PARAMETERS)
        if arguments:
            given["arguments"] = arguments
        if params.get("priority") is not None:
            given["priority"] = params.priority()
        policy = _policy(params)
        if policy.as_dict():
            given["policy"] = policy
        if not given:
            raise ApiError(400, "editschedule.json: give at least one parameter to change"
                                " (cron, every, after, on, tz, overlap, misfire, setting,"
                                " priority, jitter, pause_after, a policy key or spider"
                                " arguments)")
        hidden_schedule(request, project, name)
        edited = self.api.timetable.edit(project, name, given)
        return edited.addCallbacks(self._entry, refused)


class RunSchedule(_ScheduleEndpoint):
    """runschedule.json: ``project``, ``name``: one job now, as a firing."""

    methods = (b"POST",)
    audit_answer = ("jobid", "queued")

    def answer(self, params, request):
        project = params.name("project")
        name = params.name("name", "schedule name")
        hidden_schedule(request, project, name)
        ran = self.api.timetable.run_now(project, name)
        return ran.addCallbacks(self._answer, refused)

    def _answer(self, result):
        record, jobid, changes = result
        if changes.get("error"):
            raise ApiError(400, f"schedule {record.name!r} queued no job: {changes['error']}")
        answer = {"jobid": jobid, "queued": bool(changes.get("queued"))}
        if changes.get("skipped_added"):
            answer["why"] = ("skipped: a job of the schedule waits or runs"
                             f" (overlap {record.overlap})")
        elif not answer["queued"]:
            answer["why"] = f"a job named {jobid!r} exists already (one a second)"
        answer["schedule"] = self._entry(record)
        return answer


class BackfillSchedule(_ScheduleEndpoint):
    """backfillschedule.json: ``project``, ``name``, ``from``, ``to``."""

    methods = (b"POST",)
    audit_answer = ("queued",)

    def answer(self, params, request):
        project = params.name("project")
        name = params.name("name", "schedule name")
        for key in ("from", "to"):
            if not params.get(key):
                raise ApiError(400, f"parameter {key!r} is missing: give an ISO 8601 time")
        hidden_schedule(request, project, name)
        filled = self.api.timetable.backfill(project, name, params.get("from"), params.get("to"))
        return filled.addCallbacks(self._answer, refused)

    def _answer(self, result):
        record, queued, already = result
        zone = self.api.timetable.zone_of(record)
        return {"queued": queued, "already": [iso_time(due, zone) for due in already],
                "schedule": schedule_entry(record, zone)}


def _policy(params):
    """The schedule's policy: its keys as parameters (timeout=6h), or
    spelt as schedule.json spells them (_timeout=6h), not both."""
    given = params.policy()
    spelt = params.policy(prefix="_")
    both = sorted(set(given.as_dict()) & set(spelt.as_dict()))
    if both:
        raise ApiError(400, f"{both[0]} and _{both[0]} are the same key: give one of them")
    return spelt.over(given)


class ListSchedules(ApiEndpoint):
    """listschedules.json: every schedule, or a project's (``project``), or
    one by ``name`` (any case; an empty list when there is none). Each
    entry has its rule ``in_words``; ``upcoming=N`` (1 to MAX_UPCOMING)
    adds its next N due times (and, with jitter, when their jobs start)."""

    def answer(self, params, request):
        project = params.name("project", required=False)
        name = params.name("name", "schedule name", required=False)
        count = _upcoming_count(params.get("upcoming"))
        listed = self.api.timetable.schedules(project)
        return listed.addCallbacks(self._entries, refused,
                                   callbackArgs=(name, identity_of(request), count))

    def _entries(self, records, name, identity, count):
        zone_of = self.api.timetable.zone_of
        records = [r for r in records if identity.sees(r.project)]
        if name is not None:
            records = [r for r in records if fold(r.name) == fold(name)]
        entries = []
        for record in records:
            zone = zone_of(record)
            entry = schedule_entry(record, zone)
            entry["in_words"] = in_words(record.kind, record.rule, record.tz, record.chain_on)
            if count:
                _add_upcoming(entry, record, zone, count)
            entries.append(entry)
        return {"schedules": entries}


def _upcoming_count(text):
    """listschedules.json's ``upcoming``: None when not given, else a whole
    number from 1 to MAX_UPCOMING (an ApiError naming it otherwise)."""
    if text is None or text == "":
        return None
    count = whole_number(text)
    if count is None or not 1 <= count <= MAX_UPCOMING:
        raise ApiError(400, f"parameter 'upcoming': {text!r} is not a number of runs from 1"
                            f" to {MAX_UPCOMING}")
    return count


def _add_upcoming(entry, record, zone, count):
    """The entry's ``upcoming`` due times (none while paused, nor for a
    chain, which runs when its upstream ends) and, with jitter,
    ``upcoming_starts``: when each of their jobs starts."""
    dues = []
    if not record.paused and record.next_due is not None:
        try:
            rule = rule_of_record(record)
        except RuleError:
            rule = None  # a zone the system no longer knows: its next run alone
        dues = upcoming(rule, record.anchor, record.next_due, count) if rule else [
            record.next_due]
    entry["upcoming"] = [iso_time(due, zone) for due in dues]
    if record.jitter:
        offset = jitter_offset(record.name, record.jitter)
        entry["upcoming_starts"] = [iso_time(due + offset, zone) for due in dues]


class PauseSchedule(_ScheduleEndpoint):
    """pauseschedule.json: ``project``, ``name`` and an optional ``note``."""

    methods = (b"POST",)

    def answer(self, params, request):
        project = params.name("project")
        name = params.name("name", "schedule name")
        note = params.get("note") or None
        if note is not None and len(note) > MAX_NOTE:
            raise ApiError(400, f"parameter 'note' is longer than {MAX_NOTE} characters")
        hidden_schedule(request, project, name)
        paused = self.api.timetable.pause(project, name, note=note)
        return paused.addCallbacks(self._entry, refused)


class ScheduleAction(_ScheduleEndpoint):
    """delschedule.json, resumeschedule.json: ``project``
    and ``name``, as cancel.json takes ``project`` and ``job``."""

    methods = (b"POST",)

    def __init__(self, api, action):
        super().__init__(api)
        self.action = action

    def answer(self, params, request):
        project = params.name("project")
        name = params.name("name", "schedule name")
        hidden_schedule(request, project, name)
        done = getattr(self.api.timetable, self.action)(project, name)
        return done.addCallbacks(self._entry, refused)


def schedule_endpoints(api):
    """{path segment: resource} of the schedules' endpoints."""
    return {
        b"addschedule.json": AddSchedule(api),
        b"listschedules.json": ListSchedules(api),
        b"delschedule.json": ScheduleAction(api, "delete"),
        b"pauseschedule.json": PauseSchedule(api),
        b"resumeschedule.json": ScheduleAction(api, "resume"),
        b"editschedule.json": EditSchedule(api),
        b"runschedule.json": RunSchedule(api),
        b"backfillschedule.json": BackfillSchedule(api),
    }
