"""A finished run judged against its checks and the runs before it.

Pure: no reactor, no store. The store calls ``judge`` in the transaction
that records a run's end (store.job_table), with the run's counts, its
policy (reliability.policy.JobPolicy) and, when a drop or slower check
is set, its history: the last ``history`` runs of the same schedule (or
of the same project and spider, for a job no schedule queued) that
finished healthy, newest first.

The checks (each given like the other policy keys):

- ``min_items=N``, ``min_pages=N``: degraded below N (a run whose stats
  have no count has 0 of it);
- ``items_drop=P``, ``pages_drop=P``: degraded when the count fell by
  more than P percent below the history's median, that is below
  (100 - P) % of it;
- ``max_errors=P``: degraded when errors (failed requests and callback
  errors) over pages, in percent, is above P;
- ``slower=F``: degraded when the runtime is above F times the history's
  median runtime.

A drop or slower check applies only once at least MIN_HISTORY earlier
runs have the number it compares; a run no check applies to is healthy,
so first runs build the history.
"""

from dataclasses import dataclass

from ..reliability.policy import MIN_HISTORY

HEALTHY, DEGRADED = "healthy", "degraded"
# What a run that finished is; --notify-on takes them beside the outcomes.
HEALTHS = (HEALTHY, DEGRADED)


@dataclass(frozen=True)
class RunCounts:
    """What a run is judged by: its counts (None where its stats had none)
    and its runtime in seconds (None when it never started)."""

    items: int = None
    pages: int = None
    errors: int = None
    runtime: float = None


# How many decimals a reason shows: of a count or a median of counts (a
# median of two is a half), of a share in percent, and of a runtime in
# seconds.
COUNT_DECIMALS = 1
# A policy's own numbers (items_drop=12.5, slower=1.25) as given, within
# reason.
POLICY_DECIMALS = 4
# runs.json's median runtime, and a reason's runtime under RUNTIME_SMALL
# seconds; a longer one shows a tenth.
RUNTIME_DECIMALS = 3
RUNTIME_SMALL = 10


def _shown(number, decimals=COUNT_DECIMALS):
    """A number as a reason shows it: in plain fixed point (never 2e+06),
    rounded to at most ``decimals`` decimals, trailing zeros and a bare
    point dropped: 4000, 2.5, 123456.5, 12.3."""
    if isinstance(number, int):
        return str(number)
    text = f"{number:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _seconds(runtime):
    """A runtime as a reason shows it, in seconds: to the thousandth under
    RUNTIME_SMALL seconds (0.125), to the tenth above (3600.5)."""
    small = abs(runtime) < RUNTIME_SMALL
    return _shown(float(runtime), RUNTIME_DECIMALS if small else COUNT_DECIMALS) + "s"


def _json_number(number, decimals=None):
    """``number`` (rounded to ``decimals`` when given) as JSON shows it the
    same way whatever gave it: an int when whole (the median of an even
    count of runs is a mean, a float), else a float."""
    if number is None:
        return None
    if decimals is not None:
        number = round(number, decimals)
    return int(number) if float(number).is_integer() else float(number)


def median_of(history, name):
    """(the median of the runs' ``name``, how many runs had one), or
    (None, count) when fewer than MIN_HISTORY had it."""
    values = [getattr(run, name) for run in history if getattr(run, name) is not None]
    if len(values) < MIN_HISTORY:
        return None, len(values)
    return _median(values), len(values)


def _median(values):
    # statistics.median would import fractions (and decimal, numbers) into
    # the idle daemon, for one sort and a mean (tests.test_idle_imports).
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def medians_of(history):
    """{items, pages, runtime: their medians over ``history``}, None for
    each fewer than MIN_HISTORY runs have: what runs.json shows. Each an
    int when whole, else a float (a count's median may be a half; a
    runtime's is to the thousandth of a second)."""
    return {"items": _json_number(median_of(history, "items")[0]),
            "pages": _json_number(median_of(history, "pages")[0]),
            "runtime": _json_number(median_of(history, "runtime")[0], RUNTIME_DECIMALS)}


def _minimum(run, name, least):
    count = getattr(run, name) or 0
    if least is not None and count < least:
        return f"{name} {count} < min_{name} {least}"
    return None


def _drop(run, history, name, percent):
    if percent is None:
        return None
    median, runs = median_of(history, name)
    if median is None:
        return None
    count = getattr(run, name) or 0
    share = 100 - percent
    if count * 100 < median * share:
        return (f"{name} {count} < {_shown(share, POLICY_DECIMALS)}% of median"
                f" {_shown(median)} over {runs} runs")
    return None


def _errors(run, most):
    if most is None or run.errors is None:
        return None
    pages = run.pages or 0
    if pages == 0:
        # Errors with no page fetched at all: every request failed.
        if not run.errors:
            return None
        return f"errors {run.errors} with no pages > max_errors {_shown(most, POLICY_DECIMALS)}%"
    share = run.errors * 100 / pages
    if share > most:
        return (f"errors {run.errors} = {_shown(share)}% of pages {pages}"
                f" > max_errors {_shown(most, POLICY_DECIMALS)}%")
    return None


def _slower(run, history, factor):
    if factor is None or run.runtime is None:
        return None
    median, runs = median_of(history, "runtime")
    if median is None:
        return None
    if run.runtime > factor * median:
        return (f"runtime {_seconds(run.runtime)} > {_shown(factor, POLICY_DECIMALS)}x median"
                f" {_seconds(median)} over {runs} runs")
    return None


def judge(run, policy, history=()):
    """(health, reasons) of a run that finished: ``run`` its RunCounts,
    ``policy`` its JobPolicy, ``history`` the RunCounts of the earlier
    healthy runs it is compared with. (HEALTHY, ()) when every check that
    applies holds, or none applies; (DEGRADED, the reasons in the order
    of the checks) else."""
    reasons = [reason for reason in (
        _minimum(run, "items", policy.min_items),
        _minimum(run, "pages", policy.min_pages),
        _drop(run, history, "items", policy.items_drop),
        _drop(run, history, "pages", policy.pages_drop),
        _errors(run, policy.max_errors),
        _slower(run, history, policy.slower),
    ) if reason is not None]
    return (DEGRADED, tuple(reasons)) if reasons else (HEALTHY, ())
