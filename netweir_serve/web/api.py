"""The scrapyd-shaped JSON endpoints."""

import math

from twisted.internet import defer

from ..jobs.records import DuplicateJob, StoreError
from ..jobs.submit import JobRequest, SubmitRefused, UnknownProject
from ..names import fold
from ..spiders.runners import InspectError
from .answer import NODE_NAME, encode, ok_body, write_error
from .endpoint import JsonEndpoint
from .params import ApiError
from .views import job_entry, stats_entry

# Parameters of schedule.json that are not spider arguments. _version is
# what scrapyd clients send to pick an egg; there are no eggs here.
SCHEDULE_PARAMETERS = ("project", "spider", "setting", "jobid", "priority", "_version")

# scrapyd's cancel.json takes a signal name; these mean "stop now".
KILL_SIGNALS = ("KILL", "SIGKILL", "9")

# How the job core's refusals are answered (InspectError: a spider file
# that cannot be listed, a sentence about the files).
_REFUSALS = ((UnknownProject, 404), (DuplicateJob, 409), (SubmitRefused, 400),
             (InspectError, 400), (StoreError, 503))


def refused(failure):
    """An errback: the job core's refusals as ApiErrors; anything else
    passes on (and is answered 500)."""
    for kind, code in _REFUSALS:
        if failure.check(kind):
            error = failure.value
            raise ApiError(code, getattr(error, "message", None) or str(error))
    return failure


class Api:
    """What the endpoints work with: the parts of the service they call."""

    def __init__(self, projects, store, scheduler, launcher, reader, submitter):
        self.projects = projects
        self.store = store
        self.scheduler = scheduler
        self.launcher = launcher
        self.reader = reader
        self.submitter = submitter

    def project(self, params, key="project"):
        """The served Project named by ``key``; ApiError when it is not."""
        try:
            return self.submitter.project(params.name(key))
        except UnknownProject as e:
            raise ApiError(404, e.message) from None


class VersionCache:
    """Answers built from the job table, kept until its version moves on."""

    def __init__(self, api):
        self._api = api
        self._version = None
        self._answers = {}

    def answer(self, key, build):
        """Deferred of the answer for ``key``: the kept one while the table's
        version is the same, else ``build()`` (a Deferred) again."""
        return self._api.store.version().addCallback(self._for_version, key, build)

    def _for_version(self, version, key, build):
        if version != self._version:
            self._answers.clear()
            self._version = version
        if key in self._answers:
            return self._answers[key]
        return build().addCallback(self._keep, version, key)

    def _keep(self, answer, version, key):
        if version == self._version:
            self._answers[key] = answer
        return answer


class ApiEndpoint(JsonEndpoint):
    def __init__(self, api):
        super().__init__()
        self.api = api


class DaemonStatus(ApiEndpoint):
    """Dashboards poll this: the answer is built once per change of the table."""

    def __init__(self, api):
        super().__init__(api)
        self._cache = VersionCache(api)

    def answer(self, params, request):
        return self._cache.answer(None, self._build)

    def _build(self):
        return self.api.store.counts().addCallback(lambda counts: ok_body(**counts))


class ListProjects(ApiEndpoint):
    def answer(self, params, request):
        return {"projects": self.api.projects.names()}


class ListVersions(ApiEndpoint):
    """Always no versions: there are no eggs, but clients ask before they
    schedule and must carry on."""

    def answer(self, params, request):
        params.name("project")
        return {"versions": []}


class ListSpiders(ApiEndpoint):
    def answer(self, params, request):
        project = self.api.project(params)
        d = self.api.reader.listSpiders(project)
        d.addCallbacks(lambda names: {"spiders": names}, refused)
        return d


def _setting_pairs(params):
    pairs = []
    for text in params.all("setting"):
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise ApiError(400, f"setting {text!r} is not KEY=VALUE")
        pairs.append((key, value))
    return pairs


def _priority(params):
    text = params.get("priority")
    if text is None or text == "":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, f"priority {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ApiError(400, f"priority {text!r} is not a finite number")
    return value


