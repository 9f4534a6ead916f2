"""The figures of issue 28's wave (``--only wave``): netweir-serve alone,
each beside what its user would do instead.

- **health**: a job's end recorded (``IJobStore.mark_finished`` on the
  real SQLite store, in this process, its statements run on the calling
  thread: the work its store thread does) with every run health check set
  and ``history=100``, against no checks; 100 healthy earlier runs of the
  same spider are in the table first, so the drop and slower checks read
  them all. p50 and p99, interleaved.
- **auth**: ``daemonstatus.json`` per request with basic auth
  (``--password``: what a user does without tokens), with a token's
  secret checked before (its check remembered), and with a token's first
  check (the scrypt KDF, in the KDF pool's threads).
- **audit**: ``pauseschedule.json`` (a new note each time: always a write)
  with its audit row committed before the answer, as the service runs,
  against the same with the audit taken out (the service cannot be
  started without one: ``api.audit`` set to None in-process, so that
  ``AuditLog.record`` is never called).

The auth and audit figures run in a process of their own
(``python -m bench.wave web SCRATCH --auth N --first N --audit N``, which
prints JSON): the real daemon (``makeService``, started as twistd starts it, on
the real reactor), each request fed to a connection of its real factory
(connection limits, guard, site, resource tree) over an in-memory
transport, as bench/micro.py does, and timed from its bytes handed in to
its connection closed after the answer. A request's own wall time: what
its client waits, less the sockets.
"""

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time

from twisted.internet import defer
from twisted.internet.testing import StringTransport

from netweir_serve.reliability.policy import HEALTH_KEYS

from .figures import EVERY_POLICY_KEY, percentile, rounds
from .services import OURS, ROOT

# Every run health check (reliability.policy.HEALTH_KEYS) as the policy
# figure gives them: at values a trivial run passes, so each is judged and
# none degrades it. history=100 is the most a policy may give.
EVERY_HEALTH_KEY = {key[1:]: value for key, value in EVERY_POLICY_KEY.items()
                    if key[1:] in HEALTH_KEYS}
HISTORY = 100

# Samples per figure, by mode: health ends of each kind, requests with
# basic auth and with a remembered token, tokens' first checks (each needs
# a token never checked, made before the service starts: its hash is one
# KDF), audit writes of each kind.
SIZES = {"full": (300, 200, 30, 100), "quick": (60, 50, 10, 30), "smoke": (8, 4, 2, 4)}

USERNAME, PASSWORD = "bench", "wave-password"
SCHEDULE = "wave"


# -- health: a job's end with every check, 100 earlier runs ---------------------


def health_end(samples, scratch, history=HISTORY):
    """``samples`` job ends recorded with EVERY_HEALTH_KEY and as many with
    no policy, interleaved, on a fresh SQLite table in ``scratch`` holding
    ``history`` healthy runs of the spider first; {"none": {...}, "all":
    {...}} each with p50, p99 (seconds), the samples, and cpu_p50 (the
    CPU seconds of the median end)."""
    from twisted.internet import task

    from netweir_serve.reliability.policy import JobPolicy
    from netweir_serve.store.sqlite import SQLiteJobStore

    os.makedirs(scratch, exist_ok=True)
    store = SQLiteJobStore(os.path.join(scratch, "jobs.db"), task.Clock())
    policies = {"none": None,
                "all": JobPolicy.parse(dict(EVERY_HEALTH_KEY, history=str(history))).to_json()}
    ended = _Ends(store)
    try:
        for _ in range(history):
            ended.one(None)
        times = {kind: [] for kind in policies}
        cpu = {kind: [] for kind in policies}
        for _, kind in rounds(list(policies), samples):
            times[kind].append(ended.one(policies[kind]))
            cpu[kind].append(ended.cpu[-1])
    finally:
        store.close()
    if ended.degraded:
        raise RuntimeError(f"{ended.degraded} trivial run(s) judged degraded: the checks"
                           " must pass (EVERY_HEALTH_KEY)")
    return {kind: dict(_summary(values), cpu_p50=statistics.median(cpu[kind]))
            for kind, values in times.items()}


