"""How netweir-serve grows with its job table: ``python -m bench.scale``.

Fills one service's table to 100, 1,000 and 10,000 finished jobs (through
the public API, as bench/figures.py's fill_finished does) and at each size
measures listjobs.json under load (64 connections), daemonstatus.json, and
the daemon's RSS. Only netweir-serve: the point is the shape of its curve.
"""

import argparse
import os
import shutil
import tempfile
import time

from . import figures
from .projects import write_projects
from .services import OURS, Service, Site, commands, kill_leftovers

SIZES = (100, 1_000, 10_000)


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


def measure(sizes, duration, log=print):
    """Rows of (finished jobs, listjobs req/s, p50, p99, daemonstatus req/s, RSS MB)."""
    root = tempfile.mkdtemp(prefix="netweir-serve-scale-")
    site, service, rows = None, None, []
    try:
        site = Site()
        projects = write_projects(os.path.join(root, "projects"), site.url)
        service = Service(OURS, commands()[OURS], os.path.join(root, "ours"), projects,
                          max_jobs=2, keep=max(sizes) * 2).start()
        blockers = figures.hold_slots(service, 2)
        for size in sizes:
            started = time.monotonic()
            figures.fill_finished([service], size, timeout=900)
            log(f"filled to {size:,} finished jobs in {time.monotonic() - started:.1f} s")
            listing = figures.measure_load(service, "/listjobs.json", 64, duration, warmup=0.5)
            status = figures.measure_load(service, "/daemonstatus.json", 64, duration)
            time.sleep(1)
            rows.append((size, listing["rps"], listing["p50"], listing["p99"], status["rps"],
                         service.rss_mb()))
        figures.release_slots(service, blockers)
    finally:
        if service is not None:
            service.stop()
        if site is not None:
            site.stop()
        kill_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)
    return rows


def table(rows):
    lines = ["| finished jobs | listjobs.json req/s | p50 | p99 | daemonstatus.json req/s | RSS |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size, rps, p50, p99, status_rps, rss in rows:
        lines.append(f"| {size:,} | {rps:,.0f} | {_ms(p50)} | {_ms(p99)} | {status_rps:,.0f}"
                     f" | {rss:.1f} MB |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.scale",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per load run")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="finished-job counts, ascending (default 100,1000,10000)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(table(measure(sizes, args.duration)))


if __name__ == "__main__":
    main()
