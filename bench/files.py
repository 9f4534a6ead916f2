"""Job files: a file fetched over and over by many clients, and a big one
fetched by a few at once, on each service.

The file is written once and linked into each service's
DIR/items/one/trivial/ (the same inode, so the same page cache), and
measured as:

- ``rate_figure``: CONNS clients (from 127.0.0.2, .3... 4 each, under the
  per-address cap) fetching the whole file over and over for SECONDS, after
  a warm-up: requests/s, and the service's CPU (utime + stime from
  /proc/PID/stat) per request. Reps alternate between the services.
- ``big_figure``: FETCHERS clients fetching a big file at once, whole; the
  service's RSS before and its largest value while they fetch (sampled
  every 20 ms).

The client reads the headers of each answer and then discards the body in the
kernel (``recv`` with MSG_TRUNC, which TCP supports on Linux): the bytes still
cross the socket, but the client copies none of them, so that on a 2-CPU
machine the client's copying does not take the CPU the service would use.
It keeps connections alive where the answer allows (netweir-serve: HTTP/1.1)
and connects again for each request otherwise (`netweir serve`: HTTP/1.0).
"""

import os
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time

from .figures import rounds
from .services import ROOT, _die_with_parent, cpu_seconds, rss_mb, stop_piped

PER_SOURCE = 4
PATH = "/items/one/trivial/big.jl"
DISCARD = bytearray(16 << 20)


def write_file(path, size_mb):
    """Writes ``size_mb`` MB of items lines at ``path``, then reads it
    once, so that it is in the page cache, as a file served often is."""
    line = b'{"title": "' + b"x" * 100 + b'"}\n'
    with open(path, "wb") as f:
        chunk = line * 8192
        left = size_mb << 20
        while left > 0:
            piece = chunk[:left]
            f.write(piece)
            left -= len(piece)
    with open(path, "rb") as f:
        while f.read(1 << 22):
            pass
    return path


def _served(service):
    return os.path.join(service.directory, "items", "one", "trivial", "big.jsonl")


def place(services, source):
    """Links the file ``source`` into each service's --dir as the items of
    a job ``big`` (PATH), in place of any before."""
    unplace(services)
    for service in services:
        os.makedirs(os.path.dirname(_served(service)), exist_ok=True)
        os.link(source, _served(service))


