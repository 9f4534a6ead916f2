"""The reactor's lateness: a timer asks to run every ``interval`` seconds
and records how late it ran. Anything that holds the reactor (a slow
statement, a large answer built at once, a blocking call) shows as a late
tick, whichever part of the service caused it."""

from twisted.logger import Logger

# Every 100 ms: fine enough to see a stall a person would notice in an
# answer, coarse enough to cost nothing (ten wake-ups a second).
INTERVAL_SECONDS = 0.1
# From a millisecond (a healthy reactor) to ten seconds (a wedged one).
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# The benchmark's finer probe (bench/stall.py): a tick every this many
# seconds instead, for stalls of a few milliseconds that a 100 ms timer
# mostly misses. Not an option: a thousand wake-ups a second cost CPU.
PROBE_VARIABLE = "NETWEIR_SERVE_LAG_PROBE_SECONDS"


def probe_interval(environ):
    """The interval PROBE_VARIABLE asks for (at least 0.5 ms), else the usual one."""
    try:
        asked = float(environ.get(PROBE_VARIABLE, ""))
    except ValueError:
        return INTERVAL_SECONDS
    return max(asked, 0.0005) if asked > 0 else INTERVAL_SECONDS


class ReactorLag:
    """Observes into ``histogram`` (web.metrics.Histogram, no labels) how
    late each tick ran, in seconds. ``clock`` is the reactor (IReactorTime).

    Not a LoopingCall: one that runs late skips the ticks it missed and
    says only how many, while the lateness of the tick itself is what is
    wanted. Each tick is planned from when the last one ran.

    ``take_largest()`` gives the largest lateness since it was last asked
    (a /metrics render asks): the histogram's buckets say how many stalls,
    this how long the worst one was."""

    log = Logger()

    def __init__(self, clock, histogram, interval=INTERVAL_SECONDS):
        self._clock = clock
        self.histogram = histogram
        self._interval = interval
        self._call = None
        self._due = None
        self._largest = 0.0

    def start(self):
        if self._call is None:
            self._plan()

    def stop(self):
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _plan(self):
        self._due = self._clock.seconds() + self._interval
        self._call = self._clock.callLater(self._interval, self._tick)

    def take_largest(self):
        largest, self._largest = self._largest, 0.0
        return largest

    def _tick(self):
        late = max(0.0, self._clock.seconds() - self._due)
        self.histogram.observe((), late)
        self._largest = max(self._largest, late)
        self._plan()
