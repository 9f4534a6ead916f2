"""Starting jobs' parents from the warm process, as the service sees it.

``WarmStarter.spawnProcess`` takes the arguments of the reactor's and
starts the job's parent in a spare of the warm process when there is one
ready (and the command is a job's, see jobs.process.crawl_command), else
through the reactor as ever: the first job after a start, a burst past
the spares, and every job once the warm process is gone for good start
cold, the way they always did. Either way the caller gets an object with
the parent's ``pid`` at once, and the protocol's ``processEnded`` with
its exit status: the warm process reaps the parents it forked and says
so; should it die first, they are watched as adopted jobs are (a pidfd),
and the status the parent wrote beside the job's files tells the rest.
"""

import array
import json
import os
import signal
import socket

from twisted.internet import defer
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReadDescriptor
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ... import _proctree
from .. import process as job_process
from . import _zygote

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

# The warm process: as a job's parent starts (process._BOOTSTRAP), this
# copy of netweir_serve importable for its few lines; then, in a spare
# given a job, the very last line of a cold parent.
_BOOTSTRAP = (
    "import os, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from netweir_serve.jobs.warm import _zygote\n"
    "del sys.path[0]\n"
    "argv = _zygote.main(sys.argv[2:])\n"
    "from netweir_serve.jobs import _crawlparent\n"
    "os._exit(_crawlparent.main(argv))\n"
)

# The warm process's own output (a traceback, should it die), in the
# service's private run/ folder, replaced at each start.
LOG_NAME = "warm-starts.log"
# The biggest message the warm process sends (an end, a spare's pid).
CONTROL_MESSAGE = 4096
# Seconds stop() waits for the warm process to leave before killing it.
STOP_GRACE_SECONDS = 2.0
# A warm process that dies is started again at the next job, this many
# times in a service's life; after that, jobs start cold for good.
MAX_STARTS = 4


@implementer(IReadDescriptor)
class _Control:
    """The service's end of the control socket, read by the reactor."""

    def __init__(self, reactor, sock, heard, lost):
        self._reactor = reactor
        self.sock = sock
        self._heard = heard
        self._lost = lost

    def fileno(self):
        return self.sock.fileno() if self.sock is not None else -1

    def logPrefix(self):
        return "warm-starts"

    def doRead(self):
        while self.sock is not None:
            try:
                message, fds = _zygote._receive(self.sock, CONTROL_MESSAGE)
            except BlockingIOError:
                return
            except (OSError, ValueError):
                message, fds = None, []
            if message is None:
                self._lost("its control socket closed")
                return
            self._heard(message, fds)

    def connectionLost(self, reason):
        self._lost("its control socket failed")

    def close(self):
        if self.sock is not None:
            self._reactor.removeReader(self)
            self.sock.close()
            self.sock = None


class _ZygoteProtocol(ProcessProtocol):
    def __init__(self, starter):
        self._starter = starter
        self.ended = defer.Deferred()

    def processEnded(self, reason):
        self._starter._zygote_ended(self, reason)
        self.ended.callback(None)


class WarmProcess:
    """A job's parent started in a spare: its ``pid``, as a spawned
    process's transport has it."""

    def __init__(self, pid, protocol, identity):
        self.pid = pid
        self.identity = identity
        self.protocol = protocol
        self.watch = None

    def ended(self, status):
        """Tells the protocol the parent ended with ``status`` (negative:
        killed by that signal; None: unknown, it was not ours to reap)."""
        if self.watch is not None:
            self.watch.stop()
            self.watch = None
        if status == 0:
            reason = Failure(ProcessDone(0))
        elif status is None or status > 0:
            reason = Failure(ProcessTerminated(exitCode=status))
        else:
            reason = Failure(ProcessTerminated(signal=-status))
        self.protocol.processExited(reason)
        self.protocol.processEnded(reason)

    # What the reactor's process transports have, for protocols that use it.
    def signalProcess(self, signal_id):
        number = getattr(signal, f"SIG{signal_id}") if isinstance(signal_id, str) else signal_id
        job_process.send_signal(self.pid, number, False)

    def loseConnection(self):
        pass


