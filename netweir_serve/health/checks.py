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


def _shown(number):
    """A number as a reason shows it: 4000, 2.5, 12.3."""
    return f"{round(number, 1):g}" if isinstance(number, float) else str(number)


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
    each fewer than MIN_HISTORY runs have: what runs.json shows."""
    return {name: median_of(history, name)[0] for name in ("items", "pages", "runtime")}


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
        return f"{name} {count} < {_shown(share)}% of median {_shown(median)} over {runs} runs"
    return None


def _errors(run, most):
    if most is None or run.errors is None:
        return None
    pages = run.pages or 0
    if pages == 0:
        # Errors with no page fetched at all: every request failed.
        return f"errors {run.errors} with no pages > max_errors {_shown(most)}%" \
            if run.errors else None
    share = run.errors * 100 / pages
    if share > most:
        return (f"errors {run.errors} = {_shown(share)}% of pages {pages}"
                f" > max_errors {_shown(most)}%")
    return None


def _slower(run, history, factor):
    if factor is None or run.runtime is None:
        return None
    median, runs = median_of(history, "runtime")
    if median is None:
        return None
    if run.runtime > factor * median:
        return (f"runtime {_shown(float(run.runtime))}s > {_shown(factor)}x median"
                f" {_shown(float(median))}s over {runs} runs")
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
