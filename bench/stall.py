"""The reactor's largest stall with a big job table (``--only stall``).

Both services get the same table, written straight into their jobs.db
while they are stopped (the API would take netweir serve an hour for
20,000 jobs): N finished ``trivial`` jobs and N pending ``blocker`` jobs.
Started again, each starts two blockers, which hold both slots, and the
rest stay pending. Then:

- netweir-serve, run with ``NETWEIR_SERVE_LAG_PROBE_SECONDS`` (a timer every
  millisecond recording how late it ran, watching/lag.py), takes a burst
  of requests from two clients at once: schedule.json, listjobs.json right
  after that change, cancel.json of a pending job (an end, and a prune,
  the table being at --keep), and now and then cancel.json of a running
  blocker (an end that frees a slot, so a claim through the backlog). The
  largest lateness of the timer over the burst is read from /metrics
  (``netweir_serve_reactor_lag_largest_seconds``, reset by each read).
- ``netweir serve`` has no reactor: its column is the time of one
  listjobs.json after a change on the same table, what a client of either
  waits for a listing (ours is in the notes).
"""

import json
import os
import sqlite3
import threading
import time

from . import figures as fig
from .projects import MAIN_FILE
from .services import OURS, Service, commands

PROBE = {"NETWEIR_SERVE_LAG_PROBE_SECONDS": "0.001"}
LARGEST = b"netweir_serve_reactor_lag_largest_seconds "
BUCKET = b'netweir_serve_reactor_lag_seconds_bucket{le="'
# The stalls counted in the notes: over the target, and over ten times it.
OVER = (0.005, 0.05)


def fill_ours(path, spider_file, finished, pending, now):
    """``finished`` + ``pending`` jobs in netweir-serve's table at ``path``."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO jobs (key, id, project, project_key, spider, spider_file, settings,"
            " arguments, priority, state, outcome, created, start_time, end_time, reason)"
            " VALUES (?, ?, 'one', 'one', ?, ?, '[]', '[]', 0, ?, ?, ?, ?, ?, ?)",
            [(f"f{n:06d}", f"f{n:06d}", "trivial", spider_file, "finished", "cancelled",
              now + n * 1e-3, None, now + n * 1e-3, "cancelled before it started")
             for n in range(finished)]
            + [(f"p{n:06d}", f"p{n:06d}", "blocker", spider_file, "pending", None,
                now + n * 1e-3, None, None, None) for n in range(pending)])
        db.execute("UPDATE store_meta SET version = version + 1")
        db.execute("COMMIT")
    finally:
        db.close()


def fill_theirs(path, spider_file, finished, pending, now):
    """The same jobs in ``netweir serve``'s table at ``path``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO jobs (id, project, spider, file, settings, arguments, priority, state,"
            " outcome, end_time) VALUES (?, 'one', ?, ?, '[]', '{}', 0, ?, ?, ?)",
            [(f"f{n:06d}", "trivial", spider_file, "finished", "cancelled", stamp)
             for n in range(finished)]
            + [(f"p{n:06d}", "blocker", spider_file, "pending", None, None)
               for n in range(pending)])
        db.execute("COMMIT")
    finally:
        db.close()


def lag(service):
    """(the largest lateness of ``service``'s probe since the last call, in
    seconds; {bucket bound: ticks at most that late so far})."""
    status, _, body = fig.http_get(service.port, "/metrics")
    if status != 200:
        raise RuntimeError(f"{service.name}: /metrics answered {status}")
    largest, buckets = None, {}
    for line in body.splitlines():
        if line.startswith(LARGEST):
            largest = float(line[len(LARGEST):])
        elif line.startswith(BUCKET):
            bound, _, count = line[len(BUCKET):].partition(b'"} ')
            buckets[float(bound)] = float(count)
    if largest is None:
        raise RuntimeError(f"{service.name}: /metrics has no reactor_lag_largest (no probe?)")
    return largest, buckets