class _Ends:
    """Adds, claims and ends one trivial job after another in ``store``
    (its Inline runner: each Deferred has fired when the call returns)."""

    def __init__(self, store):
        self.store = store
        self.count = 0
        self.degraded = 0
        # CPU seconds of each end (the commit's fsync waits for the disk:
        # wall time, not CPU).
        self.cpu = []
        self.now = 1_790_000_000.0

    def one(self, policy):
        """Seconds ``mark_finished`` took on a job of ``policy``."""
        from netweir_serve.store.records import JobRecord

        self.count += 1
        self.now += 10
        jobid = f"wave{self.count:08d}"
        _fired(self.store.add(JobRecord(id=jobid, project="one", spider="trivial",
                                        spider_file="/nowhere/spiders.py", created=self.now,
                                        policy=policy)))
        claimed = _fired(self.store.claim_next("bench", ["one"], self.now))
        if getattr(claimed, "id", None) != jobid:
            raise RuntimeError(f"claimed {claimed!r}, not job {jobid}")
        cpu, started = time.process_time(), time.perf_counter()
        d = self.store.mark_finished(jobid, "finished", self.now + 1.0, exit_status=0,
                                     stats={"items": 1, "fetched": 1, "failed": 0})
        elapsed = time.perf_counter() - started
        self.cpu.append(time.process_time() - cpu)
        record = _fired(d)
        if record.health != "healthy":
            self.degraded += 1
        return elapsed


def _fired(d):
    """The result of the Deferred ``d``, which must have fired."""
    found = []
    d.addBoth(found.append)
    if not found:
        raise RuntimeError("the store did not answer at once")
    if hasattr(found[0], "raiseException"):
        found[0].raiseException()
    return found[0]


def _summary(values):
    return {"p50": statistics.median(values), "p99": percentile(values, 99),
            "samples": values}


# -- auth and audit: the real daemon in a process of its own ---------------------


