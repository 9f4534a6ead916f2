"""A job's processes: how a crawl is started, signalled and watched.

A job runs as one interpreter, the crawl's parent (``_crawlparent``: a
session of its own, a child subreaper), and under it the crawl, forked from
it (a fork, not a second interpreter's start: a millisecond or two). The
crawl reads the job's settings and arguments from a private file
(``DIR/run/JOB.json``, mode 0600, deleted once read) and runs ``netweir``
exactly as ``python -m netweir crawl`` would, so no setting (a proxy
password, an API key) is on any command line, where every user of the
machine can read it in ``/proc/PID/cmdline``.

The service watches the parent: as its child (a ProcessProtocol) when it
started it, or, after a restart, through a pidfd the reactor reads (a
short poll where there is none). The parent writes the crawl's exit status
beside the job's files, so its end is known either way.
"""

import hashlib
import json
import os
import signal
import sys

from twisted.internet.interfaces import IReadDescriptor
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from zope.interface import implementer

from .. import _proctree
from ..reliability import cgroupfs
from .deadlines import timed_settings
from . import datapaths

# What the job's environment must never see: the service's credentials.
SECRET_PREFIX = "NETWEIR_SERVE_"
# libpq's variables that carry a password or say where one is (a password
# file, a service file, a client key's passphrase): the service's own way
# into a shared job table (docs/cluster.md exports PGPASSWORD), never a
# spider's. Those naming only a host, port or database stay.
LIBPQ_SECRETS = ("PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGSSLPASSWORD",
                 "PGSSLKEY")

# The variable that marks every process of one run of a job (see run_mark):
# inherited by the crawl and whatever it starts, in any session, and
# written by the crawl's parent into the job's status file.
RUN_MARK_VARIABLE = "NETWEIR_JOB_RUN"

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The job's process (see _crawlparent): this copy of netweir_serve is
# importable for the parent's few lines, then taken off sys.path again, so
# the crawl forked from it has the sys.path of ``python -m netweir``: the
# working directory (the project's folder) first, as ``-c`` puts it.
# The parent leaves with os._exit once the status is written: nothing of
# its own to flush, and an interpreter's teardown is milliseconds a job. The
# crawl, forked inside main(), leaves as python -m netweir would.
_BOOTSTRAP = (
    "import os, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from netweir_serve.jobs import _crawlparent\n"
    "del sys.path[0]\n"
    "os._exit(_crawlparent.main(sys.argv[2:]))\n"
)

# How often an adopted job's parent is looked at where there is no pidfd.
POLL_SECONDS = 0.5


class StartRefused(Exception):
    """A job that cannot start; the message goes in its log."""


def private_arguments(record, data_dir):
    """The crawl's ``--set`` and ``-a`` arguments for ``record``: they go in
    the private file, never on a command line. Path settings are resolved
    in ``data_dir`` again here: the directory may have changed since the
    job was checked (a symlink put there meanwhile). A job with a timeout
    gets Netweir's own max_time short of it (jobs.deadlines)."""
    argv = []
    for key, value in timed_settings(record.settings, record.policy):
        if key in datapaths.PATH_SETTINGS:
            try:
                value = datapaths.prepare(data_dir, key, value)
            except ValueError as e:
                raise StartRefused(str(e)) from None
        argv.append(f"--set={key}={value}")
    argv.extend(f"-a{name}={value}" for name, value in record.arguments)
    return argv


def crawl_command(python, record, files, private_path, groups=()):
    """The argv of the job's process for ``record``: what any user may see
    of it (no setting, no argument: those are in ``private_path``). The
    crawl joins the control group whose directories are ``groups``."""
    return [python, "-c", _BOOTSTRAP, _PACKAGE_PARENT, files.status, private_path,
            *(cgroupfs.FLAG + path for path in groups),
            "crawl", record.spider_file, f"--spider={record.spider}",
            f"--output={files.items}", f"--stats={files.stats}"]


