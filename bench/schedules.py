"""Recurring schedules, against what netweir serve's users do instead: cron.

netweir serve has no schedules; a scrapyd-style setup runs a crontab line
that posts schedule.json at the due time. So each figure here puts
netweir-serve's own timer beside that:

- ``lateness``: N schedules of netweir-serve's all due in the same second
  (a daily cron line for the first whole minute far enough away to add
  them all), from each due time to its job in the job table (the job's
  ``created`` in DIR/jobs.db; the due time is in the job's id). Daily, so
  that none fires again while they are deleted: schedules due every few
  seconds would keep the table busy with their skipped runs. Against
  it, netweir serve driven as cron would drive it: at the due second, N
  schedule.json requests, CRON_CONNECTIONS at a time (one client may hold
  8 connections, more are closed unanswered, so N curls at once would
  mostly fail), from the due second to each answer (the job is in its
  table before it answers). Both services' slots are held by blockers, so
  the jobs stay pending: what is measured is the queueing, not crawls
  competing with it.
- ``idle_cpu``: each service's CPU over an idle spell, per hour: ours with
  N schedules waiting (``every=1d``), netweir serve with nothing to do
  (cron itself is another process, not counted).
"""

import math
import os
import sqlite3
import statistics
import threading
import time
from datetime import datetime, timezone

from .figures import percentile, rounds
from .services import OURS, run_seconds, wait_until

# Connections the cron driver uses at once: the per-address cap, from two
# addresses of 4 each (a connection closed a moment ago may still count).
CRON_CONNECTIONS = 8
PER_SOURCE = 4
# Seconds between the schedules' expected end of adding and their due time.
MARGIN = 1.0


def in_parallel(work, items, threads=4):
    """Calls ``work(item)`` for every item, ``threads`` at a time; the
    first exception, if any, is raised once all are done."""
    items = list(items)
    lock = threading.Lock()
    errors = []

    def worker():
        while True:
            with lock:
                if not items:
                    return
                item = items.pop()
            try:
                work(item)
            except Exception as e:  # raised below
                errors.append(e)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


def add_schedules(service, names, every=None, cron=None):
    """Adds a schedule of the ``trivial`` spider under each of ``names``,
    its interval ``every()`` (asked just before each is sent), or the cron
    line ``cron`` (in UTC); the seconds it took."""
    started = time.monotonic()
    when = [("cron", cron), ("tz", "UTC")] if cron is not None else None

    def add(name):
        answer = service.post("addschedule.json", [("project", "one"), ("spider", "trivial"),
                                                   ("name", name)]
                              + (when or [("every", str(every()))]))
        if answer.get("status") != "ok":
            raise RuntimeError(f"{service.name}: addschedule.json refused: {answer}")

    in_parallel(add, names)
    return time.monotonic() - started


def delete_schedules(service, names):
    in_parallel(lambda name: service.post("delschedule.json", [("project", "one"),
                                                               ("name", name)]), names)


def idle_cpu(services, seconds, settle=2.0):
    """{name: CPU seconds per hour} of each service over ``seconds`` of
    doing nothing, measured at the same time, after ``settle`` seconds
    (at most ``seconds``)."""
    time.sleep(min(settle, seconds))
    before = {s.name: run_seconds(s.pid) for s in services}
    time.sleep(seconds)
    return {s.name: (run_seconds(s.pid) - before[s.name]) * 3600 / seconds for s in services}


def due_of(jobid):
    """The due time in a schedule's job id (NAME-YYYYMMDDTHHMMSSZ)."""
    stamp = jobid.rsplit("-", 1)[1]
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()


def _fired(service, prefix):
    """[(job id, created)] of the jobs of the schedules named ``prefix``...,
    read from the service's jobs.db beside it."""
    path = os.path.join(service.directory, "jobs.db")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("SELECT id, created FROM jobs WHERE schedule LIKE ?",
                          (prefix + "%",)).fetchall()
    finally:
        db.close()


def timer_lateness(service, count, prefix, add_seconds):
    """netweir-serve's own timer: ``count`` schedules named ``prefix``N,
    all due at the first whole minute at least ``add_seconds`` (what adding
    as many took before) times 1.5 plus MARGIN from now; seconds from each
    due time to its job, once all have fired. The schedules are deleted
    afterwards."""
    names = [f"{prefix}{n:04d}" for n in range(count)]
    due = math.ceil((time.time() + add_seconds * 1.5 + MARGIN) / 60) * 60
    moment = datetime.fromtimestamp(due, timezone.utc)
    add_schedules(service, names, cron=f"{moment.minute} {moment.hour} * * *")
    rows = wait_until(lambda: (lambda r: r if len(r) >= count else None)(
        _fired(service, prefix)), max(60, due - time.time() + 30 + count * 0.05),
        f"{service.name}: {count} schedules to fire", interval=0.25)
    delete_schedules(service, names)
    return [created - due_of(jobid) for jobid, created in rows]


def cron_lateness(service, count, connections=CRON_CONNECTIONS):
    """What cron would do: at a whole second at least half a second away
    (for the threads to be ready), ``count`` schedule.json requests,
    ``connections`` at a time; seconds from that second to each answer."""
    due = math.ceil(time.time() + 0.5)
    left = list(range(count))
    lock = threading.Lock()
    late = []

    def fire(source):
        time.sleep(max(0.0, due - time.time()))
        while True:
            with lock:
                if not left:
                    return
                left.pop()
            service.schedule("one", "trivial", source=source)
            late.append(time.time() - due)

    sources = [f"127.0.2.{1 + n // PER_SOURCE}" for n in range(connections)]
    in_parallel(fire, sources, threads=connections)
    return late


def lateness(services, count, reps, add_seconds, log=None):
    """``reps`` interleaved rounds of ``count`` firings on each service
    (ours by its timer, netweir serve by the cron driver); per service
    p50 and p99 of every firing's lateness, pooled, and the samples."""
    samples = {s.name: [] for s in services}
    for n, service in rounds(services, reps):
        if service.name == OURS:
            late = timer_lateness(service, count, f"late{n}-", add_seconds)
        else:
            late = cron_lateness(service, count)
        samples[service.name] += late
        if log:
            log(f"  {service.name:14} round {n + 1}: {len(late)} firings, p50"
                f" {statistics.median(late) * 1000:,.0f} ms, max {max(late) * 1000:,.0f} ms")
    return {name: {"p50": percentile(late, 50), "p99": percentile(late, 99), "samples": late}
            for name, late in samples.items()}
