"""Job files by hand: `python -m bench.files` (not part of `python -m bench`).

Starts `netweir serve` and netweir-serve as the benchmark does (bench/services.py:
fresh --dir each, the benchmark's projects, --max-jobs 2 --keep 1000, loopback),
writes the same items file beneath each one's DIR/items/one/trivial/, and measures:

- ``rate``: CONNS clients (from 127.0.0.2, .3... 4 each, under the per-address
  cap) fetching the whole file over and over for SECONDS, after half a second of
  warm-up: requests/s, and the service's CPU (utime + stime from /proc/PID/stat)
  per request. Reps alternate between the services.
- ``big``: FETCHERS clients fetching a BIG_MB file at once, whole; the service's
  RSS before and its largest value while they fetch (sampled every 20 ms).

The client reads the headers of each answer and then discards the body in the
kernel (``recv`` with MSG_TRUNC, which TCP supports on Linux): the bytes still
cross the socket, but the client copies none of them, so that on a 2-CPU
machine the client's copying does not take the CPU the service would use.
It keeps connections alive where the answer allows (netweir-serve: HTTP/1.1)
and connects again for each request otherwise (`netweir serve`: HTTP/1.0).
"""

import argparse
import os
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time

from .projects import write_projects
from .services import OURS, SLUGS, Service, Site, commands, kill_leftovers

PER_SOURCE = 4
TICKS = os.sysconf("SC_CLK_TCK")
PATH = "/items/one/trivial/big.jl"
DISCARD = bytearray(16 << 20)


def service_cpu(pid, user_only=False):
    """utime + stime of ``pid`` (or utime only), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + (0 if user_only else int(fields[12]))) / TICKS


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def write_file(directory, size_mb):
    folder = os.path.join(directory, "items", "one", "trivial")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "big.jsonl")
    line = b'{"title": "' + b"x" * 100 + b'"}\n'
    with open(path, "wb") as f:
        chunk = line * 8192
        left = size_mb << 20
        while left > 0:
            piece = chunk[:left]
            f.write(piece)
            left -= len(piece)
    # In the page cache for both, as a file served often would be.
    with open(path, "rb") as f:
        while f.read(1 << 22):
            pass
    return path


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


def rate_rep(service, connections, seconds):
    """One rep: requests/s and ms of service CPU per request, counted from
    the end of half a second of warm-up to the end."""
    warmup = 0.5
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
            ok0, cpu0, wall0, client0 = (counts["ok"], service_cpu(service.pid), now,
                                         time.process_time())
            user0 = service_cpu(service.pid, user_only=True)
        if now >= end:
            break
        for key, mask in selector.select(0.05):
            key.data.event(mask)
    wall = time.monotonic() - wall0
    done = counts["ok"] - ok0
    cpu = service_cpu(service.pid) - cpu0
    user = service_cpu(service.pid, user_only=True) - user0
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.files", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=5, help="MB of the file (5)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--big", type=int, default=500, help="MB of the big file (500)")
    parser.add_argument("--fetchers", type=int, default=4)
    parser.add_argument("--only", choices=("rate", "big"))
    parser.add_argument("--ours", help="run netweir-serve with this command instead"
                        " (e.g. another checkout's python -m netweir_serve)")
    args = parser.parse_args(argv)

    root = tempfile.mkdtemp(prefix="netweir-serve-bench-files-")
    site = Site()
    services = []
    try:
        projects = write_projects(os.path.join(root, "projects"), site.url)
        for name, command in commands().items():
            if name == OURS and args.ours:
                command = args.ours.split()
            service = Service(name, command, os.path.join(root, SLUGS[name]), projects,
                              keep=1000)
            service.start()
            services.append(service)
            print(f"{name}: port {service.port}, pid {service.pid},"
                  f" RSS {rss_mb(service.pid):.1f} MB", file=sys.stderr)
        if args.only != "big":
            for service in services:
                write_file(service.directory, args.size)
            runs = {s.name: [] for s in services}
            rss_before = {s.name: rss_mb(s.pid) for s in services}
            for rep in range(args.reps):
                order = services if rep % 2 == 0 else services[::-1]
                for service in order:
                    r = rate_rep(service, args.connections, args.seconds)
                    runs[service.name].append(r)
                    print(f"rep {rep + 1} {service.name}: {r['rps']:.0f} req/s,"
                          f" {r['cpu_ms']:.2f} ms CPU/request ({r['user_ms']:.2f} in user"
                          f" space; service {r['service_cpu']:.0%},"
                          f" client {r['client_cpu']:.0%} of a CPU), errors {r['errors']}",
                          file=sys.stderr)
            print(f"\n{args.size} MB file, {args.connections} connections,"
                  f" {args.reps} x {args.seconds:g} s (median)")
            for name, rs in runs.items():
                rps = sorted(r["rps"] for r in rs)[len(rs) // 2]
                cpu = sorted(r["cpu_ms"] for r in rs)[len(rs) // 2]
                print(f"  {name:14} {rps:8.0f} req/s  {cpu:6.2f} ms CPU/request")
            theirs, ours = (sorted(r["rps"] for r in runs[s.name])[args.reps // 2]
                            for s in services)
            print(f"  ratio          {ours / theirs:8.2f}x")
            time.sleep(1)
            for service in services:
                print(f"  {service.name:14} RSS {rss_before[service.name]:.1f} MB before,"
                      f" {rss_mb(service.pid):.1f} MB after")
        if args.only != "rate":
            print(f"\n{args.big} MB file, {args.fetchers} clients at once")
            for service in services:
                write_file(service.directory, args.big)
                r = big_fetch(service, args.fetchers, args.big)
                print(f"  {service.name:14} RSS {r['before']:.1f} MB before, peak"
                      f" {r['peak']:.1f} MB (+{r['peak'] - r['before']:.1f}), after"
                      f" {r['after']:.1f}; {r['seconds']:.1f} s, {r['mb_per_s']:.0f} MB/s,"
                      f" {r['ok']} whole, {r['errors']} errors")
                os.unlink(os.path.join(service.directory, "items", "one", "trivial",
                                       "big.jsonl"))
    finally:
        for service in services:
            service.stop()
        site.stop()
        kill_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
