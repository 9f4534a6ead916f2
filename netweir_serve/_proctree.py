"""Process trees on Linux, for the processes that must leave nothing behind.

Standard library only, and cheap to import: the crawl's parent process
(jobs/_crawlparent.py) and the spider readers' warm helper
(spiders/_forkserver.py) use it. A process made a *child subreaper*
inherits every orphan among its descendants, whatever session or process
group it made, so "everything this process started" is "every process
whose chain of parents leads to it", and that can be ended. What still
escapes: a process started by another service's daemon (systemd-run, an
ssh or docker daemon), which is never a descendant.
"""

import os

# The signal module's C half: the numbers and signal(), without the enum
# (and re) the module pulls in, which cost the crawl's parent 4 ms a job.
import _signal as signal

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option, value):
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper():
    """Makes the calling process a child subreaper (Linux 3.4+). Returns
    whether it worked; elsewhere, False."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def make_undumpable():
    """Makes the calling process non-dumpable, as ssh-agent does: its
    /proc files (environ, mem, maps...) belong to root, so no other
    process of the same user can read them, and it leaves no core dump.
    Processes it starts are dumpable again once they exec."""
    return _prctl(_PR_SET_DUMPABLE, 0)


def _each(kind):
    """(pid, content of /proc/PID/``kind``) of every process this one can
    see and may read that file of."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/{kind}", "rb") as f:
                yield int(name), f.read()
        except OSError:
            continue


def _parents():
    """{pid: parent pid} of every process this one can see."""
    found = {}
    for pid, stat in _each("stat"):
        # The command name (field 2) may hold spaces and parentheses: the
        # fields after it start past the last ")".
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            found[pid] = int(fields[1])
    return found


def children(pid):
    """The pids of the processes whose parent is ``pid``."""
    return [child for child, parent in _parents().items() if parent == pid]


def descendants(pid):
    """The pids of every living descendant of ``pid``."""
    children = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


def kill_descendants(pid=None, sig=signal.SIGKILL):
    """Sends ``sig`` to every descendant of ``pid`` (default: this process).
    Returns how many were signalled."""
    return signal_each(descendants(os.getpid() if pid is None else pid), sig)


def signal_each(pids, sig):
    """Sends ``sig`` to each of ``pids`` that is still there and ours to
    signal; returns how many were signalled."""
    count = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            count += 1
        except (ProcessLookupError, PermissionError):
            pass
    return count


def _marked(variable, values):
    """{pid: value} of the processes (not this one) whose environment sets
    ``variable`` to one of ``values`` (bytes); those whose environment
    cannot be read (another user's, a zombie's) are not among them."""
    prefix = variable + b"="
    found = {}
    own = os.getpid()
    for pid, environ in _each("environ"):
        if pid == own or prefix not in environ:
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(prefix) and entry[len(prefix):] in values:
                found[pid] = entry[len(prefix):]
                break
    return found


def kill_marked(variable, values, sig=signal.SIGKILL):
    """Sends ``sig`` to every process whose environment sets ``variable``
    to one of ``values`` (strings), again until none is left (one may fork
    as the others are killed): what is left of a job whose parent is gone,
    found by the mark it passed on to all it started, however they were
    reparented, and never a process that merely has a pid it once had.
    Returns {value: pids signalled}."""
    wanted = {v.encode("utf-8", "surrogateescape") for v in values}
    signalled = {}
    if not wanted:
        return signalled
    for _ in range(50):
        found = _marked(variable.encode(), wanted)
        if not found:
            break
        for pid, value in found.items():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                continue
            pids = signalled.setdefault(value.decode("utf-8", "surrogateescape"), [])
            if pid not in pids:
                pids.append(pid)
        if sig != signal.SIGKILL:
            break
    return signalled


def start_time(pid):
    """An identity of the living process ``pid`` that a reused pid never
    has: the boot's id and the process's start time in clock ticks since
    boot (/proc/PID/stat field 22). None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().strip().decode("ascii")
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    # A zombie has ended: only its exit status waits to be collected.
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return f"{boot}:{int(fields[19])}"
