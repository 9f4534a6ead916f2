"""Submitting a job: the use case behind schedule.json (and recurring schedules).

A request is checked as far as it can be before it is queued: the project
must be served, the job id free, the path settings inside the project's
data directory (their folders made, since the crawl needs them), and the
spider must accept the settings and arguments (read in a reader process).
Only then is the job queued. A request refused at any step leaves nothing
behind: the folders it made are removed again.
"""

import os
from dataclasses import dataclass

from twisted.internet import defer

from ..names import spelled_settings
from ..reliability.policy import JobPolicy
from ..reliability.rules import PolicyRules
from ..store.records import DuplicateJob, Refusal
from . import datapaths, policies
from .checked import InspectError, check_job


class SubmitRefused(Refusal):
    """A job that is not queued; ``message`` says why, for the requester."""


class UnknownProject(SubmitRefused):
    """No served project has that name."""


def unknown_project(name, known):
    """What is said of project ``name`` when none of ``known`` (names) is it."""
    return f"no project {name!r} (projects: {', '.join(known) or 'none'})"


class JobRefused(SubmitRefused):
    """The spider, a setting or an argument does not pass the checks."""


@dataclass(frozen=True)
class JobRequest:
    """What a requester asks for. ``settings`` and ``arguments`` are
    ``(key, value)`` pairs in the order given."""

    project: str
    spider: str
    settings: tuple = ()
    arguments: tuple = ()
    jobid: str = None
    priority: float = 0.0
    # The recurring schedule queueing it, and the locks that come with it
    # (policies.schedule_lock for overlap=queue).
    schedule: str = None
    schedule_locks: tuple = ()
    # The job's own policy values (its ``_KEY`` parameters, or its
    # schedule's), over the --policy rules of its project and spider.
    policy: JobPolicy = None
    # For a job a chain schedule queues: the upstream job whose end did.
    upstream: str = None
    # Who asks (the request's token or user name; listjobs.json's ``by``).
    # None for a schedule's firing or a chain's: those are by
    # ``schedule:NAME`` (queued_by).
    by: str = None


def queued_by(request):
    """Who a job of ``request`` (a JobRequest) is said to be queued by."""
    if request.schedule is not None:
        return f"schedule:{request.schedule}"
    return request.by


class JobSubmitter:
    """Checks and queues jobs for the served ``projects``.

    ``reader`` provides ISpiderReader, ``scheduler`` IScheduler; ``directory``
    is the service's DIR (path settings live in DIR/data/PROJECT).
    ``rules`` are the --policy rules; ``enforceable(policy)`` says why this
    machine cannot enforce a policy (a sentence), or None when it can."""

    def __init__(self, projects, store, scheduler, reader, directory, rules=None,
                 enforceable=None):
        self._projects = projects
        self._store = store
        self._scheduler = scheduler
        self._reader = reader
        self._directory = directory
        self.rules = rules if rules is not None else PolicyRules()
        self._enforceable = enforceable or (lambda policy: None)

    def policy_of(self, project, spider, own=None):
        """The policy a job of ``spider`` gets: its own values (``own``, a
        JobPolicy) over the spider's rule, over the project's. Raises
        JobRefused when this machine cannot enforce it."""
        policy = (own or JobPolicy()).over(self.rules.for_spider(project, spider))
        problem = self._enforceable(policy)
        if problem:
            raise JobRefused(problem)
        return policy

    def project(self, name):
        """The served Project called ``name`` (any case); UnknownProject if none."""
        project = self._projects.get(name)
        if project is None:
            raise UnknownProject(unknown_project(name, self._projects.names()))
        return project

    def data_dir(self, project):
        return os.path.join(self._directory, "data", project.name)

    @defer.inlineCallbacks
    def check(self, request):
        """Deferred CheckedJob for ``request`` without queueing it; fails
        with SubmitRefused (or DuplicateJob for a taken job id). Folders of
        path settings stay made (a job will need them)."""
        checked, _ = yield self._check(request)
        return checked

    @defer.inlineCallbacks
    def submit(self, request):
        """Deferred JobRecord of the queued job; fails with SubmitRefused,
        DuplicateJob, or StoreError when the table cannot be written."""
        checked, prepared = yield self._check(request)
        try:
            policy = self.policy_of(checked.project, checked.spider, request.policy)
            locks = policies.path_locks(checked.project, self.data_dir(self.project(
                checked.project)), checked.settings) + tuple(request.schedule_locks)
            record = yield self._scheduler.schedule(
                checked, jobid=request.jobid, priority=request.priority,
                schedule=request.schedule, locks=locks, policy=policy.to_json(),
                upstream=request.upstream, by=queued_by(request))
        except defer.CancelledError:
            # Cancelled while the job was being queued: its transaction may
            # have committed all the same (PostgreSQL's runInteraction has no
            # canceller), and a queued job needs its folders. Folders left
            # for a job that was not queued are empty and harmless.
            raise
        except BaseException:
            prepared.undo()
            raise
        return record

    @defer.inlineCallbacks
    def _check(self, request):
        project = self.project(request.project)
        if request.jobid is not None:
            existing = yield self._store.get(request.jobid)
            if existing is not None:
                raise DuplicateJob(request.jobid)
        data_dir = self.data_dir(project)
        try:
            # By setting name: CHECKPOINT=x is checkpoint=x (names.setting_name).
            prepared = datapaths.prepare_all(data_dir, spelled_settings(request.settings)[0])
        except ValueError as e:
            raise JobRefused(str(e)) from None
        try:
            checked = yield check_job(self._reader, project, request.spider, request.settings,
                                      request.arguments, data_dir)
        except InspectError as e:
            prepared.undo()
            raise JobRefused(e.message) from None
        except BaseException:
            # Cancelled (the requester went away), or the reader failed.
            prepared.undo()
            raise
        return checked, prepared
