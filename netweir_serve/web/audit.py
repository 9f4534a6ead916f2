"""The audit of every write made over HTTP (audit.json lists it:
web/audit_listing.py).

Every answer of a write endpoint (schedule.json, cancel.json, the
schedules' writes: ``ApiEndpoint.audited``) is recorded in the job table
(store.audit_table) before it is sent: ok or refused (400, 404, 409, a
403 at the door, a 500), with who asked (the identity's name), from
where, what it named and what it changed (its parameters, settings and
arguments masked as the listings mask them). A write that answered ok
has its row committed before its answer left, so no ``kill -9`` after
the answer can lose it; one killed before its row was written never
answered. A client that goes away before its answer does not cut the
write short: it goes on to its end and its row is written with the status
the answer would have had (web/endpoint.py). A row that cannot be written is logged with what it held, and
the answer goes out as it was (the change is made: saying otherwise
would make a client do it twice).
"""

from twisted.internet import defer
from twisted.logger import Logger

from ..access.roles import identity_of
from ..access.throttle import same_address
from ..store.audit_records import AuditEntry
from .deferred import shielded
from .views import masked, shown_settings

log = Logger()

# How much of a parameter an audit row keeps: a row says what changed, it
# is no copy of the request.
MAX_VALUE = 200
MAX_KEYS = 50


def client_address(request):
    """The client's address as the audit and the throttle name it (a
    Unix socket's clients are one: ``unix``). A request from a trusted
    proxy (--trusted-proxy: the ``trusted_proxies`` of the request's site)
    is from the last hop its X-Forwarded-For names, the address the proxy
    saw (nginx's ``$proxy_add_x_forwarded_for`` appends it); the hops
    before it are the client's word and are not read. A header missing or
    not ending in an address leaves the proxy's own address."""
    get = getattr(request, "getClientAddress", None)
    address = get() if get is not None else None
    host = getattr(address, "host", None)
    host = host if host is not None else "unix"
    trusted = getattr(getattr(request, "site", None), "trusted_proxies", ())
    if trusted and same_address(host) in trusted:
        forwarded = request.requestHeaders.getRawHeaders(b"x-forwarded-for") or ()
        hops = b",".join(forwarded).decode("latin-1").split(",")
        last = same_address(hops[-1].strip())
        if last is not None and last != "unix":
            return last
    return host


def _short(value):
    return value if len(value) <= MAX_VALUE else value[:MAX_VALUE] + "\u2026"


def change_of(params, skip=("project",)):
    """What a write's parameters change, as an audit row keeps it: its
    settings (``setting=K=V``) masked as listings mask them, every other
    parameter (spider arguments, policy keys, times) masked as a spider
    argument is, each value cut at MAX_VALUE characters."""
    settings, others = [], {}
    for key, value in params.pairs:
        if key in skip:
            continue
        if key == "setting":
            name, _, given = value.partition("=")
            settings.append((name, given))
        elif len(others) < MAX_KEYS:
            others[_short(key)] = _short(masked(value))
    change = dict(others)
    if settings:
        change["settings"] = {_short(k): _short(v) if isinstance(v, str) else v
                              for k, v in shown_settings(settings[:MAX_KEYS]).items()}
    return change


class AuditLog:
    """Writes the rows of the audit to ``store`` (an IAuditStore); ``wall``
    gives the epoch time."""

    def __init__(self, store, wall, clock=None):
        self._store = store
        self._wall = wall
        # Times record's ``wait_at_most`` (IReactorTime); none: no such wait.
        self._clock = clock

    def record(self, request, endpoint, status, project=None, target=None, change=None,
               wait_at_most=None):
        """A Deferred that fires once the row is committed (or failed to
        be: logged, never an error to the caller). Not cancelled with the
        request: a client gone away does not take the row with it. With
        ``wait_at_most`` (seconds), it fires then at the latest, the row's
        write going on: for cancel.json, whose answer a table locked by
        another program holds back no more than it holds back the cancel's
        own record (docs/restarts.md)."""
        who = identity_of(request).who
        entry = AuditEntry(time=self._wall.seconds(), who=who, address=client_address(request),
                           endpoint=endpoint, project=project, target=target, change=change,
                           status=int(status))
        written = defer.Deferred()
        self._store.add_audit(entry).addCallbacks(
            written.callback,
            lambda failure: (log.failure("an audit row could not be written: {entry}",
                                         failure, entry=entry), written.callback(None)))
        # (The request's cancelling stops at this Deferred: the write goes on.)
        answer = shielded(written)
        if wait_at_most is not None and self._clock is not None:
            timer = self._clock.callLater(
                wait_at_most, lambda: answer.called or answer.callback(None))
            written.addBoth(lambda result: timer.active() and timer.cancel())
        return answer
