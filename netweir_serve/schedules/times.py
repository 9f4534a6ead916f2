"""When a schedule is due: cron and interval rules, zones, missed runs, ids.

Pure time logic: no reactor, no clock and no I/O (but for reading the local
zone's name). Every time is epoch seconds, a float, passed in by the caller.

A schedule's rule is ``cron=EXPR`` or ``every=DURATION``, in a zone. Its due
times are:

* cron: the times cronsim finds for EXPR in the zone. cronsim follows
  Debian's cron, DST included. An expression whose minute and hour fields are
  fixed (neither starts with ``*``: ``30 2 * * *``, ``0 3-5 * * *``,
  ``@daily``) runs once on every local day it names: a local time skipped by
  a spring-forward is due once, right after the jump (02:30 becomes 03:00),
  and a local time repeated by a fall-back is due once, the first time it
  comes. Any other expression (``*/15 * * * *``, ``0 */2 * * *``,
  ``@hourly``) goes by the wall clock, minute by minute: ``@hourly`` is due
  23 times on a spring-forward day and 25 times on a fall-back day, as
  Debian's cron runs it.
* every: ``anchor + k * interval`` for k = 1, 2, ..., where the anchor is
  the time the schedule was added. That is elapsed time, blind to DST (use
  cron for a wall-clock time) and on one grid, never drifting with how long
  jobs take.

The timer asks :func:`due_now` what to fire whenever it wakes, and
:func:`catch_up` once at start-up; neither fires a due time twice, even when
the clock is stepped backwards.
"""

import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo

from ..names import fold
from ..reliability.policy import PolicyError, parse_duration

# fractions (with decimal and numbers) and cronsim are imported by the
# functions that use them, not here: the daemon imports this module at
# start (for its local zone), and a service with no schedule, or none of
# that kind, never needs them (0.5 MB of an idle daemon). A schedule read
# at start or added by a request imports them once, in well under a ms.

# Temporal's overlap policies, with ``queue`` (this service's first name
# for buffer_one) kept as its other name: both are stored as given and do
# the same (QUEUE_LIKE).
OVERLAP = ("skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow",
           "queue")
QUEUE_LIKE = ("queue", "buffer_one")
MISFIRE = ("once", "skip")
POLICIES = {"overlap": OVERLAP, "misfire": MISFIRE}

# A run the timer notices at most this many seconds after its due time is on
# time, not missed: a timer woken late by a busy reactor still runs it under
# misfire=skip. Start-up (catch_up) has no grace: what came due while the
# service was down is missed.
GRACE = 60.0

MIN_EVERY = 1
# A longer interval is a typo far more often than a wish; cron=@yearly (or a
# day-of-month and month) says the rarer ones.
MAX_EVERY = 366 * 86400
MAX_CRON_LENGTH = 200


class RuleError(ValueError):
    """A schedule parameter that cannot be used: the message is one sentence
    for the user, naming the parameter and its value."""


# -- every ------------------------------------------------------------------

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)([smhd]?)\Z")


def parse_every(text):
    """The whole number of seconds (an int) that ``text`` says.

    ``text`` is a number of seconds (``90``) or a number and a unit: ``s``,
    ``m``, ``h`` or ``d`` (``90s``, ``15m``, ``6h``, ``1d``). A decimal number
    is allowed when the result is whole seconds (``1.5h`` is 5400, ``1.5s``
    is refused). Between 1 second and 366 days.
    """
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise RuleError(
            f"every {text!r} is not a duration: give seconds (90) or a number"
            " with s, m, h or d (90s, 15m, 6h, 1d)"
        )
    from fractions import Fraction  # see the top

    number, unit = match.groups()
    seconds = Fraction(number) * _UNITS[unit]
    if seconds < MIN_EVERY:
        raise RuleError(f"every {text!r} is too short: the least is 1s")
    if seconds > MAX_EVERY:
        raise RuleError(
            f"every {text!r} is too long: the most is 366d (cron=@yearly runs"
            " once a year)"
        )
    if seconds.denominator != 1:
        raise RuleError(f"every {text!r} is not a whole number of seconds")
    return int(seconds)


