"""A schedule's rule in words, for people: "every day at 03:00
Europe/Berlin", "every 15 min", "after books when healthy".

Written here rather than taken from cron-descriptor (PyPI): the rules
reaching this module are only the ones times.parse_cron accepts (five
fields of Debian's cron, the @ macros already expanded), which a hundred
lines cover; cron-descriptor reads Quartz's and others' syntaxes too, says
"At 03:00 AM", joins a day of the month and a day of the week with "and"
where Debian's cron runs on either, and knows nothing of zones, intervals
or chains, so it would have been a dependency of the daemon for half of
the job. Pure text: no clock, no I/O.
"""

from .times import _MACROS

# Monday first, as people read a week (cron counts from Sunday, 0 or 7).
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_DAY_NAMES = {name[:3].upper(): (n + 1) % 7 for n, name in enumerate(_WEEKDAYS)}
_MONTH_NAMES = {name[:3].upper(): n + 1 for n, name in enumerate(_MONTHS)}
# (lowest, highest, names) of each of the five fields.
_FIELDS = ((0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTH_NAMES), (0, 7, _DAY_NAMES))
# More fixed times than this are told as minutes past hours.
_MOST_TIMES = 6


def in_words(kind, rule, tz, on=()):
    """The rule of a schedule of ``kind`` "cron", "every" or "after" (a
    chain, fired on the ends ``on``), as listschedules.json shows it
    (``rule``: "0 3 * * *", "@daily", "15m", "schedule:nightly"), in
    words; a cron rule's with its zone ``tz``."""
    if kind == "every":
        return "every " + _interval(rule)
    if kind == "after":
        upstream = rule.replace("schedule:", "schedule ", 1)
        return f"after {upstream} when {_joined(list(on) or ['healthy'], 'or')}"
    return f"{cron_in_words(rule)} {tz}"


def _interval(text):
    """"15m" as "15 min", "1h" as "hour", "2d" as "2 days"."""
    number, unit = int(text[:-1]), text[-1]
    names = {"s": ("second", "s"), "m": ("minute", "min"), "h": ("hour", "h"),
             "d": ("day", "days")}[unit]
    return names[0] if number == 1 else f"{number} {names[1]}"


def cron_in_words(text):
    """A cron expression (five fields, or a macro) in words, without its zone."""
    fields = _MACROS.get(text.strip().lower(), text).split()
    minutes, hours, days, months, weekdays = (
        _values(field, *_FIELDS[n]) for n, field in enumerate(fields))
    # Monday 0 to Sunday 6.
    weekdays = sorted({(day + 6) % 7 for day in weekdays})
    when = _days(fields, days, months, weekdays)
    if len(minutes) * len(hours) <= _MOST_TIMES and not (len(hours) > 3 and _step(hours, 24)):
        times = [f"{h:02d}:{m:02d}" for h in hours for m in minutes]
        return f"{when} at {_joined(times, 'and')}"
    return _repeating(minutes, hours) + ("" if when == "every day" else f" {when}")


def _values(field, lowest, highest, names):
    """The sorted numbers a cron field stands for."""
    found = set()
    for part in field.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            start, end = lowest, highest
        else:
            first, _, last = span.partition("-")
            start = _number(first, names)
            end = _number(last, names) if last else (highest if step else start)
        found.update(range(start, end + 1, int(step) if step else 1))
    return sorted(found)


def _number(text, names):
    return names[text.upper()] if text.upper() in names else int(text)


