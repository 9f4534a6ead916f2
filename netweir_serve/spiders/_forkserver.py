"""The processes that read spider files: the plumbing around ``_loader.answer``.

It runs in one of two modes, chosen by the first command-line argument:

``once``
    Reads one request from stdin, answers it on stdout and exits.
    One fresh process per request: slow (netweir is imported each time) but
    simple.
``warm``
    Imports netweir once, then reads requests (a line each, with an
    ``id``) from stdin and forks a fresh child for each: the child imports
    the project's files, answers, and exits. The helper relays each answer
    as a line with the request's ``id``, and kills a child that is
    still running past the request's ``timeout``. Closing its stdin stops
    it, with every child it still has.

The messages, and how they are written, are in ``protocol``.

Files may print: the answer channel is a copy of the original stdout, taken
before any spider file runs, and fd 1 then points at /dev/null.
"""

import gc
import math
import os
import selectors
import signal
import sys
import time

from .. import _proctree
from . import protocol
from ._loader import answer

# The most a child may answer; past it the answer is refused, not relayed.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# How much of a child's stderr is kept for a "died without answering" report.
STDERR_TAIL_BYTES = 16 * 1024
# Seconds past its timeout after which a warm child kills itself, in case
# the helper that should have killed it is gone.
BACKSTOP_SECONDS = 5


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _take_stdout():
    """A private copy of stdout to answer on; fd 1 then points at /dev/null,
    so whatever a spider file prints can't garble an answer."""
    answers_fd = os.dup(1)
    _point_at_devnull(1, os.O_WRONLY)
    return answers_fd


def _point_at_devnull(fd, flags):
    devnull = os.open(os.devnull, flags)
    os.dup2(devnull, fd)
    os.close(devnull)


def _leave():
    """Ends this reading process and anything a spider file started, in its
    process group or in a session of its own (this process is a subreaper,
    so those stay its descendants): a file may leave threads or processes
    behind."""
    for stream in (sys.stderr, sys.stdout):
        try:
            stream.flush()
        except BaseException:
            pass
    try:
        _proctree.kill_descendants()
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(0)


def _serve_once(answers_fd):
    """``once`` mode: one request from stdin, one answer, then exit."""
    try:
        if hasattr(os, "setsid"):
            # A group of its own, so the daemon can kill it with whatever a
            # spider file started.
            os.setsid()
        _proctree.become_subreaper()
        request = protocol.decode(sys.stdin.buffer.read())
        _point_at_devnull(0, os.O_RDONLY)
        _write_all(answers_fd, protocol.encode(answer(request)))
    finally:
        _leave()


class _Child:
    """A forked child of the warm helper, and what it has said so far."""

    def __init__(self, request_id, pid, answer_fd, stderr_fd, deadline):
        self.request_id = request_id
        self.pid = pid
        self.answer_fd = answer_fd
        self.stderr_fd = stderr_fd
        self.deadline = deadline
        self.answer = bytearray()
        self.stderr = bytearray()


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        # Not yet in a group of its own: just the child.
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _how_it_ended(status):
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return protocol.how_it_ended(signal_number=-code)
    return protocol.how_it_ended(exit_status=code)