class WarmStarter:
    """Starts jobs' parents from a warm process (jobs/warm), with the
    reactor's ``spawnProcess`` as the fallback. ``environ`` is the jobs'
    environment without a run's mark (what the launcher is given);
    ``spares`` the jobs that can start warm at once."""

    log = Logger()

    def __init__(self, reactor, python, environ, directory, spares=2,
                 identify=_proctree.start_time, watch_process=job_process.watch_exit):
        self._reactor = reactor
        self._python = python
        self._environ = dict(environ)
        self._directory = directory
        self._wanted = max(1, spares)
        self._identify = identify
        self._watch = watch_process
        self._zygote = None
        self._control = None
        self._ready = False
        self._spares = []
        self._asked = 0
        self._jobs = {}
        self._starts = 0
        self._off = None
        # The warm process said it leaves to be started again (something
        # was installed): its end is no failure to report.
        self._restarting = False
        self._stopping = False
        self.warm_started = 0

    # -- the warm process --------------------------------------------------------

    def start(self):
        """Starts the warm process, unless it runs or warm starts are off.
        Jobs start cold until it says it is ready."""
        if self._zygote is not None or self._off is not None or self._stopping:
            return
        if self._starts >= MAX_STARTS:
            self._turn_off(f"it ended {self._starts} times")
            return
        self._starts += 1
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        opened = [theirs]
        try:
            run = os.path.join(self._directory, "run")
            os.makedirs(run, mode=0o700, exist_ok=True)
            log_fd = os.open(os.path.join(run, LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                             | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            opened.append(log_fd)
            null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(null_fd)
            env = job_process.job_environment(self._environ, _zygote.MARK_PLACEHOLDER)
            protocol = _ZygoteProtocol(self)
            self._reactor.spawnProcess(
                protocol, self._python,
                [self._python, "-c", _BOOTSTRAP, _PACKAGE_PARENT, self._directory],
                env=env, path="/",
                childFDs={0: null_fd, 1: log_fd, 2: log_fd, _zygote.CONTROL_FD: theirs.fileno()})
        except OSError as e:
            ours.close()
            self._turn_off(f"it could not start: {e}")
            return
        finally:
            for each in opened:
                each.close() if isinstance(each, socket.socket) else os.close(each)
        self._zygote = protocol
        ours.setblocking(False)
        self._control = _Control(self._reactor, ours, self._heard, self._lost)
        self._reactor.addReader(self._control)

    def _heard(self, message, fds):
        if "spare" in message and fds:
            self._asked = max(0, self._asked - 1)
            spare = socket.socket(fileno=fds.pop(0))
            spare.setblocking(False)
            self._spares.append((message["spare"], spare))
        for extra in fds:
            os.close(extra)
        if "ended" in message:
            self._child_ended(message["ended"], message.get("status"))
        elif message.get("ready"):
            self._ready = True
            self.log.info("warm starts: ready, jobs' parents fork from pid {pid}",
                          pid=getattr(self._zygote_transport(), "pid", None))
            self._ask_for_spares()
        elif "unsafe" in message:
            why = message["unsafe"]
            if "site-packages changed" in why:
                # Started again, with what is installed now, at the next
                # job; not counted as an end that went wrong.
                self.log.info("warm starts: {why}; the warm process starts again", why=why)
                self._starts -= 1
                self._restarting = True
            else:
                self._turn_off(f"the warm process is not safe to fork: {why}")

    def _zygote_transport(self):
        return getattr(self._zygote, "transport", None)

    def _ask_for_spares(self):
        while (self._control is not None and self._ready
               and len(self._spares) + self._asked < self._wanted):
            try:
                _zygote._send(self._control.sock, {"spare": 1})
            except OSError:
                return
            self._asked += 1

    def _child_ended(self, pid, status):
        process = self._jobs.pop(pid, None)
        if process is not None:
            process.ended(status)
            return
        for n, (spare_pid, sock) in enumerate(self._spares):
            if spare_pid == pid:
                # Killed while idle: another takes its place.
                del self._spares[n]
                sock.close()
                self._ask_for_spares()
                return

    def _lost(self, why):
        """The warm process is gone (or going): spares are let go, and the
        jobs it started are watched as adopted ones are."""
        if self._control is None:
            return
        self._control.close()
        self._control = None
        self._ready = False
        self._asked = 0
        for _pid, sock in self._spares:
            sock.close()
        self._spares = []
        if not self._stopping:
            # (Stopping, the launcher has seen them end or let them go.)
            for pid, process in list(self._jobs.items()):
                self._watch_orphan(pid, process)
        transport = self._zygote_transport()
        if not self._stopping and self._off is None and not self._restarting:
            self.log.warn("warm starts: the warm process ended ({why}); jobs start cold until"
                          " it is started again at the next job", why=why)
        self._restarting = False
        if not self._stopping and transport is not None:
            # Whatever is left of it goes (a stuck one would never leave).
            _kill_alone(transport.pid)

    def _watch_orphan(self, pid, process):
        def ended():
            if self._jobs.pop(pid, None) is process:
                process.ended(None)
        try:
            process.watch = self._watch(self._reactor, pid, process.identity, ended)
        except ProcessLookupError:
            self._reactor.callLater(0, ended)

    def _zygote_ended(self, protocol, reason):
        self._lost("it exited")
        if self._zygote is protocol:
            self._zygote = None

    def _turn_off(self, why):
        if self._off is None:
            self._off = why
            self.log.warn("warm starts are off ({why}): every job starts cold", why=why)

    # -- starting a job --------------------------------------------------------------

    def spawnProcess(self, processProtocol, executable, args=(), env=None, path=None,
                     childFDs=None, **options):
        """IReactorProcess.spawnProcess for a job's parent: warm when it
        can be, else the reactor's."""
        if self._zygote is None and not self._stopping:
            self.start()
        message = self._job_message(executable, args, env, path, childFDs, options)
        while message is not None and self._spares:
            pid, sock = self._spares.pop(0)
            process = self._hand(pid, sock, message, processProtocol)
            self._ask_for_spares()
            if process is not None:
                return process
        return self._reactor.spawnProcess(processProtocol, executable, args, env=env, path=path,
                                          childFDs=childFDs, **options)

    def _job_message(self, executable, args, env, path, childFDs, options):
        """(the job's message, its descriptors), or None if it is no job's
        parent this starter can start."""
        args = list(args)
        if (not self._ready or options or env is None or path is None or not childFDs
                or executable != self._python or args[:4] != [self._python, "-c",
                                                              job_process._BOOTSTRAP,
                                                              job_process._PACKAGE_PARENT]):
            return None
        fds, mapping = [], {}
        for child_fd, parent_fd in childFDs.items():
            # The standard streams only: the spare closes every other.
            if not isinstance(parent_fd, int) or child_fd not in (0, 1, 2):
                return None
            if parent_fd not in fds:
                fds.append(parent_fd)
            mapping[str(child_fd)] = fds.index(parent_fd)
        try:
            data = json.dumps({"command": args, "env": dict(env), "cwd": path,
                               "fds": mapping})
        except (TypeError, ValueError):
            # Bytes in the environment or the command: the reactor takes them.
            return None
        if len(data) >= _zygote.MAX_MESSAGE or len(fds) > _zygote.MAX_FDS:
            return None
        return data.encode("utf-8"), fds

    def _hand(self, pid, sock, message, protocol):
        data, fds = message
        try:
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                   array.array("i", fds))])
        except OSError:
            # Gone meanwhile: the next spare, or a cold start.
            return None
        finally:
            sock.close()
        process = WarmProcess(pid, protocol, self._identify(pid))
        self._jobs[pid] = process
        self.warm_started += 1
        protocol.makeConnection(process)
        return process

    # -- stopping ------------------------------------------------------------------

    def stop(self):
        """Lets the warm process and its spares go (jobs it started run on:
        stop the launcher first to wait for them). Fires once it has left."""
        self._stopping = True
        zygote, ready = self._zygote, self._ready
        self._lost("the service is stopping")
        if zygote is None or zygote.ended.called:
            return defer.succeed(None)
        transport = zygote.transport
        # Not ready, it has started no job, and hears nothing while it
        # imports netweir: it goes at once.
        kill = self._reactor.callLater(STOP_GRACE_SECONDS if ready else 0, _kill_alone,
                                       transport.pid)
        zygote.ended.addCallback(lambda _: kill.cancel() if kill.active() else None)
        return zygote.ended


def _kill_alone(pid):
    """SIGKILL for the warm process alone, never its process group: a
    spare given a job a moment ago is still in it until the job's parent
    makes its session, and must not go with it. Idle spares leave by
    themselves once their sockets close."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
