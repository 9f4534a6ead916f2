"""Failed logins counted per client address: past a limit in a minute,
the address is refused (429) for a minute.

Only that address: every other client is served as before, and a refused
address costs the service no checker at all (no KDF), so a flood of wrong
secrets slows nobody else. A failure is a request that carried
credentials the checkers refused; a request with none (a browser's first,
answered with the challenge) is no failure.

Addresses are counted as a client holds them (``counted_as``): an IPv6
client is given a /64 (its whole network, where it may pick any address),
so it is counted by its /64; an IPv4-mapped IPv6 address is the IPv4
address it maps.
"""

import ipaddress
from collections import OrderedDict, deque

from twisted.logger import Logger

log = Logger()

# The defaults of --max-auth-failures and the window and the refusal.
MAX_FAILURES = 10
WINDOW = 60.0
REFUSED_FOR = 60.0
# Counters of addresses not refused remembered at most (the one failed
# longest ago forgotten first): failures from a million addresses cost no
# more memory than this. A refused address is never forgotten before its
# refusal ends (forgetting it would lift it): those are at most one per
# MAX_FAILURES + 1 failures in REFUSED_FOR, each failure a checker's work.
MAX_ADDRESSES = 10000


def counted_as(address):
    """The key ``address`` (a host as web/audit.client_address gives it,
    or ``unix``) is counted under: an IPv6 address's /64
    (``2001:db8:0:1::/64``), an IPv4-mapped IPv6 address's IPv4, anything
    else (an IPv4 address, ``unix``) itself."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network((ip, 64), strict=False))
    return str(ip)


def same_address(text):
    """``text`` (an address, or ``unix``) as --trusted-proxy compares it:
    an IP address in its short form (an IPv4-mapped one as IPv4), ``unix``
    itself; None for anything else."""
    if text == "unix":
        return text
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped if mapped is not None else ip)


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
        self._failures = OrderedDict()   # {key: deque of clock times}, oldest first
        self._refused = OrderedDict()    # {key: clock time it may come back}, soonest first

    def refused(self, address):
        """Whether ``address`` (counted as ``counted_as`` says) is refused now."""
        if not self._refused:
            # Nobody is: asked at every request, so spare it the parse.
            return False
        address = counted_as(address)
        until = self._refused.get(address)
        if until is None:
            return False
        if self._clock.seconds() >= until:
            del self._refused[address]
            return False
        return True

    def failed(self, address):
        """Counts a failure of ``address`` (counted as ``counted_as``
        says); whether it is refused from now."""
        address = counted_as(address)
        now = self._clock.seconds()
        times = self._failures.pop(address, None) or deque()
        times.append(now)
        while times and times[0] <= now - self._window:
            times.popleft()
        if len(times) <= self.limit:
            self._failures[address] = times
            _bounded(self._failures, self._max_addresses)
            return False
        # (Popped first: the newest refusal is last, as _forget_ended needs.)
        self._refused.pop(address, None)
        self._refused[address] = now + self._refused_for
        self._forget_ended(now)
        log.warn("{address} gave wrong credentials more than {limit} times in {window:g}s:"
                 " its requests are refused (429) for {refused_for:g}s",
                 address=address, limit=self.limit, window=self._window,
                 refused_for=self._refused_for)
        return True

    def _forget_ended(self, now):
        # Refusals end in the order they began (one length for all): the
        # ended ones are at the front. None still running is forgotten.
        while self._refused and next(iter(self._refused.values())) <= now:
            self._refused.popitem(last=False)


def _bounded(kept, most):
    while len(kept) > most:
        kept.popitem(last=False)
