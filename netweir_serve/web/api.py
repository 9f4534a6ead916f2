"""The scrapyd-shaped JSON endpoints."""

from twisted.internet import defer

from ..access.roles import WRITE, identity_of
from ..clocks import WallClock
from ..jobs.history import read_history
from ..jobs.launcher import CANCEL_ANSWER_WAIT
from ..store.records import FINISHED, PENDING, RUNNING
from ..store.runpolicy import EnforceableLimits, RunningSet, ServedProjects
from ..jobs.submit import JobRequest, UnknownProject, unknown_project
from ..names import fold, job_id_problem
from ..watching.builds import ListingBuilds
from .audit_listing import AuditList
from .answer import encode, node_name, ok_body, write_error
from .elsewhere import OwnerAnswered, OwnerDown
from .endpoint import ApiEndpoint
from .params import ApiError
from .cache import VersionCache
from .jobdetail import JobDetail
from .paging import KeptPages, PageRequest, PagedJobs, is_paged, with_entries
from .refusals import refused
from .nodes import ListNodes
from .runs import Runs
from .schedules import schedule_endpoints
from .views import format_time, job_entry, stats_entry

# Parameters of schedule.json that are not spider arguments. _version is
# what scrapyd clients send to pick an egg; there are no eggs here.
SCHEDULE_PARAMETERS = ("project", "spider", "setting", "jobid", "priority", "_version")

# jobstats.json's history parameter: any of these asks for the series.
HISTORY_YES = ("1", "true", "yes")

# Paged listings kept in memory at once (web/paging.KeptPages): every
# project's, and a few single projects' or tokens' projects'.
KEPT_LISTINGS = 8

# scrapyd's cancel.json takes a signal name; these mean "stop now".
KILL_SIGNALS = ("KILL", "SIGKILL", "9")

class Api:
    """What the endpoints work with: the parts of the service they call."""

    def __init__(self, projects, store, scheduler, launcher, reader, submitter, timetable,
                 max_per_spider=None, history=None, owners=None, listing_builds=None,
                 build_aside=None, limits=None, wall=None, audit=None, node=None):
        self.projects = projects
        self.store = store
        self.scheduler = scheduler
        self.launcher = launcher
        self.reader = reader
        self.submitter = submitter
        self.timetable = timetable
        # For saying why a pending job waits (listjobs.json).
        self.max_per_spider = max_per_spider
        # The jobs' stats over time (jobs/history.py), for jobstats.json.
        self.history = history
        # web/elsewhere.Owners with a shared job table: the files and history
        # of a job another node ran are asked of that node.
        self.owners = owners
        # Listings built from the table, by endpoint (/metrics shows them).
        self.listing_builds = listing_builds or ListingBuilds()
        # ``build_aside(function, *args)``, a Deferred of its result: where a
        # large answer is built, off the reactor thread in the service (20,000
        # jobs are 4 MB of JSON, hundreds of milliseconds); at once without.
        self.build_aside = build_aside or _at_once
        # Which job limits this machine can enforce: {"memory": bool, "cpu": bool}
        # (reliability/cgroups.JobGroups.available), for daemonstatus.json.
        self.limits = limits or {"memory": False, "cpu": False}
        # The time of day, for saying that a retry waits for its due time.
        self.wall = wall if wall is not None else WallClock()
        # The audit the writes are recorded in (web/audit.AuditLog), or None.
        self.audit = audit
        # This node's name (--node-name, or the host's), for listnodes.json.
        self.node = node

    def served(self):
        """Deferred ServedProjects: this service's projects, or, on a
        shared job table, those of every live node."""
        if not self.store.shared:
            return defer.succeed(ServedProjects(self.projects.names(), shared=False))
        return self.store.nodes().addCallback(ServedProjects.of_nodes)

    def reasons(self, running):
        """Deferred function saying why a pending record waits while
        ``running`` run (listjobs.json's ``waiting_for``, /jobs's), or None."""
        holding = RunningSet(running, data_dir_of=self._data_dir_of, now=self.wall.seconds(),
                             show_time=format_time)

        limits = EnforceableLimits(self.limits, self.store.shared)

        def reasons(served):
            return lambda record: (served.waits_for(record)
                                   or limits.waits_for(record)
                                   or holding.waits_for(record, self.max_per_spider))

        return self.served().addCallback(reasons)

    def _data_dir_of(self, project):
        try:
            return self.submitter.data_dir(self.submitter.project(project))
        except UnknownProject:
            return None

    def project(self, params, key="project", request=None):
        """The served Project named by ``key``; ApiError when it is not, or
        when ``request``'s identity cannot see it: the same answer, naming
        the projects it sees."""
        name = params.name(key)
        identity = identity_of(request)
        if not identity.sees(name):
            raise ApiError(404, unknown_project(name, self.project_names(identity)))
        try:
            return self.submitter.project(name)
        except UnknownProject:
            raise ApiError(404, unknown_project(name, self.project_names(identity))) from None

    def project_names(self, identity):
        """The names of the served projects ``identity`` sees."""
        return [name for name in self.projects.names() if identity.sees(name)]


