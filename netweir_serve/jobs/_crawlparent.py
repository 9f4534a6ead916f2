"""The job's process: the crawl's parent, and the crawl forked from it.

The service spawns one interpreter per job (``spawnProcess``, watched by a
ProcessProtocol as ever). It makes a session of its own and becomes a child
subreaper, then forks: the child reads the job's settings and arguments
from its private file and runs ``netweir`` exactly as ``python -m netweir
crawl`` would; the parent waits for it, ends everything the crawl left
behind (in any session: orphans come to a subreaper), and writes the
crawl's exit status beside the job's files before it exits. So a job's end
is known whoever is watching, and a restarted service records the real
outcome. Forking, not starting a second interpreter, keeps that to a
millisecond or two per job.

Signals from the service: SIGTERM (a cancel) is passed to the crawl;
SIGUSR1 (the kill after the grace period, a second cancel) kills the crawl
and every process it started, in any session, at once.

A job with a ``memory`` or ``cpu`` limit has a control group made for it
by the service (reliability/cgroups.py), named by ``--cgroup=DIR`` words
before ``crawl``: the forked child moves itself into it before netweir
starts, so the crawl and all it starts are held to the limit, while the
parent stays outside, to outlive an OOM kill and report it. At the end the
parent empties the group, notes whether the kernel killed in it for
memory (``"oom": true`` in the status file, so a restarted service sees
it too), and removes it, and the DIR's group above it if no other job's
group is left there (so a service that died first leaves nothing).

Run as ``python -c BOOTSTRAP PACKAGE_PARENT STATUS PRIVATE [--cgroup=DIR...]
crawl ARGS...`` (see process.crawl_command).
"""

import os
import sys
import time

from .. import _proctree
# Not ``signal`` and ``json``: with the enum and re modules they import,
# they cost 10 ms of every job's start.
from .._proctree import signal

# The exit status of a crawl that could not even read its settings.
CANNOT_RUN = 127


class _Crawl:
    pid = None
    killing = False


def _forward(signum, frame):
    if _Crawl.pid is not None:
        try:
            os.kill(_Crawl.pid, signum)
        except ProcessLookupError:
            pass


def _kill_everything(signum=None, frame=None):
    _Crawl.killing = True
    _proctree.kill_descendants()


