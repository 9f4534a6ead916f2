"""CPU per request of netweir-serve's web stack, without sockets:

    python -m bench.micro [PATH] [--requests N] [--finished N] [--profile]

Builds the real daemon (``makeService`` on a scratch --dir, not listening)
and feeds keep-alive requests for PATH (default /daemonstatus.json) to one
connection of its real factory (connection limits, guard, site, resource
tree) over an in-memory transport, then prints the best of seven rounds in
microseconds of CPU per request. No client shares the CPU, and the best of
seven ignores moments when something else ran, so two builds can be
compared on a busy machine, which the HTTP benchmark can't do to a few
percent. What it leaves out is the socket half of a request: reading,
writing and epoll, about as much again (see docs/performance.md).

``--finished N`` puts N finished jobs in the job table first (for
/listjobs.json); ``--profile`` prints where the time goes (cProfile).
"""

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time

# Rounds per measurement; the best one counts.
ROUNDS = 7


def build(directory):
    """The daemon's service, and the factory it listens with."""
    from twisted.internet import reactor

    from netweir_serve.options import ServeOptions
    from netweir_serve.service import makeService

    options = ServeOptions({})
    options.parseOptions(["--dir", directory, "--port", "0", "--bind", "127.0.0.1"])
    service = makeService(options.config(), reactor)
    factory = getattr(service, "factory", None)
    if factory is None:  # older wiring: a TCPServer holds it
        factory = service.listener.args[1]
    return service, factory


def fill(store, count):
    """``count`` finished jobs, added, claimed and ended through the store's
    interface (the SQLite store's Deferreds have fired when it returns)."""
    from netweir_serve.store.records import JobRecord

    now = time.time()
    for n in range(count):
        store.add(JobRecord(id=f"{n:032x}", project="one", spider="trivial",
                            spider_file="/nowhere/spiders.py", created=now))
        store.claim_next("bench", ["one"], now)
        store.mark_finished(f"{n:032x}", "finished", now + 1, exit_status=0)


def connect(factory):
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import StringTransport

    client = IPv4Address("TCP", "127.0.0.2", 40000)
    protocol = factory.buildProtocol(client)
    transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 6800),
                                peerAddress=client)
    protocol.makeConnection(transport)
    return protocol, transport


def rounds(protocol, transport, request, count):
    started = time.process_time()
    for _ in range(count):
        protocol.dataReceived(request)
        transport.clear()
    return (time.process_time() - started) / count * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.micro",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default="/daemonstatus.json")
    parser.add_argument("--requests", type=int, default=3000, help="per round (3000)")
    parser.add_argument("--finished", type=int, default=0, help="finished jobs to add first")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of a round")
    args = parser.parse_args(argv)

    directory = tempfile.mkdtemp(prefix="netweir-serve-micro-")
    try:
        service, factory = build(directory)
        fill(service.store, args.finished)
        protocol, transport = connect(factory)
        request = (f"GET {args.path} HTTP/1.1\r\nHost: 127.0.0.1:6800\r\n"
                   "Connection: keep-alive\r\n\r\n").encode("ascii")
        protocol.dataReceived(request)
        answer = transport.value()
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        if " 200 " not in status:
            sys.stderr.write(f"{args.path}: {status}\n")
            return 1
        rounds(protocol, transport, request, max(1, args.requests // 5))  # warm up
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            rounds(protocol, transport, request, args.requests)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        best = min(rounds(protocol, transport, request, args.requests) for _ in range(ROUNDS))
        print(f"{args.path}: {best:.1f} us of CPU per request ({len(answer):,} bytes answered;"
              f" best of {ROUNDS} rounds of {args.requests:,})")
        service.store.close()
        return 0
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
