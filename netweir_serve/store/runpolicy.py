"""Which pending job a claim may take now, and why one waits: the rule
every backend's claim applies (IJobStore.claim_next) and the listings
explain. Locks are strings a job carries (jobs.policies makes them when a
job is submitted): a pending job waits while a running job holds any of
its locks, or while its spider already has ``max_per_spider`` running
jobs. A node claims only jobs of the projects it serves (``ServedProjects``
says when no live node serves a pending job's project).
"""

import os

from ..names import fold

# The kinds of lock (the text before the first colon).
PATH = "path"
SCHEDULE = "schedule"


def _shown(lock, data_dir):
    """The lock as listjobs says it. A path lock is the absolute path (the
    lock must stay the same string it always was: both stores compare locks
    as strings, old jobs' included), shown relative to ``data_dir``, the
    project's data directory, as the settings name it: the server's own
    paths are none of a client's business. A path outside it (a node with
    another --dir queued the job) is shown as it is."""
    kind, _, rest = lock.partition(":")
    if kind == SCHEDULE:
        return f"schedule {rest}"
    _project, _, path = rest.partition(":")
    if data_dir is not None:
        inside = os.path.relpath(path, os.path.realpath(data_dir))
        if inside != os.pardir and not inside.startswith(os.pardir + os.sep):
            path = inside
    return f"the data directory {path} (of a checkpoint, deltafetch or cache setting)"


class RunningSet:
    """What the running jobs hold: their locks, and how many run per spider.
    ``data_dir_of(project)`` (a project's data directory, or None), where
    given, is what paths are shown relative to. With ``now`` (a time of
    day), a retry whose ``not_before`` is later waits for it, shown by
    ``show_time(seconds)`` (a listing's format of times)."""

    def __init__(self, running=(), data_dir_of=None, now=None, show_time=str):
        self._holders = {}
        self._per_spider = {}
        self._data_dir_of = data_dir_of or (lambda project: None)
        self._now = now
        self._show_time = show_time
        for record in running:
            self.add(record)

    def add(self, record):
        for lock in record.locks:
            self._holders.setdefault(lock, record.id)
        spider = (fold(record.project), record.spider)
        self._per_spider[spider] = self._per_spider.get(spider, 0) + 1

    def waits_for(self, record, max_per_spider=None):
        """Why ``record`` (pending) may not start now, as a sentence for
        listjobs.json, or None when it may."""
        if (self._now is not None and record.not_before is not None
                and record.not_before > self._now):
            # The claim skips it until then (store.columns.claim_candidates).
            return (f"its retry time, {self._show_time(record.not_before)} (attempt"
                    f" {record.attempt} of job {record.retry_of})")
        for lock in record.locks:
            holder = self._holders.get(lock)
            if holder is not None:
                return (f"{_shown(lock, self._data_dir_of(record.project))} is in use by"
                        f" job {holder}")
        if max_per_spider is not None:
            running = self._per_spider.get((fold(record.project), record.spider), 0)
            if running >= max_per_spider:
                return (f"spider {record.project}/{record.spider} has {running} running"
                        f" job(s), the most --max-jobs-per-spider allows")
        return None


def first_that_may_run(running, pending, max_per_spider=None, can_run=None):
    """Of ``pending`` (records, in the order they would start) the first
    that may start beside ``running`` (records), and that the claiming
    node can run (``can_run(record)``, when given: it can enforce the
    job's limits), or None: the decision of every backend's claim
    (IJobStore.claim_next)."""
    held = RunningSet(running)
    return next((record for record in pending
                 if held.waits_for(record, max_per_spider) is None
                 and (can_run is None or can_run(record))), None)


class EnforceableLimits:
    """The job limits this node can enforce (``limits``, {"memory": bool,
    "cpu": bool}), for saying that a pending job asking for another waits
    for a node that can (a node that cannot never claims it)."""

    def __init__(self, limits, shared):
        self._limits = dict(limits or {})
        self._shared = shared

    def waits_for(self, record):
        """Why ``record`` (pending) cannot start on this node, or None."""
        values = record.policy or {}
        for controller in ("memory", "cpu"):
            if values.get(controller) is not None and not self._limits.get(controller):
                if self._shared:
                    return (f"a node that can limit {controller}: this one cannot, and"
                            f" only a node that can will take it")
                return f"a node that can limit {controller}: this service cannot"
        return None


class ServedProjects:
    """The projects some live node serves, for saying that a pending job
    of any other waits for a node that serves it."""

    def __init__(self, names, shared):
        self._folded = frozenset(fold(name) for name in names)
        self._shared = shared

    @classmethod
    def of_nodes(cls, nodes):
        """From IClusterStore.nodes(): what the nodes not declared dead serve."""
        return cls((p for node in nodes if not node["dead"] for p in node["projects"]),
                   shared=True)

    def waits_for(self, record):
        """Why ``record`` (pending) cannot start anywhere, or None."""
        if fold(record.project) in self._folded:
            return None
        if self._shared:
            return (f"a node that serves project {record.project}: no live node has"
                    f" --project {record.project}")
        return (f"a service that serves project {record.project}: this one was started"
                f" without --project {record.project}")
