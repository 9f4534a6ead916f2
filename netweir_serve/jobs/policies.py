"""Run policies: which pending job may start now, and why one waits.

A job's ``locks`` are what it must hold alone while it runs: the data
directory of a ``checkpoint``, ``deltafetch`` or ``cache`` setting (two
crawls writing one would corrupt it), and, for the jobs of a schedule with
``overlap=queue``, the schedule itself. A pending job waits while a running
job holds any of its locks, or while its spider already has
``max_per_spider`` running jobs; it holds no slot meanwhile, and the next
job that may run takes the slot.

What a claim does with the locks is store.runpolicy's: the store's claim
and the listings both ask it, so what waits and what listjobs says agree.
"""

import os

from ..names import fold
from ..store.runpolicy import PATH, SCHEDULE
from . import datapaths

# The settings whose directory a crawl reads and rewrites as it goes; warc
# and har are files a crawl only appends to, named per job by users.
EXCLUSIVE_SETTINGS = ("checkpoint", "deltafetch", "cache")


def path_locks(project, data_dir, settings):
    """The locks of a job of ``project`` with ``settings`` (``(key, value)``
    pairs, checked): one per exclusive path setting that names a directory."""
    # By directory alone: a checkpoint and a cache naming one directory
    # share it as much as two checkpoints do.
    locks = []
    for key, value in settings:
        if key in EXCLUSIVE_SETTINGS and value is not None and not datapaths.means_none(value):
            # Through symlinks (datapaths keeps them inside data_dir): two
            # names of one directory are one lock.
            path = os.path.realpath(datapaths.resolve(data_dir, key, value))
            locks.append(f"{PATH}:{fold(project)}:{path}")
    return tuple(sorted(set(locks)))


def schedule_lock(name):
    """The lock every job a schedule queues holds, unless its overlap is
    ``allow`` (schedules.overlap)."""
    return f"{SCHEDULE}:{fold(name)}"