class DaemonStatus(ApiEndpoint):
    """Dashboards poll this: the answer is built once per change of the table."""

    def __init__(self, api):
        super().__init__(api)
        self._cache = VersionCache(lambda: api.store,
                                   built=lambda: api.listing_builds.count("daemonstatus.json"))

    def answer(self, params, request):
        identity = identity_of(request)
        if not identity.every_project:
            # Its projects' jobs alone, counted for (and kept for) the
            # projects it sees.
            answer = self._cache.answer(seen_key(identity), lambda: self._build_for(identity))
            return answer.addErrback(refused) if isinstance(answer, defer.Deferred) else answer
        return self._cache.answer(None, self._build)

    def _build_for(self, identity):
        return self.api.store.tally().addCallback(self._counted, identity).addCallback(
            encode_ok, self.api.limits)

    def _build(self):
        return self.api.store.counts().addCallback(
            lambda counts: ok_body(**counts, limits=self.api.limits))

    @staticmethod
    def _counted(tally, identity):
        counts = {PENDING: 0, RUNNING: 0, FINISHED: 0}
        for (state, project, _), n in tally.items():
            if identity.sees(project):
                counts[state] += n
        return counts


def encode_ok(counts, limits):
    return ok_body(**counts, limits=limits)


def seen_key(identity):
    """The key of an answer built for the projects ``identity`` sees (no
    project's name is a tuple, so none is mistaken for one)."""
    return ("seen",) + tuple(sorted(identity.projects))


class WhoAmI(ApiEndpoint):
    """Who the request comes in as, for the console's buttons: its name,
    role, and the served projects it may read and write (``writes``); on a
    service open to all, null and every project."""

    def answer(self, params, request):
        identity = identity_of(request)
        seen = self.api.project_names(identity)
        return {"name": identity.who, "role": identity.role, "projects": seen,
                "writes": seen if identity.may(WRITE) else [],
                "shared": bool(self.api.store.shared)}


class ListProjects(ApiEndpoint):
    def answer(self, params, request):
        return {"projects": self.api.project_names(identity_of(request))}


class ListVersions(ApiEndpoint):
    """Always no versions: there are no eggs, but clients ask before they
    schedule and must carry on."""

    def answer(self, params, request):
        params.name("project")
        return {"versions": []}


class ListSpiders(ApiEndpoint):
    def answer(self, params, request):
        project = self.api.project(params, request=request)
        d = self.api.reader.listSpiders(project)
        d.addCallbacks(lambda names: {"spiders": names}, refused)
        return d


class ListPolicies(ApiEndpoint):
    """listprojects.json's companion: the policy each spider of a project
    gets from the --policy rules (a job's or its schedule's own values go
    over it), and the project's rule alone."""

    def answer(self, params, request):
        project = self.api.project(params, request=request)
        rules = self.api.submitter.rules
        d = self.api.reader.listSpiders(project)
        d.addCallbacks(lambda names: self._policies(project.name, names, rules), refused)
        return d

    @staticmethod
    def _policies(project, names, rules):
        answer = {
            "project": project,
            "policy": rules.for_project(project).shown(),
            "spiders": {name: rules.for_spider(project, name).shown() for name in names},
        }
        # A rule for a spider the project does not have (a typo, a class
        # name, a spider since removed) applies to nothing: said, not hidden.
        unused = sorted(set(rules.spiders_named(project)) - set(names))
        if unused:
            answer["no_such_spider"] = unused
        return answer


class Schedule(ApiEndpoint):
    methods = (b"POST",)
    audited = True
    audit_target = ("jobid", "jobid")

    def answer(self, params, request):
        project = self.api.project(params, request=request)
        job = JobRequest(
            project=project.name,
            spider=params.name("spider"),
            # A job id leaves room for its retries' ids (JOBID.r1...).
            jobid=params.name("jobid", "job id", required=False, rule=job_id_problem),
            priority=params.priority(),
            settings=tuple(params.settings()),
            # A spider argument never starts with "_": those are the job's
            # policy (_timeout=...), as scrapyd's _version is its own.
            arguments=tuple((k, v) for k, v in params.pairs
                            if k not in SCHEDULE_PARAMETERS and not k.startswith("_")),
            policy=params.policy(prefix="_", every=True, skip=("_version",)),
            by=identity_of(request).who,
        )
        d = self.api.submitter.submit(job)
        d.addCallbacks(lambda record: {"jobid": record.id}, refused)
        return d


class Cancel(ApiEndpoint):
    methods = (b"POST",)
    audited = True
    audit_target = ("job", None)
    audit_answer = ("prevstate",)
    # As the cancel's own record (Launcher.cancel_recorded): a table locked
    # by another program holds back the row, not the answer; both are
    # written as soon as it lets them.
    audit_wait = CANCEL_ANSWER_WAIT

    def answer(self, params, request):
        # Any project name: the jobs of a project taken off the command line
        # can still be cancelled.
        project = params.name("project")
        jobid = params.name("job", "job id")
        now = (params.get("signal") or "").upper() in KILL_SIGNALS
        if not identity_of(request).sees(project):
            # As for a project that does not exist: no such job.
            return {"prevstate": None}
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
        self._cache = VersionCache(lambda: api.store,
                                   built=lambda: api.listing_builds.count("listjobs.json"))
        # The paged answers' source (web/paging.py): the table in paged
        # order, kept in memory per listing and caught up at each change.
        self._kept = {}

    def answer(self, params, request):
        project = params.name("project", required=False)
        identity = identity_of(request)
        if is_paged(params):
            return self._page(PageRequest(params), project, identity)
        if project and not identity.sees(project):
            # As for a project that does not exist: no jobs.
            return self._listing(([], [], []), lambda record: None)
        if not project and not identity.every_project:
            # Every project it sees, and no other.
            key, build = seen_key(identity), lambda: self._build(None, identity.sees)
            answer = self._cache.answer(key, build)
            return answer.addErrback(refused) if isinstance(answer, defer.Deferred) else answer
        key = fold(project) if project else None
        answer = self._cache.answer(key, lambda: self._build(project))
        return answer.addErrback(refused) if isinstance(answer, defer.Deferred) else answer

    def _page(self, asked, project, identity):
        if project and not identity.sees(project):
            return PagedJobs(([], []), [], lambda record: None).page(asked, node_name())
        if not project and not identity.every_project:
            key, sees = seen_key(identity), identity.sees
        else:
            key, sees = (fold(project) if project else None), None
        kept = self._kept.pop(key, None)
        if kept is None:
            kept = KeptPages(self.api, project, sees,
                             built=lambda: self.api.listing_builds.count("listjobs.json paged"))
            if len(self._kept) >= KEPT_LISTINGS:
                # Each may hold a row of every finished job (270 bytes
                # each): a few, the most recently asked.
                del self._kept[next(iter(self._kept))]
        self._kept[key] = kept
        return kept.paged().addCallback(self._answer_page, asked).addErrback(refused)

    def _answer_page(self, paged, asked):
        if asked.narrows:
            # A filter may look at every job kept before it finds a page:
            # off the reactor's thread, on a copy the catch-ups leave alone.
            return self.api.build_aside(paged.frozen().page, asked, node_name()).addCallback(
                self._with_records)
        return self._with_records(paged.page(asked, node_name()))

    def _with_records(self, answer):
        if not answer[FINISHED]:
            return answer
        # The finished jobs shown: their records, read for this page alone
        # (the listing keeps a row of each, not its record).
        return self.api.store.listed_jobs([row.id for row in answer[FINISHED]]).addCallback(
            lambda records: with_entries(answer, records))

    def _build(self, project, sees=None):
        # Kept per version of the table: a node registering or declared
        # dead moves it on, so what the nodes serve is read again then.
        jobs = self.api.store.jobs(project)
        if sees is not None:
            jobs.addCallback(lambda lists: tuple(
                [r for r in records if sees(r.project)] for records in lists))
        return jobs.addCallback(
            lambda jobs: self.api.reasons(jobs[1]).addCallback(
                lambda waits_for: self.api.build_aside(self._listing, jobs, waits_for)))

    @staticmethod
    def _listing(jobs, waits_for):
        # Possibly on a thread (build_aside): it reads only its arguments,
        # records and policies nobody changes.
        pending, running, finished = jobs
        return encode({
            "node_name": node_name(), "status": "ok",
            "pending": [job_entry(r, waits_for(r)) for r in pending],
            "running": [job_entry(r) for r in running],
            "finished": [job_entry(r) for r in reversed(finished)],
        })


