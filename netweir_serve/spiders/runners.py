"""The processes that read spider files, as the daemon sees them.

Two runners, each with ``start()``, ``ask(request) -> Deferred[answer
dict]`` and ``stop() -> Deferred``: ``OneShotRunner`` starts a fresh
interpreter per request; ``WarmRunner`` keeps one helper process that has
imported netweir and forks a reader per request (see _forkserver for the
other end of the pipes, protocol for what goes through them). A reader
past its deadline is killed with its whole process group; a helper that
dies is replaced and its requests are sent again once.
"""

import itertools
import os
import signal

from twisted.internet import defer
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol

from ..jobs.checked import InspectError
from . import protocol

# How long past a request's own timeout a warm helper may stay silent before
# it is taken for stuck and replaced. Its children are timed by the helper
# itself; this only catches a helper that stopped working.
HELPER_GRACE_SECONDS = 10.0
# How long stop() waits for the warm helper to leave before killing it.
STOP_GRACE_SECONDS = 2.0
# A request is sent again once if its warm helper dies under it: a helper
# killed from outside is worth a retry, a request that kills helpers is not.
MAX_ATTEMPTS = 2
MAX_ANSWER_BYTES = 8 * 1024 * 1024
STDERR_TAIL_BYTES = 16 * 1024
STDERR_TAIL_LINES = 15

_STOPPED = "the service is stopping: spider files are no longer read"


def _could_not_start(exc):
    return f"could not start a process to read spider files: {exc}"


class _Tail:
    """The last bytes of a stream, kept for an error message."""

    def __init__(self, limit=STDERR_TAIL_BYTES):
        self._limit = limit
        self._data = bytearray()

    def add(self, data):
        self._data += data
        del self._data[: -self._limit]

    def text(self):
        return last_lines(bytes(self._data).decode("utf-8", "replace"))


def last_lines(text):
    return "\n".join(text.strip().splitlines()[-STDERR_TAIL_LINES:])


class _AnswerTooLarge(Exception):
    pass


class _Lines:
    """Splits a byte stream into lines, none longer than ``limit``."""

    def __init__(self, limit=MAX_ANSWER_BYTES):
        self._limit = limit
        self._partial = bytearray()

    def feed(self, data):
        """The lines ``data`` completes; raises _AnswerTooLarge (and drops
        what it had) once a line grows past the limit."""
        self._partial += data
        lines = []
        if b"\n" in data:
            *lines, rest = bytes(self._partial).split(b"\n")
            self._partial = bytearray(rest)
        if len(self._partial) > self._limit:
            self._partial = bytearray()
            raise _AnswerTooLarge()
        return lines


def _how_it_ended(reason):
    """``it exited with status N`` or ``it was killed by SIGNAME``, from a
    processEnded reason."""
    return protocol.how_it_ended(
        signal_number=getattr(reason.value, "signal", None),
        exit_status=getattr(reason.value, "exitCode", None),
    )


def _kill_group(transport, pid):
    """SIGKILL for the reader ``pid`` and its process group (whatever a
    spider file started), or for the reader alone if it has no group yet."""
    if pid is not None and hasattr(os, "killpg"):
        try:
            os.killpg(pid, signal.SIGKILL)
            return
        except OSError:
            pass
    try:
        transport.signalProcess("KILL")
    except (ProcessExitedAlready, OSError):
        pass


# --- one interpreter per request -----------------------------------------------


