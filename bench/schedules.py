"""Figures for recurring schedules: firing lateness and idle CPU.

``python -m bench.schedules [--quick]`` starts netweir-serve on the
benchmark's projects, adds N schedules through addschedule.json (1,000, or
200 with --quick), and measures:

* firing lateness: from each firing's due time to its job being in the
  job table (the job's ``created`` time in DIR/jobs.db, read after the run;
  the due time is in the job's id), p50 and p99, with every schedule due in
  the same few seconds — the worst case for one timer;
* CPU per idle hour with the N schedules waiting (``every=1d``): the
  service's CPU time over an idle minute, times 60.

``netweir serve`` has no recurring schedules, so there is no ratio: the
figures stand alone (docs/performance.md).
"""

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from datetime import datetime, timezone

from .projects import write_projects
from .services import OURS, Service, Site, commands, kill_leftovers

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def due_of(jobid):
    stamp = jobid.rsplit("-", 1)[1]
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()


def measure(count, idle_seconds):
    scratch = tempfile.mkdtemp(prefix="bench-schedules-")
    site = Site()
    service = None
    try:
        projects = write_projects(os.path.join(scratch, "projects"), site.url)
        service = Service(OURS, commands()[OURS], os.path.join(scratch, "ours"),
                          {"one": projects["one"]}, max_jobs=2, keep=count * 3)
        service.start()
        # Idle: N schedules a day apart from their add time.
        for n in range(count):
            service.post("addschedule.json", [("project", "one"), ("spider", "trivial"),
                                              ("every", "1d"), ("name", f"idle{n}")])
        time.sleep(2)
        before = cpu_seconds(service.pid)
        time.sleep(idle_seconds)
        idle_hour = (cpu_seconds(service.pid) - before) * 3600 / idle_seconds
        # Lateness: N schedules added within a few seconds, each every 30 s,
        # so they all come due in the same few seconds, twice.
        for n in range(count):
            service.post("addschedule.json", [("project", "one"), ("spider", "trivial"),
                                              ("every", "30s"), ("name", f"busy{n}"),
                                              ("overlap", "allow")])
        time.sleep(65)
        service.stop()
        service = None
        db = sqlite3.connect(os.path.join(scratch, "ours", "jobs.db"))
        rows = db.execute("SELECT id, created FROM jobs WHERE schedule LIKE 'busy%'").fetchall()
        db.close()
        late = [created - due_of(jobid) for jobid, created in rows]
        return {"schedules": count, "firings": len(late),
                "lateness_p50_s": percentile(late, 0.5), "lateness_p99_s": percentile(late, 0.99),
                "idle_cpu_s_per_hour": idle_hour}
    finally:
        if service is not None:
            service.stop()
        site.stop()
        kill_leftovers(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.schedules",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 schedules, 20 s idle")
    args = parser.parse_args(argv)
    count, idle = (200, 20) if args.quick else (1000, 60)
    figures = measure(count, idle)
    print(f"{figures['schedules']} schedules: {figures['firings']} firings, lateness p50"
          f" {figures['lateness_p50_s'] * 1000:.0f} ms, p99"
          f" {figures['lateness_p99_s'] * 1000:.0f} ms; idle CPU"
          f" {figures['idle_cpu_s_per_hour']:.2f} s per hour")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
