"""The warm process: imports Netweir once, then forks spares for jobs.

Run by the service (warm/starter.py) as ``python -c BOOTSTRAP
PACKAGE_PARENT DIRECTORY`` with its control socket (AF_UNIX,
SOCK_SEQPACKET) on descriptor 3, /dev/null on 0 and its own log on 1 and 2.
DIRECTORY is the service's --dir, there only so that whoever looks for
the processes of that directory by their command line finds these too.

Messages on the control socket are JSON, one a packet:

- to the service: ``{"ready": true}`` once Netweir is imported, or
  ``{"unsafe": why}`` (then it exits); ``{"spare": pid}`` with the
  service's end of the new spare's socket attached; ``{"ended": pid,
  "status": n}`` for every child reaped (a job's parent or a spare; ``n``
  negative: killed by that signal).
- from the service: ``{"spare": 1}``, fork one more spare.

It ends when the service closes the control socket (the service stopped
or died), leaving the jobs it started to run on. A spare waits on its
own socket for one job: ``{"command": argv, "env": {...}, "cwd": dir,
"fds": {child fd: index}}`` with those descriptors attached; it ends
quietly when that socket is closed without one.
"""

import array
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys

CONTROL_FD = 3
# The variable holding the run's mark (jobs.process.RUN_MARK_VARIABLE), and
# what stands for it in the warm process's environment: as long as a mark.
MARK_VARIABLE = "NETWEIR_JOB_RUN"
MARK_PLACEHOLDER = "0" * 32
# The biggest job message: a job's environment and command line.
MAX_MESSAGE = 1 << 20
MAX_FDS = 8
# The status a spare exits with when the job's command cannot even be
# exec'd (as _crawlparent.CANNOT_RUN).
CANNOT_RUN = 127


class _Startup:
    """What a fresh interpreter had at the start, before the warm process
    changed anything: put back in each spare given a job."""

    def __init__(self):
        self.path = list(sys.path)
        self.environ = dict(os.environ)
        self.handlers = {s: signal.getsignal(s) for s in (signal.SIGCHLD,)}
        # Where the kernel keeps this process's environment: what
        # /proc/PID/environ shows, which os.environ does not change.
        self.mark_address = _mark_address()
        self.stamps = None

    def take_stamps(self):
        self.stamps = _path_stamps(self.path)


