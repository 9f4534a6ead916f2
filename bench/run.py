"""The side-by-side benchmark: ``python -m bench [--quick | --smoke]``.

Starts the local test site, writes the projects, starts ``netweir serve``
and netweir-serve on free loopback ports (each with a fresh --dir, both
with --max-jobs 2 --keep 1000), measures every figure of bench/table.py on
both, interleaved, and prints the table. Two pairs of services are used:
the first for what wants an empty job table (RSS idle, daemonstatus.json,
listspiders.json, idle -> code, jobs), the second for what wants a full
one (schedule.json, listjobs.json with 100 and 1,000 finished jobs, RSS
with 1,000). Everything it started is stopped when it ends, however it
ends.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from . import figures as fig
from .projects import write_projects
from .services import OURS, SLUGS, Service, Site, commands, kill_leftovers
from .table import render


@dataclass(frozen=True)
class Mode:
    name: str
    duration: float        # seconds per load run
    warmup: float          # seconds of load before each run, not counted
    reps: int              # load runs per figure and service
    connections: int
    samples: int           # single requests per latency figure and service
    stamp_samples: int     # idle -> code samples per service
    jobs: int              # jobs of the overhead figure
    chunk: int             # jobs per chunk of the overhead figure
    small_table: int       # finished jobs, first listjobs figure
    big_table: int         # finished jobs, second listjobs figure
    streams: int = 50      # open /events streams of the watched figure


FULL = Mode("full", duration=3.0, warmup=0.5, reps=3, connections=64, samples=15,
            stamp_samples=10, jobs=100, chunk=20, small_table=100, big_table=1000)
QUICK = Mode("quick", duration=1.0, warmup=0.2, reps=1, connections=64, samples=5,
             stamp_samples=5, jobs=20, chunk=10, small_table=100, big_table=250)
# The test's: both services started, one tiny figure, both stopped.
SMOKE = Mode("smoke", duration=0.3, warmup=0.0, reps=1, connections=8, samples=0,
             stamp_samples=0, jobs=100, chunk=0, small_table=100, big_table=1000)

MODES = {m.name: m for m in (FULL, QUICK, SMOKE)}
KEEP = 1000
MAX_JOBS = 2


def log(message):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "kernel": platform.release()}


def versions():
    from importlib.metadata import PackageNotFoundError, version
    found = {}
    for name in ("netweir", "netweir-serve", "twisted"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


class Bench:
    """One run of the benchmark in the scratch directory ``root``."""

    def __init__(self, mode, root, python=sys.executable, log=log):
        self.mode = mode
        self.root = root
        self.python = python
        self.log = log
        self.results = {}
        self.details = {}
        self.notes = []
        self.site = None
        self.services = []
        self.projects = None

    # -- processes ---------------------------------------------------------------

    def start_site(self):
        self.site = Site(self.python)
        self.projects = write_projects(os.path.join(self.root, "projects"), self.site.url)

    def start_pair(self, label):
        """Both services, each with a fresh --dir; [theirs, ours]."""
        pair = []
        for name, command in commands(self.python).items():
            directory = os.path.join(self.root, f"{label}-{SLUGS[name]}")
            service = Service(name, command, directory, self.projects, max_jobs=MAX_JOBS,
                              keep=KEEP)
            self.services.append(service)
            started = time.monotonic()
            service.start()
            self.log(f"{name} ({label}) answers on port {service.port} after"
                     f" {time.monotonic() - started:.2f} s, pid {service.pid}")
            pair.append(service)
        return pair

    def stop_pair(self, pair):
        for service in pair:
            service.stop()

    def stop_all(self):
        for service in self.services:
            try:
                service.stop()
            except Exception as e:  # keep stopping the others
                self.log(f"stopping {service.name}: {e}")
        if self.site is not None:
            self.site.stop()
        left = kill_leftovers(self.root)
        if left:
            self.log(f"killed {left} leftover process(es)")

    # -- the run -----------------------------------------------------------------------

    def labels(self):
        m = self.mode
        return {"conns": m.connections, "small": f"{m.small_table:,}",
                "big": f"{m.big_table:,}", "jobs": m.jobs, "streams": m.streams}

    def note_load(self, what, found):
        """Notes what a reader of a load figure should know: errors, and
        runs where the client, not the service, may have been the limit."""
        for name, r in found.items():
            if r["errors"]:
                samples = sorted({e for run in r["runs"] for e in run["error_samples"]})
                self.notes.append(f"{what}: {r['errors']} failed request(s) on {name}"
                                  f" ({'; '.join(samples[:3])}).")
            busy = max(run["client_cpu"] for run in r["runs"])
            if busy > 0.85:
                self.notes.append(f"{what}: the load generator used {busy:.0%} of a CPU"
                                  f" against {name}: that rate may be the client's limit.")

    def put(self, key, values, stalled=None, detail=None):
        self.results[key] = dict(values)
        if stalled is not None:
            self.results[key]["stalled"] = dict(stalled)
        if detail is not None:
            self.details[key] = detail

    def run(self):
        m = self.mode
        self.start_site()
        pair = self.start_pair("a")
        self.measure_rss(pair, "rss_idle")
        self.measure_status(pair)
        if m.name == "smoke":
            self.stop_pair(pair)
            return self.results
        self.measure_watched(pair)
        self.measure_listspiders(pair)
        self.measure_idle_to_code(pair)
        self.measure_overhead(pair)
        self.stop_pair(pair)

        pair = self.start_pair("b")
        holds = {s.name: fig.hold_slots(s, MAX_JOBS) for s in pair}
        self.measure_schedule(pair)
        self.measure_listjobs(pair, m.small_table, "jobs100_rps")
        self.measure_listjobs(pair, m.big_table, "jobs1000_rps", "jobs1000_p99")
        self.measure_metrics(pair)
        self.measure_rss(pair, "rss_1000")
        for s in pair:
            fig.release_slots(s, holds[s.name])
        self.stop_pair(pair)
        return self.results

    def measure_rss(self, pair, key):
        # A few requests first, so each daemon has served some.
        for s in pair:
            for _ in range(3):
                s.counts()
        values = {s.name: fig.settle_rss(s, 1.0 if self.mode.name != "smoke" else 0.2)
                  for s in pair}
        self.log("RSS " + ", ".join(f"{n}: {v:.1f} MB" for n, v in values.items()))
        self.put(key, values)

    def measure_status(self, pair):
        m = self.mode
        self.log(f"daemonstatus.json, {m.connections} connections, {m.reps} x {m.duration:g} s")
        found = fig.load_figure(pair, "/daemonstatus.json", m.connections, m.duration, m.reps,
                                m.warmup, self.log)
        self.put("status_rps", {n: r["rps"] for n, r in found.items()}, detail=found)
        self.note_load("daemonstatus.json", found)
        self.put("status_p99", {n: r["p99"] * 1000 for n, r in found.items()},
                 stalled={n: r["stalled"] for n, r in found.items()})

    def measure_watched(self, pair):
        m = self.mode
        ours = next(s for s in pair if s.name == OURS)
        self.log(f"daemonstatus.json on {OURS} alone, without and with {m.streams} /events"
                 " streams and a /metrics scrape every second")
        found = fig.watched_status(ours, m.connections, m.duration, max(2, m.reps), m.streams,
                                   m.warmup, self.log)
        self.put("status_unwatched_rps", {OURS: found["unwatched"]}, detail=found)
        self.put("status_watched_rps", {OURS: found["watched"]})
        self.notes.append(f"watched: {found['streams_seen']} /events streams open during the"
                          f" load, {found['scrapes']} /metrics scrapes"
                          f" ({found['scrape_errors']} failed).")

    def measure_metrics(self, pair):
        ours = next(s for s in pair if s.name == OURS)
        measure = fig.time_metrics_render(ours)
        measure()
        found = fig.latency_samples([(OURS, measure)], self.mode.samples, self.log,
                                    "/metrics after a change")
        self.put("metrics_p50", {OURS: found[OURS]["p50"] * 1000}, detail=found)

    def measure_listspiders(self, pair):
        for key, project in (("listspiders1_p50", "one"), ("listspiders10_p50", "ten"),
                             ("listspiders50_p50", "fifty")):
            measures = fig.each(pair, fig.time_listspiders(project))
            # One unmeasured call each: a first request may start a helper.
            for _, measure in measures:
                measure()
            found = fig.latency_samples(measures, self.mode.samples, self.log,
                                        f"listspiders.json {project}")
            self.put(key, {n: r["p50"] * 1000 for n, r in found.items()}, detail=found)

    def measure_idle_to_code(self, pair):
        scratch = os.path.join(self.root, "stamps")
        os.makedirs(scratch, exist_ok=True)
        measures = fig.each(pair, lambda s: fig.idle_to_code(s, scratch))
        measures.append(("direct", fig.direct_to_code(self.python, self.projects["one"],
                                                      scratch)))
        found = fig.latency_samples(measures, self.mode.stamp_samples, self.log,
                                    "idle -> code")
        direct = found.pop("direct")
        self.put("idle_to_code", {n: r["p50"] * 1000 for n, r in found.items()},
                 detail=dict(found, direct=direct))
        self.notes.append(f"idle -> code: the same crawl started directly (no service) runs"
                          f" its code after {direct['p50'] * 1000:.0f} ms (p50).")

    def measure_overhead(self, pair):
        m = self.mode
        totals = fig.job_overhead(pair, self.python, self.projects["one"], m.jobs, m.chunk,
                                  MAX_JOBS, os.path.join(self.root, "direct"), self.log)
        values = {s.name: (totals[s.name] - totals["direct"]) / m.jobs * 1000 for s in pair}
        self.put("overhead", values, detail=totals)
        line = ", ".join(f"{s.name} {totals[s.name]:.1f} s" for s in pair)
        self.notes.append(f"jobs: {m.jobs} crawls took {totals['direct']:.1f} s directly,"
                          f" {line}, in chunks of {m.chunk}.")
        for name, bad in totals["not_finished"].items():
            if bad:
                self.notes.append(f"jobs: {bad} job(s) through {name} did not finish.")

    def measure_schedule(self, pair):
        measures = fig.each(pair, fig.time_schedule)
        for _, measure in measures:
            measure()
        found = fig.latency_samples(measures, self.mode.samples, self.log, "schedule.json")
        self.put("schedule_p50", {n: r["p50"] * 1000 for n, r in found.items()}, detail=found)

    def measure_listjobs(self, pair, finished, rps_key, p99_key=None):
        m = self.mode
        started = time.monotonic()
        fig.fill_finished(pair, finished)
        self.log(f"job tables filled to {finished} finished jobs in"
                 f" {time.monotonic() - started:.1f} s")
        found = fig.load_figure(pair, "/listjobs.json", m.connections, m.duration, m.reps,
                                m.warmup, self.log)
        self.put(rps_key, {n: r["rps"] for n, r in found.items()}, detail=found)
        self.note_load(f"listjobs.json ({finished} finished)", found)
        if p99_key:
            self.put(p99_key, {n: r["p99"] * 1000 for n, r in found.items()},
                     stalled={n: r["stalled"] for n, r in found.items()})


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def header(mode, took=None, load_before=None, load_after=None):
    info = machine()
    v = versions()
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    text = (f"{when}; {info['nproc']} CPU(s), {info['cpu']}; Python {info['python']};"
            f" netweir {v['netweir']}, netweir-serve {v['netweir-serve']},"
            f" Twisted {v['twisted']}; mode {mode.name}")
    if took is not None:
        text += f"; took {took:.0f} s"
    if load_before is not None and load_after is not None:
        text += f"; load average {load_before:.2f} before, {load_after:.2f} after"
    return text


def report(bench, took=None, load_before=None, load_after=None):
    """The header, the table and the notes, as printed."""
    text = header(bench.mode, took, load_before, load_after) + "\n\n"
    text += render(bench.results, bench.labels())
    if bench.notes:
        text += "\n\n" + "\n".join(f"- {note}" for note in bench.notes)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_const", dest="mode", const="quick",
                       help="1 s per load run, one rep, fewer samples and jobs, 250 finished"
                            " jobs instead of 1,000 (under 2 minutes)")
    group.add_argument("--smoke", action="store_const", dest="mode", const="smoke",
                       help="start both services, one tiny figure, stop (a few seconds)")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement here")
    parser.add_argument("--keep-scratch", action="store_true",
                        help="leave the scratch directory (logs, job dirs) in place")
    args = parser.parse_args(argv)
    mode = MODES[args.mode or "full"]

    # SIGTERM (a CI timeout, say) unwinds like Ctrl-C, through the finally.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    root = tempfile.mkdtemp(prefix="netweir-serve-bench-")
    bench = Bench(mode, root)
    load_before = load_average()
    if load_before is not None and load_before > (os.cpu_count() or 1) / 2:
        log(f"note: the machine is busy (load average {load_before:.2f}): figures will be"
            " noisier")
    started = time.monotonic()
    try:
        bench.run()
    finally:
        bench.stop_all()
        signal.signal(signal.SIGTERM, previous)
        if args.keep_scratch:
            log(f"scratch directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    took = time.monotonic() - started
    load_after = load_average()
    print(report(bench, took, load_before, load_after))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header(mode, took, load_before, load_after),
                       "mode": asdict(mode), "machine": machine(), "versions": versions(),
                       "results": bench.results, "details": bench.details,
                       "notes": bench.notes}, f, indent=1, default=str)
    return 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