def ticks_over(before, after):
    """{bound: ticks later than it} between two ``lag`` bucket readings,
    and the ticks in all."""
    total = after[float("inf")] - before[float("inf")]
    return {bound: total - (after[bound] - before[bound]) for bound in OVER}, total


def burst(service, rounds, clients=2):
    """``rounds`` rounds of schedule, listing and ends from each of
    ``clients`` threads; the errors met (a list of strings)."""
    errors = []
    blockers = iter(f"p{n:06d}" for n in range(rounds * clients))
    lock = threading.Lock()

    def client(n):
        try:
            for r in range(rounds):
                jobid = service.schedule("one", "trivial")
                status, _, body = fig.http_get(service.port, "/listjobs.json")
                if status != 200 or b'"finished"' not in body:
                    errors.append(f"listjobs.json answered {status}")
                service.cancel("one", jobid)
                if r % 5 == n:
                    # A running blocker ends: the next blocker is claimed
                    # through the backlog.
                    running = json.loads(body)["running"]
                    if running:
                        service.cancel("one", running[0]["id"])
                with lock:
                    pending = next(blockers, None)
                if pending is not None:
                    service.cancel("one", pending)
        except Exception as e:  # reported by the caller
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return errors


def prepare(service, filler, spider_file, finished, pending):
    """Starts ``service`` once (its table made), stops it, fills the table,
    and starts it again; waits until its two blockers run."""
    service.start()
    service.stop()
    filler(os.path.join(service.directory, "jobs.db"), spider_file, finished, pending,
           time.time() - 86400)
    service.start(timeout=120)
    service.wait_counts(120, "two blockers to run", running=2)


def measure(bench, jobs, rounds, samples):
    """{name: value (ms)} for the stall row, and the notes."""
    notes, values, detail = [], {}, {}
    spider_file = os.path.join(bench.projects["one"], MAIN_FILE)
    for name, command in commands(bench.python).items():
        directory = os.path.join(bench.root, f"stall-{'ours' if name == OURS else 'theirs'}")
        service = Service(name, command, directory, bench.projects, max_jobs=2, keep=jobs,
                          environment=PROBE if name == OURS else None)
        bench.services.append(service)
        try:
            started = time.monotonic()
            prepare(service, fill_ours if name == OURS else fill_theirs, spider_file, jobs,
                    jobs)
            bench.log(f"{name}: {jobs:,} finished + {jobs:,} pending jobs, answering after"
                      f" {time.monotonic() - started:.1f} s")
            listing = fig.latency_samples([(name, fig.time_listjobs_render(service))],
                                          samples, bench.log,
                                          "listjobs.json after a change")[name]
            detail[name] = {"listjobs": listing}
            if name != OURS:
                values[name] = listing["p50"] * 1000
                continue
            _, before = lag(service)  # the largest from now on
            took = time.monotonic()
            errors = burst(service, rounds)
            took = time.monotonic() - took
            stall, after = lag(service)
            over, ticks = ticks_over(before, after)
            values[name] = stall * 1000
            detail[name].update(stall=stall, burst_seconds=took, errors=errors, ticks=ticks,
                                over={str(k): v for k, v in over.items()})
            late = ", ".join(f"{n:.0f} over {bound * 1000:g} ms" for bound, n in over.items())
            bench.log(f"{name}: a burst of {rounds} rounds from 2 clients in {took:.1f} s;"
                      f" the reactor's largest stall {stall * 1000:.1f} ms; of {ticks:.0f}"
                      f" ticks of the 1 ms probe, {late}")
            notes.append(f"stall: netweir-serve's listjobs.json after a change on the same"
                         f" table: p50 {listing['p50'] * 1000:.0f} ms; the burst ({rounds}"
                         f" rounds of schedule.json, listjobs.json and cancel.json from 2"
                         f" clients) took {took:.1f} s; of the 1 ms probe's {ticks:.0f} ticks,"
                         f" {late}.")
            for error in errors[:3]:
                notes.append(f"stall: the burst met an error: {error}.")
        finally:
            service.stop()
    return values, notes, detail
