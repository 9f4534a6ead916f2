"""A job's policy: what it may take and what happens when it goes wrong.

Pure values, no reactor and no I/O. A policy is given in three places,
each a set of ``KEY=VALUE`` texts checked here: ``--policy`` rules for a
project or one of its spiders (rules.py), a recurring schedule's
parameters, and one job's ``_KEY`` parameters of schedule.json. The more
particular wins key by key: a job's or a schedule's value over the
spider's rule, the spider's rule over the project's (``JobPolicy.over``).
"""

import math
import re
from dataclasses import dataclass, fields, replace

# Durations as a schedule's ``every`` takes them.
_DURATION = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)([smhd]?)\Z")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Sizes in powers of 1024: 512M is 512 MiB.
_SIZE = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)([KMGT]?)(?:i?B)?\Z", re.I)
_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

MAX_DURATION = 366 * 86400
MAX_RETRIES = 10
# Below this a crawl's interpreter and Netweir hardly start.
MIN_MEMORY = 64 << 20
# A crawl rewrites its stats file every STATS_GRAIN seconds, so progress
# is seen at that grain (jobs/deadlines.py): a stall under two grains would
# cancel a crawl that is progressing between two rewrites.
STATS_GRAIN = 5
MIN_STALL = 2 * STATS_GRAIN
# Backoff: the first wait unless given, doubled per attempt up to the most.
DEFAULT_BACKOFF = 60
MAX_BACKOFF = 3600

# Run health's checks (health.checks): how many earlier runs a drop or
# slower check compares with, by default and at most; at least 3 must be
# there before such a check applies, so fewer would never judge.
DEFAULT_HISTORY = 5
MIN_HISTORY, MAX_HISTORY = 3, 100
# A count a min_items or min_pages takes (more than any crawl writes).
MAX_COUNT = 10 ** 15

# What a retry may follow: outcomes and reasons. A user's cancel never.
RETRYABLE = ("failed", "lost", "timeout", "stalled", "memory")
DEFAULT_RETRY_ON = RETRYABLE


# A whole number as a key takes it: ASCII digits alone. str.isdigit
# also takes "²" and other digits int() refuses.
_WHOLE = re.compile(r"[0-9]{1,16}")


def whole_number(text):
    """The int ``text`` (surrounding spaces aside) writes in 1 to 16 ASCII
    digits, or None for anything else (a sign, a point, "²", "٣")."""
    if not isinstance(text, str) or _WHOLE.fullmatch(text.strip()) is None:
        return None
    return int(text)


class PolicyError(ValueError):
    """A policy value that cannot be used; the message names the key and
    the value, one sentence for the user."""

    @property
    def message(self):
        return self.args[0]


def parse_duration(key, text, least=1, why=""):
    """Whole seconds, ``least`` (1 s) to 366 d, from ``90``, ``90s``,
    ``15m``, ``6h``, ``1d``; ``why`` explains a ``least`` above 1 s."""
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise PolicyError(f"{key} {text!r} is not a duration: give seconds (90) or a number"
                          " with s, m, h or d (90s, 15m, 6h, 1d)")
    number, unit = match.groups()
    seconds = float(number) * _SECONDS[unit]
    if seconds < least:
        raise PolicyError(f"{key} {text!r} is too short: the least is {least}s{why}")
    if seconds > MAX_DURATION:
        raise PolicyError(f"{key} {text!r} is too long: the most is 366d")
    if seconds != int(seconds):
        raise PolicyError(f"{key} {text!r} is not a whole number of seconds")
    return int(seconds)


def parse_stall(key, text):
    """A stall's whole seconds: at least MIN_STALL."""
    return parse_duration(key, text, least=MIN_STALL,
                          why=f" (progress is seen every {STATS_GRAIN} s)")


def parse_size(key, text, least=MIN_MEMORY):
    """Bytes from ``512M``, ``2G``, ``1.5G`` (powers of 1024), at least ``least``."""
    match = _SIZE.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise PolicyError(f"{key} {text!r} is not a size: give a number with K, M, G or T"
                          " (512M, 2G; powers of 1024)")
    number, unit = match.groups()
    size = int(float(number) * _BYTES[unit.upper()])
    if size < least:
        raise PolicyError(f"{key} {text!r} is too small: the least is {least >> 20}M")
    return size


