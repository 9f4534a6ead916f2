"""job.json: one job, with everything its console page shows that the
listings leave out.

listjobs.json shows a job's settings and arguments only while it is
pending (scrapyd's fields), and never the upstream job a chain queued it
after; a person looking at a finished job wants both, and all of its
attempts. The answer is the job's listjobs.json entry plus:

- ``state``: pending, running or finished (a listing's lists say it);
- ``priority``, ``settings`` and ``arguments`` in every state, masked as
  listings mask them (views.shown_settings, shown_arguments);
- ``masked``: the names of the settings and arguments whose shown value
  is not the stored one (a password, a URL's user information), so that a
  page offering "Run again" knows it cannot send them back as shown;
- ``upstream`` (the job whose end queued this one, for a chain's job),
  ``detail`` (a sentence beside ``reason``), ``cancel_requested`` and
  ``kill_requested``;
- ``attempts``: every attempt of its retry chain the table still holds,
  first to last, each with its id, attempt, state, outcome, reason and
  ``at`` times (the job itself among them).
"""

from twisted.internet import defer

from ..access.roles import identity_of
from ..names import retry_id
from ..reliability.policy import MAX_RETRIES
from .endpoint import ApiEndpoint
from .params import ApiError
from .refusals import refused
from .views import job_entry, shown_arguments, shown_settings


class JobDetail(ApiEndpoint):
    """GET job.json?job=J[&project=P]."""

    def answer(self, params, request):
        jobid = params.name("job", "job id")
        project = params.name("project", required=False)
        identity = identity_of(request)
        return self.api.store.get(jobid).addCallback(
            self._found, jobid, project, identity).addErrback(refused)

    def _found(self, record, jobid, project, identity):
        if record is not None and project and record.project.lower() != project.lower():
            record = None  # as status.json: a job of another project is unknown
        if record is not None and not identity.sees(record.project):
            record = None  # as a job that does not exist
        if record is None:
            raise ApiError(404, f"no job {jobid!r}")
        return attempts_of(self.api.store, record).addCallback(
            lambda attempts: {"job": detail_entry(record, attempts)})


def detail_entry(record, attempts):
    """job.json's ``job``: ``record``'s listing entry and the rest (above);
    ``attempts`` the records of its retry chain, first to last."""
    entry = job_entry(record, times=True)
    # The listings say a job's state by the list it is in; here, in words.
    entry["state"] = record.state
    settings = shown_settings(record.settings)
    arguments = shown_arguments(record.arguments)
    entry["priority"] = record.priority
    entry["settings"] = settings
    entry["arguments"] = arguments
    entry["masked"] = sorted(
        [f"setting {key}" for key, value in record.settings if settings.get(key) != value]
        + [f"argument {key}" for key, value in record.arguments if arguments.get(key) != value])
    if record.upstream is not None:
        entry["upstream"] = record.upstream
    if record.detail is not None:
        entry["detail"] = record.detail
    entry["cancel_requested"] = bool(record.cancel_requested)
    entry["kill_requested"] = bool(record.kill_requested)
    entry["attempts"] = [attempt_entry(one) for one in attempts]
    return entry


def attempt_entry(record):
    """One attempt of a retry chain, as job.json lists it."""
    return {"id": record.id, "attempt": record.attempt, "state": record.state,
            "outcome": record.outcome, "reason": record.reason,
            "at": {"queued": record.created or None, "started": record.start_time,
                   "ended": record.end_time}}


def attempts_of(store, record):
    """Deferred list of the records of ``record``'s retry chain the store
    holds, by attempt: its first attempt's id and that id with .r1 to
    .r10 (names.retry_id; a policy allows at most MAX_RETRIES retries).
    One lookup each, side by side: a dozen reads of one row by its key,
    and no store method of its own for a page's question."""
    first = record.retry_of or record.id
    ids = [first] + [retry_id(first, attempt) for attempt in range(2, MAX_RETRIES + 2)]
    lookups = [defer.succeed(record) if one.lower() == record.id.lower() else store.get(one)
               for one in ids]

    def chain(found):
        return sorted((one for one in found if one is not None), key=lambda one: one.attempt)

    return defer.gatherResults(lookups, consumeErrors=True).addCallback(chain).addErrback(
        _first_error)


def _first_error(failure):
    # gatherResults wraps the failure of a lookup in a FirstError; the
    # store's own (a StoreError: 503) is what refusals() knows.
    if failure.check(defer.FirstError):
        return failure.value.subFailure
    return failure