def _parent_death_signal():
    """A function that makes the calling process die with its parent, or
    None where there is none (Linux only). Looked up once in the helper:
    loading ctypes in every fork would cost milliseconds each time."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    PR_SET_PDEATHSIG = 1
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class _WarmHelper:
    """``warm`` mode: forks a reader per request, relays answers, enforces
    timeouts. Single-threaded; blocks only on its selector."""

    def __init__(self, answers_fd):
        self.answers_fd = answers_fd
        self.selector = selectors.DefaultSelector()
        self.inbox = bytearray()
        self.children = {}
        # Killed children not yet reaped: reaping waits for an exit to
        # finish, which is no reason to hold an answer back.
        self.dying = []
        self.die_with_parent = _parent_death_signal()

    def run(self):
        os.set_blocking(0, False)
        self.selector.register(0, selectors.EVENT_READ, None)
        while True:
            for key, _events in self.selector.select(self._seconds_to_next_deadline()):
                if key.data is None:
                    if not self._read_requests():
                        self._kill_everything()
                        return
                else:
                    self._read_child(key.fd, *key.data)
            self._expire()
            self._reap_dying()

    def _seconds_to_next_deadline(self):
        waits = [child.deadline - _now() for child in self.children.values()]
        if self.dying:
            waits.append(0.05)
        return max(0.0, min(waits)) if waits else None

    def _read_requests(self):
        """False once the daemon has closed our stdin: time to go."""
        try:
            data = os.read(0, 65536)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.inbox += data
        while b"\n" in self.inbox:
            line, _, rest = bytes(self.inbox).partition(b"\n")
            self.inbox = bytearray(rest)
            self._handle(protocol.decode(line))
        return True

    def _handle(self, request):
        if protocol.is_cancel(request):
            child = self.children.get(protocol.id_of(request))
            if child is not None:
                self._end(child)
            return
        self._fork(request)

    def _fork(self, request):
        answer_r, answer_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        sys.stderr.flush()
        helper_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(answer_r)
                os.close(stderr_r)
                self._become_reader(helper_pid, stderr_w, protocol.timeout_of(request))
                _write_all(answer_w, protocol.encode(answer(request)))
            finally:
                _leave()
        os.close(answer_w)
        os.close(stderr_w)
        deadline = _now() + protocol.timeout_of(request)
        child = _Child(protocol.id_of(request), pid, answer_r, stderr_r, deadline)
        self.children[child.request_id] = child
        self.selector.register(answer_r, selectors.EVENT_READ, (child, "answer"))
        self.selector.register(stderr_r, selectors.EVENT_READ, (child, "stderr"))

    def _become_reader(self, helper_pid, stderr_w, timeout):
        """In a fresh fork: let go of the helper's pipes and children, take
        a process group of its own, and arrange to die if abandoned."""
        os.setsid()
        # What a spider file starts as it is read stays in this tree, even
        # in a session of its own, and is ended with the reading.
        _proctree.become_subreaper()
        if self.die_with_parent is not None:
            self.die_with_parent()
        if os.getppid() != helper_pid:
            # The helper died before the line above took effect.
            os._exit(1)
        signal.alarm(math.ceil(timeout) + BACKSTOP_SECONDS)
        # Closing, not unregistering: the epoll set is shared with the helper.
        os.close(self.selector.fileno())
        os.close(self.answers_fd)
        for other in self.children.values():
            for fd in (other.answer_fd, other.stderr_fd):
                if fd is not None:
                    os.close(fd)
        _point_at_devnull(0, os.O_RDONLY)
        os.dup2(stderr_w, 2)
        os.close(stderr_w)

    def _read_child(self, fd, child, which):
        if getattr(child, which + "_fd") != fd:
            # Closed by an earlier event of the same select() round.
            return
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if which == "stderr":
            if data:
                child.stderr += data
                del child.stderr[:-STDERR_TAIL_BYTES]
            else:
                self._close(child, "stderr_fd")
            return
        if not data:
            self._end(child, self._died(child))
            return
        child.answer += data
        if len(child.answer) > MAX_ANSWER_BYTES:
            self._end(child, protocol.too_large())
        elif child.answer.endswith(b"\n"):
            # Relayed as soon as it is whole, without waiting for the child
            # to finish exiting.
            try:
                reply = protocol.decode(bytes(child.answer))
            except ValueError:
                return
            self._end(child, reply)

    def _died(self, child):
        """The answer for a child that closed its answer pipe without a
        whole answer: how it ended and the last of its stderr."""
        _proctree.kill_descendants(child.pid)
        _kill_group(child.pid)
        _pid, status = os.waitpid(child.pid, 0)
        child.pid = None
        self._drain_stderr(child)
        return protocol.died(_how_it_ended(status), bytes(child.stderr).decode("utf-8", "replace"))

    def _drain_stderr(self, child):
        # The child is dead: what it wrote is already in the pipe, so a
        # non-blocking read gets all of it, even if a grandchild holds the pipe.
        if child.stderr_fd is None:
            return
        os.set_blocking(child.stderr_fd, False)
        while True:
            try:
                data = os.read(child.stderr_fd, 65536)
            except BlockingIOError:
                return
            if not data:
                return
            child.stderr += data
            del child.stderr[:-STDERR_TAIL_BYTES]

    def _expire(self):
        now = _now()
        for child in list(self.children.values()):
            if child.deadline <= now:
                self._end(child, protocol.timed_out())

    def _end(self, child, reply=None):
        """Forgets ``child``: kills its process group, sends ``reply`` if
        any, and reaps it once it has gone."""
        self.children.pop(child.request_id, None)
        self._close(child, "answer_fd")
        self._close(child, "stderr_fd")
        if child.pid is not None:
            # Its descendants in sessions of their own first, while the tree
            # still leads to them; then its group.
            _proctree.kill_descendants(child.pid)
            _kill_group(child.pid)
            self.dying.append(child.pid)
            child.pid = None
        if reply is not None:
            self._reply(child.request_id, reply)
        self._end_strays()
        self._reap_dying()

    def _end_strays(self):
        """Kills the processes that came to this helper (a subreaper) when
        the reader that started them ended: any child that is no reader."""
        known = {c.pid for c in self.children.values() if c.pid is not None}
        known.update(self.dying)
        for pid in _proctree.children(os.getpid()):
            if pid not in known:
                _proctree.kill_descendants(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.dying.append(pid)

    def _reap_dying(self, block=False):
        for pid in list(self.dying):
            try:
                reaped, _status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                reaped = pid
            if reaped:
                self.dying.remove(pid)

    def _close(self, child, attribute):
        fd = getattr(child, attribute)
        if fd is not None:
            self.selector.unregister(fd)
            os.close(fd)
            setattr(child, attribute, None)

    def _reply(self, request_id, reply):
        try:
            _write_all(self.answers_fd, protocol.encode(protocol.with_id(reply, request_id)))
        except BrokenPipeError:
            # The daemon is gone; the next read of stdin ends this loop.
            pass

    def _kill_everything(self):
        for child in list(self.children.values()):
            self._end(child)
        self._reap_dying(block=True)


def _now():
    return time.monotonic()


def _serve_warm(answers_fd):
    if hasattr(os, "setsid"):
        # Away from the daemon's terminal: a Ctrl-C there is the daemon's
        # to handle, and it stops this helper by closing its stdin.
        os.setsid()
    # Orphans of its readers come to it, to be ended (see _end_strays).
    _proctree.become_subreaper()
    # Everything imported so far stays shared with the forks, untouched by
    # their garbage collector, instead of being copied into each.
    gc.freeze()
    _WarmHelper(answers_fd).run()


def main(argv):
    """Entry point: ``argv`` is ``["once"]`` or ``["warm"]``."""
    answers_fd = _take_stdout()
    if argv == ["warm"]:
        _serve_warm(answers_fd)
    elif argv == ["once"]:
        _serve_once(answers_fd)
    else:
        sys.exit(f"usage: {__name__} once|warm")