def _start(private_path, crawl_argv, groups=()):
    """Forks the crawl: in the child, netweir runs as ``python -m netweir``
    would, with the settings and arguments of the private file (read, then
    deleted) after ``crawl_argv``, inside the control group whose
    directories are ``groups`` (if any). Returns the child's pid and, with
    ``groups``, the read end of a pipe on which the child says why it could
    not join them (nothing: it did), else None."""
    told = os.pipe() if groups else None
    pid = os.fork()
    if pid != 0:
        if told is None:
            return pid, None
        os.close(told[1])
        return pid, told[0]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    if groups:
        os.close(told[0])
        try:
            # Before anything of the crawl's runs: a limit asked is never
            # left unenforced.
            _cgroupfs().join(groups, os.getpid())
        except OSError as e:
            why = f"the crawl could not join its control group: {e}"
            os.write(2, f"netweir-serve: {why}\n".encode())
            os.write(told[1], why.encode("utf-8", "replace")[:1024])
            os._exit(CANNOT_RUN)
        # Nothing the crawl starts holds the pipe open.
        os.close(told[1])
    import json
    import runpy

    try:
        with open(private_path, encoding="utf-8") as f:
            private = json.load(f)
        os.unlink(private_path)
    except (OSError, ValueError) as e:
        os.write(2, f"netweir-serve: cannot read the job's settings: {e}\n".encode())
        os._exit(CANNOT_RUN)
    sys.argv = ["netweir"] + list(crawl_argv) + private
    # What netweir's exit says is the crawl's exit status: SystemExit goes
    # up to the interpreter, as it would from python -m netweir.
    runpy.run_module("netweir", run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _wait_for(pid):
    """Reaps children (orphans given to this subreaper too) until ``pid``
    has ended; its exit status (negative: killed by that signal)."""
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        if child == pid:
            return os.waitstatus_to_exitcode(status)


def _no_children():
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _end_the_rest():
    """Kills whatever the crawl left, and reaps it, until nothing is left."""
    # With no child left there is no descendant (orphans come here), so
    # the usual end costs no look through /proc.
    if _no_children():
        return
    for _ in range(100):
        if not _proctree.kill_descendants():
            break
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    time.sleep(0.01)
                    break
            except ChildProcessError:
                break


# The mark of this run of the job (process.run_mark), set by the service.
RUN_MARK_VARIABLE = "NETWEIR_JOB_RUN"


def _run_mark():
    mark = os.environ.get(RUN_MARK_VARIABLE)
    # Hex, as the service makes it: anything else is not written.
    if mark and len(mark) <= 64 and all(c in "0123456789abcdef" for c in mark):
        return mark
    return None


def _cgroupfs():
    # Imported by the jobs with a limit only: the others' start pays nothing.
    from ..reliability import cgroupfs
    return cgroupfs


# The first words of the command line that name the crawl's control group
# (reliability/cgroupfs.FLAG, process.crawl_command).
_GROUP_FLAG = "--cgroup="


def _end_the_group(groups):
    """Kills what is left in the crawl's control group and removes it.
    Returns whether the kernel killed in it for memory."""
    if not groups:
        return False
    cgroupfs = _cgroupfs()
    oom = bool(cgroupfs.oom_kills(groups))
    for _ in range(100):
        # A process killed leaves its group as it exits, a moment later.
        cgroupfs.kill_members(groups)
        _end_the_rest()
        if not cgroupfs.remove(groups):
            # The DIR's group too, if no other job's is in it (the kernel
            # refuses then): with the service gone meanwhile nobody else
            # would. The service makes it again for its next job.
            cgroupfs.remove([os.path.dirname(group) for group in groups])
            break
        time.sleep(0.01)
    else:
        sys.stderr.write(f"netweir-serve: could not remove the job's control group"
                         f" {' '.join(groups)}\n")
    return oom


def _why_not_started(told):
    """What the child said on the pipe ``told`` before it exited (it has
    ended: the read does not wait), or None."""
    if told is None:
        return None
    try:
        data = os.read(told, 1024)
    except OSError:
        data = b""
    finally:
        os.close(told)
    return data.decode("utf-8", "replace") or None


def status_json(status, end_time, crawl_pid, run=None, oom=False, not_started=None):
    """The status file's JSON (files.read_exit_status reads it). ``run``,
    the run's mark, says whose status it is: a later service trusts it even
    for a job whose pid it never recorded (it died in between). ``oom``:
    the kernel killed in the crawl's control group for memory.
    ``not_started``: why the crawl never started (it could not join its
    control group), so the job ends ``not started``, not with a crawl's
    failure that a retry policy would take for a flaky run."""
    shown = "null" if status is None else str(int(status))
    mark = "" if run is None else f', "run": "{run}"'
    killed = ', "oom": true' if oom else ""
    why = ""
    if not_started is not None:
        # Only here, on this rare path: json costs every job's start 10 ms.
        import json
        why = f', "not_started": {json.dumps(not_started)}'
    return (f'{{"exit_status": {shown}, "end_time": {float(end_time)!r},'
            f' "crawl_pid": {int(crawl_pid)}{mark}{killed}{why}}}')


def _write_status(path, status, crawl_pid, oom=False, not_started=None):
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        # Not fsynced: a machine that loses power loses the crawl too, and a
        # torn file reads as none (the job is lost), as it would be anyway.
        os.write(fd, status_json(status, time.time(), crawl_pid, _run_mark(), oom,
                                 not_started).encode("ascii"))
    finally:
        os.close(fd)
    os.replace(temporary, path)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: _crawlparent STATUS PRIVATE crawl ARGS...\n")
        return 2
    status_path, private_path = argv[0], argv[1]
    groups, crawl_argv = [], argv[2:]
    if crawl_argv[0].startswith(_GROUP_FLAG):
        groups, crawl_argv = _cgroupfs().split_flags(crawl_argv)
    os.setsid()
    _proctree.become_subreaper()
    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    signal.signal(signal.SIGUSR1, _kill_everything)
    # The service going away (a handover) must not end the crawl.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _Crawl.pid, told = _start(private_path, crawl_argv, groups)
    status = _wait_for(_Crawl.pid)
    not_started = _why_not_started(told)
    _end_the_rest()
    oom = _end_the_group(groups)
    try:
        _write_status(status_path, status, _Crawl.pid, oom, not_started)
    except OSError as e:
        sys.stderr.write(f"netweir-serve: could not write the job's exit status: {e}\n")
        # The service watching this process takes its status for the
        # crawl's when there is no file: pass the crawl's on.
        if status is None:
            return CANNOT_RUN
        return status if status >= 0 else 128 - status
    return 0
