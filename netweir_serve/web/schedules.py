"""The recurring schedules' endpoints: add, list, delete, pause, resume."""

from ..reliability.policy import KEYS as POLICY_KEYS
from ..schedules.timetable import ScheduleRequest
from .endpoint import ApiEndpoint
from .params import ApiError
from .refusals import refused
from .views import schedule_entry

# Parameters of addschedule.json that are not spider arguments: a spider
# argument of a schedule cannot take one of these names.
# The policy keys (timeout, retries, memory...) are the schedule's jobs' policy.
ADDSCHEDULE_PARAMETERS = ("project", "spider", "setting", "priority", "cron", "every", "tz",
                          "name", "overlap", "misfire", "jobid", "after", "on",
                          "_version") + POLICY_KEYS


class AddSchedule(ApiEndpoint):
    methods = (b"POST",)

    def answer(self, params, request):
        project = self.api.project(params)
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
            arguments=tuple((k, v) for k, v in params.pairs if k not in ADDSCHEDULE_PARAMETERS
                            and not (k.startswith("_") and k[1:] in POLICY_KEYS)),
            priority=params.priority(),
            policy=_policy(params),
            after=params.get("after"),
            # Repeated, comma-separated, or both (schedules.chains.parse_on).
            on=tuple(params.all("on")),
        )
        added = self.api.timetable.add(wanted)
        return added.addCallbacks(self._entry, refused)

    def _entry(self, record):
        return schedule_entry(record, self.api.timetable.zone_of(record))


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
    def answer(self, params, request):
        project = params.name("project", required=False)
        listed = self.api.timetable.schedules(project)
        return listed.addCallbacks(self._entries, refused)

    def _entries(self, records):
        zone_of = self.api.timetable.zone_of
        return {"schedules": [schedule_entry(r, zone_of(r)) for r in records]}


class ScheduleAction(ApiEndpoint):
    """delschedule.json, pauseschedule.json, resumeschedule.json: ``project``
    and ``name``, as cancel.json takes ``project`` and ``job``."""

    methods = (b"POST",)

    def __init__(self, api, action):
        super().__init__(api)
        self.action = action

    def answer(self, params, request):
        project = params.name("project")
        name = params.name("name", "schedule name")
        done = getattr(self.api.timetable, self.action)(project, name)
        return done.addCallbacks(self._entry, refused)

    def _entry(self, record):
        return schedule_entry(record, self.api.timetable.zone_of(record))


def schedule_endpoints(api):
    """{path segment: resource} of the schedules' endpoints."""
    return {
        b"addschedule.json": AddSchedule(api),
        b"listschedules.json": ListSchedules(api),
        b"delschedule.json": ScheduleAction(api, "delete"),
        b"pauseschedule.json": ScheduleAction(api, "pause"),
        b"resumeschedule.json": ScheduleAction(api, "resume"),
    }
