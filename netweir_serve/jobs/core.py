"""The job core, built in one place: the events, the launcher, the poller,
the scheduler and (with ``keep``) the pruner, over a job store, each part
subscribing to the events it needs. makeService builds the service's with
it and the tests theirs, so both are wired the same way."""

import sys
from dataclasses import dataclass

from .events import JobEvents
from .launcher import Launcher
from .poller import Poller
from .pruning import Pruner
from .scheduler import Scheduler


@dataclass(frozen=True)
class JobCore:
    events: JobEvents
    launcher: Launcher
    poller: Poller
    scheduler: Scheduler
    pruner: Pruner = None


def can_run_here(groups):
    """The claim's can_run for a node with ``groups`` (a JobGroups): jobs
    whose limits it can enforce. Without groups (tests) every job is
    claimed, and one asking for a limit fails to start (the launcher)."""
    return None if groups is None else groups.can_run


def build_job_core(store, reactor, projects, directory, max_jobs, node, wall=None,
                   keep=None, keep_audit=None, python=sys.executable, grace=30.0, stats_interval=1.0,
                   poll_interval=5.0, max_per_spider=None, claims_projects=None,
                   **launcher_options):
    """The job core on ``store`` (an IJobStore) and ``reactor``, for
    ``projects`` (a ProjectTable) kept in ``directory``, at most
    ``max_jobs`` at once, claimed as ``node``. ``wall`` gives the time of
    day (the reactor's clock times intervals); ``keep``, when given, makes
    a pruner forgetting finished jobs past it (on a shared table only this
    node's), and forgetting the audit's rows older than ``keep_audit``
    seconds; ``claims_projects`` the names claimed (the projects' own by
    default); ``launcher_options`` go to the Launcher (its environment and
    signals, for tests)."""
    events = JobEvents()
    launcher = Launcher(reactor, store, events, projects, directory, max_jobs, python=python,
                        grace=grace, stats_interval=stats_interval, wall=wall,
                        **launcher_options)
    poller = Poller(store, launcher, reactor, node,
                    projects.names() if claims_projects is None else claims_projects,
                    interval=poll_interval, max_per_spider=max_per_spider, wall=wall,
                    can_run=can_run_here(launcher_options.get("groups")))
    poller.subscribe(events)
    scheduler = Scheduler(store, launcher, reactor if wall is None else wall, events)
    pruner = None
    if keep is not None:
        # --keep is each node's own on a shared table: a node can delete
        # the files of the jobs it ran only.
        pruner = Pruner(store, directory, keep, reactor, node=node if store.shared else None,
                        keep_audit=keep_audit, wall=wall)
        pruner.subscribe(events)
    return JobCore(events, launcher, poller, scheduler, pruner)
