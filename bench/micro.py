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
/listjobs.json); ``--file BYTES`` writes a job's items file of that size,
/items/one/trivial/micro.jsonl (GET it to measure what serving a job file
costs besides moving its bytes: the in-memory transport has no socket, so
the body is read through Python rather than sent by ``sendfile``: keep it
small, or ask with ``--method HEAD``, which is all of a GET but the body);
``--header "Name: value"`` adds a request header (a Range, say);
``--profile`` prints where the time goes (cProfile).
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
    if factory is None:  # one factory per place it listens (--listen)
        factory = service.listening[0].factory
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


def write_job_file(directory, size):
    """A job's items file of ``size`` bytes, as /items/one/trivial/micro.jsonl."""
    import os

    folder = os.path.join(directory, "items", "one", "trivial")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "micro.jsonl"), "wb") as f:
        f.write(b"x" * size)


def connect(factory):
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import StringTransport

    client = IPv4Address("TCP", "127.0.0.2", 40000)
    protocol = factory.buildProtocol(client)
    transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 6800),
                                peerAddress=client)
    protocol.makeConnection(transport)
    return protocol, transport


def settle(transport, timeout=10.0):
    """Turns the reactor until ``transport`` holds an answer: a request
    answered from a thread (the job table, or the token table read again
    once it is READ_FOR old) is written on a later turn."""
    from twisted.internet import reactor

    deadline = time.monotonic() + timeout
    while not transport.value() and time.monotonic() < deadline:
        reactor.iterate(0.001)


def rounds(protocol, transport, request, count):
    started = time.process_time()
    for _ in range(count):
        protocol.dataReceived(request)
        if not transport.value():
            settle(transport)
        transport.clear()
    return (time.process_time() - started) / count * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.micro",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default="/daemonstatus.json")
    parser.add_argument("--requests", type=int, default=3000, help="per round (3000)")
    parser.add_argument("--finished", type=int, default=0, help="finished jobs to add first")
    parser.add_argument("--file", type=int, metavar="BYTES",
                        help="write /items/one/trivial/micro.jsonl of this size first")
    parser.add_argument("--method", default="GET",
                        help="GET (default) or HEAD: a job file's HEAD is all of its GET"
                             " but the body")
    parser.add_argument("--header", action="append", default=[],
                        help="a request header to add, 'Name: value' (repeatable)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of a round")
    args = parser.parse_args(argv)

    directory = tempfile.mkdtemp(prefix="netweir-serve-micro-")
    try:
        service, factory = build(directory)
        fill(service.store, args.finished)
        if args.file is not None:
            write_job_file(directory, args.file)
        protocol, transport = connect(factory)
        extra = "".join(f"{h}\r\n" for h in args.header)
        request = (f"{args.method} {args.path} HTTP/1.1\r\nHost: 127.0.0.1:6800\r\n"
                   f"Connection: keep-alive\r\n{extra}\r\n").encode("ascii")
        protocol.dataReceived(request)
        settle(transport)
        answer = transport.value()
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        if " 200 " not in status and " 206 " not in status:
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