class _OneShotReader(ProcessProtocol):
    """A ``once`` reader process: sends it the request, collects its answer,
    kills it at the deadline. ``done`` fires with the answer dict."""

    def __init__(self, reactor, payload, timeout, done):
        self._reactor = reactor
        self._payload = payload
        self._timeout = timeout
        self.done = done
        self.ended = defer.Deferred()
        self._pid = None
        self._answer = bytearray()
        self._stderr = _Tail()
        self._timer = None
        self._why_killed = None

    def connectionMade(self):
        self._pid = self.transport.pid
        self.transport.write(self._payload)
        self.transport.closeStdin()
        self._timer = self._reactor.callLater(self._timeout, self.kill, "timeout")

    def outReceived(self, data):
        if self._why_killed is not None:
            return
        self._answer += data
        if len(self._answer) > MAX_ANSWER_BYTES:
            self._answer = bytearray()
            self.kill("too large")

    def errReceived(self, data):
        self._stderr.add(data)

    def kill(self, why):
        if self._why_killed is None:
            self._why_killed = why
        _kill_group(self.transport, self._pid)

    def processExited(self, reason):
        # Anything the reader left running in its group would hold its
        # pipes open, and processEnded would never come.
        if self._pid is not None and hasattr(os, "killpg"):
            try:
                os.killpg(self._pid, signal.SIGKILL)
            except OSError:
                pass

    def processEnded(self, reason):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        if not self.done.called:
            self.done.callback(self._final_answer(reason))
        self.ended.callback(None)

    def _final_answer(self, reason):
        if self._why_killed == "timeout":
            return protocol.timed_out()
        if self._why_killed == "too large":
            return protocol.too_large()
        try:
            return protocol.decode(bytes(self._answer))
        except ValueError:
            return protocol.died(_how_it_ended(reason), self._stderr.text())


class OneShotRunner:
    """Answers each request in an interpreter of its own."""

    def __init__(self, reactor, argv, env):
        self._reactor = reactor
        self._argv = argv
        self._env = env
        self._readers = set()
        self._stopped = False

    def start(self):
        """Nothing to warm up."""

    def ask(self, request):
        """Deferred answer dict (see protocol)."""
        if self._stopped:
            return defer.fail(InspectError(_STOPPED))
        payload = protocol.encode(request)
        done = defer.Deferred(canceller=lambda _: reader.kill("cancelled"))
        reader = _OneShotReader(self._reactor, payload, protocol.timeout_of(request), done)
        try:
            self._reactor.spawnProcess(reader, self._argv[0], self._argv, env=self._env)
        except Exception as exc:
            return defer.fail(InspectError(_could_not_start(exc)))
        self._readers.add(reader)
        reader.ended.addCallback(lambda _: self._readers.discard(reader))
        return done

    def stop(self):
        self._stopped = True
        for reader in list(self._readers):
            reader.kill("stopping")
            if not reader.done.called:
                reader.done.errback(InspectError(_STOPPED))
        return defer.DeferredList([r.ended for r in self._readers]).addCallback(lambda _: None)


# --- a warm helper that forks a reader per request ---------------------------------


class _HelperConnection(ProcessProtocol):
    """The pipes to one warm helper process; reports to its _WarmRunner."""

    def __init__(self, runner):
        self._runner = runner
        self._lines = _Lines()
        self.stderr = _Tail()
        self.ended = False

    def send(self, line):
        if not self.ended:
            self.transport.write(line)

    def outReceived(self, data):
        try:
            lines = self._lines.feed(data)
        except _AnswerTooLarge:
            self.kill()
            return
        for line in lines:
            try:
                message = protocol.decode(line)
            except ValueError:
                # Not our helper talking: replace it.
                self.kill()
                return
            self._runner._answered(self, message)

    def errReceived(self, data):
        self.stderr.add(data)

    def processEnded(self, reason):
        self.ended = True
        self._runner._helper_ended(self, reason)

    def kill(self):
        # Its readers die with it (PR_SET_PDEATHSIG), or at their backstop alarm.
        try:
            self.transport.signalProcess("KILL")
        except (ProcessExitedAlready, OSError):
            pass


class _Pending:
    """A request sent to a warm helper and not yet answered."""

    def __init__(self, request_id, line, timeout, deferred):
        self.request_id = request_id
        self.line = line
        self.timeout = timeout
        self.deferred = deferred
        self.attempts = 0
        self.connection = None
        self.guard = None

    def stop_guard(self):
        if self.guard is not None and self.guard.active():
            self.guard.cancel()
        self.guard = None