def parse_cpu(key, text):
    """Cores, fractional: ``0.5``, ``2``."""
    try:
        cores = float(text)
    except (TypeError, ValueError):
        cores = math.nan
    if not math.isfinite(cores) or cores <= 0:
        raise PolicyError(f"{key} {text!r} is not a number of cores: give one above 0,"
                          " such as 0.5 or 2")
    if cores < 0.01:
        raise PolicyError(f"{key} {text!r} is too little: the least is 0.01 of a core")
    return cores


def parse_retries(key, text):
    retries = whole_number(text)
    if retries is None:
        raise PolicyError(f"{key} {text!r} is not a whole number of retries (0 to"
                          f" {MAX_RETRIES})")
    if retries > MAX_RETRIES:
        raise PolicyError(f"{key} {text!r} is too many: the most is {MAX_RETRIES}")
    return retries


def parse_retry_on(key, text):
    names = [name.strip() for name in text.split(",")] if isinstance(text, str) else []
    if not names or not all(names):
        raise PolicyError(f"{key} {text!r} names nothing: give outcomes or reasons from"
                          f" {', '.join(RETRYABLE)}, separated by commas")
    wrong = [name for name in names if name not in RETRYABLE]
    if wrong:
        raise PolicyError(f"{key} {text!r}: {wrong[0]!r} is not an outcome or reason a retry"
                          f" may follow; give some of {', '.join(RETRYABLE)}")
    return tuple(dict.fromkeys(names))


def parse_count(key, text):
    """A whole number, 0 or more: a run's least items or pages."""
    count = whole_number(text)
    if count is None or count > MAX_COUNT:
        raise PolicyError(f"{key} {text!r} is not a whole number of 0 or more")
    return count


def _number(text):
    try:
        number = float(text)
    except (TypeError, ValueError):
        return math.nan
    return number


def parse_percent(key, text):
    """A percentage, 0 to 100 (fractions taken: 12.5)."""
    percent = _number(text)
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        raise PolicyError(f"{key} {text!r} is not a percentage: give a number from 0 to 100")
    return int(percent) if percent == int(percent) else percent


def parse_factor(key, text):
    """A factor above 1 (1.5: half as long again)."""
    factor = _number(text)
    if not math.isfinite(factor) or factor <= 1 or factor > 1000:
        raise PolicyError(f"{key} {text!r} is not a factor: give a number above 1 (up to"
                          " 1000), such as 1.5 or 3")
    return int(factor) if factor == int(factor) else factor


def parse_history(key, text):
    """How many earlier runs the drop and slower checks compare with."""
    runs = whole_number(text)
    if runs is None or not MIN_HISTORY <= runs <= MAX_HISTORY:
        raise PolicyError(f"{key} {text!r} is not a number of runs from {MIN_HISTORY} to"
                          f" {MAX_HISTORY} (a drop or slower check needs {MIN_HISTORY})")
    return runs


# Each key, how its text is read, and how it is shown back.
_PARSERS = {
    "timeout": parse_duration, "stall": parse_stall, "expire": parse_duration,
    "retries": parse_retries, "retry_on": parse_retry_on, "backoff": parse_duration,
    "memory": parse_size, "cpu": parse_cpu,
    "min_items": parse_count, "min_pages": parse_count, "items_drop": parse_percent,
    "pages_drop": parse_percent, "max_errors": parse_percent, "slower": parse_factor,
    "history": parse_history,
}
# The keys that judge a run once it has finished (health.checks), not how it runs.
HEALTH_KEYS = ("min_items", "min_pages", "items_drop", "pages_drop", "max_errors", "slower",
               "history")
KEYS = tuple(_PARSERS)


def format_duration(seconds):
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_size(size):
    for unit, bytes_ in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % bytes_ == 0:
            return f"{size // bytes_}{unit}"
    return str(size)


