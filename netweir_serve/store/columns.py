"""The job and schedule tables' columns, declared once for every backend,
and how a record's fields are written to them and read back.

Each field is declared here once (``JOB_FIELDS``, ``SCHEDULE_FIELDS``),
with the kind of value it holds where backends store that kind
differently (a flag, a list, pairs, a JSON value); a backend turns the
declarations into Columns with its own converters for those kinds
(``columns_of``), and derives its statements from them. Neither backend
declares a column of its own.
"""

import functools
import json
import re
from dataclasses import dataclass


def _identity(value):
    return value


def dump_pairs(pairs):
    return json.dumps(pairs)


# Most jobs have no settings, arguments, locks or health reasons: their
# columns hold "[]", read without the JSON parser (a listing of 10,000
# jobs reads 40,000 of them; json.loads was a third of its time).
EMPTY = "[]"


def load_pairs(text):
    if text == EMPTY:
        return ()
    return tuple(tuple(pair) for pair in json.loads(text))


def dump_list(values):
    return json.dumps(list(values))


def load_list(text):
    return tuple(json.loads(text)) if text and text != EMPTY else ()


def load_array(values):
    # A column added after rows were written holds NULL in them.
    return tuple(values) if values is not None else ()


def load_real(value):
    return float(value) if value is not None else None


@functools.lru_cache(maxsize=None)
def in_sqlites_words(statement):
    """``statement`` (psycopg's named placeholders, as every statement is
    written once for both backends) with SQLite's."""
    return re.sub(r"%\((\w+)\)s", r":\1", statement)


def dump_json(value):
    return json.dumps(value) if value is not None else None


def load_json(text):
    return json.loads(text) if text else None


@dataclass(frozen=True)
class Column:
    """A column named as the record field it holds."""

    name: str
    to_db: object = _identity
    from_db: object = _identity


# The kinds of value a backend may store in a way of its own. A field of
# no kind is stored as it is (a string, a number, None).
PLAIN = "plain"
FLAG = "flag"      # a bool
LIST = "list"      # a tuple of strings
PAIRS = "pairs"    # a tuple of (key, value) pairs, in order
JSON = "json"      # a JSON value (a dict), or None
REAL = "real"      # a float, or None


# Each JobRecord field's column. (``key`` and ``project_key``, the folded
# id and project, are written beside them for lookups ignoring case.)
JOB_FIELDS = (
    ("seq", PLAIN), ("id", PLAIN), ("project", PLAIN), ("spider", PLAIN),
    ("spider_file", PLAIN), ("settings", PAIRS), ("arguments", PAIRS), ("priority", REAL),
    ("state", PLAIN), ("outcome", PLAIN), ("pid", PLAIN), ("exit_status", PLAIN),
    ("created", REAL), ("start_time", REAL), ("end_time", REAL), ("stats", JSON),
    ("cancel_requested", FLAG), ("reason", PLAIN), ("node", PLAIN), ("proc_start", PLAIN),
    ("schedule", PLAIN), ("locks", LIST), ("kill_requested", FLAG), ("policy", JSON),
    ("attempt", PLAIN), ("retry_of", PLAIN), ("not_before", REAL), ("detail", PLAIN),
    ("health", PLAIN), ("health_reasons", LIST), ("items", PLAIN), ("pages", PLAIN),
    ("errors", PLAIN), ("upstream", PLAIN), ("queued_by", PLAIN),
)

# Each ScheduleRecord field's column (``key`` and ``project_key`` beside them).
SCHEDULE_FIELDS = (
    ("seq", PLAIN), ("name", PLAIN), ("project", PLAIN), ("spider", PLAIN), ("kind", PLAIN),
    ("rule", PLAIN), ("tz", PLAIN), ("overlap", PLAIN), ("misfire", PLAIN),
    ("settings", PAIRS), ("arguments", PAIRS), ("priority", REAL), ("paused", FLAG),
    ("anchor", REAL), ("next_due", REAL), ("last_due", REAL), ("last_job", PLAIN),
    ("runs", PLAIN), ("skipped", PLAIN), ("error", PLAIN), ("created", REAL),
    ("policy", JSON), ("chain_on", LIST), ("jitter", REAL), ("pause_after", PLAIN),
    ("note", PLAIN), ("failed_in_row", PLAIN), ("buffered", PLAIN), ("caught_up", PLAIN),
)

