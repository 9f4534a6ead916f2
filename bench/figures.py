"""Measuring each figure of the table on both services.

Every function here takes ``services``, a list of running ``Service``s,
and measures them in turn, interleaved (one rep or one sample of each,
then the next, with the order swapped every round), so a slow moment of
the machine falls on both; it returns ``{service name: value}`` or
``{service name: {detail: value}}``.
"""

import http.client
import os
import selectors
import socket
import statistics
import subprocess
import threading
import time
import uuid

from . import load as loadgen
from .projects import MAIN_FILE
from .services import cpu_seconds, wait_until


def percentile(values, p):
    """The ``p``-th percentile of ``values``, interpolated between the two
    nearest ranks; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    k = (len(ordered) - 1) * p / 100
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def rounds(services, count):
    """(round, service) pairs: every service once per round, the order
    reversed on odd rounds."""
    for n in range(count):
        order = services if n % 2 == 0 else list(reversed(services))
        for service in order:
            yield n, service


# -- HTTP load -------------------------------------------------------------------


def measure_load(service, path, connections, duration, warmup=0.0):
    """One load run against ``service``; a dict of what it measured."""
    if warmup:
        loadgen.load(service.port, path, connections, warmup)
    cpu0, wall0 = cpu_seconds(service.pid), time.monotonic()
    result = loadgen.load(service.port, path, connections, duration)
    wall = time.monotonic() - wall0
    return {
        "rps": result.rps,
        "p50": result.percentile(50),
        "p99": result.percentile(99),
        "stalled": result.stalled,
        "errors": result.errors,
        "unfinished": result.unfinished,
        "connects": result.connects,
        "server_cpu": (cpu_seconds(service.pid) - cpu0) / wall,
        "client_cpu": result.client_cpu,
        "error_samples": result.error_samples,
    }


def load_figure(services, path, connections, duration, reps, warmup=0.0, log=None):
    """``reps`` interleaved load runs per service; per service, the median
    of requests/s and of p99, the total of stalled requests and errors,
    and every run."""
    runs = {s.name: [] for s in services}
    for n, service in rounds(services, reps):
        run = measure_load(service, path, connections, duration, warmup)
        runs[service.name].append(run)
        if log:
            log(f"  {service.name:14} {path} rep {n + 1}: {run['rps']:,.0f} req/s,"
                f" p99 {_ms(run['p99'])}, stalled {run['stalled']}, errors {run['errors']},"
                f" server CPU {run['server_cpu']:.0%}, client CPU {run['client_cpu']:.0%}")
    return {name: {
        "rps": statistics.median(r["rps"] for r in rs),
        "p99": statistics.median(r["p99"] for r in rs),
        "stalled": sum(r["stalled"] for r in rs),
        "errors": sum(r["errors"] for r in rs),
        "runs": rs,
    } for name, rs in runs.items()}


def _ms(seconds):
    if seconds is None:
        return "-"
    if seconds == float("inf"):
        return "unanswered"
    return f"{seconds * 1000:,.1f} ms"


# -- single requests -------------------------------------------------------------------


def latency_samples(participants, count, log=None, label=""):
    """``count`` interleaved calls of each ``(name, measure)`` in
    ``participants`` (``measure()`` returns seconds);
    {name: {"p50": median, "samples": [...]}}."""
    samples = {name: [] for name, _ in participants}
    for _, (name, measure) in rounds(participants, count):
        samples[name].append(measure())
    result = {name: {"p50": statistics.median(values), "samples": values}
              for name, values in samples.items()}
    if log:
        for name, r in result.items():
            log(f"  {name:14} {label}: p50 {_ms(r['p50'])}"
                f" (min {_ms(min(r['samples']))}, max {_ms(max(r['samples']))})")
    return result


def each(services, make):
    """[(name, measure)] for ``latency_samples``: ``make(service)`` is the
    measure of one service."""
    return [(s.name, make(s)) for s in services]


def time_listspiders(project):
    def make(service):
        def measure():
            started = time.perf_counter()
            answer = service.get("listspiders.json", [("project", project)])
            elapsed = time.perf_counter() - started
            if answer.get("status") != "ok":
                raise RuntimeError(f"{service.name}: listspiders.json failed: {answer}")
            return elapsed
        return measure
    return make


def time_schedule(service):
    """A schedule.json while both slots are held (the job stays pending),
    then the job is cancelled, outside the time."""
    def measure():
        started = time.perf_counter()
        jobid = service.schedule("one", "trivial")
        elapsed = time.perf_counter() - started
        service.cancel("one", jobid)
        return elapsed
    return measure


def hold_slots(service, count, timeout=60):
    """Schedules ``count`` blocker jobs and waits until they run; their ids."""
    jobs = [service.schedule("one", "blocker") for _ in range(count)]
    wait_until(lambda: service.counts()["running"] >= count, timeout,
               f"{service.name}: the blockers to run")
    return jobs


def release_slots(service, jobs, timeout=60):
    for jobid in jobs:
        service.cancel("one", jobid)
    service.wait_counts(timeout, "the blockers to end", running=0)


def _read_stamp(stampfile, what):
    wait_until(lambda: os.path.exists(stampfile), 30, f"{what}: the stamp spider to run",
               interval=0.001)
    with open(stampfile) as f:
        return float(f.read())


def idle_to_code(service, scratch):
    """The measure of the time from just before schedule.json is sent to
    the moment the stamp spider's code runs (its own time.time()), on an
    idle service; it then waits for the job to end."""

    def measure():
        service.wait_counts(60, "to be idle", pending=0, running=0)
        stampfile = os.path.join(scratch, f"stamp-{uuid.uuid4().hex}")
        started = time.time()
        service.schedule("one", "stamp", stampfile=stampfile)
        stamped = _read_stamp(stampfile, service.name)
        service.wait_counts(60, "the stamp job to end", pending=0, running=0)
        return stamped - started

    return measure


def direct_to_code(python, project_dir, scratch):
    """The same without a service: from just before ``netweir crawl`` is
    started (as a service would start it) to the stamp spider's code."""

    def measure():
        stampfile = os.path.join(scratch, f"stamp-{uuid.uuid4().hex}")
        argv = crawl_argv(python, project_dir, "stamp",
                          os.path.join(scratch, "direct-stamp.jsonl"))
        started = time.time()
        process = subprocess.Popen(argv + [f"-astampfile={stampfile}"], cwd=project_dir,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=crawl_environment(),
                                   start_new_session=True)
        try:
            stamped = _read_stamp(stampfile, "directly")
        finally:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return stamped - started

    return measure


