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


class ReactorLag:
    """Observes into ``histogram`` (web.metrics.Histogram, no labels) how
    late each tick ran, in seconds. ``clock`` is the reactor (IReactorTime).

    Not a LoopingCall: one that runs late skips the ticks it missed and
    says only how many, while the lateness of the tick itself is what is
    wanted. Each tick is planned from when the last one ran."""

    log = Logger()

    def __init__(self, clock, histogram, interval=INTERVAL_SECONDS):
        self._clock = clock
        self.histogram = histogram
        self._interval = interval
        self._call = None
        self._due = None

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

    def _tick(self):
        self.histogram.observe((), max(0.0, self._clock.seconds() - self._due))
        self._plan()
