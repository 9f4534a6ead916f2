"""A job's stats over time: each new snapshot a line of a bounded series.

While a job runs, the crawl rewrites its stats file every 5 seconds and
the launcher publishes "changed" when it has read a new one. ``StatsHistory``
hears those events and appends ``{"time": SECONDS, "stats": {...}}`` to the
job's ``JobFiles.history`` (DIR/history/P/S/JOB.jsonl), one JSON object a
line, oldest first; the final stats are appended when the job ends. The
file is one of the job's files, so --keep deletes it with the others.

Bounded: a series holds at most ``max_points`` lines (500: 41 minutes at
one snapshot each 5 s, about 1 MB at most). When it is full, every other
line is dropped (the first is kept, so the series still starts where the
job started) and from then on only every second snapshot is kept; full
again, every fourth, and so on. A long job's series thus stays evenly
spaced over its whole run, at a coarser step, and its last point is
always the job's final stats.
"""

import json
import os

from twisted.logger import Logger

from ..names import fold
from .events import CHANGED, ENDED
from .files import files_of

MAX_POINTS = 500


def read_history(path):
    """The points of the series at ``path``, oldest first (a list of
    ``{"time": ..., "stats": ...}``); an empty list when there is none. A
    line that is not a whole point (a write cut short by a crash) is
    skipped."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        try:
            point = json.loads(line)
        except ValueError:
            continue
        if isinstance(point, dict) and isinstance(point.get("stats"), dict):
            points.append(point)
    return points


class _Series:
    """What is known of one job's series while it runs."""

    def __init__(self, path, count):
        self.path = path
        self.count = count      # lines in the file
        self.stride = 1         # keep every stride-th snapshot
        self.seen = 0           # snapshots heard since the last thinning
        self.heard = None       # the stats dict last heard (kept or not)
        self.written = None     # the stats of the last line written
        self.broken = False     # a write failed: no more points
        self.torn = False       # the file ends in a partial line


class StatsHistory:
    """Subscribe ``heard`` to "changed" and "ended" (``subscribe`` does).

    ``directory`` is the service's DIR; ``running_stats(jobid)`` gives a
    running job's latest stats (``ILauncher.running_stats``); ``clock``
    gives the time of day of each point (``seconds()``: the wall clock)."""

    log = Logger()

    def __init__(self, directory, running_stats, clock, max_points=MAX_POINTS):
        if max_points < 2:
            raise ValueError("a series needs room for at least two points")
        self._directory = directory
        self._running_stats = running_stats
        self._clock = clock
        self._max = max_points
        self._series = {}

    def subscribe(self, events):
        return events.subscribe(self.heard, kinds=(CHANGED, ENDED))

    def path_of(self, record):
        return files_of(self._directory, record).history

    def heard(self, kind, record):
        key = fold(record.id)
        if kind == CHANGED:
            stats = self._running_stats(record.id)
            if stats is not None:
                self._snapshot(key, record, stats, final=False)
        elif kind == ENDED:
            if record.stats is not None:
                self._snapshot(key, record, record.stats, final=True)
            self._series.pop(key, None)

    def _snapshot(self, key, record, stats, final):
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._open(record)
        # "changed" comes for a cancel request too, with the same stats.
        if series.broken or stats is series.heard or (final and stats == series.written):
            return
        series.heard = stats
        series.seen += 1
        if not final and series.seen % series.stride:
            return
        if series.count >= self._max:
            self._thin(series, record)
        self._append(series, record, stats)

    def _open(self, record):
        # A job this service did not see start (it was adopted after a
        # restart) may have a series already: go on from it.
        path = self.path_of(record)
        count, torn = 0, False
        try:
            with open(path, "rb") as f:
                for line in f:
                    count += 1
                    torn = not line.endswith(b"\n")
        except OSError:
            pass
        series = _Series(path, count)
        # A line cut short by a crash is ended, so the next one stays whole.
        series.torn = torn
        return series

    def _append(self, series, record, stats):
        line = json.dumps({"time": round(self._clock.seconds(), 3), "stats": stats},
                          separators=(",", ":"))
        if series.torn:
            line, series.torn = "\n" + line, False
        try:
            os.makedirs(os.path.dirname(series.path), exist_ok=True)
            with open(series.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            self._broken(series, record, e)
            return
        series.count += 1
        series.written = stats

    def _thin(self, series, record):
        try:
            with open(series.path, "rb") as f:
                lines = f.read().splitlines(keepends=True)
            kept = lines[::2]
            partial = series.path + ".thinning"
            with open(partial, "wb") as f:
                f.writelines(kept)
            os.replace(partial, series.path)
        except OSError as e:
            self._broken(series, record, e)
            return
        series.count = len(kept)
        series.stride *= 2
        series.seen = 0

    def _broken(self, series, record, error):
        series.broken = True
        self.log.warn("job {jobid}: could not write its stats history {path}, keeping no"
                      " more of it: {e}", jobid=record.id, path=series.path, e=error)