def format_every(seconds):
    """``seconds`` in the largest unit that divides it: 5400 is ``90m``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# The longest jitter: a day spreads @daily schedules over the whole day.
MAX_JITTER = 86400


def parse_jitter(text):
    """The whole seconds (an int, 0 to a day) of a ``jitter`` duration,
    written as a policy's durations are (``90``, ``30s``, ``15m``, ``2h``,
    ``1d``)."""
    try:
        seconds = parse_duration("jitter", text, least=0)
    except PolicyError as e:
        raise RuleError(e.message) from None
    if seconds > MAX_JITTER:
        raise RuleError(f"jitter {text!r} is too long: the most is 1d")
    return seconds


def jitter_offset(name, jitter):
    """The fixed delay, whole seconds in [0, ``jitter``), after each due
    time at which schedule ``name`` starts its job: from a SHA-256 of its
    folded name, so the same on every node and across restarts (Python's
    hash() of a string is not: it is salted per process), as systemd's
    FixedRandomDelay=."""
    if not jitter or jitter < 1:
        return 0
    import hashlib

    digest = hashlib.sha256(fold(name).encode("utf-8")).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2.0 ** 64
    return min(int(fraction * jitter), int(math.ceil(jitter)) - 1)


# -- cron -------------------------------------------------------------------

# Debian's cron's shorthands (entry.c), as cronsim takes five fields only.
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = ("0-59", "0-23", "1-31", "1-12 or JAN-DEC", "0-7 or SUN-SAT")
_NAMES = {
    3: frozenset("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()),
    4: frozenset("SUN MON TUE WED THU FRI SAT".split()),
}
_DIGITS = re.compile(r"[0-9]+\Z")
_SEPARATORS = re.compile(r"[,/-]")
# Only for cronsim to read an expression; no time is computed from it.
_SOME_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)


def parse_cron(text):
    """``(shown, expression)`` for a cron expression: the text to show (the
    fields one space apart, or the lower-case macro) and the five fields
    cronsim evaluates.

    Five fields with numbers, ``*``, ranges, steps, lists, and month and day
    names, or one of ``@hourly``, ``@daily`` (``@midnight``), ``@weekly``,
    ``@monthly``, ``@yearly`` (``@annually``): Debian's cron's syntax.
    cronsim's own extensions (a seconds field, ``L``, ``W``, ``#``) are
    refused, so every expression has due times forever.
    """
    from cronsim import CronSim, CronSimError  # see the top

    if not isinstance(text, str) or not text.strip():
        raise RuleError("cron is empty: give five fields (minute hour"
                        " day-of-month month day-of-week) or @daily and the like")
    if len(text) > MAX_CRON_LENGTH:
        raise RuleError(f"cron is longer than {MAX_CRON_LENGTH} characters")
    stripped = text.strip()
    if stripped.startswith("@"):
        macro = stripped.lower()
        if macro == "@reboot":
            raise RuleError(
                "cron '@reboot' cannot be a schedule: a schedule runs at times,"
                " and @reboot names none; give @hourly, @daily, @weekly,"
                " @monthly, @yearly or five fields"
            )
        if macro not in _MACROS:
            raise RuleError(
                f"cron {text!r} is not a cron expression: the @ forms are"
                " @hourly, @daily, @weekly, @monthly and @yearly"
            )
        return macro, _MACROS[macro]
    fields = stripped.split()
    if len(fields) != 5:
        raise RuleError(
            f"cron {text!r} is not a cron expression: it has {len(fields)}"
            " fields, not 5 (minute hour day-of-month month day-of-week)"
        )
    for index, value in enumerate(fields):
        for token in _SEPARATORS.split(value):
            if not (
                token == "*"
                or _DIGITS.match(token)
                or token.upper() in _NAMES.get(index, ())
            ):
                raise RuleError(_bad_field(text, fields, index))
    expression = " ".join(fields)
    try:
        CronSim(expression, _SOME_TIME)
    except CronSimError as e:
        index = _field_named(str(e))
        if index is None:
            raise RuleError(f"cron {text!r} is not a cron expression: {e}") from None
        if index == 2 and _is_cron(" ".join(fields[:3] + ["*"] + fields[4:])):
            raise RuleError(
                f"cron {text!r} never runs: no month {fields[3]!r} has a day"
                f" {fields[2]!r}"
            ) from None
        raise RuleError(_bad_field(text, fields, index)) from None
    return expression, expression


def _bad_field(text, fields, index):
    return (
        f"cron {text!r} is not a cron expression: bad {_FIELDS[index]}"
        f" {fields[index]!r} (a {_FIELDS[index]} is {_RANGES[index]}; a field"
        " takes *, ranges 1-5, steps */15 and lists 1,3)"
    )


def _field_named(message):
    """The index of the field a CronSimError message ("Bad minute") names."""
    for index, name in enumerate(_FIELDS):
        if message == f"Bad {name}":
            return index
    return None


def _is_cron(expression):
    from cronsim import CronSim, CronSimError  # see the top

    try:
        CronSim(expression, _SOME_TIME)
    except CronSimError:
        return False
    return True


# -- zones ------------------------------------------------------------------

_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*\Z")
# Files in the zone database that are not zones to name: the machine's own
# (which the default already is), a build leftover, the placeholder, and the
# copies in other formats (right/ counts leap seconds, which epoch time does
# not).
_NOT_ZONES = frozenset(("localtime", "posixrules", "Factory"))


def _load_zone(name):
    """The tzinfo for an IANA zone name, or None."""
    if (
        not isinstance(name, str)
        or len(name) > 100
        or not _ZONE_NAME.match(name)
        or name in _NOT_ZONES
        or name.startswith(("posix/", "right/"))
    ):
        return None
    try:
        return ZoneInfo(name)
    except (LookupError, ValueError, OSError):
        # No zone database at all: UTC needs none.
        return timezone.utc if name == "UTC" else None


def _after_zoneinfo(path):
    """``Europe/Berlin`` from ``/usr/share/zoneinfo/Europe/Berlin``, else None."""
    marker = "zoneinfo/"
    at = path.rfind(marker)
    return path[at + len(marker):] if at >= 0 else None


def _linked_zone(root, path):
    """The zone a symlink such as /etc/localtime points at, or None."""
    try:
        target = os.readlink(os.path.join(root, path.lstrip("/")))
    except OSError:
        return None
    return _after_zoneinfo(target)


def _named_zone(root, path):
    """The zone named on the first line of a file such as /etc/timezone."""
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8") as f:
            return f.readline(200).strip()
    except (OSError, UnicodeDecodeError):
        return None


def local_zone_name(environ=None, root="/"):
    """The IANA name of the zone the service runs in.

    As the C library finds it: ``TZ`` when set (``Europe/Berlin``,
    ``:Europe/Berlin`` or a path into a zoneinfo directory; an empty or
    unknown one, such as a POSIX rule string, means UTC, as glibc takes it;
    ``:/etc/localtime`` means the system's zone), else the zone
    ``/etc/localtime`` links to, else the one ``/etc/timezone`` names
    (Debian's), else UTC. ``environ`` (default ``os.environ``) and ``root``
    (where ``/etc`` is) are for tests.
    """
    environ = os.environ if environ is None else environ
    tz = environ.get("TZ")
    if tz is not None and tz.lstrip(":") != "/etc/localtime":
        tz = tz.lstrip(":")
        if tz.startswith("/"):
            tz = _after_zoneinfo(tz) or _linked_zone(root, tz)
        return tz if _load_zone(tz) is not None else "UTC"
    for name in (
        _linked_zone(root, "/etc/localtime"),
        _named_zone(root, "/etc/timezone"),
    ):
        if _load_zone(name) is not None:
            return name
    return "UTC"


def parse_zone(name=None, environ=None, root="/"):
    """``(name, tzinfo)`` for an IANA zone name; None means the local zone
    (:func:`local_zone_name`), whose name the answer then gives."""
    if name is None:
        name = local_zone_name(environ, root)
        return name, _load_zone(name) or timezone.utc
    zone = _load_zone(name)
    if zone is None:
        raise RuleError(
            f"tz {name!r} is not a time zone: give an IANA name such as"
            " Europe/Berlin, America/New_York or UTC"
        )
    return name, zone


# -- policies ---------------------------------------------------------------


def parse_policy(kind, text):
    """``text`` if it is one of the ``kind`` policies ("overlap": OVERLAP,
    "misfire": MISFIRE), else a RuleError naming it."""
    choices = POLICIES[kind]
    if text in choices:
        return text
    listed = ", ".join(choices[:-1]) + " or " + choices[-1]
    raise RuleError(f"{kind} {text!r} is not a policy: give {listed}")


# -- rules ------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """When a schedule is due: build one with :func:`rule_of`.

    ``kind`` is "cron" or "every"; ``text`` the rule as shown (``30 2 * * *``,
    ``@daily``, ``15m``); ``zone_name`` and ``zone`` the zone cron times are
    read in and times are shown in; ``expression`` the five fields cronsim
    evaluates (cron), ``interval`` the seconds between runs (every).
    """

    kind: str
    text: str
    zone_name: str
    zone: tzinfo = field(repr=False)
    expression: str | None = None
    interval: int | None = None

    def next_after(self, t, anchor):
        """The first due time strictly after ``t``. ``anchor`` is when the
        schedule was added: an every rule's grid starts there (and is due
        first one interval after it); a cron rule ignores it."""
        if self.interval is not None:
            k = max(0, _steps(t, anchor, self.interval)) + 1
            return anchor + k * self.interval
        from cronsim import CronSim  # see the top

        found = CronSim(self.expression, datetime.fromtimestamp(t, self.zone))
        # cronsim walks a fixed-time expression in local wall-clock time, so
        # from inside an hour repeated by a fall-back its first answer can be
        # that hour's first pass, already past: skip such answers.
        for _ in range(10_000):
            try:
                due = next(found).timestamp()
            except StopIteration:
                break
            if due > t:
                return due
        # parse_cron refuses what could lead here (cronsim gives up after
        # 50 years without a match).
        raise RuntimeError(f"cron {self.text!r} has no due time after {t}")

    def first_due(self, added_at):
        """The first due time of a schedule added at ``added_at``: cron, its
        next due time; every, one interval later."""
        return self.next_after(added_at, added_at)

    def latest_at_or_before(self, t, anchor, since=None):
        """The latest due time at or before ``t`` (None if none: an every
        rule is first due one interval after its anchor), quickly however
        many came before: arithmetic for every,
        cronsim's reverse walk for cron. ``since``, a due time at or before
        ``t`` when known (the stored next due time), bounds the search."""
        if self.interval is not None:
            k = _steps(t, anchor, self.interval)
            return anchor + k * self.interval if k >= 1 else None
        from cronsim import CronSim  # see the top

        latest = since
        start = datetime.fromtimestamp(math.floor(t) + 1, self.zone)
        try:
            back = next(CronSim(self.expression, start, reverse=True)).timestamp()
        except StopIteration:
            back = None
        if back is not None and back <= t and (latest is None or back > latest):
            latest = back
        if latest is None:
            return None
        # Walking back in local wall-clock time can miss the first pass of an
        # hour repeated by a fall-back; forward is the rule, so step forward
        # to the last due time at or before t (usually a single step).
        while (after := self.next_after(latest, anchor)) <= t:
            latest = after
        return latest


def _steps(t, anchor, interval):
    """The largest k with ``anchor + k * interval <= t``: arithmetic, then
    checked in the very sums the callers make, so float rounding cannot put
    a due time on the wrong side of ``t``."""
    k = math.floor((t - anchor) / interval)
    while anchor + k * interval > t:
        k -= 1
    while anchor + (k + 1) * interval <= t:
        k += 1
    return k


def dues_between(rule, anchor, start, end, most):
    """The due times of ``rule`` in [``start``, ``end``), oldest first, but
    no more than ``most`` + 1 (one more than a caller takes says there are
    too many). An every rule's grid runs on before its anchor too: a
    backfill may ask for the days before the schedule was added."""
    dues = []
    if rule.interval is not None:
        k = _steps(start, anchor, rule.interval)
        if anchor + k * rule.interval < start:
            k += 1
        due = anchor + k * rule.interval
    else:
        due = rule.next_after(start - 0.001, anchor)
    while due < end and len(dues) <= most:
        dues.append(due)
        if rule.interval is not None:
            k += 1
            due = anchor + k * rule.interval
        else:
            due = rule.next_after(due, anchor)
    return dues


def upcoming(rule, anchor, first, count):
    """The next ``count`` due times of ``rule``, oldest first, from
    ``first`` (the schedule's stored next due time, the one its timer
    wakes for) on: what the console shows as the next runs."""
    dues = []
    due = first
    while due is not None and len(dues) < count:
        dues.append(due)
        due = rule.next_after(due, anchor)
    return dues


def rule_of(cron=None, every=None, tz=None, environ=None, root="/"):
    """The Rule for exactly one of ``cron`` and ``every`` in zone ``tz``
    (None: the local zone); a RuleError naming what is wrong."""
    if cron is None and every is None:
        raise RuleError("a schedule needs cron=EXPR or every=DURATION")
    if cron is not None and every is not None:
        raise RuleError("a schedule takes cron or every, not both")
    if cron is not None:
        shown, expression = parse_cron(cron)
        zone_name, zone = parse_zone(tz, environ, root)
        return Rule("cron", shown, zone_name, zone, expression=expression)
    interval = parse_every(every)
    zone_name, zone = parse_zone(tz, environ, root)
    return Rule("every", format_every(interval), zone_name, zone, interval=interval)


# -- what to fire -----------------------------------------------------------


def due_now(rule, anchor, next_due, last_due, now, misfire, grace=GRACE):
    """What a schedule fires at ``now``: ``(due, next_due)``.

    ``due`` is the due time whose job to queue now (its id is
    :func:`job_id_for`), or None; ``next_due`` the due time to store and wake
    at next. ``anchor`` is when the schedule was added, ``next_due`` the
    stored next due time (None: not computed yet), ``last_due`` the last due
    time fired (None: never), ``misfire`` one of MISFIRE.

    * Nothing is due before ``next_due``.
    * Of all due times from ``next_due`` to ``now``, only the latest can
      fire: several come to one job. It fires when it is at most ``grace``
      seconds old (on time), or else (missed) under misfire=once;
      misfire=skip fires none.
    * ``next_due`` is then the first due time after ``now``.
    * Nothing at or before ``last_due`` ever fires, so a clock stepped
      backwards fires nothing twice: the schedule waits until the clock
      passes the last due time fired again.
    """
    if misfire not in MISFIRE:
        raise ValueError(f"misfire must be one of {MISFIRE}, not {misfire!r}")
    if next_due is None:
        next_due = rule.first_due(anchor)
    if last_due is not None and next_due <= last_due:
        next_due = rule.next_after(last_due, anchor)
    if next_due > now:
        return None, next_due
    latest = rule.latest_at_or_before(now, anchor, since=next_due)
    upcoming = rule.next_after(now, anchor)
    if latest is None:
        # A stored next due time off this rule's grid: nothing is due.
        return None, upcoming
    if now - latest <= grace or misfire == "once":
        return latest, upcoming
    return None, upcoming


def catch_up(rule, anchor, next_due, last_due, now, misfire):
    """:func:`due_now` at start-up: the due times that passed while the
    service was down are missed, however recent, so misfire=once fires the
    latest of them (one job for all) and misfire=skip none."""
    return due_now(rule, anchor, next_due, last_due, now, misfire, grace=0.0)


# -- showing ----------------------------------------------------------------


def job_id_for(name, due):
    """The id of the job schedule ``name`` queues for ``due``:
    ``NAME-YYYYMMDDTHHMMSSZ``, the due time in UTC to the second."""
    stamp = datetime.fromtimestamp(math.floor(due), timezone.utc)
    return f"{name}-{stamp:%Y%m%dT%H%M%SZ}"


def parse_instant(param, text, zone):
    """Epoch seconds of the ISO 8601 time ``text`` given as parameter
    ``param`` (``2026-12-01T03:00:00+01:00``, ``...Z``, or without an
    offset: a local time in ``zone``, the earlier of a repeated one); a
    RuleError naming the parameter."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError(f"parameter {param!r} is missing: give an ISO 8601 time")
    written = text.strip()
    if written[-1:] in "zZ":
        written = written[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(written)
    except ValueError:
        raise RuleError(f"parameter {param!r}: {text!r} is not an ISO 8601 time"
                        " (2026-12-01T03:00:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def iso_time(t, zone):
    """``t`` in ISO 8601 with ``zone``'s offset, to the second
    (``2026-12-02T03:00:00+01:00``); None stays None."""
    if t is None:
        return None
    return datetime.fromtimestamp(math.floor(t), zone).isoformat()
