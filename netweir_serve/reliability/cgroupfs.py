"""What is done to one job's control group once it exists: join it, read
whether the kernel killed in it for memory, empty it, remove it.

``os`` and the service's ``_proctree`` only (which the parent imports
anyway), and cheap to import: the crawl's parent
(jobs/_crawlparent.py) uses it on every job's start and end, where each
millisecond is paid per job. A group is given as the list of its
directories, one per hierarchy it lives in: one under cgroup v2 (memory
and cpu share the unified tree), one or two under v1 (the memory
hierarchy, the cpu hierarchy). Making groups and choosing where is
reliability/cgroups.py.
"""

import os

from .._proctree import signal_each

# The flag of the crawl's parent's command line that names one of the
# directories of the crawl's group (jobs/process.crawl_command).
FLAG = "--cgroup="

# Where the count of the kernel's OOM kills in a group is: v2, then v1
# (memory.oom_control's oom_kill line, Linux 4.13 and later).
_OOM_FILES = ("memory.events", "memory.oom_control")


def join(directories, pid):
    """Moves the process ``pid`` (with all its threads) into the group:
    its pid written to each directory's cgroup.procs. Raises OSError."""
    data = str(pid).encode("ascii")
    for directory in directories:
        fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def members(directories):
    """The pids in the group's directories (none for a directory gone)."""
    found = []
    for directory in directories:
        try:
            with open(os.path.join(directory, "cgroup.procs"), "rb") as f:
                data = f.read()
        except OSError:
            continue
        found.extend(int(word) for word in data.split() if word.isdigit())
    return found


def oom_kills(directories):
    """How many processes the kernel's OOM killer killed in the group
    (its memory directory's count); None where no directory tells."""
    for directory in directories:
        for name in _OOM_FILES:
            try:
                with open(os.path.join(directory, name), "rb") as f:
                    data = f.read()
            except OSError:
                continue
            for line in data.splitlines():
                words = line.split()
                if len(words) == 2 and words[0] == b"oom_kill" and words[1].isdigit():
                    return int(words[1])
    return None


def kill_members(directories, sig=9):
    """Sends ``sig`` (SIGKILL by default) to every process in the group.
    Returns how many were signalled."""
    return signal_each(members(directories), sig)


def remove(directories):
    """Removes the group's directories (rmdir: the kernel refuses one that
    still holds a process, EBUSY). Returns those that could not be
    removed; one already gone is removed."""
    left = []
    for directory in directories:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:
            left.append(directory)
    return left


def split_flags(argv):
    """(the group's directories, the rest) of a command line whose first
    words may be ``--cgroup=DIR``."""
    directories = []
    at = 0
    while at < len(argv) and argv[at].startswith(FLAG):
        directories.append(argv[at][len(FLAG):])
        at += 1
    return directories, argv[at:]