# -- jobs ----------------------------------------------------------------------------


def crawl_argv(python, project_dir, spider, items):
    return [python, "-m", "netweir", "crawl", os.path.join(project_dir, MAIN_FILE),
            f"--spider={spider}", f"--output={items}"]


def crawl_environment():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_direct(python, project_dir, count, parallel, scratch, timeout=600):
    """Runs ``count`` trivial crawls directly, ``parallel`` at a time, as
    ``netweir crawl`` from the project's directory; seconds taken."""
    os.makedirs(scratch, exist_ok=True)
    env = crawl_environment()
    running = []
    started = time.monotonic()
    deadline = started + timeout
    failed = 0
    with open(os.devnull, "wb") as devnull:
        for n in range(count):
            while len(running) >= parallel:
                running, failed = _reap(running, failed, deadline)
            argv = crawl_argv(python, project_dir, "trivial",
                              os.path.join(scratch, f"direct-{n}.jsonl"))
            running.append(subprocess.Popen(argv, cwd=project_dir, stdin=subprocess.DEVNULL,
                                            stdout=devnull, stderr=devnull, env=env,
                                            start_new_session=True))
        while running:
            running, failed = _reap(running, failed, deadline)
    if failed:
        raise RuntimeError(f"{failed} of the direct crawls failed")
    return time.monotonic() - started


def _reap(running, failed, deadline):
    if time.monotonic() > deadline:
        for p in running:
            p.kill()
        raise TimeoutError("the direct crawls took too long")
    still = []
    for p in running:
        code = p.poll()
        if code is None:
            still.append(p)
        elif code != 0:
            failed += 1
    if len(still) == len(running):
        time.sleep(0.002)
    return still, failed


def run_through(service, count, timeout=600, **params):
    """Schedules ``count`` trivial jobs on an idle ``service`` (one client,
    one request after the other; ``params`` go with each schedule.json) and
    waits until every one has ended; seconds from the first schedule.json
    to the end of the last job, and how many did not finish with outcome
    "finished"."""
    service.wait_counts(60, "to be idle", pending=0, running=0)
    started = time.monotonic()
    jobs = [service.schedule("one", "trivial", **params) for _ in range(count)]
    wait_until(lambda: (lambda c: c["pending"] == 0 and c["running"] == 0)(service.counts()),
               timeout, f"{service.name}: {count} jobs to end", interval=0.01)
    elapsed = time.monotonic() - started
    finished = service.get("listjobs.json")["finished"]
    outcomes = {e["id"].lower(): e.get("outcome") for e in finished}
    bad = sum(1 for j in jobs if outcomes.get(j.lower()) != "finished")
    return elapsed, bad


