"""The benchmark's modes: how long, how many and how big, for each of
``python -m bench``, ``--quick`` and ``--smoke``; and the groups of figures
``--only`` picks from."""

from dataclasses import dataclass

from . import cluster

GROUPS = ("api", "watching", "memory", "files", "schedules", "nodes", "stall", "reliability",
          "deadlines", "paged", "wave", "console", "warm")


@dataclass(frozen=True)
class Mode:
    name: str
    duration: float        # seconds per load run
    warmup: float          # seconds of load before each run, not counted
    reps: int              # load runs per figure and service
    connections: int
    samples: int           # single requests per latency figure and service
    stamp_samples: int     # idle -> code samples per service
    jobs: int              # jobs of the overhead figure
    chunk: int             # jobs per chunk of the overhead figure
    small_table: int       # finished jobs, first listjobs figure
    big_table: int         # finished jobs, second listjobs figure
    huge_table: int        # finished jobs, the RSS and /metrics figures at scale
    schedules: int         # schedules of the schedules figures
    idle_seconds: float    # the idle spell of the CPU per idle hour
    schedule_rounds: int   # rounds of firings per service
    file_mb: int           # the job file fetched over and over
    big_file_mb: int       # the one fetched by a few clients at once
    fetchers: int
    nodes: cluster.Mode
    streams: int = 50      # open /events streams of the watched figure
    stall_jobs: int = 10_000   # finished, and as many pending, of the stall figure
    stall_rounds: int = 50     # rounds of its burst, per client
    deadline_jobs: int = 1000  # running jobs of the deadline figure (on a Clock)
    paged_jobs: int = 100_000  # finished jobs of the paged listing figures
    # The console's first paint (bench/console.py): finished jobs, measured
    # loads of each of our pages, of ScrapydWeb's (over a minute each at
    # 10,000 on 2 CPUs), and whether its venv may be made (a minute).
    console_jobs: int = 10_000
    console_loads: int = 7
    console_their_loads: int = 3
    console_install: bool = True


FULL = Mode("full", duration=3.0, warmup=0.5, reps=3, connections=64, samples=15,
            stamp_samples=10, jobs=100, chunk=20, small_table=100, big_table=1000,
            huge_table=10_000, schedules=1000, idle_seconds=60, schedule_rounds=2,
            file_mb=5, big_file_mb=500, fetchers=4, nodes=cluster.FULL)
# netweir serve checks every scheduled job in a new interpreter: filling its
# table takes about a minute per thousand jobs on 2 CPUs, so the quick run
# stops at 250 and 1,000.
QUICK = Mode("quick", duration=1.0, warmup=0.2, reps=1, connections=64, samples=5,
             stamp_samples=5, jobs=20, chunk=10, small_table=100, big_table=250,
             huge_table=1000, schedules=200, idle_seconds=20, schedule_rounds=1,
             file_mb=5, big_file_mb=500, fetchers=4, nodes=cluster.QUICK, stall_rounds=20,
             paged_jobs=10_000,
             console_jobs=1000, console_loads=3)
# The tests': both services started, one tiny figure, both stopped (and the
# sizes of the job file and schedule figures they measure on their own).
SMOKE = Mode("smoke", duration=0.3, warmup=0.0, reps=1, connections=8, samples=0,
             stamp_samples=0, jobs=100, chunk=0, small_table=100, big_table=1000,
             huge_table=1000, schedules=5, idle_seconds=0.5, schedule_rounds=1,
             file_mb=1, big_file_mb=2, fetchers=2, nodes=cluster.QUICK, stall_jobs=200,
             stall_rounds=3, deadline_jobs=100, paged_jobs=200, console_jobs=200,
             console_loads=2, console_their_loads=1, console_install=False)

MODES = {m.name: m for m in (FULL, QUICK, SMOKE)}


def labels(mode):
    """What fills the blanks of the table's labels in ``mode``."""
    m = mode
    return {"conns": m.connections, "small": f"{m.small_table:,}", "big": f"{m.big_table:,}",
            "jobs": m.jobs, "streams": m.streams, "huge": f"{m.huge_table:,}",
            "sched": f"{m.schedules:,}",
            # The firing burst: 1,000 in a full run, fewer elsewhere, said so.
            "burst": f"{m.schedules:,}" + ("" if m.name == "full" else f" ({m.name})"),
            "file_mb": m.file_mb, "big_mb": m.big_file_mb,
            "fetchers": m.fetchers, "slots": cluster.SLOTS,
            "stall_jobs": f"{m.stall_jobs:,}", "deadline_jobs": f"{m.deadline_jobs:,}",
            "paged_jobs": f"{m.paged_jobs:,}",
            "console_jobs": f"{m.console_jobs:,}"}
