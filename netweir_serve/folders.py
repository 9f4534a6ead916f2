"""Making a folder and the missing folders above it, one at a time,
outermost first, so that a caller knows exactly which ones it made (and
can take them back): the lock on ``--dir`` (dirlock) and the folders of a
job's path settings (jobs.datapaths).

Two steps, so that a caller can word a failure to look apart from a
failure to make: ``missing_folders`` only looks, ``make_folders`` makes.
"""

import errno
import os
import stat


def missing_folders(folder):
    """``folder`` and the folders above it that do not exist yet, outermost
    first: what ``make_folders`` is to make. Raises NotADirectoryError, its
    ``filename`` the file, when the nearest of them that exists is a file;
    and the OSError of looking at one (os.stat), ``filename`` the one."""
    missing = []
    here = folder
    while True:
        try:
            mode = os.stat(here).st_mode
        except (FileNotFoundError, NotADirectoryError):
            # Missing, or below a file: the file is found further up.
            missing.append(here)
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
            continue
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), here)
        break
    missing.reverse()
    return missing


def make_folders(folders, made):
    """Makes each of ``folders`` in turn (``missing_folders`` gives them),
    calling ``made(path)`` after making each one. One that someone else
    made meanwhile is passed over, not ``made``, if it is a folder; if it
    is a file, raises its FileExistsError. Raises the OSError of making one
    (os.mkdir, ``filename`` the one); what it made by then stays."""
    for path in folders:
        try:
            os.mkdir(path)
        except FileExistsError:
            if os.path.isdir(path):
                continue
            raise
        made(path)
