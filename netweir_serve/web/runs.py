"""runs.json: the last runs of a spider, or of a schedule, with the
medians its run health checks compare with (health.checks): the numbers
a person wants before trusting a threshold."""

from twisted.internet import defer

from ..health.checks import medians_of
from ..names import fold
from ..reliability.policy import JobPolicy, whole_number
from .endpoint import ApiEndpoint
from .params import ApiError
from .refusals import refused
from .views import format_time

# How many runs an answer lists unless ``limit`` says, and at most: the
# finished jobs the table keeps (--keep) bound them anyway.
DEFAULT_LIMIT, MAX_LIMIT = 50, 1000


def run_entry(record):
    """One run of runs.json: when and how it ended, and its counts."""
    runtime = None
    if record.start_time is not None and record.end_time is not None:
        runtime = round(max(0.0, record.end_time - record.start_time), 3)
    return {
        "id": record.id,
        "start_time": format_time(record.start_time),
        "end_time": format_time(record.end_time),
        "outcome": record.outcome,
        "reason": record.reason,
        "health": record.health,
        "health_reasons": list(record.health_reasons),
        "items": record.items,
        "pages": record.pages,
        "errors": record.errors,
        "runtime": runtime,
        # The same times as epoch seconds, as paged listings give them: the
        # two above are the service's local time without a zone, which a
        # browser in another zone cannot place.
        "at": {"queued": record.created or None, "started": record.start_time,
               "ended": record.end_time},
    }


def _limit(params):
    text = params.get("limit")
    if text is None or text == "":
        return DEFAULT_LIMIT
    limit = whole_number(text)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"limit {text!r} is not a number of runs from 1 to {MAX_LIMIT}")
    return limit


class Runs(ApiEndpoint):
    """``project``, ``spider`` and, optionally, ``schedule`` (of that
    spider) and ``limit``: ``runs``, the last finished jobs newest first,
    and ``medians`` (items, pages, runtime: None until 3 healthy runs
    have one) over ``history``, the runs the next one's checks compare
    with; with ``schedule``, its counts too."""

    def answer(self, params, request):
        project = self.api.project(params, request=request)
        spider = params.name("spider")
        schedule = params.name("schedule", "schedule name", required=False)
        limit = _limit(params)
        return self._answer(project.name, project, spider, schedule, limit).addErrback(refused)

    @defer.inlineCallbacks
    def _answer(self, name, project, spider, schedule, limit):
        spiders = yield self.api.reader.listSpiders(project)
        if spider not in spiders:
            raise ApiError(404, f"spider {spider!r} not found in project {name!r}")
        policy = self.api.submitter.rules.for_spider(name, spider)
        record = None
        if schedule is not None:
            record = yield self.api.store.get_schedule(schedule)
            if (record is None or fold(record.project) != fold(name)
                    or record.spider != spider):
                raise ApiError(404, f"no schedule {schedule!r} of spider {spider!r} in"
                                    f" project {name!r}")
            # Its jobs' policy: the schedule's own values over the spider's.
            policy = JobPolicy.from_json(record.policy).over(policy)
        size = policy.history_size
        runs, history = yield self.api.store.runs(
            name, spider, schedule=record.name if record else None, limit=limit, history=size)
        answer = {
            "project": name,
            "spider": spider,
            "runs": [run_entry(r) for r in runs],
            "history": {"size": size, "runs": len(history)},
            "medians": medians_of(history),
        }
        if record is not None:
            answer["schedule"] = {"name": record.name, "runs": record.runs,
                                  "skipped": record.skipped, "buffered": record.buffered,
                                  "caught_up": record.caught_up}
        return answer