class JobStats(ApiEndpoint):
    """A job's stats; with ``history=1``, its stats over time too."""

    def answer(self, params, request):
        jobid = params.name("job", "job id")
        history = (params.get("history") or "0").lower() in HISTORY_YES
        return self.api.store.get(jobid).addCallback(
            self._entry, jobid, history, request).addErrback(refused)

    def _entry(self, record, jobid, history=False, request=None):
        if record is not None and not identity_of(request).sees(record.project):
            record = None  # as a job that does not exist
        if record is None:
            raise ApiError(404, f"no job {jobid!r}")
        entry = stats_entry(record, self.api.launcher.running_stats(record.id))
        owners = self.api.owners
        if history and owners is not None and record.node not in (None, owners.node):
            # Its history is in the --dir of the node that ran it.
            return owners.history(record.id, request).addCallbacks(
                lambda series: self._with_history(entry, record, series), _history_refused)
        if history:
            self._with_history(entry, record)
        return entry

    def _with_history(self, entry, record, series=None):
        if series is None:
            series = (read_history(self.api.history.path_of(record))
                      if self.api.history is not None else [])
        entry["history"] = series
        return entry


def _history_refused(failure):
    if failure.check(OwnerDown):
        raise ApiError(404, failure.value.message)
    if failure.check(OwnerAnswered):
        raise ApiError(failure.value.code, failure.value.message)
    return failure


class Status(ApiEndpoint):
    """scrapyd's status.json: a job's state, plus its outcome."""

    def answer(self, params, request):
        jobid = params.name("job", "job id")
        project = params.name("project", required=False)
        return self.api.store.get(jobid).addCallback(
            self._entry, project, identity_of(request)).addErrback(refused)

    @staticmethod
    def _entry(record, project, identity):
        if record is not None and project and fold(record.project) != fold(project):
            record = None
        if record is not None and not identity.sees(record.project):
            record = None  # as a job that does not exist
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
        b"listpolicies.json": ListPolicies(api),
        b"schedule.json": Schedule(api),
        b"cancel.json": Cancel(api),
        b"listjobs.json": ListJobs(api),
        b"whoami.json": WhoAmI(api),
        b"jobstats.json": JobStats(api),
        b"job.json": JobDetail(api),
        b"runs.json": Runs(api),
        b"listnodes.json": ListNodes(api),
        b"status.json": Status(api),
        b"audit.json": AuditList(api),
        b"delproject.json": DelProject(api),
        b"addversion.json": NoDeploying(api),
        b"delversion.json": NoDeploying(api),
        **schedule_endpoints(api),
    }


def _at_once(function, *args):
    return defer.maybeDeferred(function, *args)