@dataclass(frozen=True)
class JobPolicy:
    """The policy of a job; None where a key is not given (no limit, no
    retry). Build one from texts with ``parse``."""

    timeout: int = None       # seconds running, then cancelled (reason timeout)
    stall: int = None         # seconds without progress, then cancelled (stalled)
    expire: int = None        # seconds pending, then dropped (expired)
    retries: int = None       # retries after a retryable end (at most MAX_RETRIES)
    retry_on: tuple = None    # the outcomes and reasons that retry
    backoff: int = None       # the first wait before a retry, doubling
    memory: int = None        # bytes the crawl's control group may use
    cpu: float = None         # cores the crawl's control group may use
    # Run health (health.checks): a finished run is degraded below these.
    min_items: int = None     # fewer items than this
    min_pages: int = None     # fewer pages than this
    items_drop: float = None  # items fell more than this % below the history's median
    pages_drop: float = None  # pages fell more than this % below the history's median
    max_errors: float = None  # errors over pages, in %, above this
    slower: float = None      # runtime above this factor of the history's median
    history: int = None       # how many earlier healthy runs (DEFAULT_HISTORY)

    @classmethod
    def parse(cls, texts, prefix=""):
        """The policy ``texts`` ({key: text}, keys with ``prefix``) give;
        a PolicyError naming the first bad key or value."""
        values = {}
        for given, text in texts.items():
            key = given[len(prefix):] if given.startswith(prefix) else None
            if key not in _PARSERS:
                raise PolicyError(f"{given!r} is not a policy key: give {_listed(prefix)}")
            values[key] = _PARSERS[key](given, text)
        return cls(**values)

    def over(self, under):
        """This policy with ``under``'s values where this one has none."""
        return replace(under, **{k: v for k, v in self.as_dict().items()})

    def as_dict(self):
        """The keys given, as values ({} for no policy)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def shown(self):
        """The keys given, as texts the parameters take back."""
        shown = {}
        for key, value in self.as_dict().items():
            if key in ("timeout", "stall", "expire", "backoff"):
                shown[key] = format_duration(value)
            elif key == "memory":
                shown[key] = format_size(value)
            elif key == "retry_on":
                shown[key] = ",".join(value)
            elif key in ("cpu", "items_drop", "pages_drop", "max_errors", "slower"):
                shown[key] = f"{value:g}"
            else:
                shown[key] = value
        return shown

    def to_json(self):
        """For a table's column: JSON-ready, None for no policy."""
        values = self.as_dict()
        if "retry_on" in values:
            values["retry_on"] = list(values["retry_on"])
        return values or None

    @classmethod
    def from_json(cls, values):
        values = dict(values or {})
        if "retry_on" in values:
            values["retry_on"] = tuple(values["retry_on"])
        return cls(**values)

    @property
    def history_size(self):
        """How many earlier runs the drop and slower checks compare with."""
        return self.history if self.history is not None else DEFAULT_HISTORY

    @property
    def compares(self):
        """Whether a check of this policy compares with earlier runs (a
        drop or slower check): only then is the history read."""
        return any(v is not None for v in (self.items_drop, self.pages_drop, self.slower))

    def backoff_wait(self, attempt, jitter):
        """Seconds to wait before attempt ``attempt`` + 1 (``attempt`` ended):
        the first wait doubled per attempt up to an hour, plus ``jitter``
        (0 to 1) times 10 %."""
        first = self.backoff if self.backoff is not None else DEFAULT_BACKOFF
        wait = min(first * 2 ** max(0, attempt - 1), max(first, MAX_BACKOFF))
        return wait * (1 + 0.1 * jitter)

    def retries_after(self, outcome, reason):
        """Whether a job of this policy that ended so is retried (attempts
        left aside): never after a cancel asked by a user."""
        if not self.retries:
            return False
        retry_on = self.retry_on if self.retry_on is not None else DEFAULT_RETRY_ON
        return outcome in retry_on or reason in retry_on


def _listed(prefix):
    return ", ".join(prefix + key for key in KEYS)