class WarmRunner:
    """Answers requests through one warm helper, started on first use and
    started again on the next request after it dies."""

    def __init__(self, reactor, argv, env):
        self._reactor = reactor
        self._argv = argv
        self._env = env
        self._connection = None
        self._pending = {}
        self._ids = itertools.count(1)
        self._stopped = False
        self._stop_waiters = []
        self._kill_call = None

    def start(self):
        """The running helper's connection, starting one if there is none.
        May raise what spawnProcess raises, or InspectError once stopped."""
        if self._stopped:
            raise InspectError(_STOPPED)
        if self._connection is None:
            connection = _HelperConnection(self)
            self._reactor.spawnProcess(connection, self._argv[0], self._argv, env=self._env)
            self._connection = connection
        return self._connection

    def ask(self, request):
        """Deferred answer dict (see protocol)."""
        if self._stopped:
            return defer.fail(InspectError(_STOPPED))
        request_id = next(self._ids)
        # Encoded before anything is recorded, so a request that can't be
        # sent fails here and leaves nothing behind.
        line = protocol.encode(protocol.with_id(request, request_id))
        deferred = defer.Deferred(canceller=lambda _: self._cancel(request_id))
        pending = _Pending(request_id, line, protocol.timeout_of(request), deferred)
        self._pending[request_id] = pending
        self._send(pending)
        return deferred

    def _send(self, pending):
        try:
            connection = self.start()
        except Exception as exc:
            self._finish(pending, protocol.error(_could_not_start(exc)))
            return
        pending.attempts += 1
        pending.connection = connection
        pending.guard = self._reactor.callLater(
            pending.timeout + HELPER_GRACE_SECONDS, self._guard_expired, pending.request_id
        )
        connection.send(pending.line)

    def _finish(self, pending, answer):
        self._pending.pop(pending.request_id, None)
        pending.stop_guard()
        pending.deferred.callback(answer)

    def _answered(self, connection, message):
        pending = self._pending.get(protocol.take_id(message))
        # None: cancelled, or already failed by its guard.
        if pending is not None and pending.connection is connection:
            self._finish(pending, message)

    def _guard_expired(self, request_id):
        pending = self._pending.get(request_id)
        if pending is None:
            return
        pending.guard = None
        self._finish(pending, protocol.timed_out())
        # The helper times its readers itself; silent this long, it is stuck.
        pending.connection.kill()

    def _cancel(self, request_id):
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending.stop_guard()
            pending.connection.send(protocol.encode(protocol.cancel_request(request_id)))

    def _helper_ended(self, connection, reason):
        if connection is self._connection:
            self._connection = None
        orphans = [p for p in self._pending.values() if p.connection is connection]
        for pending in orphans:
            pending.stop_guard()
            if pending.attempts < MAX_ATTEMPTS:
                self._send(pending)
            else:
                how = _how_it_ended(reason)
                self._finish(pending, protocol.helper_died(how, connection.stderr.text()))
        if self._stopped and self._connection is None:
            self._stopped_now()

    def stop(self):
        """Deferred that fires once the helper has gone: asked to leave by
        closing its stdin (it kills its readers), killed if it lingers."""
        self._stopped = True
        for pending in list(self._pending.values()):
            self._pending.pop(pending.request_id)
            pending.stop_guard()
            pending.deferred.errback(InspectError(_STOPPED))
        if self._connection is None:
            return defer.succeed(None)
        waiter = defer.Deferred()
        self._stop_waiters.append(waiter)
        if self._kill_call is None:
            self._connection.transport.closeStdin()
            self._kill_call = self._reactor.callLater(STOP_GRACE_SECONDS, self._connection.kill)
        return waiter

    def _stopped_now(self):
        if self._kill_call is not None and self._kill_call.active():
            self._kill_call.cancel()
        waiters, self._stop_waiters = self._stop_waiters, []
        for waiter in waiters:
            waiter.callback(None)
