"""Warm starts (netweir_serve/jobs/warm): how soon a job's code runs.

``measure(bench)`` starts a pair of services of its own, waits until
netweir-serve's warm process is ready, and measures, interleaved:

- idle schedule.json -> the stamp spider's code (p50) on each service, and
  the bare ``netweir crawl`` start to the same code beside them (the
  target: netweir-serve under 40 ms and at most half the bare start);
- the overhead per job: trivial jobs through each service against as many
  run directly, ``--max-jobs 2`` (the target: under 10 ms).

Beside them runs a third service, netweir-serve with warm starts off
(NETWEIR_SERVE_WARM_STARTS=0): what the warm process gains, in a note.
It records the rows ``warm_direct``, ``warm_to_code`` and ``warm_overhead``
(bench/table.py) and the notes.
"""

import os
import time

from . import figures as fig
from .services import OURS, Service, wait_until

COLD = f"{OURS} (cold)"

# The line netweir-serve logs once its warm process has imported netweir.
READY = "warm starts: ready"


def _wait_warm(pair):
    ours = next(s for s in pair if s.name == OURS)
    wait_until(lambda: READY in ours.log_tail(200), 60, f"{OURS}'s warm process")


def _start_cold(bench, max_jobs):
    ours = next(s for s in bench.services if s.name == OURS)
    cold = Service(COLD, ours.command, os.path.join(bench.root, "w-cold"), bench.projects,
                   max_jobs=max_jobs, keep=ours.keep,
                   environment={"NETWEIR_SERVE_WARM_STARTS": "0"})
    bench.services.append(cold)
    started = time.monotonic()
    cold.start()
    bench.log(f"{COLD} (w) answers on port {cold.port} after {time.monotonic() - started:.2f} s")
    return cold


def measure(bench, max_jobs=2):
    m = bench.mode
    pair = bench.start_pair("w")
    cold = None
    try:
        cold = _start_cold(bench, max_jobs)
        _wait_warm(pair)
        everyone = pair + [cold]
        scratch = os.path.join(bench.root, "warm-stamps")
        os.makedirs(scratch, exist_ok=True)
        measures = fig.each(everyone, lambda s: fig.idle_to_code(s, scratch))
        measures.append(("direct", fig.direct_to_code(bench.python, bench.projects["one"],
                                                      scratch)))
        # One unmeasured run each: the first job after a start fills the
        # warm process's spares, the first bare crawl the page cache.
        for _, once in measures:
            once()
        samples = max(5, m.stamp_samples)
        found = fig.latency_samples(measures, samples, bench.log, "warm start: idle -> code")
        direct = found.pop("direct")
        unwarmed = found.pop(COLD)
        bench.put("warm_direct", {OURS: direct["p50"] * 1000}, detail=direct)
        bench.put("warm_to_code", {n: r["p50"] * 1000 for n, r in found.items()},
                  detail=found)
        jobs, chunk = m.jobs, m.chunk or m.jobs
        totals = fig.job_overhead(everyone, bench.python, bench.projects["one"], jobs, chunk,
                                  max_jobs, os.path.join(bench.root, "warm-direct"), bench.log)
        bench.put("warm_overhead", {s.name: (totals[s.name] - totals["direct"]) / jobs * 1000
                                    for s in pair}, detail=totals)
        ours = found[OURS]["p50"] * 1000
        bench.notes.append(
            f"warm start: idle schedule.json -> spider's code {ours:.0f} ms (p50 of {samples})"
            f" on {OURS}, {direct['p50'] * 1000:.0f} ms for the bare netweir crawl start"
            f" ({ours / (direct['p50'] * 1000):.2f}x); {jobs} trivial jobs took"
            f" {totals['direct']:.1f} s directly, "
            + ", ".join(f"{s.name} {totals[s.name]:.1f} s" for s in everyone) + ".")
        bench.notes.append(
            f"warm start: with warm starts off ({COLD}), idle -> code"
            f" {unwarmed['p50'] * 1000:.0f} ms (p50), overhead per job"
            f" {(totals[COLD] - totals['direct']) / jobs * 1000:.1f} ms.")
        for name, bad in totals["not_finished"].items():
            if bad:
                bench.notes.append(f"warm start: {bad} job(s) through {name} did not finish.")
    finally:
        bench.stop_pair(pair + ([cold] if cold is not None else []))