def _repeating(minutes, hours):
    """Times many in a day: "every 15 min", "every hour at :05", "every 2
    hours at :00", "every 15 min from 09:00 to 17:45"."""
    step = _step(minutes, 60)
    if len(hours) == 24:
        if len(minutes) == 60:
            return "every minute"
        if step:
            start = f" from :{minutes[0]:02d}" if minutes[0] else ""
            return f"every {step} min{start}"
        return "every hour at " + _joined([f":{m:02d}" for m in minutes], "and")
    hour_step = _step(hours, 24)
    if hour_step and len(minutes) == 1:
        start = f" from {hours[0]:02d}:{minutes[0]:02d}" if hours[0] else ""
        return f"every {hour_step} hours at :{minutes[0]:02d}{start}"
    if hours == list(range(hours[0], hours[-1] + 1)):
        first, last = f"{hours[0]:02d}:{minutes[0]:02d}", f"{hours[-1]:02d}:{minutes[-1]:02d}"
        if len(minutes) == 60:
            return f"every minute from {first} to {last}"
        if _progression(minutes) and (len(hours) == 1 or step):
            return f"every {_progression(minutes)} min from {first} to {last}"
        if len(minutes) == 1:
            return f"every hour at :{minutes[0]:02d} from {first} to {last}"
    hour_words = ("hour " if len(hours) == 1 else "hours ") + _runs(hours)
    if len(minutes) > 3 and _progression(minutes):
        return f"every {_progression(minutes)} min in {hour_words}"
    return f"at minute {_runs(minutes)} past {hour_words}"


def _step(values, size):
    """The step of ``values`` when they are every step-th value of a
    ``size`` long cycle (0, 15, 30, 45 of 60: 15); else None."""
    if len(values) < 2:
        return None
    step = values[1] - values[0]
    if size % step or values != list(range(values[0], size, step)) or values[0] >= step:
        return None
    return step


def _progression(values):
    """The step of ``values`` when there are three or more, equally apart."""
    steps = {b - a for a, b in zip(values, values[1:])}
    return steps.pop() if len(values) > 2 and len(steps) == 1 else None


def _ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _days(fields, days, months, weekdays):
    """The days part: "every day", "on Monday to Friday", "on day 1 of the
    month in January", "on 1 January", "on day 1 of the month or on Monday"."""
    any_day = len(days) == 31
    any_weekday = len(weekdays) == 7
    month = "" if len(months) == 12 else " in " + _named_runs(months, _MONTHS, 1)
    if len(days) == 1 and len(months) == 1 and any_weekday:
        return f"on {days[0]} {_MONTHS[months[0] - 1]}"
    day_part = ("on day " if len(days) == 1 else "on days ") + _runs(days) + " of the month"
    if len(days) > 3 and (_progression(days) or 1) > 1:
        day_part = (f"on every {_ordinal(_progression(days))} day of the month"
                    f" from day {days[0]}")
    weekday_part = "on " + _named_runs(weekdays, _WEEKDAYS, 0)
    if any_day and any_weekday:
        return "every day" + month
    if any_weekday:
        return day_part + month
    if any_day:
        return weekday_part + month
    # Debian's cron runs on either day when both fields are restricted and
    # neither starts with "*" (*/2 counts as unrestricted there), on both else.
    if fields[2].startswith("*") or fields[4].startswith("*"):
        return f"{day_part} if a {_named_runs(weekdays, _WEEKDAYS, 0, 'or')}{month}"
    return f"{day_part} or {weekday_part}{month}"


def _spans(values):
    """[(first, last)] of the runs of consecutive numbers in ``values``."""
    spans = []
    for value in values:
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return spans


def _runs(values):
    """1, 2, 3, 15 as "1-3 and 15"."""
    return _joined([str(a) if a == b else f"{a}-{b}" for a, b in _spans(values)], "and")


def _named_runs(values, names, first, last_word="and"):
    """Weekdays or months by name, three or more in a row as "X to Y"."""
    parts = []
    for a, b in _spans(values):
        if b - a >= 2:
            parts.append(f"{names[a - first]} to {names[b - first]}")
        else:
            parts.extend(names[n - first] for n in range(a, b + 1))
    return _joined(parts, last_word)


def _joined(parts, word):
    """["a", "b", "c"] as "a, b and c"."""
    parts = list(parts)
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} {word} {parts[-1]}"
