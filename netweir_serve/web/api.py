"""The scrapyd-shaped JSON endpoints."""

import math
import os

from ..jobs import datapaths
from ..jobs.store.sqlite import DuplicateJob
from ..names import fold
from .answer import NODE_NAME, encode, ok_body, write_error
from .endpoint import JsonEndpoint
from .params import ApiError
from .views import job_entry, stats_entry

# Parameters of schedule.json that are not spider arguments. _version is
# what scrapyd clients send to pick an egg; there are no eggs here.
SCHEDULE_PARAMETERS = ("project", "spider", "setting", "jobid", "priority", "_version")

# scrapyd's cancel.json takes a signal name; these mean "stop now".
KILL_SIGNALS = ("KILL", "SIGKILL", "9")


class Api:
    """What the endpoints work with: the parts of the service they call."""

    def __init__(self, projects, store, scheduler, launcher, inspector, directory):
        self.projects = projects
        self.store = store
        self.scheduler = scheduler
        self.launcher = launcher
        self.inspector = inspector
        self.directory = directory

    def project(self, params, key="project"):
        """The served Project named by ``key``; ApiError when it is not."""
        name = params.name(key)
        project = self.projects.get(name)
        if project is None:
            known = ", ".join(self.projects.names()) or "none"
            raise ApiError(404, f"no project {name!r} (projects: {known})")
        return project


class ApiEndpoint(JsonEndpoint):
    def __init__(self, api):
        super().__init__()
        self.api = api


class DaemonStatus(ApiEndpoint):
    """Dashboards poll this: the answer is built once per change of the table."""

    def __init__(self, api):
        super().__init__(api)
        self._answer = None
        self._generation = None

    def answer(self, params, request):
        if self._generation != self.api.store.generation:
            self._answer = ok_body(**self.api.store.counts())
            self._generation = self.api.store.generation
        return self._answer


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
        d = self.api.inspector.listSpiders(project)
        d.addCallbacks(lambda names: {"spiders": names}, _refused)
        return d


def _refused(failure):
    message = getattr(failure.value, "message", None)
    if message is None:
        return failure
    raise ApiError(400, message)


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
        api = self.api
        project = api.project(params)
        spider = params.name("spider")
        jobid = params.name("jobid", "job id", required=False)
        priority = _priority(params)
        settings = _setting_pairs(params)
        arguments = [(k, v) for k, v in params.pairs if k not in SCHEDULE_PARAMETERS]
        if jobid is not None and api.store.get(jobid) is not None:
            raise ApiError(409, f"a job with id {jobid!r} already exists (job ids ignore case)")
        data_dir = os.path.join(api.directory, "data", project.name)
        for key, value in settings:
            if key in datapaths.PATH_SETTINGS:
                try:
                    datapaths.prepare(data_dir, key, value)
                except ValueError as e:
                    raise ApiError(400, str(e)) from None
        d = api.inspector.checkJob(project, spider, settings, arguments, data_dir)
        d.addErrback(_refused)
        d.addCallback(self._queue, jobid, priority)
        return d

    def _queue(self, checked, jobid, priority):
        try:
            record = self.api.scheduler.schedule(checked, jobid=jobid, priority=priority)
        except DuplicateJob as e:
            raise ApiError(409, str(e)) from None
        return {"jobid": record.id}


class Cancel(ApiEndpoint):
    methods = (b"POST",)

    def answer(self, params, request):
        # Any project name: the jobs of a project taken off the command line
        # can still be cancelled.
        project = params.name("project")
        jobid = params.name("job", "job id")
        now = (params.get("signal") or "").upper() in KILL_SIGNALS
        record = self.api.store.get(jobid)
        if record is None or fold(record.project) != fold(project):
            return {"prevstate": None}
        return {"prevstate": self.api.scheduler.cancel(record.id, now=now)}


class ListJobs(ApiEndpoint):
    """Built once per change of the job table, per project asked for."""

    def __init__(self, api):
        super().__init__(api)
        self._cache = {}
        self._generation = None

    def answer(self, params, request):
        project = params.name("project", required=False)
        key = project.lower() if project else None
        if self._generation != self.api.store.generation:
            self._cache.clear()
            self._generation = self.api.store.generation
        body = self._cache.get(key)
        if body is None:
            pending, running, finished = self.api.store.jobs(project)
            body = encode({
                "node_name": NODE_NAME, "status": "ok",
                "pending": [job_entry(r) for r in pending],
                "running": [job_entry(r) for r in running],
                "finished": [job_entry(r) for r in reversed(finished)],
            })
            self._cache[key] = body
        return body


class JobStats(ApiEndpoint):
    def answer(self, params, request):
        jobid = params.name("job", "job id")
        record = self.api.store.get(jobid)
        if record is None:
            raise ApiError(404, f"no job {jobid!r}")
        return stats_entry(record, self.api.launcher.running_stats(record.id))


class Status(ApiEndpoint):
    """scrapyd's status.json: a job's state, plus its outcome."""

    def answer(self, params, request):
        jobid = params.name("job", "job id")
        project = params.name("project", required=False)
        record = self.api.store.get(jobid)
        if record is not None and project and record.project.lower() != project.lower():
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
