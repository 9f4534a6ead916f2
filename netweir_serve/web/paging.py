"""listjobs.json one page at a time: ``limit``, ``before`` and filters.

Without ``limit`` listjobs.json answers as scrapyd's does, every job in
three lists. With it, the answer is a window over the same three lists
laid end to end (pending in queue order, running by start, finished
newest first), at most ``limit`` jobs, each in the list of its state, and
``next_before``: the cursor of the next page, null after the last. A
finished job's entry there has its ``items``, ``pages`` and ``errors``
too (the counts kept in its row), so that a page needs no request per job.

Pending and running jobs are held in paged order once per change of the
table (``PagedJobs``); finished ones are read a page at a time, in SQL
(``IJobStore.finished_page``), so that 10,000 of them cost a page's read.

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
from bisect import bisect_right

from ..names import fold
from ..store.records import FINISHED, PENDING, RUNNING, STATES
from .params import ApiError
from .views import job_entry

# The most jobs one page may ask for, and the page when ``limit`` is empty.
MAX_LIMIT = 1000

RANKS = {PENDING: 0, RUNNING: 1, FINISHED: 2}

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
        # The same, by column, for the store's read of finished jobs.
        self.columns = {}
        for name, value_of in FILTERS.items():
            wanted = params.get(name)
            if wanted:
                self.filters.append((value_of, fold(wanted)))
                self.columns[name] = fold(wanted)
        q = params.get("q")
        self.text = q.lower() if q else None

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


class PagedJobs:
    """One version of the pending and running jobs, in paged order: their
    lists and sort keys, made once and searched by every page asked of
    it. The finished jobs, the long list, are not held here: a page reads
    those it shows from the store (``finished_page``), so that a change
    of the table costs a read of the jobs not yet ended, whatever the
    number that did (10,000 finished rows took 1.5 s to read and order)."""

    def __init__(self, jobs, waits_for):
        pending, running = jobs[0], jobs[1]
        self.waits_for = waits_for
        self.sections = {}
        for state, records in ((PENDING, pending), (RUNNING, running)):
            ordered = sorted(records, key=sort_key)
            self.sections[state] = (ordered, [sort_key(r) for r in ordered])

    def page(self, request, node):
        """(answer, rest): the answer to ``request`` (a PageRequest) as far
        as the jobs held here go, and None when it is whole; else the
        finished jobs still to read: (after, count, last), ``after`` the
        (end_time, seq) they come after (None for the first),
        ``count`` how many the page has room for, ``last`` the sort key of
        the page's last job so far (the cursor if no finished one fits)."""
        answer = {"node_name": node, "status": "ok",
                  PENDING: [], RUNNING: [], FINISHED: [], "next_before": None}
        shown, last = 0, None
        for state in (PENDING, RUNNING):
            if state not in request.states:
                continue
            records, keys = self.sections[state]
            start = 0
            if request.before is not None:
                if request.before[0] > RANKS[state]:
                    continue
                if request.before[0] == RANKS[state]:
                    start = bisect_right(keys, request.before)
            for index in range(start, len(records)):
                record = records[index]
                if not request.matches(record):
                    continue
                if shown == request.limit:
                    # One more matches: there is a next page.
                    answer["next_before"] = encode_cursor(last)
                    return answer, None
                answer[state].append(self._entry(record))
                shown, last = shown + 1, keys[index]
        if FINISHED not in request.states:
            return answer, None
        after = None
        if request.before is not None and request.before[0] == RANKS[FINISHED]:
            after = (-request.before[1], -request.before[2])
        return answer, (after, request.limit - shown, last)

    def finish(self, answer, rest, records):
        """``answer`` with the finished ``records`` read for its ``rest``
        (one more than it has room for, when there are more)."""
        _, room, last = rest
        for record in records[:room]:
            answer[FINISHED].append(self._entry(record))
            last = sort_key(record)
        if len(records) > room:
            answer["next_before"] = encode_cursor(last)
        return answer

    def _entry(self, record):
        waits_for = self.waits_for(record) if record.state == PENDING else None
        entry = job_entry(record, waits_for)
        if record.state == FINISHED:
            # The counts its health was judged by (health.counts), kept in
            # the row: a page of finished jobs shows them without a
            # jobstats.json per job. Null for a run that wrote no stats.
            entry.update(items=record.items, pages=record.pages, errors=record.errors)
        return entry
