"""/logs/stats.json: every job's pages and items, in the shape LogParser writes.

ScrapydWeb shows the pages and items of each job in its job list from
``/logs/stats.json``, the file LogParser (its companion) writes into
scrapyd's logs directory after parsing every Scrapy log. A Netweir log is no
Scrapy log, but the service has the numbers itself: the crawl's own stats
(``fetched`` is pages, ``items`` items) and the job's start and end. So it
answers that path with them, in LogParser's shape::

    {"status": "ok", "logparser_version": "0.8.4",
     "last_update_time": "2026-01-02 03:04:05", "last_update_timestamp": 1767319445,
     "datas": {PROJECT: {SPIDER: {JOB: {
         "pages": 30, "items": 30,
         "first_log_time": "2026-01-02 03:04:00", "first_log_timestamp": 1767319440,
         "latest_log_time": "2026-01-02 03:04:05", "latest_log_timestamp": 1767319445,
         "runtime": "0:00:05", "shutdown_reason": "N/A", "finish_reason": "finished",
         "last_update_time": "2026-01-02 03:04:05",
         "last_update_timestamp": 1767319445}}}}}

for every job that has run or runs (a pending one has no log yet). Times
are local, as a log's lines are; ``pages`` and ``items`` are null where the
crawl wrote no stats. ScrapydWeb ignores a stats.json whose
``logparser_version`` is not the LogParser it was installed with;
``LOGPARSER_VERSION`` is the one ScrapydWeb 1.6.0 requires.
"""

import os
from datetime import datetime, timedelta

from ..jobs.files import files_of, read_stats
from ..store.records import RUNNING
from ..names import fold
from ..access.roles import NOBODY, identity_of
from .answer import encode
from .endpoint import JsonEndpoint
from .refusals import refused

LOGPARSER_VERSION = "0.8.4"
NA = "N/A"


def log_time(seconds):
    """LogParser's ``YYYY-MM-DD HH:MM:SS`` (local), or N/A."""
    if seconds is None:
        return NA
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def job_stats(record, stats, latest, now):
    """LogParser's entry for the job ``record`` whose last stats are
    ``stats`` (a dict or None) and whose log was last written at ``latest``
    (epoch seconds, or None), as of ``now``."""
    stats = stats or {}
    first = record.start_time
    if latest is not None and first is not None:
        latest = max(latest, first)
    runtime = NA
    if first is not None and latest is not None:
        runtime = str(timedelta(seconds=int(latest) - int(first)))
    if record.state == RUNNING:
        reason = NA
    else:
        reason = stats.get("finish_reason") or record.outcome or NA
    return {
        "pages": _count(stats.get("fetched")),
        "items": _count(stats.get("items")),
        "first_log_time": log_time(first),
        "first_log_timestamp": int(first) if first is not None else 0,
        "latest_log_time": log_time(latest),
        "latest_log_timestamp": int(latest) if latest is not None else 0,
        "runtime": runtime,
        "shutdown_reason": NA,
        "finish_reason": reason,
        "last_update_time": log_time(now),
        "last_update_timestamp": int(now),
    }


def _count(value):
    # LogParser's pages and items: None or a whole number, nothing else.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class LogParserStats(JsonEndpoint):
    """The resource of /logs/stats.json. ``store`` provides IJobStore,
    ``launcher`` ILauncher (a running job's latest stats); ``directory``
    is the service's DIR; ``clock`` has ``seconds()``.

    A finished job's entry never changes, so it is made once, from its
    stats file, and kept while the job is; a running job's is made again
    for each request, from the stats the launcher last read."""

    def __init__(self, store, launcher, directory, clock):
        super().__init__()
        self._store = store
        self._launcher = launcher
        self._directory = directory
        self._clock = clock
        self._finished = {}

    def answer(self, params, request):
        return self._store.jobs().addCallback(
            self._answer, identity_of(request)).addErrback(refused)

    def _answer(self, jobs, identity=NOBODY):
        _, running, finished = jobs
        if not identity.every_project:
            running = [r for r in running if identity.sees(r.project)]
            finished = [r for r in finished if identity.sees(r.project)]
        now = self._clock.seconds()
        datas = {}
        for record in running:
            files = files_of(self._directory, record)
            _add(datas, record, job_stats(record, self._launcher.running_stats(record.id),
                                          _modified(files.log), now))
        kept = {}
        for record in finished:
            key = fold(record.id)
            entry = self._finished.get(key)
            if entry is None:
                stats = read_stats(files_of(self._directory, record).stats)
                entry = job_stats(record, stats, record.end_time, now)
            kept[key] = entry
            _add(datas, record, entry)
        # Forgotten jobs' entries go with them (a listing of some projects
        # alone forgets none).
        if identity.every_project:
            self._finished = kept
        else:
            self._finished.update(kept)
        return encode({
            "status": "ok",
            "datas": datas,
            "logparser_version": LOGPARSER_VERSION,
            "last_update_time": log_time(now),
            "last_update_timestamp": int(now),
        })


def _add(datas, record, entry):
    datas.setdefault(record.project, {}).setdefault(record.spider, {})[record.id] = entry


def _modified(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