def interleaved(participants, jobs, chunk, log=None):
    """Runs ``jobs`` jobs of each of ``participants`` ((name, run) pairs,
    ``run(k)`` running k jobs and giving (seconds, how many did not
    finish)), in chunks of ``chunk``, the order turning at each chunk so
    that a busy moment of the machine falls on all alike; {name: seconds,
    ..., "not_finished": {name: count}}."""
    totals = {name: 0.0 for name, _ in participants}
    bad = {name: 0 for name, _ in participants}
    done, n = 0, 0
    while done < jobs:
        k = min(chunk, jobs - done)
        turn = n % len(participants)
        for name, run in participants[turn:] + participants[:turn]:
            took, failed = run(k)
            totals[name] += took
            bad[name] += failed
            if log:
                log(f"  {k} jobs {name + ':':15} {took:.2f} s")
        done += k
        n += 1
    totals["not_finished"] = bad
    return totals


def job_overhead(services, python, project_dir, jobs, chunk, parallel, scratch, log=None):
    """Runs ``jobs`` trivial crawls directly and through each service, in
    interleaved chunks of ``chunk``; {"direct": seconds, name: seconds,
    ..., "not_finished": {name: count}}."""
    participants = [("direct", lambda k: (run_direct(python, project_dir, k, parallel,
                                                      scratch), 0))]
    participants += [(s.name, lambda k, s=s: run_through(s, k)) for s in services]
    return interleaved(participants, jobs, chunk, log)


# A policy of every key (reliability.policy.KEYS) that never fires on a
# trivial job: what each costs a job that runs normally (its deadlines
# watched, its retry decided at the end, its control group made, joined
# and removed, its health judged against its 100 last runs).
EVERY_POLICY_KEY = {"_timeout": "1h", "_stall": "1h", "_expire": "1h", "_retries": "2",
                    "_retry_on": "failed", "_backoff": "1m", "_memory": "1G", "_cpu": "1",
                    # Run health's checks, at values a trivial run passes
                    # (1 item, 1 page, no error, about the same runtime).
                    "_min_items": "1", "_min_pages": "1", "_items_drop": "50",
                    "_pages_drop": "50", "_max_errors": "10", "_slower": "10",
                    "_history": "100"}


def policy_cost(service, jobs, chunk, log=None):
    """Runs ``jobs`` trivial jobs through ``service`` without a policy and
    as many with EVERY_POLICY_KEY, in interleaved chunks of ``chunk``;
    {"none": seconds, "all": seconds, "not_finished": {kind: count}}."""
    return interleaved([("none", lambda k: run_through(service, k)),
                        ("all", lambda k: run_through(service, k, **EVERY_POLICY_KEY))],
                       jobs, chunk, log)


def fill_finished(services, target, threads=4, timeout=300):
    """Brings each service's finished jobs up to ``target`` through the
    public API alone, quickly: with every slot held by a blocker, each job
    is scheduled (it stays pending) and cancelled at once, which finishes
    it. All services are filled at the same time (nothing is measured)."""
    errors = []

    def fill(service, count):
        try:
            for _ in range(count):
                service.cancel("one", service.schedule("one", "trivial"))
        except Exception as e:  # reported below
            errors.append(f"{service.name}: {e}")

    workers = []
    for service in services:
        missing = target - service.counts()["finished"]
        for n in range(threads):
            share = missing // threads + (1 if n < missing % threads else 0)
            if share > 0:
                workers.append(threading.Thread(target=fill, args=(service, share), daemon=True))
    for w in workers:
        w.start()
    deadline = time.monotonic() + timeout
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    if any(w.is_alive() for w in workers):
        raise TimeoutError(f"filling the job tables took more than {timeout} s")
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    for service in services:
        finished = service.counts()["finished"]
        if finished < target:
            raise RuntimeError(f"{service.name} has {finished} finished jobs, not {target}")


def settle_rss(service, seconds=1.0):
    """The daemon's RSS after ``seconds`` of quiet, in MB."""
    time.sleep(seconds)
    return service.rss_mb()



# -- what watching costs (ours alone: netweir serve has no /events or /metrics) --