def _mark_address():
    """The address of the placeholder mark's value in this process's
    initial environment block, or None."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rfind(b")") + 2:].split()
        # Fields 50 and 51 of proc(5), env_start and env_end (Linux 3.5+).
        start, end = int(fields[47]), int(fields[48])
    except (OSError, ValueError, IndexError):
        return None
    # A NUL before the block, so that its first entry is found as any.
    area = b"\0" + ctypes.string_at(start, end - start)
    where = area.find(f"\0{MARK_VARIABLE}={MARK_PLACEHOLDER}\0".encode())
    if where < 0:
        return None
    # area[where] is the NUL before the entry, block[where - 1].
    return start + where + len(MARK_VARIABLE) + 1


def _write_mark(address, mark):
    import ctypes

    ctypes.memmove(address, mark.encode("ascii"), len(MARK_PLACEHOLDER))


def _path_stamps(path):
    """The modification times of the installation folders on ``path``
    (site-packages, dist-packages): one changes when a package is
    installed, upgraded or removed there. Not the others': the working
    directory, or an editable install's checkout, change at every file
    written there."""
    stamps = {}
    for entry in path:
        if os.path.basename(entry.rstrip(os.sep)) not in ("site-packages", "dist-packages"):
            continue
        try:
            stamps[entry] = os.stat(entry).st_mtime_ns
        except OSError:
            stamps[entry] = None
    return stamps


def _preload():
    """Imports what ``python -m netweir`` imports before a spider's code
    runs, and what the crawl's parent imports, without the working
    directory on sys.path (it would be the project's in a job)."""
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    try:
        # The parent's own (its subreaper call, the crawl's start), then
        # what netweir.__main__ runs, and the parent's module itself.
        for name in ("ctypes", "runpy", "netweir", "netweir._cli",
                     "netweir_serve.jobs._crawlparent"):
            importlib.import_module(name)
    finally:
        sys.path[:] = saved


def unsafe_state():
    """Why a fork of this process now would share what it must not, or
    None: another thread, or a descriptor besides the standard streams
    and the control socket."""
    tasks = os.listdir("/proc/self/task")
    if len(tasks) != 1:
        return f"{len(tasks)} threads run in it"
    extra = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in (0, 1, 2, CONTROL_FD):
            continue
        try:
            extra.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            # The descriptor listdir itself had open.
            continue
    if extra:
        return "it holds open descriptors: " + ", ".join(extra)
    return None


def _send(sock, message, fds=()):
    data = json.dumps(message).encode("utf-8")
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def _receive(sock, size=MAX_MESSAGE):
    """(message or None at end of stream, descriptors)."""
    data, ancillary, _flags, _address = sock.recvmsg(
        size, socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)


class _Zygote:
    def __init__(self, startup):
        self.startup = startup
        self.pid = os.getpid()
        self.control = socket.socket(fileno=CONTROL_FD)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def serve(self):
        """Forks spares as asked and reports the ends of its children until
        the service closes the control socket. Returns only in a spare
        given a job: the argv of the job's parent."""
        signal.set_wakeup_fd(self.wake_w)
        # A handler (not SIG_DFL, which the wakeup fd would not hear).
        signal.signal(signal.SIGCHLD, _ignore)
        poll = select.poll()
        poll.register(self.control.fileno(), select.POLLIN)
        poll.register(self.wake_r, select.POLLIN)
        while True:
            try:
                for fd, _events in poll.poll():
                    if fd == self.wake_r:
                        os.read(self.wake_r, 4096)
                        continue
                    message, fds = _receive(self.control)
                    for extra in fds:
                        os.close(extra)
                    if message is None:
                        # The service is gone: the jobs run on, reparented.
                        os._exit(0)
                    if message.get("spare"):
                        argv = self._fork_spare()
                        if argv is not None:
                            return argv
                self._reap()
            except (BrokenPipeError, ConnectionResetError):
                if os.getpid() != self.pid:
                    raise  # a spare's: its job's, not this loop's
                # The service closed its end while this one spoke: gone.
                os._exit(0)

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _send(self.control, {"ended": pid, "status": os.waitstatus_to_exitcode(status)})

    def _fork_spare(self):
        if _path_stamps(self.startup.path) != self.startup.stamps:
            # Something was installed or upgraded: a cold start would see it.
            _send(self.control, {"unsafe": "the interpreter's site-packages changed"})
            os._exit(0)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            ours.close()
            return _Spare(self, theirs).wait()
        theirs.close()
        _send(self.control, {"spare": pid}, [ours.fileno()])
        ours.close()
        return None

    def let_go(self):
        """In a spare: lets go of the warm process's own parts."""
        signal.set_wakeup_fd(-1)
        for signum, handler in self.startup.handlers.items():
            signal.signal(signum, handler)
        os.close(self.wake_r)
        os.close(self.wake_w)
        self.control.close()


def _ignore(signum, frame):
    pass


class _Spare:
    def __init__(self, zygote, sock):
        self.zygote = zygote
        self.startup = zygote.startup
        self.sock = sock

    def wait(self):
        """Waits for a job; returns its parent's argv, having made this
        process what a cold start of it would be (or exec'd that cold
        start). Exits quietly if the service closes the socket first."""
        self.zygote.let_go()
        try:
            message, fds = _receive(self.sock)
        except (OSError, ValueError):
            os._exit(CANNOT_RUN)
        self.sock.close()
        if message is None:
            os._exit(0)
        command = message["command"]
        self._take_streams(message["fds"], fds)
        try:
            os.chdir(message["cwd"])
        except OSError as e:
            os.write(2, f"netweir-serve: could not start the job: {e}\n".encode())
            os._exit(CANNOT_RUN)
        env = message["env"]
        why = self._why_cold(env, message["cwd"])
        if why is not None:
            self._exec_cold(command, env)
        os.environ[MARK_VARIABLE] = env[MARK_VARIABLE]
        _write_mark(self.startup.mark_address, env[MARK_VARIABLE])
        self._as_fresh(command, message["cwd"])
        return command[4:]

    def _take_streams(self, mapping, fds):
        # Above the standard streams' numbers (the received ones are, since
        # 0-2 are open here), so no dup2 overwrites one still to be used.
        for child_fd, index in sorted(mapping.items()):
            os.dup2(fds[index], int(child_fd))
        # Exactly the streams asked, as a spawned process has.
        os.closerange(3, max(os.sysconf("SC_OPEN_MAX"), 1024))

    def _why_cold(self, env, cwd):
        """Why this job must start cold (the exec of its command), or None."""
        if self.startup.mark_address is None:
            return "no room for the run's mark"
        mark = env.get(MARK_VARIABLE, "")
        if len(mark) != len(MARK_PLACEHOLDER):
            return "a mark of another length"
        if {k: v for k, v in env.items() if k != MARK_VARIABLE} != {
                k: v for k, v in self.startup.environ.items() if k != MARK_VARIABLE}:
            return "another environment"
        if _path_stamps(self.startup.path) != self.startup.stamps:
            return "the interpreter's site-packages changed"
        if shadowed(cwd, sys.modules):
            return "the project's folder holds a module of an imported name"
        return None

    def _exec_cold(self, command, env):
        # As the reactor spawns a process: what Python ignores (SIGPIPE,
        # SIGXFSZ) is not left ignored for the program exec'd.
        for signum in signal.valid_signals():
            try:
                if signal.getsignal(signum) == signal.SIG_IGN:
                    signal.signal(signum, signal.SIG_DFL)
            except (OSError, ValueError):
                continue
        try:
            os.execve(command[0], command, env)
        except OSError as e:
            os.write(2, f"netweir-serve: could not start the job: {e}\n".encode())
        os._exit(CANNOT_RUN)

    def _as_fresh(self, command, cwd):
        """What a fresh ``python -c BOOTSTRAP ARGS`` has, where a fork of
        this process has something else."""
        import linecache

        sys.path[:] = self.startup.path
        sys.argv = ["-c"] + list(command[3:])
        sys.orig_argv = list(command)
        importlib.invalidate_caches()
        sys.path_importer_cache.clear()
        linecache.clearcache()
        process = sys.modules.get("multiprocessing.process")
        if process is not None:
            # Both read at import in a cold start, in the job's folder:
            # worker processes start there, and hold a key of this job's.
            process.ORIGINAL_DIR = os.path.abspath(cwd)
            process.current_process().authkey = os.urandom(32)


def shadowed(folder, modules):
    """Whether ``folder`` (the first place a cold start imports from)
    holds a module or package named as one of ``modules`` (top-level
    names): a cold start would import that one."""
    try:
        names = os.listdir(folder)
    except OSError:
        return True
    for name in names:
        stem, dot, _rest = name.partition(".")
        if stem not in modules:
            continue
        if dot:
            if name.endswith((".py", ".pyc", ".so", ".pyd")):
                return True
        elif os.path.exists(os.path.join(folder, name, "__init__.py")):
            return True
    return False


def main(argv):
    """The warm process: returns only in a spare given a job, with the
    argv for _crawlparent.main."""
    startup = _Startup()
    try:
        _preload()
    except BaseException as e:
        sys.stderr.write(f"netweir-serve: the warm process cannot import netweir: {e!r}\n")
        os._exit(CANNOT_RUN)
    # Away from the service's terminal and process group: a Ctrl-C there
    # is the service's to handle. Its children make sessions of their own.
    os.setsid()
    startup.take_stamps()
    # Before the warm process opens anything of its own.
    why = unsafe_state()
    if why is None and startup.mark_address is None:
        why = "the run's mark cannot be written where /proc shows the environment"
    if why is not None:
        _send(socket.socket(fileno=CONTROL_FD), {"unsafe": why})
        os._exit(0)
    zygote = _Zygote(startup)
    # Everything imported so far stays shared with the forks, untouched by
    # their garbage collector, instead of being copied into each.
    gc.freeze()
    _send(zygote.control, {"ready": True})
    return zygote.serve()
