"""Paged listings of a big table (``--only paged``; issue 28's third item).

Both services get N finished jobs written straight into their stopped
jobs.db (bench/stall.py's fillers), are started again with ``--keep N``,
and then, sample after sample, a job is scheduled and cancelled and has
ended (a change: an end, and a prune, the table being at --keep) before
one listing is timed:

- netweir-serve: ``listjobs.json?limit=100``, the console's first page,
  answered from the listing kept in memory and caught up with the end and
  the prune (web/paging.py), while the reactor's lag probe records the
  largest stall (bench/stall.py's ``lag``);
- ``netweir serve`` has no pages: its column is its ``listjobs.json`` on
  the same table, what its clients ask for.

Then the resident memory of each, with the same table, after a second of
quiet (both have answered listings, so ours holds its kept listing).
"""

import os
import time

from . import figures as fig
from . import stall
from .projects import MAIN_FILE
from .services import OURS, Service, commands

PAGE = "/listjobs.json?limit=100"


def after_an_end(service, path, timeout=60):
    """A measure of one GET of ``path`` once a job was scheduled, cancelled
    and has ended (so the table changed, and a prune followed: nothing kept
    answers it as it was), the job's own start and end outside the time."""
    def measure():
        jobid = service.schedule("one", "trivial")
        service.cancel("one", jobid)
        deadline = time.monotonic() + timeout
        # Nothing pending or running: the job ended (daemonstatus.json, which
        # both answer alike; netweir serve's status.json forgets a job
        # cancelled before it started).
        while service.counts()["pending"] or service.counts()["running"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{service.name}: job {jobid} did not end")
            time.sleep(0.02)
        started = time.perf_counter()
        status, _, body = fig.http_get(service.port, path, timeout=300)
        elapsed = time.perf_counter() - started
        if status != 200 or b'"finished"' not in body:
            raise RuntimeError(f"{service.name}: {path} answered {status}")
        return elapsed
    return measure


def measure(bench, jobs, samples):
    """({figure key: {name: value}}, notes, detail)."""
    values = {"paged_p50": {}, "paged_stall": {}, "paged_rss": {}}
    notes, detail = [], {}
    spider_file = os.path.join(bench.projects["one"], MAIN_FILE)
    for name, command in commands(bench.python).items():
        ours = name == OURS
        directory = os.path.join(bench.root, f"paged-{'ours' if ours else 'theirs'}")
        service = Service(name, command, directory, bench.projects, max_jobs=2, keep=jobs,
                          environment=stall.PROBE if ours else None)
        bench.services.append(service)
        try:
            service.start()
            service.stop()
            filler = stall.fill_ours if ours else stall.fill_theirs
            filler(os.path.join(directory, "jobs.db"), spider_file, jobs, 0,
                   time.time() - 86400)
            service.start(timeout=300)
            path = PAGE if ours else "/listjobs.json"
            # The first listing reads the whole table: not timed.
            fig.http_get(service.port, path, timeout=300)
            if ours:
                _, before = stall.lag(service)
            found = fig.latency_samples([(name, after_an_end(service, path))], samples,
                                        bench.log, f"{path} after a change")[name]
            values["paged_p50"][name] = found["p50"] * 1000
            detail[name] = {"listing": found}
            if ours:
                # How many listings read the table whole (the first, and
                # any the journal could not bring up to date).
                _, _, metrics = fig.http_get(service.port, "/metrics")
                whole = [line for line in metrics.decode().splitlines()
                         if line.startswith("netweir_serve_listing_builds_total")
                         and "paged" in line]
                bench.log(f"{name}: whole reads of the paged listing: {whole}")
                largest, after = stall.lag(service)
                over, ticks = stall.ticks_over(before, after)
                values["paged_stall"][name] = largest * 1000
                detail[name].update(stall=largest, ticks=ticks,
                                    over={str(k): v for k, v in over.items()})
            values["paged_rss"][name] = fig.settle_rss(service)
            bench.log(f"{name}: {path} after a change, {jobs:,} finished: p50"
                      f" {found['p50'] * 1000:.1f} ms; RSS {values['paged_rss'][name]:.0f} MB")
        finally:
            service.stop()
    if OURS in values["paged_stall"]:
        notes.append(f"paged: netweir-serve's largest reactor stall over {samples} paged"
                     f" listings, each after an end and a prune of a {jobs:,}-job table:"
                     f" {values['paged_stall'][OURS]:.1f} ms.")
    return values, notes, detail
