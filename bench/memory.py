"""The daemons' memory by hand: `python -m bench.memory` (not part of `python -m bench`).

Starts `netweir serve` and netweir-serve as the benchmark does (bench/services.py,
the benchmark's projects and site, --max-jobs 2, loopback) and prints each one's
RSS (VmRSS, after a second of quiet) at each step, with the ratio:

1. idle, right after start;
2. after the API run on the empty table: daemonstatus.json and listjobs.json,
   64 connections, REPS x SECONDS each, interleaved;
3. with JOBS finished jobs (1,000), after a listjobs.json run;
4. after a 5 MB job file to 64 connections (bench/files.py), SECONDS;
5. with BIG finished jobs (10,000; --big 0 skips it), after a listjobs.json
   run. `netweir serve` checks each scheduled job in a new interpreter, so
   filling its table takes minutes per thousand; --ours-only-big fills
   netweir-serve's alone and prints the other's row of step 3 beside it.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

from .figures import fill_finished, hold_slots, load_figure, release_slots
from .files import rate_rep, write_file
from .projects import write_projects
from .services import SLUGS, Service, Site, commands, kill_leftovers


def rss(service):
    time.sleep(1.0)
    return service.rss_mb()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--big", type=int, default=10000)
    parser.add_argument("--ours-only-big", action="store_true")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)

    def log(message):
        print(message, file=sys.stderr, flush=True)

    root = tempfile.mkdtemp(prefix="netweir-serve-bench-memory-")
    site = Site()
    services = []
    rows = []

    def row(label, values):
        rows.append((label, values))
        log(f"{label}: " + ", ".join(f"{n} {v:.1f} MB" for n, v in values.items()))

    try:
        projects = write_projects(os.path.join(root, "projects"), site.url)
        for name, command in commands().items():
            service = Service(name, command, os.path.join(root, SLUGS[name]), projects,
                              keep=max(args.jobs, args.big) + 10)
            service.start()
            services.append(service)
        theirs, ours = services
        row("idle", {s.name: rss(s) for s in services})

        for path in ("daemonstatus.json", "listjobs.json"):
            load_figure(services, "/" + path, 64, args.seconds, args.reps, warmup=0.5, log=log)
        row("after the API run (empty table)", {s.name: rss(s) for s in services})

        held = {s.name: hold_slots(s, 2) for s in services}
        fill_finished(services, args.jobs, timeout=3600)
        for s in services:
            release_slots(s, held[s.name])
        load_figure(services, "/listjobs.json", 64, args.seconds, args.reps, warmup=0.5, log=log)
        row(f"{args.jobs:,} finished jobs, after a listjobs.json run",
            {s.name: rss(s) for s in services})

        for s in services:
            write_file(s.directory, 5)
            rate_rep(s, 64, args.seconds)
        row("after a 5 MB job file to 64 connections", {s.name: rss(s) for s in services})

        if args.big:
            filled = [ours] if args.ours_only_big else services
            held = {s.name: hold_slots(s, 2) for s in filled}
            fill_finished(filled, args.big, timeout=4 * 3600)
            for s in filled:
                release_slots(s, held[s.name])
            load_figure(filled, "/listjobs.json", 64, args.seconds, 1, warmup=0.5, log=log)
            values = {s.name: rss(s) for s in filled}
            if args.ours_only_big:
                values = {theirs.name: rows[2][1][theirs.name], **values}
            row(f"{args.big:,} finished jobs, after a listjobs.json run"
                + (f" ({theirs.name}: its {args.jobs:,} row)" if args.ours_only_big else ""),
                values)

        print(f"\n{'':58} {theirs.name:>14} {ours.name:>14}  ratio")
        for label, values in rows:
            print(f"{label:58} {values[theirs.name]:11.1f} MB {values[ours.name]:11.1f} MB"
                  f"  {values[ours.name] / values[theirs.name]:.2f}x")
    finally:
        for service in services:
            service.stop()
        site.stop()
        kill_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
