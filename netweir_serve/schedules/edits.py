"""What editschedule.json changes in a schedule: its parameters as given,
checked and turned into the columns they set (IScheduleStore.update_schedule).

One parser per parameter (``FIELD_PARSERS``), so a new editable parameter
is one entry; ``cron``, ``every`` and ``tz`` make the rule together
(``rule_changes``). Every parameter not given stays as it is. Settings and
spider arguments are lists: any ``setting`` given replaces the schedule's
settings, any spider argument its arguments (the ones not given again are
dropped). Policy keys are merged: each key given replaces that key, the
others stay.
"""

import math

from ..reliability.policy import JobPolicy
from . import times

# pause_after's largest value: more is a typo (and a streak that long is
# a schedule nobody watches).
MAX_PAUSE_AFTER = 1000
RULE_KEYS = ("cron", "every", "tz")


def parse_pause_after(text):
    """``pause_after``: a whole number of runs, 1 to 1000, or 0 for never
    (None); a RuleError naming it."""
    if text is None:
        return None
    try:
        count = int(text)
    except (TypeError, ValueError):
        raise times.RuleError(f"pause_after {text!r} is not a whole number of runs") from None
    if not 0 <= count <= MAX_PAUSE_AFTER:
        raise times.RuleError(f"pause_after {text!r} must be 0 (never) to {MAX_PAUSE_AFTER}")
    return count or None


def _policy(record, given):
    # Each key given replaces that key; the others stay.
    return {"policy": given.over(JobPolicy.from_json(record.policy)).to_json()}


# {parameter: parse(record, value) -> {column: value}}; a RuleError names
# the parameter. The web layer gives settings and arguments as pairs,
# priority as a float and policy as a JobPolicy, already checked.
FIELD_PARSERS = {
    "overlap": lambda record, text: {"overlap": times.parse_policy("overlap", text)},
    "misfire": lambda record, text: {"misfire": times.parse_policy("misfire", text)},
    "jitter": lambda record, text: {"jitter": float(times.parse_jitter(text))},
    "pause_after": lambda record, text: {"pause_after": parse_pause_after(text)},
    "settings": lambda record, pairs: {"settings": tuple(pairs)},
    "arguments": lambda record, pairs: {"arguments": tuple(pairs)},
    "priority": lambda record, value: {"priority": float(value)},
    "policy": _policy,
}
EDITABLE = RULE_KEYS + tuple(FIELD_PARSERS)
# The editable parameters taken as their text, as the request gives them
# (the others the web layer reads as addschedule.json reads them).
TEXT_PARAMETERS = RULE_KEYS + ("overlap", "misfire", "jitter", "pause_after")


def rule_changes(record, given, now, rule_of_record):
    """The columns ``cron``, ``every`` and ``tz`` in ``given`` set, the
    next due time computed afresh from ``now``: a new rule starts a new
    grid (its anchor ``now``, as if added now); the same rule in another
    zone, or no rule given, keeps the anchor. A RuleError names what is
    wrong."""
    if given.get("cron") is not None or given.get("every") is not None:
        rule = times.rule_of(cron=given.get("cron"), every=given.get("every"),
                             tz=given.get("tz") or record.tz)
    elif given.get("tz") is not None:
        if record.kind not in ("cron", "every"):
            raise times.RuleError(f"tz {given['tz']!r}: schedule {record.name!r} runs by no"
                                  " clock (it has no cron or every)")
        rule = times.rule_of(**{record.kind: record.rule}, tz=given["tz"])
    else:
        rule = rule_of_record(record)
    changes = {"kind": rule.kind, "rule": rule.text, "tz": rule.zone_name}
    anchor = record.anchor
    if (rule.kind, rule.text) != (record.kind, record.rule):
        anchor = changes["anchor"] = float(math.floor(now))
        changes["next_due"] = rule.first_due(anchor)
    else:
        changes["next_due"] = rule.next_after(now, anchor)
    return changes


def edit_changes(record, given, now, rule_of_record):
    """{column: value} that the parameters ``given`` ({name: value}, only
    those given) set on ``record``, the next due time among them. A
    RuleError names the first bad one; a KeyError an unknown one (a bug)."""
    unknown = set(given) - set(EDITABLE)
    if unknown:
        raise KeyError(f"not editable: {', '.join(sorted(unknown))}")
    changes = {}
    for key, value in given.items():
        if key in FIELD_PARSERS:
            changes.update(FIELD_PARSERS[key](record, value))
    if record.kind in ("cron", "every") or any(given.get(k) is not None for k in RULE_KEYS):
        changes.update(rule_changes(record, given, now, rule_of_record))
    return changes
