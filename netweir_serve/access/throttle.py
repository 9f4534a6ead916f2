"""Failed logins counted per client address: past a limit in a minute,
the address is refused (429) for a minute.

Only that address: every other client is served as before, and a refused
address costs the service no checker at all (no KDF), so a flood of wrong
secrets slows nobody else. A failure is a request that carried
credentials the checkers refused; a request with none (a browser's first,
answered with the challenge) is no failure.
"""

from collections import OrderedDict, deque

from twisted.logger import Logger

log = Logger()

# The defaults of --max-auth-failures and the window and the refusal.
MAX_FAILURES = 10
WINDOW = 60.0
REFUSED_FOR = 60.0
# Addresses remembered at most (the oldest forgotten first): failures
# from a million addresses cost no more memory than this.
MAX_ADDRESSES = 10000


class LoginThrottle:
    """Counts failures by address on ``clock`` (IReactorTime); an address
    with more than ``limit`` in ``window`` seconds is ``refused`` for
    ``refused_for`` seconds, logged once each time."""

    def __init__(self, clock, limit=MAX_FAILURES, window=WINDOW, refused_for=REFUSED_FOR,
                 max_addresses=MAX_ADDRESSES):
        self._clock = clock
        self.limit = limit
        self._window = window
        self._refused_for = refused_for
        self._max_addresses = max_addresses
        self._failures = OrderedDict()   # {address: deque of clock times}
        self._refused = OrderedDict()    # {address: clock time it may come back}

    def refused(self, address):
        """Whether ``address`` is refused now."""
        until = self._refused.get(address)
        if until is None:
            return False
        if self._clock.seconds() >= until:
            del self._refused[address]
            return False
        return True

    def failed(self, address):
        """Counts a failure of ``address``; whether it is refused from now."""
        now = self._clock.seconds()
        times = self._failures.pop(address, None) or deque()
        times.append(now)
        while times and times[0] <= now - self._window:
            times.popleft()
        if len(times) <= self.limit:
            self._failures[address] = times
            _bounded(self._failures, self._max_addresses)
            return False
        self._refused[address] = now + self._refused_for
        _bounded(self._refused, self._max_addresses)
        log.warn("{address} gave wrong credentials more than {limit} times in {window:g}s:"
                 " its requests are refused (429) for {refused_for:g}s",
                 address=address, limit=self.limit, window=self._window,
                 refused_for=self._refused_for)
        return True


def _bounded(kept, most):
    while len(kept) > most:
        kept.popitem(last=False)
