"""The side-by-side benchmark: ``python -m bench [--quick | --smoke] [--only GROUPS]``.

Starts the local test site, writes the projects, starts ``netweir serve``
and netweir-serve on free loopback ports (each with a fresh --dir, both
with --max-jobs 2), measures every figure of bench/table.py on both,
interleaved, and prints one table. The figures come in groups (GROUPS),
measured on three pairs of services and a set of nodes:

- the first pair, on an empty job table: RSS idle and after the API run
  (memory), daemonstatus.json, listspiders.json, idle -> code, jobs (api),
  what watching costs (watching), a job file to many clients and a big one
  to a few (files);
- the second pair, on a full one: schedule.json, listjobs.json with 100
  and 1,000 finished jobs (api), /metrics renders with 1,000 and 10,000
  (watching), RSS with 10,000 (memory);
- the third pair: recurring schedules against cron (schedules);
- netweir-serve nodes on a PostgreSQL job table against one SQLite node
  (nodes; skipped, with a note, when no PostgreSQL server answers).
- netweir-serve's deadline watch with 1,000 running jobs on a Clock, in
  this process (deadlines; bench/deadlines.py).
- issue 28's wave: a job's end with every health check, token checks
  against basic auth, an audited write against one without (wave;
  bench/wave.py).
- the console's first paint in Chromium with 10,000 finished jobs, beside
  ScrapydWeb's jobs page on the same table (console; bench/console.py).

Everything it started is stopped when it ends, however it ends.
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
import traceback
from dataclasses import asdict

from . import cluster
from . import figures as fig
from . import console, deadlines, files, paged, schedules, stall, wave
from .modes import GROUPS, MODES, labels
from .projects import write_projects
from .services import OURS, SLUGS, Service, Site, commands, kill_leftovers, log
from .table import BY_KEY, render

KEEP = 1000
MAX_JOBS = 2


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
    """One run of the benchmark in the scratch directory ``root``: the
    figures of ``groups`` (all by default). With ``keep_going``, a part
    that fails is noted (its rows stay "-") and the others still run."""

    def __init__(self, mode, root, python=sys.executable, log=log, groups=GROUPS,
                 keep_going=False):
        self.mode = mode
        self.root = root
        self.python = python
        self.log = log
        self.groups = set(groups)
        self.keep_going = keep_going
        self.results = {}
        self.details = {}
        self.notes = []
        self.failed = []
        self.site = None
        self.services = []
        self.nodes = None
        self.projects = None

    # -- processes ---------------------------------------------------------------

    def start_site(self):
        self.site = Site(self.python)
        self.projects = write_projects(os.path.join(self.root, "projects"), self.site.url)

    def start_pair(self, label, keep=KEEP):
        """Both services, each with a fresh --dir; [theirs, ours]."""
        pair = []
        for name, command in commands(self.python).items():
            directory = os.path.join(self.root, f"{label}-{SLUGS[name]}")
            service = Service(name, command, directory, self.projects, max_jobs=MAX_JOBS,
                              keep=keep)
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
        if self.nodes is not None:
            self.nodes.stop_all()
        if self.site is not None:
            self.site.stop()
        left = kill_leftovers(self.root)
        if left:
            self.log(f"killed {left} leftover process(es)")

    # -- the run -----------------------------------------------------------------------

    def labels(self):
        return labels(self.mode)

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

    def put(self, key, values, extra=None, detail=None):
        """Records a figure: ``values`` by service, ``extra`` (the figure's
        bracketed second value, by service), ``detail`` for --json."""
        self.results[key] = dict(values)
        if extra is not None:
            self.results[key][BY_KEY[key].extra] = dict(extra)
        if detail is not None:
            self.details[key] = detail

    def wants(self, *groups):
        return bool(self.groups.intersection(groups))

    def run(self):
        self.start_site()
        if self.mode.name == "smoke":
            self.part("smoke", self.smoke_pair)
            return self.results
        if self.wants("api", "watching", "memory", "files", "reliability"):
            self.part("the first pair", self.first_pair)
        if self.wants("api", "watching", "memory"):
            self.part("the second pair", self.second_pair)
        if self.wants("schedules"):
            self.part("schedules", self.schedules_pair)
        if self.wants("nodes"):
            self.part("nodes", self.measure_nodes)
        if self.wants("stall"):
            self.part("stall", self.measure_stall)
        if self.wants("paged"):
            self.part("paged", self.measure_paged)
        if self.wants("deadlines"):
            self.part("deadlines", self.measure_deadlines)
        if self.wants("wave"):
            self.part("wave", lambda: wave.measure(self))
        if self.wants("console"):
            self.part("console", self.measure_console)
        return self.results

    def part(self, name, step):
        """Runs ``step``; with keep_going, a failure is logged and noted."""
        if not self.keep_going:
            return step()
        try:
            return step()
        except Exception as e:
            self.log(f"{name} failed:\n{traceback.format_exc()}")
            self.failed.append(name)
            self.notes.append(f"{name}: FAILED ({type(e).__name__}: {e}); the figures it"
                              " had not measured yet show '-'.")

    def smoke_pair(self):
        pair = self.start_pair("a")
        try:
            self.measure_rss(pair, "rss_idle")
            self.measure_status(pair)
        finally:
            self.stop_pair(pair)

    def first_pair(self):
        pair = self.start_pair("a")
        try:
            if self.wants("memory"):
                self.measure_rss(pair, "rss_idle")
            if self.wants("api", "memory"):
                self.measure_status(pair)
            if self.wants("memory"):
                self.measure_rss_api(pair)
            if self.wants("watching"):
                self.measure_watched(pair)
            if self.wants("api"):
                self.measure_listspiders(pair)
                self.measure_idle_to_code(pair)
                self.measure_overhead(pair)
            if self.wants("files"):
                self.measure_files(pair)
            if self.wants("reliability"):
                self.measure_policy_cost(pair)
        finally:
            self.stop_pair(pair)

    def second_pair(self):
        m = self.mode
        pair = self.start_pair("b", keep=max(KEEP, m.huge_table + 100))
        try:
            holds = {s.name: fig.hold_slots(s, MAX_JOBS) for s in pair}
            if self.wants("api"):
                self.measure_schedule(pair)
                self.measure_listjobs(pair, m.small_table, "jobs100_rps")
                self.measure_listjobs(pair, m.big_table, "jobs1000_rps", "jobs1000_p99")
            if self.wants("watching"):
                self.fill(pair, m.big_table)
                self.measure_metrics(pair, "metrics_p50")
            if self.wants("watching", "memory"):
                self.fill(pair, m.huge_table)
            if self.wants("watching"):
                self.measure_metrics(pair, "metrics_huge")
            if self.wants("memory"):
                self.measure_rss_huge(pair)
            for s in pair:
                fig.release_slots(s, holds[s.name])
        finally:
            self.stop_pair(pair)

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
                 extra={n: r["stalled"] for n, r in found.items()})

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

    def measure_metrics(self, pair, key):
        """Ours: one /metrics render after a change; theirs, which has no
        /metrics: the listjobs.json an exporter would read instead."""
        measures = [(s.name, (fig.time_metrics_render if s.name == OURS
                              else fig.time_listjobs_render)(s)) for s in pair]
        for _, measure in measures:
            measure()
        found = fig.latency_samples(measures, self.mode.samples, self.log,
                                    "/metrics (theirs: listjobs.json) after a change")
        self.put(key, {n: r["p50"] * 1000 for n, r in found.items()}, detail=found)

    def measure_rss_api(self, pair):
        """RSS after the API run: the daemonstatus.json runs before, and
        listjobs.json runs on the empty table now."""
        m = self.mode
        self.log(f"listjobs.json, empty table, {m.connections} connections, {m.reps} x"
                 f" {m.duration:g} s")
        found = fig.load_figure(pair, "/listjobs.json", m.connections, m.duration, m.reps,
                                m.warmup, self.log)
        self.details["listjobs_empty"] = found
        self.note_load("listjobs.json (empty table)", found)
        self.measure_rss(pair, "rss_api")

    def measure_rss_huge(self, pair):
        """RSS with the big table, after a listjobs.json run on it."""
        m = self.mode
        found = fig.load_figure(pair, "/listjobs.json", m.connections, m.duration, 1,
                                m.warmup, self.log)
        self.details["listjobs_huge"] = found
        self.note_load(f"listjobs.json ({m.huge_table:,} finished)", found)
        self.measure_rss(pair, "rss_huge")

    def fill(self, pair, finished):
        """Fills both job tables to at least ``finished`` finished jobs."""
        if all(s.counts()["finished"] >= finished for s in pair):
            return
        started = time.monotonic()
        fig.fill_finished(pair, finished, timeout=max(300, finished * 0.2))
        self.log(f"job tables filled to {finished:,} finished jobs in"
                 f" {time.monotonic() - started:.1f} s")

    def measure_files(self, pair):
        m = self.mode
        folder = os.path.join(self.root, "files")
        os.makedirs(folder, exist_ok=True)
        path = files.write_file(os.path.join(folder, "job.jsonl"), m.file_mb)
        files.place(pair, path)
        self.log(f"a {m.file_mb} MB job file, {m.connections} connections, {m.reps} x"
                 f" {m.duration:g} s")
        found = files.rate_figure(pair, m.connections, m.duration, m.reps, m.warmup, self.log)
        self.put("file_rps", {n: r["rps"] for n, r in found.items()}, detail=found)
        self.put("file_cpu", {n: r["cpu_ms"] for n, r in found.items()})
        os.unlink(path)
        path = files.write_file(os.path.join(folder, "big.jsonl"), m.big_file_mb)
        files.place(pair, path)
        self.log(f"a {m.big_file_mb} MB items file, {m.fetchers} clients at once")
        big = files.big_figure(pair, m.fetchers, m.big_file_mb, self.log)
        self.put("bigfile_rss", {n: r["peak"] for n, r in big.items()},
                 extra={n: r["peak"] - r["before"] for n, r in big.items()}, detail=big)
        files.unplace(pair)
        os.unlink(path)
        for what, errors in (("job file", {n: r["errors"] for n, r in found.items()}),
                             ("big file", {n: r["errors"] for n, r in big.items()})):
            for name, count in errors.items():
                if count:
                    self.notes.append(f"files: {count} failed fetch(es) of the {what} on"
                                      f" {name}.")

    def schedules_pair(self):
        m = self.mode
        pair = self.start_pair("c")
        try:
            ours = next(s for s in pair if s.name == OURS)
            names = [f"idle{n:04d}" for n in range(m.schedules)]
            took = schedules.add_schedules(ours, names, lambda: "1d")
            self.log(f"{m.schedules:,} schedules (every=1d) added to {OURS} in {took:.1f} s;"
                     f" both idle for {m.idle_seconds:g} s")
            idle = schedules.idle_cpu(pair, m.idle_seconds)
            self.put("sched_idle_cpu", idle)
            for s in pair:
                fig.hold_slots(s, MAX_JOBS)
            self.log(f"{m.schedules:,} firings due in one second, {m.schedule_rounds} round(s)"
                     f" each (theirs: schedule.json, {schedules.CRON_CONNECTIONS} at a time)")
            late = schedules.lateness(pair, m.schedules, m.schedule_rounds, took, self.log)
            self.put("sched_late_p50", {n: r["p50"] * 1000 for n, r in late.items()},
                     detail=late)
            self.put("sched_late_p99", {n: r["p99"] * 1000 for n, r in late.items()})
            # Stopping ends the blockers; the jobs queued stay pending, unrun.
        finally:
            self.stop_pair(pair)

    def measure_nodes(self):
        root = os.path.join(self.root, "nodes")
        os.makedirs(root, exist_ok=True)
        try:
            self.nodes = cluster.ClusterBench(self.mode.nodes, root, self.projects,
                                              self.python, self.log)
        except cluster.Unavailable as e:
            self.log(f"nodes: not measured: {e}")
            self.notes.append(f"nodes: not measured: {e}.")
            return
        try:
            self.nodes.run()
        finally:
            self.nodes.stop_all()
        for key, value in cluster.table_values(self.nodes.results).items():
            self.put(key, {OURS: value})
        self.details["nodes"] = self.nodes.results
        self.notes += cluster.notes(self.nodes.results)

    def measure_paged(self):
        m = self.mode
        self.log(f"paged listings: {m.paged_jobs:,} finished jobs")
        values, notes, detail = paged.measure(self, m.paged_jobs, max(3, m.samples))
        for key, found in values.items():
            self.put(key, found, detail=detail if key == "paged_p50" else None)
        self.notes += notes

    def measure_stall(self):
        m = self.mode
        self.log(f"the reactor's largest stall: {m.stall_jobs:,} finished + {m.stall_jobs:,}"
                 f" pending jobs, a burst of {m.stall_rounds} rounds from 2 clients")
        values, notes, detail = stall.measure(self, m.stall_jobs, m.stall_rounds,
                                              max(3, m.samples))
        self.put("stall_burst", values, detail=detail)
        self.notes += notes

    def measure_deadlines(self):
        """Ours alone, in this process, on a Clock (bench/deadlines.py)."""
        jobs = self.mode.deadline_jobs
        self.log(f"the deadline watch: {jobs:,} running jobs on a Clock")
        found = deadlines.measure(jobs)
        self.put("deadline_error", {OURS: found["error_ms"]}, extra={OURS: found["timers"]},
                 detail=found)
        self.notes.append(
            f"deadlines: {found['deadlines']:,} jobs cancelled ({found['by_reason']['timeout']:,}"
            f" at their timeout, {found['by_reason']['stalled']:,} stalled), at most"
            f" {found['timers']} timer of the watch at once; {found['cpu_us']:.0f} us of CPU"
            " per deadline, the stats rounds that fed the stall watch included.")

    def measure_console(self):
        """Ours alone, with ScrapydWeb in theirs' column (bench/console.py)."""
        m = self.mode
        try:
            values, notes, detail = console.measure(self, m.console_jobs, m.console_loads,
                                                    m.console_their_loads, m.console_install)
        except console.Unavailable as e:
            self.notes.append(f"console: not measured: {e}.")
            return
        for key, value in values.items():
            self.put(key, value, detail=detail if key == "console_fcp" else None)
        self.notes += notes

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

    def measure_policy_cost(self, pair):
        m = self.mode
        ours = next(s for s in pair if s.name == OURS)
        totals = fig.policy_cost(ours, m.jobs, m.chunk or m.jobs, self.log)
        per_job = {kind: totals[kind] / m.jobs * 1000 for kind in ("none", "all")}
        self.put("policy_none", {OURS: per_job["none"]}, detail=totals)
        self.put("policy_all", {OURS: per_job["all"]})
        self.notes.append(f"reliability: {m.jobs} trivial jobs took {totals['none']:.1f} s"
                          f" without a policy and {totals['all']:.1f} s with every key"
                          f" ({per_job['all'] - per_job['none']:+.1f} ms a job), in"
                          f" alternating chunks of {m.chunk or m.jobs}.")
        for kind, bad in totals["not_finished"].items():
            if bad:
                self.notes.append(f"reliability: {bad} job(s) with policy {kind} did not"
                                  " finish.")

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
        self.fill(pair, finished)
        found = fig.load_figure(pair, "/listjobs.json", m.connections, m.duration, m.reps,
                                m.warmup, self.log)
        self.put(rps_key, {n: r["rps"] for n, r in found.items()}, detail=found)
        self.note_load(f"listjobs.json ({finished} finished)", found)
        if p99_key:
            self.put(p99_key, {n: r["p99"] * 1000 for n, r in found.items()},
                     extra={n: r["stalled"] for n, r in found.items()})


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def header(mode, took=None, load_before=None, load_after=None):
    info = machine()
    v = versions()
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    text = (f"{when}; {info['nproc']} CPU(s), {info['cpu']}; Linux {info['kernel']};"
            f" Python {info['python']};"
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
                       help="1 s per load run, one rep, fewer samples, jobs and schedules,"
                            " 250 and 1,000 finished jobs instead of 1,000 and 10,000"
                            " (under 10 minutes)")
    group.add_argument("--smoke", action="store_const", dest="mode", const="smoke",
                       help="start both services, one tiny figure, stop (a few seconds)")
    parser.add_argument("--only", metavar="GROUPS", type=_groups, default=GROUPS,
                        help=f"measure only these groups of figures, comma-separated:"
                             f" {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement here")
    parser.add_argument("--keep-scratch", action="store_true",
                        help="leave the scratch directory (logs, job dirs) in place")
    args = parser.parse_args(argv)
    mode = MODES[args.mode or "full"]

    # SIGTERM (a CI timeout, say) unwinds like Ctrl-C, through the finally.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    root = tempfile.mkdtemp(prefix="netweir-serve-bench-")
    bench = Bench(mode, root, groups=args.only, keep_going=True)
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
    return 1 if bench.failed else 0


def _groups(text):
    groups = [g.strip() for g in text.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown or not groups:
        raise argparse.ArgumentTypeError(f"groups are {', '.join(GROUPS)}; not"
                                         f" {', '.join(unknown) or 'none'}")
    return groups


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
