"""Where a job's log, items and stats live under DIR, and reading them back.

DIR/logs/P/S/JOB.log, DIR/items/P/S/JOB.jsonl, DIR/stats/P/S/JOB.json and
DIR/status/P/S/JOB.json (the exit status the crawl's parent writes when the
crawl ends): project, spider and job are names (checked by the name rule),
so these paths never leave DIR. Each kind has a tree of its own, so no
job's file can be another's whatever the ids.
"""

import json
import os
from dataclasses import dataclass

# A crawl's stats file is a few KB; anything past this is not one.
MAX_STATS_BYTES = 1 << 20


@dataclass(frozen=True)
class JobFiles:
    log: str
    items: str
    stats: str
    status: str
    # DIR/history/P/S/JOB.jsonl, the stats over time (jobs/history.py).
    history: str = None

    def all(self):
        return tuple(p for p in (self.log, self.items, self.stats, self.status, self.history)
                     if p is not None)


def job_files(directory, project, spider, jobid):
    """The JobFiles of one job under ``directory`` (the service's DIR)."""
    return JobFiles(
        log=os.path.join(directory, "logs", project, spider, jobid + ".log"),
        items=os.path.join(directory, "items", project, spider, jobid + ".jsonl"),
        stats=os.path.join(directory, "stats", project, spider, jobid + ".json"),
        status=os.path.join(directory, "status", project, spider, jobid + ".json"),
        history=os.path.join(directory, "history", project, spider, jobid + ".jsonl"),
    )


def files_of(directory, record):
    return job_files(directory, record.project, record.spider, record.id)


def read_stats(path):
    """The stats a crawl last wrote to ``path`` (a dict), or None when there
    is no complete file yet. The crawl replaces the file atomically, so a
    read sees a whole file or the previous one."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STATS_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_STATS_BYTES:
        return None
    try:
        stats = json.loads(data)
    except ValueError:
        return None
    return stats if isinstance(stats, dict) else None


def delete_files(files):
    """Removes a forgotten job's files. Returns the paths that could not be
    removed. Folders stay: a job of the same spider that has just started
    may not have written into them yet, and needs them there."""
    failed = []
    for path in files.all():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            failed.append(path)
    return failed


def read_exit_status(path):
    """What the crawl's parent wrote at the crawl's end: a dict with
    ``exit_status`` (an int, negative for a signal, or None) and
    ``end_time``, ``run`` (the run's mark, jobs.process.run_mark) if it
    wrote one, and ``oom`` (True) if the kernel killed in the crawl's
    control group for memory, ``not_started`` (why) if the crawl never
    started (it could not join its control group); None when there is no
    whole, well-formed file (the
    machine went down, or the parent itself was killed)."""
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
        status = json.loads(data)
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict):
        return None
    code, end = status.get("exit_status"), status.get("end_time")
    # An end time listjobs.json can show (no bool, NaN, infinity, year 5000).
    if "exit_status" not in status or (code is not None and type(code) is not int) \
            or type(end) not in (int, float) or not 0 <= end < 1e11:
        return None
    written = {"exit_status": code, "end_time": float(end)}
    if status.get("oom") is True:
        written["oom"] = True
    why = status.get("not_started")
    if type(why) is str and why:
        written["not_started"] = why[:1024]
    run = status.get("run")
    if run is not None:
        if type(run) is not str:
            return None
        written["run"] = run
    return written


def open_beneath(root, path):
    """Opens ``path``, a file below the folder ``root``, for reading,
    following no symbolic link on the way (not ``root``'s own folders
    beneath DIR, not the file): a link planted under DIR/logs or DIR/items
    is refused, never followed out of DIR. Returns a file descriptor;
    raises OSError (ELOOP, ENOTDIR, ENOENT...) otherwise."""
    relative = os.path.relpath(path, root)
    parts = relative.split(os.sep)
    if relative.startswith(os.pardir) or os.path.isabs(relative) or "" in parts:
        raise FileNotFoundError(path)
    return open_below(root, parts)


def open_below(root, parts):
    """``open_beneath`` of the path ``parts`` (names: no separator, no
    ``..``) below ``root``, for a caller that has the names already (a job
    file's URL gives them) and need not work them out of a path."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
        return os.open(parts[-1], flags, dir_fd=folder)
    finally:
        os.close(folder)
