"""listjobs.json one page at a time: ``limit``, ``before`` and filters.

Without ``limit`` listjobs.json answers as scrapyd's does, every job in
three lists. With it, the answer is a window over the same three lists
laid end to end (pending in queue order, running by start, finished
newest first), at most ``limit`` jobs, each in the list of its state, and
``next_before``: the cursor of the next page, null after the last. A
finished job's entry there has its ``items``, ``pages`` and ``errors``
too (the counts kept in its row), so that a page needs no request per job.

A cursor names the place of the last job shown by its sort key (its state,
the time that orders its list, its row's ``seq``), never by its position,
so it stays valid when that job is pruned or others end meanwhile: a job
that ends while a client pages through finished jobs sorts before every
cursor already given (it is newer), and is neither shown twice nor makes
another shown twice. A pending or running job can move between lists
while a client pages; finished ones, the long list, cannot.

The filters (``state``, ``spider``, ``outcome``, ``schedule``, ``reason``,
``health``, ``node``, ``q`` for text in the job id) are listjobs.json's
own: it takes no spider arguments. They narrow a page, so they need
``limit``; without it they are refused rather than ignored, so that a
client who forgets ``limit`` is not handed every job as if filtered.
"""

import base64
import binascii
import json
from bisect import bisect_left, bisect_right

from twisted.internet import defer
from twisted.python.failure import Failure

from ..names import fold
from ..store.job_table import FINISHED_ROW
from ..store.records import FINISHED, PENDING, RUNNING, STATES
from .params import ApiError
from .views import job_entry

# The most jobs one page may ask for, and the page when ``limit`` is empty.
MAX_LIMIT = 1000

# The most jobs ended or pruned since it that a kept listing catches up
# with in place; past them it is read again whole, off the reactor.
CATCH_UP_AT_MOST = 2000

RANKS = {PENDING: 0, RUNNING: 1, FINISHED: 2}

# Where the project stands in a finished row (store.finished_rows).
FINISHED_PROJECT = FINISHED_ROW.index("project")

# Each filter: the parameter, and the record's value it is compared with
# (case-folded both sides, as names are elsewhere).
FILTERS = {
    "spider": lambda record: record.spider,
    "outcome": lambda record: record.outcome,
    "schedule": lambda record: record.schedule,
    "reason": lambda record: record.reason,
    "health": lambda record: record.health,
    "node": lambda record: record.node,
}
PAGE_PARAMETERS = ("limit", "before", "state", "q") + tuple(FILTERS)


def sort_key(record):
    """Where ``record`` stands in the paged order; every key is unique
    (``seq`` is the row's), and a later page's keys are greater."""
    if record.state == PENDING:
        return (0, -record.priority, record.seq)
    if record.state == RUNNING:
        return (1, record.start_time or 0.0, record.seq)
    return (2, -(record.end_time or 0.0), -record.seq)