class Watchers:
    """``streams`` open /events streams on ``service``, read and dropped by
    one thread, and a /metrics scrape every ``scrape_every`` seconds by
    another, until ``stop()``. The streams come from source addresses of
    their own (127.0.1.x, 4 each), apart from the load generator's, under
    the service's cap of 8 connections per address."""

    PER_SOURCE = 4

    def __init__(self, service, streams, scrape_every=1.0):
        self.service = service
        self.scrapes = 0
        self.scrape_errors = 0
        self.received = 0
        self._stop = threading.Event()
        self._sockets = []
        for n in range(streams):
            source = f"127.0.1.{1 + n // self.PER_SOURCE}"
            sock = socket.create_connection(("127.0.0.1", service.port), timeout=10,
                                            source_address=(source, 0))
            sock.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{service.port}\r\n"
                         "Accept: text/event-stream\r\n\r\n".encode("ascii"))
            sock.setblocking(False)
            self._sockets.append(sock)
        self._threads = [threading.Thread(target=self._read, daemon=True)]
        if scrape_every:
            self._threads.append(threading.Thread(target=self._scrape, args=(scrape_every,),
                                                  daemon=True))
        for t in self._threads:
            t.start()

    def _read(self):
        selector = selectors.DefaultSelector()
        for sock in self._sockets:
            selector.register(sock, selectors.EVENT_READ)
        while not self._stop.is_set():
            for key, _ in selector.select(0.2):
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(key.fileobj)
                self.received += len(data)
        selector.close()

    def _scrape(self, every):
        while not self._stop.wait(every):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.service.port, timeout=10)
                conn.request("GET", "/metrics")
                answer = conn.getresponse()
                answer.read()
                conn.close()
                if answer.status == 200:
                    self.scrapes += 1
                else:
                    self.scrape_errors += 1
            except OSError:
                self.scrape_errors += 1

    def open_streams(self):
        """How many streams the service says are open (its own metric)."""
        status, _, body = http_get(self.service.port, "/metrics")
        for line in body.decode().splitlines():
            if line.startswith("netweir_serve_event_streams "):
                return int(float(line.split()[1]))
        return None

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(5)
        for sock in self._sockets:
            sock.close()


def http_get(port, path, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        conn.close()


def watched_status(service, connections, duration, reps, streams, warmup=0.0, log=None):
    """daemonstatus.json's rate on ``service`` alone, without and with
    ``streams`` open /events streams and a /metrics scrape every second,
    runs interleaved (the order swapped each rep); {"unwatched": ...,
    "watched": ..., "runs": ..., "streams_seen": n, "scrapes": n}."""
    runs = {"unwatched": [], "watched": []}
    seen, scrapes, errors = None, 0, 0
    for n in range(reps):
        order = ("unwatched", "watched") if n % 2 == 0 else ("watched", "unwatched")
        for kind in order:
            watchers = Watchers(service, streams) if kind == "watched" else None
            try:
                if watchers is not None:
                    wait_until(lambda: watchers.open_streams() == streams, 10,
                               "the /events streams to open")
                run = measure_load(service, "/daemonstatus.json", connections, duration, warmup)
                if watchers is not None:
                    seen = watchers.open_streams()
            finally:
                if watchers is not None:
                    watchers.stop()
                    scrapes += watchers.scrapes
                    errors += watchers.scrape_errors
            runs[kind].append(run)
            if log:
                log(f"  {service.name:14} daemonstatus.json {kind} rep {n + 1}:"
                    f" {run['rps']:,.0f} req/s, p99 {_ms(run['p99'])}, errors {run['errors']}")
    result = {kind: statistics.median(r["rps"] for r in rs) for kind, rs in runs.items()}
    result.update(runs=runs, streams_seen=seen, scrapes=scrapes, scrape_errors=errors)
    return result


def time_after_change(path, expect):
    """The maker of a measure (for ``each``) of one GET of ``path`` right
    after the job table changed (a job scheduled and cancelled first,
    outside the time), so that nothing cached answers it: the whole cost
    of building the answer. ``expect`` must be in a good answer."""
    def make(service):
        def measure():
            service.cancel("one", service.schedule("one", "trivial"))
            started = time.perf_counter()
            status, _, body = http_get(service.port, path)
            elapsed = time.perf_counter() - started
            if status != 200 or expect not in body:
                raise RuntimeError(f"{service.name}: {path} answered {status}")
            return elapsed
        return measure
    return make


# One /metrics render (ours), and what a scrapyd exporter would read from
# netweir serve instead, which has no /metrics: the whole job listing.
time_metrics_render = time_after_change("/metrics", b"netweir_serve_jobs{")
time_listjobs_render = time_after_change("/listjobs.json", b'"finished"')
