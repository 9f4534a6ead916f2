"""Test doubles for what cannot be driven in milliseconds: time and processes."""

import itertools

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from zope.interface import implementer


class FakeProcess:
    def __init__(self, pid, protocol, argv, kwargs):
        self.pid = pid
        self.protocol = protocol
        self.argv = argv
        self.kwargs = kwargs

    def exit(self, status=0, signal=None):
        """Ends the process as the OS would report it."""
        if signal is None and status == 0:
            reason = ProcessDone(0)
        else:
            reason = ProcessTerminated(exitCode=None if signal else status, signal=signal)
        self.protocol.processEnded(Failure(reason))


@implementer(IReactorProcess)
class FakeProcessReactor(Clock):
    """A Clock that also 'spawns' processes, recording each; pids are far
    above any real pid so nothing real could ever be signalled by mistake."""

    def __init__(self, fail_with=None):
        super().__init__()
        self.processes = []
        self.fail_with = fail_with
        self._pids = itertools.count(50_000_000)

    def spawnProcess(self, processProtocol, executable, args=(), env=None, path=None,
                     uid=None, gid=None, usePTY=0, childFDs=None):
        if self.fail_with is not None:
            raise self.fail_with
        process = FakeProcess(next(self._pids), processProtocol, list(args),
                              dict(env=env, path=path, childFDs=childFDs))
        self.processes.append(process)
        processProtocol.makeConnection(process)
        return process


class SignalLog:
    """Records the signals a launcher sends instead of sending them."""

    def __init__(self):
        self.sent = []

    def __call__(self, pid, signum, group):
        self.sent.append((pid, signum, group))