def encode_cursor(key):
    text = json.dumps(list(key), separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")


def decode_cursor(text):
    """The sort key a cursor names; ApiError for anything this module did
    not write."""
    problem = ApiError(400, "parameter 'before': not a cursor of this service (give the"
                            " next_before of an earlier page)")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        key = json.loads(raw.decode("ascii"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise problem from None
    if (not isinstance(key, list) or len(key) != 3 or key[0] not in (0, 1, 2)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in key)
            or key[1] != key[1]):  # NaN
        raise problem
    return tuple(key)


def is_paged(params):
    """Whether the request asks for a page (or names a filter, which is
    refused without ``limit``)."""
    return any(params.get(name) is not None for name in PAGE_PARAMETERS)


class PageRequest:
    """What one paged request asks for, checked."""

    def __init__(self, params):
        if params.get("limit") is None:
            named = next(name for name in PAGE_PARAMETERS if params.get(name) is not None)
            raise ApiError(400, f"parameter {named!r} pages listjobs.json: give 'limit' too"
                                " (without it the answer is every job, as scrapyd's)")
        self.limit = _limit(params.get("limit"))
        before = params.get("before")
        self.before = decode_cursor(before) if before else None
        self.states = _states(params.all("state"))
        self.filters = []
        for name, value_of in FILTERS.items():
            wanted = params.get(name)
            if wanted:
                self.filters.append((value_of, fold(wanted)))
        q = params.get("q")
        self.text = q.lower() if q else None

    @property
    def narrows(self):
        """Whether it filters: a page may then look at every job kept to
        find ``limit`` that match (100,000 rows: 8 to 15 ms)."""
        return bool(self.filters) or self.text is not None

    def matches(self, record):
        if self.text is not None and self.text not in record.id.lower():
            return False
        for value_of, wanted in self.filters:
            value = value_of(record)
            if value is None or fold(value) != wanted:
                return False
        return True


def _limit(text):
    try:
        limit = int(text)
    except ValueError:
        raise ApiError(400, f"parameter 'limit': {text!r} is not a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"parameter 'limit': {limit} is not between 1 and {MAX_LIMIT}")
    return limit


def _states(values):
    states = set()
    for value in values:
        for state in value.split(","):
            state = state.strip().lower()
            if state not in STATES:
                raise ApiError(400, f"parameter 'state': {state!r} is not one of"
                                    f" {', '.join(STATES)}")
            states.add(state)
    return states or set(STATES)


class FinishedRow:
    """What a listing kept in memory holds of one finished job: what it is
    sorted and filtered by, a tenth of its record (whose entry is read when
    a page shows it). Read as a record is, by sort_key and FILTERS."""

    __slots__ = ("end_time", "seq", "id", "project", "spider", "outcome", "reason", "health",
                 "node", "schedule")
    state = FINISHED

    def __init__(self, row, same):
        # ``same`` interns the repeated strings (a project, spider, outcome
        # or reason is one object however many jobs share it).
        (self.end_time, self.seq, self.id, project, spider, outcome, reason, health, node,
         schedule) = row
        self.project, self.spider, self.outcome = same(project), same(spider), same(outcome)
        self.reason, self.health = same(reason), same(health)
        self.node, self.schedule = same(node), same(schedule)


def _interner():
    kept = {}

    def same(value):
        return value if value is None else kept.setdefault(value, value)

    return same


def _id_key(jobid):
    """A job id folded, as the table's key; the id itself (not a copy) when
    folding changes nothing, as for most ids: 100,000 of them are 8 MB."""
    key = fold(jobid)
    return jobid if key == jobid else key


def _finished_key(row):
    return (2, -(row.end_time or 0.0), -row.seq)


class PagedJobs:
    """One version of the job table, in paged order: the unfinished jobs'
    records, and a FinishedRow of each finished job, newest first; made
    once and searched by every page asked of it.

    The finished list, the long one, is then kept up to date in place
    (``catch_up``): a job that ended is put in its place, one pruned taken
    out; the unfinished lists, a few jobs, are replaced whole.

    ``unfinished`` is (pending, running) records, ``finished`` FinishedRows
    made with ``same`` (or tuples of job_table.FINISHED_ROW's columns, when
    ``same`` is not given), in any order."""

    def __init__(self, unfinished, finished, waits_for, same=None):
        self.waits_for = waits_for
        self.sections = {}
        if same is None:
            same = _interner()
            finished = [FinishedRow(row, same) for row in finished]
        self._same = same
        self._set_unfinished(*unfinished)
        rows = sorted(finished, key=_finished_key)
        self._rows = rows
        # Each finished job's row, by folded id: how a job that ended
        # again or was pruned is found in the list.
        self._by_id = {_id_key(row.id): row for row in rows}

    def _set_unfinished(self, pending, running):
        for state, records in ((PENDING, pending), (RUNNING, running)):
            ordered = sorted(records, key=sort_key)
            self.sections[state] = (ordered, [sort_key(r) for r in ordered])

    def finished(self):
        """The finished rows, newest first."""
        return self._rows

    def catch_up(self, unfinished, finished, gone, waits_for):
        """Brings the lists to a later version: ``unfinished`` (pending,
        running) read whole, ``finished`` the rows of the jobs that ended
        since, ``gone`` the ids of the jobs ended or pruned since (among
        them those of ``finished``: a job that ended is taken out, then put
        back where it now stands)."""
        self._set_unfinished(*unfinished)
        self.waits_for = waits_for
        rows = self._rows
        for jobid in gone:
            row = self._by_id.pop(fold(jobid), None)
            if row is not None:
                index = bisect_left(rows, _finished_key(row), key=_finished_key)
                if index < len(rows) and rows[index] is row:
                    del rows[index]
        for row in finished:
            row = FinishedRow(row, self._same)
            rows.insert(bisect_left(rows, _finished_key(row), key=_finished_key), row)
            self._by_id[_id_key(row.id)] = row

    def frozen(self):
        """A copy a thread may page through while this one is caught up
        on the reactor's: its own list of the finished rows (a copy of
        100,000 references, a fraction of a millisecond); the rows, and
        the unfinished lists (replaced at each catch-up, never changed),
        are shared."""
        copy = object.__new__(PagedJobs)
        copy.__dict__.update(self.__dict__)
        copy._rows = list(self._rows)
        copy.sections = dict(self.sections)
        return copy

    def page(self, request, node):
        """The answer to ``request`` (a PageRequest), a dict whose
        ``finished`` holds FinishedRows still (``entries`` makes them
        entries, with their records)."""
        answer = {"node_name": node, "status": "ok",
                  PENDING: [], RUNNING: [], FINISHED: [], "next_before": None}
        shown, last = 0, None
        for state in STATES:
            if state not in request.states:
                continue
            start = 0
            if state == FINISHED:
                records, key = self._rows, _finished_key
                if request.before is not None and request.before[0] == RANKS[state]:
                    start = bisect_right(records, request.before, key=key)
            else:
                records, keys = self.sections[state]
                key = sort_key
                if request.before is not None and request.before[0] == RANKS[state]:
                    start = bisect_right(keys, request.before)
            if request.before is not None and request.before[0] > RANKS[state]:
                continue
            for index in range(start, len(records)):
                record = records[index]
                if not request.matches(record):
                    continue
                if shown == request.limit:
                    # One more matches: there is a next page.
                    answer["next_before"] = encode_cursor(last)
                    return answer
                answer[state].append(record if state == FINISHED else self._entry(record))
                shown, last = shown + 1, key(record)
        return answer

    def _entry(self, record):
        waits_for = self.waits_for(record) if record.state == PENDING else None
        return paged_entry(record, waits_for)


def paged_entry(record, waits_for=None):
    """A job's entry on a page: listjobs.json's, with its times as epoch
    seconds (``at``) and, for a finished job, the counts its health was
    judged by (health.counts), kept in its row: a page of finished jobs
    shows them without a jobstats.json per job. Null for a run that wrote
    no stats."""
    entry = job_entry(record, waits_for, times=True)
    if record.state == FINISHED:
        entry.update(items=record.items, pages=record.pages, errors=record.errors)
    return entry


def with_entries(answer, records):
    """``answer`` (PagedJobs.page's) with its finished rows made entries of
    ``records`` (their jobs' records, in any order); a job pruned since the
    page was chosen is left out."""
    by_id = {fold(record.id): record for record in records}
    answer[FINISHED] = [paged_entry(by_id[fold(row.id)]) for row in answer[FINISHED]
                        if fold(row.id) in by_id]
    return answer


class KeptPages:
    """The PagedJobs of one listing (a project, every project, the projects
    an identity sees), kept in memory from one version of the table to the
    next: caught up with what the store's journal says changed (the jobs
    that ended or were pruned, and the few unfinished ones read again),
    read again whole only when the journal cannot say (store/journal.py).

    ``api`` gives the store, the reasons a pending job waits, and
    ``build_aside`` (where sorting a whole table is done: not the reactor's
    thread). ``built()`` counts whole reads, ``caught_up()`` the others."""

    def __init__(self, api, project, sees, built=None):
        self.api = api
        self.project = project
        self.sees = sees
        self._built = built or (lambda: None)
        self._paged = None
        self._version = None
        # The catching up under way, which requests arriving meanwhile wait
        # for rather than each start one.
        self._catching_up = None   # (version, the Deferreds waiting for it)
        self._after = []           # asked at a later version meanwhile
        self.whole_reads = 0
        self.caught_up = 0

    def paged(self):
        """A Deferred PagedJobs as of the store's version now (or later)."""
        store = self.api.store
        if self._paged is not None and self._version == store.version:
            return defer.succeed(self._paged)
        answered = defer.Deferred()
        if self._catching_up is not None:
            version, waiting = self._catching_up
            if version == store.version:
                waiting.append(answered)
            else:
                # Asked after a later change than the one being caught up
                # with (a cancel.json answered, then a page asked): it gets
                # a catch-up of its own, after that one.
                self._after.append(answered)
            return answered
        self._start(store.version, [answered])
        return answered

    def _start(self, version, waiting):
        self._catching_up = (version, waiting)
        # maybeDeferred: a catch-up that raised at once would otherwise
        # leave every later request waiting for it.
        defer.maybeDeferred(self._catch_up, version).addBoth(self._settle, waiting)

    def _settle(self, outcome, waiting):
        if self._catching_up is not None and self._catching_up[1] is waiting:
            self._catching_up = None
        for answered in waiting:
            if isinstance(outcome, Failure):
                answered.errback(outcome)
            else:
                answered.callback(outcome)
        if self._after and self._catching_up is None:
            after, self._after = self._after, []
            self._start(self.api.store.version, after)
        return None

    def _catch_up(self, version):
        store = self.api.store
        journal = getattr(store, "journal", None)
        ids = None
        if self._paged is not None and journal is not None:
            ids = journal.finished_since(self._version, version)
            if ids is not None and len(ids) > CATCH_UP_AT_MOST:
                # Each id moves a list of up to 100,000 rows on the
                # reactor's thread: past a few thousand, a whole read
                # (off it) costs less.
                ids = None
        same = None
        if ids is None:
            self.whole_reads += 1
            self._built()
            # Each row made a FinishedRow as it is read (on the store's
            # thread), so the rows are never all in memory at once.
            same = _interner()
            reads = [store.unfinished_jobs(self.project),
                     store.finished_rows(self.project, make=lambda row: FinishedRow(row, same))]
        else:
            self.caught_up += 1
            reads = [store.unfinished_jobs(self.project),
                     store.finished_rows(self.project, ids) if ids else defer.succeed([])]

        def made(results):
            (pending, running), finished = results
            pending, running = self._seen(pending), self._seen(running)
            if self.sees is not None and same is None:
                finished = [row for row in finished if self.sees(row[FINISHED_PROJECT])]
            return self.api.reasons(running).addCallback(
                lambda waits_for: self._apply((pending, running), finished, ids, waits_for,
                                              same))

        return defer.gatherResults(reads, consumeErrors=True).addErrback(
            _first_error).addCallback(made).addCallback(self._keep, version)

    def _apply(self, unfinished, finished, ids, waits_for, same):
        if ids is None:
            # Filtering and sorting a whole table: off the reactor's thread.
            return self.api.build_aside(_whole, unfinished, finished, waits_for, same,
                                        self.sees)
        self._paged.catch_up(unfinished, finished, ids, waits_for)
        return self._paged

    def _seen(self, records):
        if self.sees is None:
            return records
        return [r for r in records if self.sees(r.project)]

    def _keep(self, paged, version):
        # The version read is the one asked at, or later: a write delivered
        # meanwhile is caught up with at the next request.
        self._paged, self._version = paged, version
        return paged


def _whole(unfinished, finished, waits_for, same, sees):
    # Possibly on a thread (build_aside): reads only its arguments.
    if sees is not None:
        finished = [row for row in finished if sees(row.project)]
    return PagedJobs(unfinished, finished, waits_for, same)


def _first_error(failure):
    # gatherResults wraps the first failure: hand on the error itself.
    return failure.value.subFailure if failure.check(defer.FirstError) else failure
