"""Two clocks: one for how long, one for what time it is.

Twisted's reactor times every ``callLater`` with ``reactor.seconds()``,
the wall clock by default: when the machine's clock steps back N seconds
(an NTP correction, an operator's ``date -s``), every timer waits N
seconds more. Found by trying (issue 23): the 15 s request deadline
became 135 s and the cancel grace 130 s, and a node whose clock stepped
back 20 s stopped beating and was declared dead, its job lost. So the
entry points (cli.py) give the reactor a monotonic ``seconds``, and every
interval (deadlines, graces, heartbeats, the stats
loops, retries and backoff) is a ``callLater`` on it.

What a person reads as a time of day comes from the wall clock, injected
as an object with ``seconds()`` (``WallClock`` in the service, a
``task.Clock`` in the tests): records' times (created, start, end), the
stats history, the times listings show, and schedules' due times, which
follow the wall clock as a cron does (a step back delays the next run to
its time of day again, and fires nothing twice: a due time fires once).
"""

import time


class WallClock:
    """The time of day, in epoch seconds: ``seconds()`` is ``time.time()``."""

    def seconds(self):
        return time.time()


def use_monotonic_time(reactor, monotonic=time.monotonic):
    """Makes ``reactor`` time its delayed calls with ``monotonic``, so no
    step of the wall clock moves them. Call at the entry point, before
    anything is scheduled: a call already there was timed by the old clock
    (refused: RuntimeError, rather than fire it at a wrong time)."""
    if reactor.getDelayedCalls():
        raise RuntimeError("the reactor's clock can change only before any call is scheduled")
    # The reactor's loop, callLater and each DelayedCall read the attribute,
    # so the instance's replaces the class's method for all of them.
    reactor.seconds = monotonic
