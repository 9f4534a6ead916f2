"""A job as the job table holds it, and the words for its states and outcomes."""

from dataclasses import dataclass, field

PENDING, RUNNING, FINISHED = "pending", "running", "finished"
STATES = (PENDING, RUNNING, FINISHED)
OUTCOMES = ("finished", "failed", "cancelled", "lost")
# The outcome of a crawl that ran to its end (exit 0): the one a health judges.
FINISHED_OUTCOME = "finished"
# The outcome of a job stopped by a cancel (its reason says whose).
CANCELLED_OUTCOME = "cancelled"

# Why a job ended, beside its outcome (jobs.outcomes says which is which):
# ``exit N`` and ``signal N`` from the crawl's status, and these. The
# first four are why a cancel was asked.
CANCELLED_BY_USER = "cancel.json"
SERVICE_STOPPED = "service stopped"
TIMEOUT = "timeout"
STALLED = "stalled"
EXPIRED = "expired"
MEMORY = "memory"
NOT_STARTED = "not started"
NODE_LOST = "node lost"
LOST = "lost"
CANCEL_REASONS = (CANCELLED_BY_USER, SERVICE_STOPPED, TIMEOUT, STALLED)


class DuplicateJob(ValueError):
    """A job with this id (compared ignoring case) is already known."""

    def __init__(self, jobid):
        super().__init__(f"a job with id {jobid!r} already exists (job ids ignore case)")
        self.jobid = jobid


class NodeNameTaken(ValueError):
    """A live node of the cluster, reached at another URL, has this name."""

    def __init__(self, name, url):
        super().__init__(f"node name {name!r} is held by a live node at {url}"
                         " (node names are unique in a cluster)")
        self.name = name
        self.url = url


class Refusal(Exception):
    """What the core tells whoever asked, when it does not do what was
    asked: ``message``, a sentence for them (web/refusals.py answers each
    kind with its HTTP status)."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class StoreError(Refusal):
    """The job table could not be read or written (a locked file for too
    long, a full disk); ``message`` says which, for a log line or an answer."""


@dataclass(frozen=True)
class JobRecord:
    """One job. Immutable: a change makes a new one.

    ``node`` is the name of the service that claimed it (None while
    pending); ``pid`` is set once its process started, so a running job
    without one was claimed but never started. ``schedule`` names the
    recurring schedule that queued it; ``locks`` are what it must hold
    alone while it runs (see jobs.policies). ``reason`` says why an ended
    job ended, as a code (jobs.outcomes); while it runs, the reason a
    cancel was asked for, if one was. Listings leave ``stats`` None
    (they never show it): read it from ``IJobStore.get``."""

    id: str
    project: str
    spider: str
    spider_file: str
    settings: tuple = ()
    arguments: tuple = ()
    priority: float = 0.0
    state: str = PENDING
    outcome: str = None
    pid: int = None
    exit_status: int = None
    created: float = 0.0
    start_time: float = None
    end_time: float = None
    stats: dict = None
    cancel_requested: bool = False
    # A kill asked (a second cancel, or cancel.json's signal=KILL): what the
    # node running the job carries out, however it hears of it.
    kill_requested: bool = False
    reason: str = None
    node: str = None
    # The identity of its process (boot id and start time, _proctree):
    # what a later service checks before it adopts the job.
    proc_start: str = None
    schedule: str = None
    locks: tuple = ()
    # The job's policy (reliability.policy.JobPolicy.to_json()), resolved
    # when it was queued: its deadlines, retries and limits. None for none.
    policy: dict = None
    # 1 for a first run; a retry is attempt 2, 3... of the job ``retry_of``
    # (the first attempt's id), pending until ``not_before`` (epoch seconds).
    attempt: int = 1
    retry_of: str = None
    not_before: float = None
    # A sentence beside ``reason`` where one helps (why a job could not
    # start, or was lost), for logs and notifications.
    detail: str = None
    # How a run that finished did against its checks and history
    # (health.checks): "healthy" or "degraded", with the reasons of a
    # degraded one; None for any other outcome, and until it ends.
    health: str = None
    health_reasons: tuple = ()
    # Its items, pages and errors (failed requests and callback errors),
    # from its stats when it ended: what later runs are judged against.
    items: int = None
    pages: int = None
    errors: int = None
    # For a job a chain schedule queued: the upstream job whose end did.
    upstream: str = None
    # Who queued it (listjobs.json's ``by``): the token or user name of
    # the request, ``schedule:NAME`` for a schedule's firing or a chain's,
    # a retry's its first attempt's; None on a service open to all.
    queued_by: str = None
    seq: int = None
    # Not a column: on the record of an end (IJobStore.mark_finished and
    # the other ways a job ends), the retry that end queued in the same
    # transaction (a pending JobRecord), or None.
    retry: object = field(default=None, compare=False, repr=False)
    # Not a column either: on the record of a final end (no retry), the
    # names of the chain schedules whose firing it wrote to the outbox in
    # the same transaction (store.chain_firings).
    chain_firings: tuple = field(default=(), compare=False, repr=False)
    # Not a column: on the record of a final end, the ScheduleRecord that
    # end paused (its pause_after reached: store.schedule_streaks), or None.
    paused_schedule: object = field(default=None, compare=False, repr=False)
