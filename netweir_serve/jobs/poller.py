"""Handing pending jobs to free slots."""

from twisted.internet.task import LoopingCall
from zope.interface import implementer

from .interfaces import IPoller


@implementer(IPoller)
class Poller:
    """IPoller: starts pending jobs, highest priority first, then oldest.

    ``poll`` is called whenever a job is queued or a slot frees, so jobs
    start at once; the timer every ``interval`` seconds is only a safety net.
    """

    def __init__(self, store, launcher, clock, interval=5.0):
        self._store = store
        self._launcher = launcher
        self._interval = interval
        self._timer = LoopingCall(self.poll)
        self._timer.clock = clock
        self._busy = False
        self._again = False

    def poll(self):
        # A launch that fails at once ends the job, which polls again from
        # inside this loop: note it and go round once more instead of nesting.
        if self._busy:
            self._again = True
            return
        self._busy = True
        try:
            self._again = True
            while self._again:
                self._again = False
                while self._launcher.slots_free() > 0:
                    record = self._store.next_pending()
                    if record is None:
                        break
                    self._launcher.launch(record)
        finally:
            self._busy = False

    def start(self):
        self._timer.start(self._interval, now=True)

    def stop(self):
        if self._timer.running:
            self._timer.stop()