def web_figures(python, scratch, auth, first, audit, timeout=600):
    """The auth and audit figures (``auth`` requests with basic auth and as
    many with a remembered token, ``first`` first checks of a token,
    ``audit`` writes of each kind), measured by ``python -m bench.wave
    web``; its JSON."""
    os.makedirs(scratch, exist_ok=True)
    done = subprocess.run([python, "-m", "bench.wave", "web", scratch, "--auth", str(auth),
                           "--first", str(first), "--audit", str(audit)], cwd=ROOT,
                          stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items()
                               if not k.startswith("NETWEIR_SERVE_")})
    if done.returncode != 0:
        raise RuntimeError(f"python -m bench.wave web exited with status {done.returncode}:"
                           f" {done.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(done.stdout)


def _web(reactor, scratch, auth, first, audit):
    """The Deferred of the web figures (the subprocess's work)."""
    return defer.ensureDeferred(_measure_web(reactor, scratch, auth, first, audit))


async def _measure_web(reactor, scratch, auth, first, audit):
    from netweir_serve.options import ServeOptions
    from netweir_serve.service import makeService

    from .projects import write_projects

    projects = write_projects(os.path.join(scratch, "projects"), "http://127.0.0.1:9")
    directory = os.path.join(scratch, "serve")
    os.makedirs(directory, exist_ok=True)
    # One token for the remembered check, and one per first check.
    secrets_ = _add_tokens(os.path.join(directory, "jobs.db"), first + 1)
    options = ServeOptions({})
    options.parseOptions(["--dir", directory, "--port", "0", "--bind", "127.0.0.1",
                          "--project", f"one={projects['one']}", "--max-jobs", "2",
                          "--username", USERNAME, "--password", PASSWORD])
    serve = makeService(options.config(), reactor)
    serve.privilegedStartService()
    serve.startService()
    try:
        await serve.started
        feed = _Feed(serve.listening[0].factory)
        basic = b"Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode())
        remembered = b"Bearer " + secrets_[0].encode()
        firsts = [b"Bearer " + s.encode() for s in secrets_[1:]]
        status = _get(b"/daemonstatus.json")
        for header in (basic, remembered):  # the second check of this one is remembered
            await feed.timed(status, header)
        await feed.timed(_post(b"/addschedule.json", b"project=one&spider=trivial"
                               b"&every=1d&name=" + SCHEDULE.encode()), basic)

        times = {"basic": [], "token_cached": [], "token_first": []}
        for _, kind in rounds(list(times), max(auth, first)):
            if kind == "token_first":
                if firsts:
                    times[kind].append(await feed.timed(status, firsts.pop()))
            elif len(times[kind]) < auth:
                header = basic if kind == "basic" else remembered
                times[kind].append(await feed.timed(status, header))

        api = _api_of(serve)
        audit_log = api.audit
        writes = {"unaudited": [], "audited": []}
        for n, kind in rounds(list(writes), audit):
            pause = _post(b"/pauseschedule.json", b"project=one&name=" + SCHEDULE.encode()
                          + f"&note={kind}-{n}".encode())
            api.audit = audit_log if kind == "audited" else None
            try:
                writes[kind].append(await feed.timed(pause, basic))
            finally:
                api.audit = audit_log
        # Every audited write has its row; no unaudited one has.
        rows = [e for e in await serve.store.audit(limit=10 * audit + 100)
                if e.endpoint == "pauseschedule.json"]
        if len(rows) != audit:
            raise RuntimeError(f"{len(rows)} audit rows of pauseschedule.json, not {audit}")
    finally:
        await serve.stopService()
    found = {kind: _summary(values) for kind, values in dict(times, **writes).items()}
    found["audit_rows"] = len(rows)
    return found


def _add_tokens(path, count):
    """``count`` admin tokens written into the job table at ``path`` before
    the service opens it; their secrets."""
    from twisted.internet import task

    from netweir_serve.access.tokens import hash_secret, new_secret
    from netweir_serve.store.sqlite import SQLiteJobStore
    from netweir_serve.store.token_records import TokenRecord

    store = SQLiteJobStore(path, task.Clock())
    found = []
    try:
        for n in range(count):
            secret = new_secret(f"wave{n}")
            _fired(store.add_token(TokenRecord(name=f"wave{n}", role="admin",
                                               created=time.time(), hash=hash_secret(secret))))
            found.append(secret)
    finally:
        store.close()
    return found


def _get(path):
    return b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:6800\r\n"


def _post(path, body):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:6800\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n", body)


def _api_of(serve):
    """The Api the endpoints share (web/api.py): the one whose ``audit`` the
    audited writes record in."""
    factory = serve.listening[0].factory
    site = factory.wrappedFactory
    root = site.resource._wrapped
    return root.children[b"pauseschedule.json"].api


class _Feed:
    """Requests fed to new connections of ``factory`` over in-memory
    transports (one connection a request, ``Connection: close``)."""

    def __init__(self, factory):
        self.factory = factory
        self.port = 40000

    async def timed(self, request, authorization):
        """Seconds from ``request`` (head, or (head, body)) handed in to the
        connection closed after its answer, which must be a 200 "ok"."""
        from twisted.internet.address import IPv4Address
        from twisted.internet.error import ConnectionDone
        from twisted.python.failure import Failure

        head, body = request if isinstance(request, tuple) else (request, b"")
        data = (head + b"Authorization: " + authorization + b"\r\nConnection: close\r\n\r\n"
                + body)
        self.port = 40000 + (self.port - 39999) % 20000
        client = IPv4Address("TCP", "127.0.0.2", self.port)
        protocol = self.factory.buildProtocol(client)
        transport = _Closing(IPv4Address("TCP", "127.0.0.1", 6800), client)
        protocol.makeConnection(transport)
        started = time.perf_counter()
        protocol.dataReceived(data)
        await transport.closed
        elapsed = time.perf_counter() - started
        protocol.connectionLost(Failure(ConnectionDone()))
        answer = transport.value()
        status = answer.split(b"\r\n", 1)[0]
        if b" 200 " not in status or b'"ok"' not in answer:
            raise RuntimeError(f"{head.split(b' HTTP')[0].decode()}: {answer[:600]!r}")
        return elapsed


class _Closing(StringTransport):
    """A StringTransport whose ``closed`` fires when the server closes it."""

    def __init__(self, host, peer):
        super().__init__(hostAddress=host, peerAddress=peer)
        self.closed = defer.Deferred()

    def loseConnection(self):
        super().loseConnection()
        if not self.closed.called:
            self.closed.callback(None)

    def abortConnection(self):
        self.loseConnection()


# -- the table's rows -------------------------------------------------------------


def measure(bench):
    """Measures the wave's figures for ``bench`` (a bench.run.Bench) and
    puts them in its results and notes."""
    health_n, auth_n, first_n, audit_n = SIZES.get(bench.mode.name, SIZES["quick"])
    bench.log(f"wave: {health_n} job ends with every health check (history {HISTORY}) and"
              f" {health_n} without, on SQLite in this process")
    health = health_end(health_n, os.path.join(bench.root, "wave-health"))
    for p in ("p50", "p99"):
        bench.put(f"health_none_{p}", {OURS: health["none"][p] * 1e6},
                  detail=health if p == "p50" else None)
        bench.put(f"health_all_{p}", {OURS: health["all"][p] * 1e6})
    bench.log(f"  no checks: p50 {health['none']['p50'] * 1000:.2f} ms, p99"
              f" {health['none']['p99'] * 1000:.2f} ms; every check: p50"
              f" {health['all']['p50'] * 1000:.2f} ms, p99 {health['all']['p99'] * 1000:.2f} ms")
    bench.notes.append(
        f"wave: a job's end (mark_finished on SQLite, {health_n} of each, interleaved) used"
        f" {health['none']['cpu_p50'] * 1000:.2f} ms of CPU without checks and"
        f" {health['all']['cpu_p50'] * 1000:.2f} ms with every check against {HISTORY}"
        " earlier runs (p50); the rest of its time is the commit's fsync.")
    bench.log(f"wave: {auth_n} daemonstatus.json with basic auth and as many with a remembered"
              f" token, {first_n} first token checks, {audit_n} pauseschedule.json audited"
              " and as many not, in a process of their own")
    web = web_figures(bench.python, os.path.join(bench.root, "wave-web"), auth_n, first_n,
                      audit_n)
    keys = {"basic": "auth_basic", "token_cached": "auth_token_cached",
            "token_first": "auth_token_first", "unaudited": "audit_off", "audited": "audit_on"}
    for kind, key in keys.items():
        scale = 1e6 if key.startswith("auth_") else 1000  # us or ms (bench/table.py)
        bench.put(key, {OURS: web[kind]["p50"] * scale},
                  detail=web if kind == "basic" else None)
        bench.log(f"  {kind}: p50 {web[kind]['p50'] * 1000:.2f} ms, p99"
                  f" {web[kind]['p99'] * 1000:.2f} ms")
    bench.notes.append(
        f"wave: per request, p99 of {auth_n}: basic auth {web['basic']['p99'] * 1000:.2f} ms,"
        f" a remembered token {web['token_cached']['p99'] * 1000:.2f} ms; of {first_n} first"
        f" checks of a token {web['token_first']['p99'] * 1000:.1f} ms; pauseschedule.json"
        f" p99 of"
        f" {audit_n}: {web['unaudited']['p99'] * 1000:.1f} ms unaudited,"
        f" {web['audited']['p99'] * 1000:.1f} ms audited"
        + (f" ({web['audit_rows']} audit rows written)" if web.get("audit_rows") is not None
           else "") + ".")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.wave",
                                     description="the wave's auth and audit figures, in"
                                                 " this process (prints JSON)")
    parser.add_argument("what", choices=("web",))
    parser.add_argument("scratch", help="an empty directory to work in")
    parser.add_argument("--auth", type=int, default=SIZES["quick"][1],
                        help="requests with basic auth, and with a remembered token")
    parser.add_argument("--first", type=int, default=SIZES["quick"][2],
                        help="first checks of a token (each a token of its own)")
    parser.add_argument("--audit", type=int, default=SIZES["quick"][3],
                        help="pauseschedule.json audited, and as many not")
    args = parser.parse_args(argv)
    from twisted.internet import task

    found = {}

    def run(reactor):
        return _web(reactor, args.scratch, args.auth, args.first, args.audit).addCallback(
            found.update)

    try:
        task.react(run)
    except SystemExit as e:
        if e.code:
            raise
    json.dump(found, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
