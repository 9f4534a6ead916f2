"""One service per --dir: an exclusive lock that dies with the process."""

import fcntl
import os

LOCK_NAME = "lock"


class DirectoryBusy(Exception):
    """Another live process holds the directory; the message says which."""


def lock_directory(directory):
    """Creates ``directory`` if needed and locks it; returns the open lock
    file, which must stay open for as long as the service owns it.

    A ``flock`` lock is released by the kernel when the process ends however
    it ends (kill -9 included), so a crashed service never leaves a stale
    lock behind. Raises DirectoryBusy when another process holds it."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DirectoryBusy(
            f"{directory} is in use by another netweir-serve (one service per --dir);"
            " stop that one or give another --dir"
        ) from None
    # The pid is for people looking at the directory; the lock is the truth.
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return os.fdopen(fd, "r+")