def write_private_file(path, arguments):
    """Writes ``arguments`` (a list of strings) to ``path`` for the crawl's
    start-up step, readable by this user alone; a file or link already
    there is refused (OSError), never followed."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, json.dumps(arguments).encode("utf-8"))
    finally:
        os.close(fd)


def remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def run_mark(directory, record):
    """What marks the processes and the status file of one run of the job
    ``record`` (claimed: its start_time is the claim's) under ``directory``:
    another run of a job of the same id, or a job of another service's
    --dir, never has it. Hex, so the parent writes it into JSON as it is;
    a hash, so it says nothing of the job to whoever reads an environment."""
    text = f"{os.path.abspath(directory)}\0{record.id}\0{record.start_time!r}"
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def job_environment(environ, mark=None, secrets=()):
    """The environment of a job (and of the reader's spider checks):
    ``environ`` without the service's secrets, by name (NETWEIR_SERVE_*,
    libpq's passwords and service files) and by value (any variable
    holding one of ``secrets``, the service's own: its password, the
    --notify secret, the job table's password, under whatever name a
    user exported them), and with the run's ``mark``."""
    held = {secret for secret in secrets if secret}
    env = {k: v for k, v in environ.items()
           if not k.startswith(SECRET_PREFIX) and k != RUN_MARK_VARIABLE
           and k not in LIBPQ_SECRETS and v not in held}
    env["PYTHONUNBUFFERED"] = "1"
    if mark is not None:
        env[RUN_MARK_VARIABLE] = mark
    return env


def exit_status_of(reason):
    """The exit status in ``reason`` (a negative signal number if killed)."""
    value = reason.value
    if getattr(value, "signal", None) is not None:
        return -value.signal
    return getattr(value, "exitCode", None)


def send_signal(pid, signum, group):
    """Signals the process ``pid``, or its whole process group; a process
    that is already gone is not an error."""
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


# What the service sends the crawl's parent: a cancel, and the kill of the
# crawl and everything it started (see _crawlparent).
CANCEL_SIGNAL = signal.SIGTERM
KILL_SIGNAL = signal.SIGUSR1


class CrawlProtocol(ProcessProtocol):
    """Reports the end of one job's parent process to ``ended(jobid, status)``
    with its exit status (negative: the signal that killed it)."""

    def __init__(self, jobid, ended):
        self.jobid = jobid
        self._ended = ended

    def processEnded(self, reason):
        self._ended(self.jobid, exit_status_of(reason))


@implementer(IReadDescriptor)
class _PidfdWatch:
    """A pidfd in the reactor: readable once its process has ended."""

    log = Logger()

    def __init__(self, reactor, fd, ended):
        self._reactor = reactor
        self._fd = fd
        self._ended = ended

    def fileno(self):
        return self._fd

    def logPrefix(self):
        return "pidfd"

    def doRead(self):
        self.stop()
        self._ended()

    def connectionLost(self, reason):
        self.stop()

    def stop(self):
        if self._fd is not None:
            self._reactor.removeReader(self)
            os.close(self._fd)
            self._fd = None


class _PollWatch:
    def __init__(self, reactor, pid, identity, ended):
        self._reactor = reactor
        self._pid = pid
        self._identity = identity
        self._ended = ended
        self._call = reactor.callLater(POLL_SECONDS, self._look)

    def _look(self):
        if _proctree.start_time(self._pid) != self._identity:
            self._call = None
            self._ended()
        else:
            self._call = self._reactor.callLater(POLL_SECONDS, self._look)

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


def watch_exit(reactor, pid, identity, ended):
    """Calls ``ended()`` once the process ``pid`` (whose start_time is
    ``identity``), not a child of this one, has ended. Returns a watch with
    ``stop()``. Raises ProcessLookupError if it has already gone."""
    opener = getattr(os, "pidfd_open", None)
    if opener is not None and hasattr(reactor, "addReader"):
        try:
            fd = opener(pid)
        except ProcessLookupError:
            raise
        except OSError:
            fd = None
        if fd is not None:
            # The pid could have been reused between the caller's check and
            # the open: look again through the descriptor we now hold.
            if _proctree.start_time(pid) != identity:
                os.close(fd)
                raise ProcessLookupError(pid)
            watch = _PidfdWatch(reactor, fd, ended)
            reactor.addReader(watch)
            return watch
    if _proctree.start_time(pid) != identity:
        raise ProcessLookupError(pid)
    return _PollWatch(reactor, pid, identity, ended)


def python_of(python):
    return python or sys.executable