# What update_schedule may set: a firing's fields, a pause's, and what
# editschedule.json changes; the counts (runs, skipped, buffered,
# caught_up) only grow, through its ``*_added``.
SCHEDULE_SETTABLE = ("paused", "next_due", "last_due", "last_job", "error", "note",
                     "kind", "rule", "tz", "anchor", "overlap", "misfire", "settings",
                     "arguments", "priority", "policy", "jitter", "pause_after",
                     "failed_in_row", "chain_on")
SCHEDULE_COUNTS = ("skipped", "buffered", "caught_up")

# How each backend stores each kind: (to_db, from_db). Pairs and JSON
# values are JSON text in both; SQLite has no booleans and no arrays (a
# flag is an integer, a list JSON text), PostgreSQL has both.
_COMMON_KINDS = {PLAIN: (_identity, _identity), PAIRS: (dump_pairs, load_pairs),
                 JSON: (dump_json, load_json)}
# A real number is a float to both, but what SQLite's RETURNING gives of
# an integral one is an int (the value before the column's affinity).
SQLITE_KINDS = {**_COMMON_KINDS, FLAG: (int, bool), LIST: (dump_list, load_list),
                REAL: (_identity, load_real)}
POSTGRES_KINDS = {**_COMMON_KINDS, FLAG: (bool, bool), LIST: (list, load_array),
                  REAL: (_identity, _identity)}

# IScheduleStore.claim_firing, the same statement on both backends (the
# placeholders psycopg's; SQLite's are made from them): the one guarded
# write that takes a schedule's firing.
CLAIM_FIRING = (
    "UPDATE schedules SET next_due = %(next)s, last_due = COALESCE(%(due)s, last_due)"
    " WHERE key = %(key)s AND seq = %(seq)s AND NOT paused AND next_due = %(seen)s"
    " AND (last_due IS NULL OR CAST(%(due)s AS DOUBLE PRECISION) IS NULL"
    " OR last_due < %(due)s)")

# What the run policies ask of a job (store.runpolicy), for a claim.
# ``policy`` for the limits it asks, which the claiming node must be able
# to enforce (IJobStore.claim_next's can_run).
POLICY_FIELDS = ("seq", "id", "project", "spider", "spider_file", "locks", "policy")


def claim_candidates(columns, among):
    """The statement of a claim's candidates: the pending jobs of the
    projects ``among`` says (a condition on ``project_key``), each the
    first in queue order of its (project, spider, locks), in queue order.
    Whether a job may run depends on its spider and locks (the run
    policies) and, for the claiming node, on the limits its policy asks
    (can_run), so asking the first of each (project, spider, locks,
    policy) is enough: a backlog held back by one lock or one spider's
    limit costs one candidate, not a record a job, and a job whose limits
    this node cannot enforce holds back no job of its spider without
    them. ``columns`` are those the policies read. A retry before its due
    time (``not_before`` after the parameter ``now``) is no candidate: it
    holds back nothing behind it."""
    selected = select_list(columns)
    return (f"SELECT {selected} FROM (SELECT {selected}, priority, row_number() OVER"
            " (PARTITION BY project_key, spider, locks, policy ORDER BY priority DESC, seq) AS place"
            f" FROM jobs WHERE state = 'pending' AND project_key {among}"
            " AND (not_before IS NULL OR not_before <= %(now)s)) AS queued"
            " WHERE place = 1 ORDER BY priority DESC, seq")


# IJobStore.tally, the same statement on both backends.
TALLY = "SELECT state, project, node, COUNT(*) FROM jobs GROUP BY state, project, node"


def columns_of(fields, kinds):
    """The Columns of ``fields`` (pairs of name and kind), converted as
    ``kinds`` (kind: (to_db, from_db)) says for each kind."""
    return tuple(Column(name, *kinds[kind]) for name, kind in fields)


def without(columns, *names):
    """``columns`` but those named."""
    return tuple(c for c in columns if c.name not in names)


def select_list(columns):
    return ", ".join(c.name for c in columns)


def record_of(kind, columns, row):
    """A ``kind`` record from ``row``, read as ``columns``."""
    return kind(**{c.name: c.from_db(value) for c, value in zip(columns, row)})
