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
        for name, value_of in FILTERS.items():
            wanted = params.get(name)
            if wanted:
                self.filters.append((value_of, fold(wanted)))
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
    """One version of the job table, in paged order: the three lists and
    their sort keys, made once and searched by every page asked of it."""

    def __init__(self, jobs, waits_for):
        pending, running, finished = jobs
        self.waits_for = waits_for
        self.sections = {}
        for state, records in ((PENDING, pending), (RUNNING, running),
                               (FINISHED, reversed(finished))):
            ordered = sorted(records, key=sort_key)
            self.sections[state] = (ordered, [sort_key(r) for r in ordered])

    def page(self, request, node):
        """The answer to ``request`` (a PageRequest), a dict."""
        answer = {"node_name": node, "status": "ok",
                  PENDING: [], RUNNING: [], FINISHED: [], "next_before": None}
        shown, last = 0, None
        for state in STATES:
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
                    return answer
                answer[state].append(self._entry(record))
                shown, last = shown + 1, keys[index]
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