class BareLoop:
    """bench/bare.py in a process of its own, serving the file ``place``
    links into ``directory``: measured beside the services, by the same
    client, as the floor of the file figure."""

    name = "bare loop"

    def __init__(self, directory, python=sys.executable):
        self.directory = directory
        self.python = python
        self.process = None
        self.port = None

    def start(self):
        os.makedirs(self.directory, exist_ok=True)
        self.process = subprocess.Popen(
            [self.python, "-m", "bench.bare", _served(self)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
            preexec_fn=_die_with_parent)
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the bare loop did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    @property
    def pid(self):
        return self.process.pid

    def stop(self):
        """Its standard input closed ends it; SIGKILL if it lingers."""
        if self.process is not None:
            stop_piped(self.process)


def unplace(services):
    for service in services:
        if os.path.exists(_served(service)):
            os.unlink(_served(service))


class _Fetcher:
    """One client connection fetching PATH again and again (non-blocking)."""

    def __init__(self, number, port, selector, counts):
        self.source = f"127.0.0.{2 + number // PER_SOURCE}"
        self.port = port
        self.selector = selector
        self.counts = counts
        self.sock = None
        self.request = (f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        "User-Agent: netweir-serve-bench-files\r\n\r\n").encode()
        self.once = False
        self.done = False

    def start(self):
        self.sock = socket.socket()
        self.sock.bind((self.source, 0))
        self.sock.setblocking(False)
        self.sock.connect_ex(("127.0.0.1", self.port))
        self.selector.register(self.sock, selectors.EVENT_WRITE, self)
        self.state = "connecting"

    def send(self):
        self.head = b""
        self.left = None
        self.sock.sendall(self.request)
        self.selector.modify(self.sock, selectors.EVENT_READ, self)
        self.state = "reading"

    def event(self, mask):
        if self.state == "connecting":
            if self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self.fail()
                return
            self.send()
            return
        if self.left is None:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.fail()
                return
            if not data:
                self.fail()
                return
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.head[:end].decode("latin-1").split("\r\n")
            headers = dict(line.split(":", 1) for line in lines[1:])
            headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
            self.status = int(lines[0].split()[1])
            self.keep = (lines[0].startswith("HTTP/1.1")
                         and headers.get("connection", "").lower() != "close")
            self.left = int(headers["content-length"]) - (len(self.head) - end - 4)
        else:
            try:
                count = self.sock.recv_into(DISCARD, min(self.left, len(DISCARD)),
                                            socket.MSG_TRUNC)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.fail()
                return
            if not count:
                self.fail()
                return
            self.left -= count
        if self.left == 0:
            self.counts["ok" if self.status == 200 else "bad"] += 1
            if self.once:
                self.close()
                self.done = True
            elif self.keep:
                self.send()
            else:
                self.close()
                self.start()

    def fail(self):
        self.counts["errors"] += 1
        self.close()
        if self.once:
            self.done = True
        else:
            self.start()

    def close(self):
        if self.sock is not None:
            self.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None


def run_clients(port, connections, seconds, once=False):
    """Drives ``connections`` fetchers; returns counts per phase."""
    selector = selectors.DefaultSelector()
    counts = {"ok": 0, "bad": 0, "errors": 0}
    fetchers = [_Fetcher(i, port, selector, counts) for i in range(connections)]
    for f in fetchers:
        f.once = once
        f.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (once and all(f.done for f in fetchers)):
        for key, mask in selector.select(0.1):
            key.data.event(mask)
    for f in fetchers:
        f.close()
    selector.close()
    return counts


def rate_rep(service, connections, seconds, warmup=0.5):
    """One rep: requests/s and ms of service CPU per request, counted from
    the end of ``warmup`` seconds to the end."""
    selector = selectors.DefaultSelector()
    counts = {"ok": 0, "bad": 0, "errors": 0}
    fetchers = [_Fetcher(i, service.port, selector, counts) for i in range(connections)]
    for f in fetchers:
        f.start()
    started = time.monotonic()
    measuring = False
    end = started + warmup + seconds
    while True:
        now = time.monotonic()
        if not measuring and now >= started + warmup:
            measuring = True
            ok0, cpu0, wall0, client0 = (counts["ok"], cpu_seconds(service.pid), now,
                                         time.process_time())
            user0 = cpu_seconds(service.pid, user_only=True)
        if now >= end:
            break
        for key, mask in selector.select(0.05):
            key.data.event(mask)
    wall = time.monotonic() - wall0
    done = counts["ok"] - ok0
    cpu = cpu_seconds(service.pid) - cpu0
    user = cpu_seconds(service.pid, user_only=True) - user0
    client = time.process_time() - client0
    for f in fetchers:
        f.close()
    selector.close()
    return {"rps": done / wall, "cpu_ms": 1000 * cpu / max(done, 1),
            "user_ms": 1000 * user / max(done, 1), "service_cpu": cpu / wall,
            "client_cpu": client / wall,
            "errors": counts["errors"] + counts["bad"]}


def big_fetch(service, fetchers, size_mb):
    """RSS before and the most while ``fetchers`` clients fetch the file once."""
    before = rss_mb(service.pid)
    peak = [before]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(service.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    counts = run_clients(service.port, fetchers, 600, once=True)
    took = time.monotonic() - started
    stop.set()
    sampler.join()
    return {"before": before, "peak": peak[0], "after": rss_mb(service.pid),
            "seconds": took, "ok": counts["ok"], "errors": counts["errors"] + counts["bad"],
            "mb_per_s": fetchers * size_mb / took}


def rate_figure(services, connections, seconds, reps, warmup=0.5, log=None):
    """``reps`` interleaved rate reps per service on the file placed last;
    per service the medians of requests/s and CPU per request, the errors,
    and every rep."""
    runs = {s.name: [] for s in services}
    for n, service in rounds(services, reps):
        r = rate_rep(service, connections, seconds, warmup)
        runs[service.name].append(r)
        if log:
            log(f"  {service.name:14} rep {n + 1}: {r['rps']:,.0f} req/s, {r['cpu_ms']:.2f} ms"
                f" of CPU a request ({r['user_ms']:.2f} in user space; service"
                f" {r['service_cpu']:.0%}, client {r['client_cpu']:.0%} of a CPU),"
                f" errors {r['errors']}")
    return {name: {"rps": statistics.median(r["rps"] for r in rs),
                   "cpu_ms": statistics.median(r["cpu_ms"] for r in rs),
                   "errors": sum(r["errors"] for r in rs), "runs": rs}
            for name, rs in runs.items()}


def big_figure(services, fetchers, size_mb, log=None):
    """``big_fetch`` on each service in turn, on the file placed last."""
    found = {}
    for service in services:
        r = found[service.name] = big_fetch(service, fetchers, size_mb)
        if log:
            log(f"  {service.name:14} RSS {r['before']:.1f} MB before, peak {r['peak']:.1f} MB"
                f" (+{r['peak'] - r['before']:.1f}), after {r['after']:.1f}; {r['seconds']:.1f} s,"
                f" {r['mb_per_s']:,.0f} MB/s, {r['ok']} whole, {r['errors']} errors")
    return found


def main(argv=None):
    """``python -m bench.files``: the rate figure alone, on netweir serve,
    netweir-serve and the bare loop, with as many reps as asked (the
    figure that ``python -m bench`` measures among all the others)."""
    import argparse
    import shutil
    import tempfile

    from .modes import FULL
    from .run import Bench
    from .services import log

    parser = argparse.ArgumentParser(prog="python -m bench.files", description=main.__doc__)
    parser.add_argument("--reps", type=int, default=FULL.reps)
    parser.add_argument("--seconds", type=float, default=FULL.duration)
    parser.add_argument("--connections", type=int, default=FULL.connections)
    parser.add_argument("--size", type=int, default=FULL.file_mb, help="MB")
    parser.add_argument("--without-theirs", action="store_true",
                        help="leave netweir serve out (to compare builds of ours quickly)")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="netweir-serve-bench-files-")
    bench = Bench(FULL, root)
    try:
        bench.start_site()
        pair = bench.start_pair("a")
        if args.without_theirs:
            pair[0].stop()
            pair = pair[1:]
        bare = bench.start_bare()
        services = pair + [bare]
        source = write_file(os.path.join(root, "job.jsonl"), args.size)
        place(services, source)
        found = rate_figure(services, args.connections, args.seconds, args.reps, FULL.warmup,
                            log=log)
        floor = found[bare.name]["cpu_ms"]
        for name, r in found.items():
            print(f"{name:14} {r['rps']:8,.0f} req/s  {r['cpu_ms']:.3f} ms CPU a request"
                  f" ({r['cpu_ms'] / floor:.2f}x the bare loop's), errors {r['errors']}")
    finally:
        bench.stop_all()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