class Schedule(ApiEndpoint):
    methods = (b"POST",)

    def answer(self, params, request):
        project = self.api.project(params)
        job = JobRequest(
            project=project.name,
            spider=params.name("spider"),
            jobid=params.name("jobid", "job id", required=False),
            priority=_priority(params),
            settings=tuple(_setting_pairs(params)),
            arguments=tuple((k, v) for k, v in params.pairs if k not in SCHEDULE_PARAMETERS),
        )
        d = self.api.submitter.submit(job)
        d.addCallbacks(lambda record: {"jobid": record.id}, refused)
        return d


class Cancel(ApiEndpoint):
    methods = (b"POST",)

    def answer(self, params, request):
        # Any project name: the jobs of a project taken off the command line
        # can still be cancelled.
        project = params.name("project")
        jobid = params.name("job", "job id")
        now = (params.get("signal") or "").upper() in KILL_SIGNALS
        return self._cancel(project, jobid, now).addErrback(refused)

    @defer.inlineCallbacks
    def _cancel(self, project, jobid, now):
        record = yield self.api.store.get(jobid)
        if record is None or fold(record.project) != fold(project):
            return {"prevstate": None}
        prevstate = yield self.api.scheduler.cancel(record.id, now=now)
        return {"prevstate": prevstate}


class ListJobs(ApiEndpoint):
    """Built once per change of the job table, per project asked for."""

    def __init__(self, api):
        super().__init__(api)
        self._cache = VersionCache(api)

    def answer(self, params, request):
        project = params.name("project", required=False)
        key = fold(project) if project else None
        return self._cache.answer(key, lambda: self._build(project)).addErrback(refused)

    def _build(self, project):
        return self.api.store.jobs(project).addCallback(lambda jobs: encode({
            "node_name": NODE_NAME, "status": "ok",
            "pending": [job_entry(r) for r in jobs[0]],
            "running": [job_entry(r) for r in jobs[1]],
            "finished": [job_entry(r) for r in reversed(jobs[2])],
        }))


class JobStats(ApiEndpoint):
    def answer(self, params, request):
        jobid = params.name("job", "job id")
        return self.api.store.get(jobid).addCallback(self._entry, jobid).addErrback(refused)

    def _entry(self, record, jobid):
        if record is None:
            raise ApiError(404, f"no job {jobid!r}")
        return stats_entry(record, self.api.launcher.running_stats(record.id))


class Status(ApiEndpoint):
    """scrapyd's status.json: a job's state, plus its outcome."""

    def answer(self, params, request):
        jobid = params.name("job", "job id")
        project = params.name("project", required=False)
        return self.api.store.get(jobid).addCallback(self._entry, project).addErrback(refused)

    @staticmethod
    def _entry(record, project):
        if record is not None and project and fold(record.project) != fold(project):
            record = None
        if record is None:
            return {"currstate": None, "outcome": None}
        return {"currstate": record.state, "outcome": record.outcome}


class DelProject(ApiEndpoint):
    methods = (b"POST",)

    def answer(self, params, request):
        name = params.name("project")
        raise ApiError(400, f"projects are not deleted over HTTP: take --project {name}=..."
                            " off the service's command line and restart it")


class NoDeploying(ApiEndpoint):
    """addversion.json and delversion.json: code is not deployed over HTTP."""

    def render(self, request):
        # Whatever the method and body (an egg, usually): refused unread.
        return write_error(request, 400, "code is not deployed over HTTP here (no eggs,"
                           " no versions): put the spider files on this machine and name"
                           " them with --project")


def endpoints(api):
    """{path segment: resource} of every JSON endpoint."""
    return {
        b"daemonstatus.json": DaemonStatus(api),
        b"listprojects.json": ListProjects(api),
        b"listversions.json": ListVersions(api),
        b"listspiders.json": ListSpiders(api),
        b"schedule.json": Schedule(api),
        b"cancel.json": Cancel(api),
        b"listjobs.json": ListJobs(api),
        b"jobstats.json": JobStats(api),
        b"status.json": Status(api),
        b"delproject.json": DelProject(api),
        b"addversion.json": NoDeploying(api),
        b"delversion.json": NoDeploying(api),
    }
