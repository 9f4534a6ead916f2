"""Jobs as the API shows them: scrapyd's field names and time format."""

import re
from datetime import datetime

from ..reliability.policy import JobPolicy
from ..store.chain_firings import CHAIN_KIND
from ..store.records import FINISHED, PENDING, RUNNING
from ..schedules.times import format_every, iso_time, jitter_offset


def format_time(seconds):
    """scrapyd's ``YYYY-MM-DD HH:MM:SS.ffffff`` (local time), or None."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S.%f")


def log_url(record):
    return f"/logs/{record.project}/{record.spider}/{record.id}.log"


def items_url(record):
    return f"/items/{record.project}/{record.spider}/{record.id}.jl"


# The user information of a URL, whatever its form: after a scheme
# (``http://user:password@host``, ``http://KEY:@host``, a password with a
# space or an @ in it: everything up to the authority's last @), or, without
# one, ``user:password@host:port`` (a colon before the @, so that
# ``me@example.com`` stays as it is).
_WITH_SCHEME = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_WITHOUT_SCHEME = re.compile(r"(?P<head>\A\s*)[^/?#@:\s]*:[^/?#]*@")


def masked(value):
    """``value`` with the user information of every URL in it (each item
    of a comma-separated list, as ``proxies`` takes) shown as ``***``: the
    user name goes too, since an API key is often given as one."""
    if "@" not in value:
        return value
    items = value.split(",")
    for i, item in enumerate(items):
        if "@" in item:
            item = _WITH_SCHEME.sub(r"\g<head>***@", item)
            if "://" not in item:
                item = _WITHOUT_SCHEME.sub(r"\g<head>***@", item)
            items[i] = item
    return ",".join(items)


def _shown(key, value):
    """A setting's value as listings show it: no password is shown, neither
    ``http_auth``'s nor any URL's user information (``proxy``, ``proxies``,
    ``queue``...)."""
    if value is None:
        return value
    # By the setting it names, however it was spelled (HTTP_AUTH and
    # http_Auth are http_auth: names.setting_name, and a refused key is
    # shown as given): a password is never shown because of its key's case.
    if isinstance(key, str) and key.strip().lower() == "http_auth":
        user, _, _ = value.partition(":")
        return f"{user}:***"
    return masked(value)


def shown_settings(pairs):
    return {k: _shown(k, v) for k, v in pairs}


def shown_arguments(pairs):
    """Spider arguments as listings show them: a URL's user information
    masked there too (a start URL with a login in it)."""
    return {k: masked(v) if isinstance(v, str) else v for k, v in pairs}


def job_entry(record, waits_for=None, times=False):
    """One job of listjobs.json; ``waits_for`` says why a pending job may
    not start yet (store.runpolicy); ``times`` adds ``at`` (below)."""
    entry = _job_entry(record)
    if record.node is not None:
        # The node that runs or ran it (several may share a job table).
        entry["node"] = record.node
    if record.schedule is not None:
        entry["schedule"] = record.schedule
    # Who queued it (a token or user name, schedule:NAME); on a service
    # open to all, a request's jobs have nobody to name (no "by").
    if record.queued_by is not None:
        entry["by"] = record.queued_by
    # Every job has its attempt (1 for a first run); a retry names the
    # first attempt's job, and waits until its due time.
    entry["attempt"] = record.attempt
    if record.retry_of is not None:
        entry["retry_of"] = record.retry_of
    if record.state == PENDING and record.not_before is not None:
        entry["not_before"] = format_time(record.not_before)
    if record.policy:
        entry["policy"] = JobPolicy.from_json(record.policy).shown()
    if waits_for is not None:
        entry["waiting_for"] = waits_for
    if times:
        # The same times as epoch seconds (UTC by definition), in paged
        # listings and /events: start_time and end_time are scrapyd's local
        # time of the service's machine, without a zone, which a browser
        # elsewhere cannot place (the console shows the browser's zone).
        entry["at"] = {"queued": record.created or None, "started": record.start_time,
                       "ended": record.end_time}
    return entry


def _job_entry(record):
    """One job of listjobs.json."""
    entry = {
        "id": record.id,
        "project": record.project,
        "spider": record.spider,
        "log_url": log_url(record),
        "items_url": items_url(record),
    }
    if record.state == PENDING:
        entry["priority"] = record.priority
        entry["settings"] = shown_settings(record.settings)
        entry["arguments"] = shown_arguments(record.arguments)
        entry["start_time"] = None
        entry["end_time"] = None
    elif record.state == RUNNING:
        entry["pid"] = record.pid
        entry["start_time"] = format_time(record.start_time)
        entry["end_time"] = None
    elif record.state == FINISHED:
        entry["start_time"] = format_time(record.start_time)
        entry["end_time"] = format_time(record.end_time)
        entry["outcome"] = record.outcome
        entry["reason"] = record.reason
        entry["exit_status"] = record.exit_status
        # Beside the outcome, which stays scrapyd's: how a run that
        # finished did against its checks (health.checks); None otherwise.
        entry["health"] = record.health
        entry["health_reasons"] = list(record.health_reasons)
    return entry


def stats_entry(record, running_stats):
    """The fields of jobstats.json for ``record``."""
    # A job running on another node: the stats that node last saved.
    stats = (running_stats or record.stats) if record.state == RUNNING else record.stats
    return {
        "job": record.id,
        "project": record.project,
        "spider": record.spider,
        "state": record.state,
        "outcome": record.outcome,
        "exit_status": record.exit_status,
        "health": record.health,
        "health_reasons": list(record.health_reasons),
        "stats": stats,
    }


def schedule_entry(record, zone):
    """One schedule of listschedules.json (and the answer to each schedule
    endpoint), its times in ISO 8601 in ``zone``."""
    next_run, last_run = shown_times(record, zone)
    entry = {
        "name": record.name,
        "project": record.project,
        "spider": record.spider,
        record.kind: record.rule,
        "tz": record.tz,
        "overlap": record.overlap,
        "misfire": record.misfire,
        "settings": shown_settings(record.settings),
        "arguments": shown_arguments(record.arguments),
        "priority": record.priority,
        "paused": record.paused,
        "next_run": next_run,
        "last_run": last_run,
        "last_job": record.last_job,
        "runs": record.runs,
        "skipped": record.skipped,
        "buffered": record.buffered,
        "caught_up": record.caught_up,
        # The schedule's own policy values, as its parameters take them.
        "policy": JobPolicy.from_json(record.policy).shown(),
    }
    if record.kind == CHAIN_KIND:
        # "after" (the rule) says what it runs after; "on", which ends.
        entry["on"] = list(record.chain_on)
    if record.jitter:
        # Its jobs start its fixed offset after each due time (next_run).
        entry["jitter"] = format_every(int(record.jitter))
        entry["starts_at"] = None if record.paused or record.next_due is None else iso_time(
            record.next_due + jitter_offset(record.name, record.jitter), zone)
    if record.pause_after is not None:
        entry["pause_after"] = record.pause_after
        entry["failed_in_row"] = record.failed_in_row
    if record.note is not None:
        entry["note"] = record.note
    if record.error is not None:
        entry["error"] = record.error
    return entry


def shown_times(record, zone):
    """``(next_run, last_run)`` of a schedule in ISO 8601 in ``zone``; a
    paused schedule runs at no time until it is resumed."""
    next_run = None if record.paused else iso_time(record.next_due, zone)
    return next_run, iso_time(record.last_due, zone)
