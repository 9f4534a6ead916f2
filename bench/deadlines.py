"""The deadline watch at scale, on a Clock (``--only deadlines``): ours alone.

netweir-serve's deadline watch (jobs/deadlines.py) with N running
jobs (1,000 in every mode but the tests'), each with a ``timeout`` (60 s
to 10 min, seeded) and a ``stall`` of a minute. Half of them make progress
until their timeout; the others stop making progress at a random moment,
so their stall falls due first when that comes soon enough. A stats loop
(one call every 5 s, as the crawls rewrite their stats files) tells the
watch of each job's new stats, as the launcher's "changed" events do.

The Clock is advanced as a reactor would run: to the next delayed call,
each in turn. At each step it counts the watch's delayed calls (the
figure's bracketed value: it must be 1 whenever a job is watched), and
each cancel is compared with the deadline worked out here independently:
``start + timeout``, or ``last progress seen + stall`` (the last stats
round at or before the job stopped). The figure is the largest difference,
in ms: 0 for a watch that fires every deadline at its time. The notes give
the CPU time per deadline of the whole run (stats rounds included).

A stand-in launcher takes the cancels and tells the stats: what is
measured is the watch alone, not the crawls.
"""

import random
import time

from twisted.internet import task

from netweir_serve.jobs.deadlines import STALL_KIND, TIMEOUT_KIND, Deadlines
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.store.records import RUNNING, STALLED, TIMEOUT, JobRecord

STATS_SECONDS = 5
STALL = 60
SEED = 24


class StandInLauncher:
    """What the watch asks of a launcher: the running jobs' stats and log
    sizes, and their cancels (recorded with the Clock's time)."""

    def __init__(self, clock):
        self.clock = clock
        self.stats = {}
        self.cancels = {}

    def running_stats(self, jobid):
        return self.stats.get(jobid)

    def log_size(self, jobid):
        return 0

    def cancel(self, jobid, now=False, reason=None):
        if jobid not in self.stats:
            return False
        self.cancels[jobid] = (self.clock.seconds(), reason)
        del self.stats[jobid]
        return True

    def cancel_once(self, jobid, reason):
        # The watch's way in (ILauncher.cancel_once): a job cancelled once
        # is gone from the stand-in, so a second ask finds nothing.
        return self.cancel(jobid, reason=reason)


def measure(jobs, seed=SEED):
    """``{"error_ms", "timers", "deadlines", "cpu_us", "by_reason"}`` of a run
    with ``jobs`` running jobs."""
    rng = random.Random(seed)
    clock, wall = task.Clock(), task.Clock()
    wall.advance(1_790_000_000)
    launcher = StandInLauncher(clock)
    watch = Deadlines(clock, wall, launcher, lambda jobid: None, serves=lambda p: True)
    expected, records, stops = {}, {}, {}
    for n in range(jobs):
        jobid = f"j{n}"
        timeout = rng.randint(60, 600)
        record = JobRecord(id=jobid, project="p", spider="s", spider_file="/s.py",
                           state=RUNNING, created=wall.seconds(), start_time=wall.seconds(),
                           policy=JobPolicy(timeout=timeout, stall=STALL).to_json())
        records[jobid] = record
        launcher.stats[jobid] = {"fetched": 0, "items": 0}
        # Even jobs progress to their end; odd ones stop at ``stop`` s.
        stop = None if n % 2 == 0 else rng.uniform(0, timeout)
        stops[jobid] = stop
        stall_due = None if stop is None else (stop // STATS_SECONDS) * STATS_SECONDS + STALL
        if stall_due is not None and stall_due < timeout:
            expected[jobid] = (stall_due, STALLED)
        else:
            expected[jobid] = (float(timeout), TIMEOUT)
    started = time.process_time()
    for record in records.values():
        watch.started(record)

    def stats_round():
        now = clock.seconds()
        for jobid, stats in list(launcher.stats.items()):
            stop = stops[jobid]
            if stop is None or now <= stop:
                launcher.stats[jobid] = {"fetched": stats["fetched"] + 1, "items": 0}
            watch.changed(records[jobid])

    loop = task.LoopingCall(stats_round)
    loop.clock = clock
    loop.start(STATS_SECONDS, now=False)
    most = 0
    # Past the last timeout every job must have been cancelled: a watch
    # that cancels nothing ends the run there, not never.
    last = max(r for r in (expected[j][0] for j in expected)) + STATS_SECONDS
    while launcher.stats and clock.seconds() <= last:
        ours = [c for c in clock.getDelayedCalls() if c.active() and c.func == watch._fire]
        most = max(most, len(ours))
        clock.advance(min(c.getTime() for c in clock.getDelayedCalls()) - clock.seconds())
    loop.stop()
    cpu = time.process_time() - started
    assert not launcher.stats, f"{len(launcher.stats)} job(s) never cancelled"
    errors = [abs(launcher.cancels[jobid][0] - at) for jobid, (at, _) in expected.items()]
    wrong = [jobid for jobid, (_, reason) in expected.items()
             if launcher.cancels[jobid][1] != reason]
    by_reason = {reason: sum(1 for _, r in launcher.cancels.values() if r == reason)
                 for reason in (TIMEOUT, STALLED)}
    assert not wrong, f"cancelled with the wrong reason: {wrong[:5]}"
    assert watch.fired[TIMEOUT_KIND] + watch.fired[STALL_KIND] == jobs
    return {"error_ms": max(errors) * 1000, "timers": most, "deadlines": jobs,
            "cpu_us": cpu / jobs * 1e6, "by_reason": by_reason}
