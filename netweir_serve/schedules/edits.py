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
from ..store.chain_firings import CHAIN_KIND
from . import chains, times

# pause_after's largest value: more is a typo (and a streak that long is
# a schedule nobody watches).
MAX_PAUSE_AFTER = 1000
RULE_KEYS = ("cron", "every", "tz")
# A chain's: its upstream (checked, and named as stored, by the timetable)
# and the ends it fires on.
CHAIN_KEYS = ("after", "on")


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
EDITABLE = RULE_KEYS + CHAIN_KEYS + tuple(FIELD_PARSERS)
# The editable parameters taken as their text, as the request gives them
# (the others the web layer reads as addschedule.json reads them).
TEXT_PARAMETERS = RULE_KEYS + ("overlap", "misfire", "jitter", "pause_after")


def rule_changes(record, given, now, rule_of_record, jitter=None):
    """The columns ``cron``, ``every`` and ``tz`` in ``given`` set, the
    next due time computed afresh from ``now``: a new rule starts a new
    grid (its anchor ``now``, as if added now); the same rule in another
    zone, or no rule given, keeps the anchor, and the next due time is the
    first whose job has not started by ``now`` (with ``jitter``, the
    schedule's as edited, a due time passed whose job waits for its offset
    stays next: the firing's ``last_due`` guard keeps one fired from firing
    again). A RuleError names what is wrong."""
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
        jitter = record.jitter if jitter is None else jitter
        started = now - times.jitter_offset(record.name, jitter)
        changes["next_due"] = rule.next_after(started, anchor)
    return changes


def chain_changes(record, given):
    """The columns ``after`` and ``on`` in ``given`` set: a schedule made a
    chain (``after``, its upstream as given: the timetable checks it and
    names it as stored), or a chain's ends changed. A schedule made a chain
    has no due times; ``on`` alone is for a chain. A RuleError names what
    is wrong."""
    clock = [key for key in ("cron", "every") if given.get(key) is not None]
    timed = clock + (["misfire"] if given.get("misfire") is not None else [])
    if given.get("after") is not None and timed:
        raise times.RuleError(f"parameter {timed[0]!r}: a chain (after=) runs when its"
                              " upstream's jobs end, not at times: give one of them")
    changes = {}
    is_chain = record.kind == CHAIN_KIND and not clock
    if is_chain and given.get("misfire") is not None:
        # misfire says what to do with due times missed: a chain has none,
        # and it stays a chain (only cron or every make it run by times).
        raise times.RuleError(f"parameter 'misfire': schedule {record.name!r} is a chain"
                              " (after=): it has no due times to miss; give cron or every"
                              " with it to run it by the clock")
    if given.get("after") is not None:
        if not given["after"]:
            raise times.RuleError("parameter 'after' is empty")
        changes.update(kind=CHAIN_KIND, rule=given["after"], next_due=None)
        is_chain = True
    if given.get("on") is not None:
        if not is_chain:
            raise times.RuleError("parameter 'on' is for a chain: give it with after=")
        try:
            changes["chain_on"] = chains.parse_on(given["on"])
        except chains.ChainError as e:
            raise times.RuleError(str(e)) from None
    elif is_chain and record.kind != CHAIN_KIND:
        changes["chain_on"] = chains.DEFAULT_ON
    if not is_chain and record.kind == CHAIN_KIND:
        changes["chain_on"] = ()  # a chain given times: no longer one
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
    chained = chain_changes(record, given)
    if chained.get("kind") == CHAIN_KIND or (
            record.kind == CHAIN_KIND
            and not any(given.get(k) is not None for k in ("cron", "every"))):
        # A chain stays one, or becomes one: no due times to compute (a
        # tz given only says the zone its times are shown in).
        if given.get("tz") is not None:
            changes["tz"] = times.parse_zone(given["tz"])[0]
        changes.update(chained)
        return changes
    changes.update(chained)
    if record.kind in ("cron", "every") or any(given.get(k) is not None for k in RULE_KEYS):
        changes.update(rule_changes(record, given, now, rule_of_record,
                                    changes.get("jitter")))
    return changes
