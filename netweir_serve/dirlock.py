"""One service per --dir: an exclusive lock that dies with the process."""

import errno
import fcntl
import os

from . import folders

LOCK_NAME = "lock"


class DirectoryError(Exception):
    """The service cannot have the directory; the message says why."""


class DirectoryBusy(DirectoryError):
    """Another live process holds the directory; the message says which."""


class DirectoryUnusable(DirectoryError):
    """The directory, or its lock file, cannot be made, opened or written
    (a file in the way, a read-only or full disk, no permission); the
    message names it and says why."""


def _unusable(directory, reason):
    return DirectoryUnusable(f"cannot use --dir {directory}: {reason}")


def _said(error):
    return (error.strerror or str(error)).lower()


def _make_directory(directory, made):
    """Makes ``directory`` and any missing folders above it, outermost
    first, appending each one made to ``made``. Raises DirectoryUnusable."""
    try:
        missing = folders.missing_folders(os.path.abspath(directory))
    except NotADirectoryError as e:
        raise _unusable(directory, f"{e.filename} is a file, not a folder") from None
    except OSError as e:
        raise _unusable(directory, f"cannot look at {e.filename}: {_said(e)}") from None
    try:
        folders.make_folders(missing, made.append)
    except FileExistsError as e:
        raise _unusable(directory, f"{e.filename} is a file, not a folder") from None
    except OSError as e:
        raise _unusable(directory, f"cannot make the folder {e.filename}: {_said(e)}") from None


def _open_lock_file(directory, path):
    """(fd, whether this call created the file)."""
    flags = os.O_RDWR | os.O_CLOEXEC
    try:
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        # Made meanwhile, by another service starting on it.
        return _open_lock_file(directory, path)
    except OSError as e:
        if e.errno == errno.EISDIR:
            reason = f"its lock file {path} is a folder"
        else:
            reason = f"cannot open its lock file {path}: {_said(e)}"
        raise _unusable(directory, reason) from None


def lock_directory(directory):
    """Creates ``directory`` if needed and locks it; returns the open lock
    file, which must stay open for as long as the service owns it.

    A ``flock`` lock is released by the kernel when the process ends however
    it ends (kill -9 included), so a crashed service never leaves a stale
    lock behind. Raises DirectoryBusy when another process holds it, and
    DirectoryUnusable, having taken back any folder or lock file it made,
    when the directory or its lock file cannot be made, opened, locked or
    written."""
    made = []
    fd = None
    created = False
    path = os.path.join(directory, LOCK_NAME)
    try:
        _make_directory(directory, made)
        fd, created = _open_lock_file(directory, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DirectoryBusy(
                f"{directory} is in use by another netweir-serve (one service per --dir);"
                " stop that one or give another --dir"
            ) from None
        except OSError as e:
            raise _unusable(directory, f"cannot lock {path}: {_said(e)}") from None
        # The pid is for people looking at the directory; the lock is the truth.
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as e:
            raise _unusable(directory, f"cannot write {path}: {_said(e)}") from None
        return os.fdopen(fd, "r+")
    except BaseException as e:
        if fd is not None:
            # Never on DirectoryBusy: the file is then another service's.
            if created and isinstance(e, DirectoryUnusable):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            os.close(fd)
        for folder in reversed(made):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise

