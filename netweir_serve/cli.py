"""Entry points: ``netweir-serve``, ``python -m netweir_serve``, the twistd
plugin and the .tac file. This is the only module that touches the global
reactor; everything below gets it as a parameter. Each gives it a monotonic
clock first (clocks.py): a step of the wall clock moves no timer."""

import os
import shlex
import sys

from twisted.application import service
from twisted.logger import (
    FilteringLogObserver, LogLevel, LogLevelFilterPredicate, globalLogBeginner,
    textFileLogObserver)
from twisted.python import usage

from . import _proctree
from .dirlock import DirectoryBusy, DirectoryUnusable
from .listening import ListenError
from .options import TWISTD_COMMAND, ServeOptions, refuse

PROG = "netweir-serve"

# The .tac file reads its options from here, as a command line would give them.
TAC_OPTIONS_VARIABLE = "NETWEIR_SERVE_OPTIONS"

# What a refusal of the .tac's options is signed with, and where it sends
# the reader: the .tac has no command line of its own to name.
TAC_NAME = f"{PROG} (.tac)"
TAC_HINT = (f"the options come from ${TAC_OPTIONS_VARIABLE}, written as on the command"
            f" line; 'netweir-serve --help' lists them")


def parse(argv, environ=None, checkers=(), name=PROG, hint=f"try '{PROG} --help'"):
    """ServeOptions for ``argv`` (with more twisted.cred ``checkers`` of
    basic auth, if any); on a usage error, prints the reason, then ``hint``,
    both signed ``name``, and exits with status 2 before anything is
    written."""
    options = ServeOptions(environ, checkers)
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        refuse(name, e, hint)
    return options


def build(options, reactor, name=PROG):
    """The service for parsed ``options``; exits with status 1 when the
    directory belongs to another running service or cannot be used, 2 when
    an endpoint cannot be made (TLS files that do not load, a systemd
    socket that was not passed on), saying why in a line signed ``name``."""
    # Imported here: the daemon's modules import Twisted's endpoints and web
    # client, which load pyOpenSSL unless main() has kept it out first.
    from .service import makeService

    try:
        return makeService(options.config(), reactor)
    except (DirectoryBusy, DirectoryUnusable) as e:
        sys.stderr.write(f"{name}: error: {e}\n")
        raise SystemExit(1) from None
    except ListenError as e:
        sys.stderr.write(f"{name}: error: {e}\n")
        raise SystemExit(2) from None


def needs_tls(config):
    """Whether ``config`` listens with TLS or notifies an https:// URL."""
    return (any(listener.tls for listener in config.endpoints)
            or any(url.lower().startswith("https:") for url in getattr(config, "notify", ())))


def _start_logging(level):
    observer = FilteringLogObserver(
        textFileLogObserver(sys.stderr, timeFormat="%Y-%m-%d %H:%M:%S%z"),
        [LogLevelFilterPredicate(defaultLogLevel=level)])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def token_main(argv):
    """``netweir-serve token ...`` (access.commands): its exit status."""
    from twisted.internet import defer, task

    from .access import commands
    from .clocks import WallClock
    from .store import open_store

    arguments = commands.parse(argv)
    outcome = []

    def run(reactor):
        try:
            if arguments.jobs_db is None:
                # As the service makes it: a token may be added before its first start.
                os.makedirs(arguments.dir, exist_ok=True)
            store = open_store(arguments.dir, reactor, url=arguments.jobs_db, reactor=reactor)
        except Exception as e:
            sys.stderr.write(f"{commands.PROG}: error: {e}\n")
            outcome.append(1)
            return defer.succeed(None)
        d = commands.run(arguments, store, WallClock())
        d.addCallback(outcome.append)
        return d.addBoth(lambda _: store.close())

    try:
        task.react(run)
    except SystemExit:
        pass
    return outcome[0] if outcome else 1


def main(argv=None):
    """``netweir-serve [options]``: runs until stopped; exit status 0 after
    a stop by Ctrl-C or SIGTERM, 1 when it cannot start, 2 for bad options.
    ``netweir-serve token ...`` manages the tokens (token_main)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["token"]:
        return token_main(argv[1:])
    options = parse(argv)
    level = LogLevel.levelWithName(options["log-level"])
    # Without an ssl: endpoint or an https:// --notify URL the service
    # speaks plain HTTP: keep Twisted from loading pyOpenSSL for TLS it will
    # never use (about 12 MB, and every connection's writes go through its
    # TLS layer once it is there). Before any module of the daemon loads.
    if not needs_tls(options.config()):
        sys.modules.setdefault("OpenSSL", None)
    from twisted.internet import reactor

    from .clocks import use_monotonic_time
    from .service import CannotListen

    use_monotonic_time(reactor)
    serve = build(options, reactor)
    _start_logging(level)
    try:
        serve.privilegedStartService()
    except CannotListen as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        raise SystemExit(1) from None
    reactor.callWhenRunning(serve.startService)
    reactor.callWhenRunning(serve.install_signal_handlers)
    reactor.addSystemEventTrigger("before", "shutdown", serve.stopService)
    reactor.run()
    if serve.failure is not None:
        # It could not start after all (another live node has its name).
        sys.stderr.write(f"{PROG}: error: {serve.failure}\n")
        return 1
    return 0


def twistd_service(options, name=TWISTD_COMMAND):
    """The service ``twistd netweir-serve`` runs, from its parsed options;
    ``name`` signs the line saying why it cannot be built."""
    from twisted.internet import reactor

    from .clocks import use_monotonic_time

    use_monotonic_time(reactor)
    serve = build(options, reactor, name)
    reactor.callWhenRunning(serve.install_signal_handlers)
    return serve


def tac_application(environ=None, checkers=()):
    """The twistd ``application`` of netweir-serve.tac: options from
    $NETWEIR_SERVE_OPTIONS, else the documented defaults. ``checkers`` are
    twisted.cred checkers of basic auth, beside or instead of the username
    and password (docs/security.md)."""
    # As the program's entry point does, before the options (entry.py).
    _proctree.make_undumpable()
    environ = os.environ if environ is None else environ
    options = parse(shlex.split(environ.get(TAC_OPTIONS_VARIABLE, "")), environ, checkers,
                    name=TAC_NAME, hint=TAC_HINT)
    application = service.Application(PROG)
    twistd_service(options, TAC_NAME).setServiceParent(application)
    return application
