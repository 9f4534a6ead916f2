"""GET /events: job and schedule changes as server-sent events.

Each change is encoded once, by the ``EventHub``, and written to every
open stream:

- ``event: job``: the job's listjobs.json entry, plus ``state``, ``time``
  (epoch seconds of the event) and ``stats`` (while it runs: its latest
  stats; once finished: its final ones), on every change of a job (queued,
  started, a cancel asked, ended) and on every new stats snapshot;
- ``event: schedule``: the schedule's listschedules.json entry, plus
  ``deleted`` (true once it is deleted), when a schedule is added, fires,
  is paused, resumed or deleted;
- ``event: resync``: ``{"time": ...}``, when changes may have been missed
  (below): read the listings again.

With a shared job table (docs/cluster.md) the hub shows every node's jobs:
it subscribes to the job events of the other nodes' jobs too, which
cluster/jobs.py publishes from the store's notices (reading them only
while a stream is open), and ``resync`` is called when changes may have
been missed (the LISTEN connection came back). A schedule another node
changed comes from the Timetable's reload (``schedule_changed``); pruned
jobs send nothing, as this node's own prunes don't.

A comment line goes to every stream each ``keepalive`` seconds (15), so
that proxies and browsers keep an idle stream open.

The request deadline (web/limits.py) covers receiving the request only:
once a request is whole, its answer is never timed, however long it
streams. The connection caps and the guard apply as to any request: the
stream is a child of the guarded root.

A slow reader cannot make a stream grow without bound. Each stream is a
push producer of its request: when the connection's write buffer is full
the transport pauses it, and from then on it keeps only the latest event
of each job or schedule (later ones replace earlier ones, in place), to
be written when the transport resumes it. If more than ``max_pending``
jobs and schedules are waiting that way, the reader is too far behind to
catch up: its connection is closed, and a browser's EventSource connects
again (the dashboard then reads the listings afresh).
"""

import json
import time
from collections import OrderedDict

from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from ..store.records import FINISHED, RUNNING
from ..access.roles import identity_of
from ..names import fold
from .answer import write_error
from .pages import refuse_leaf
from .views import job_entry, schedule_entry

log = Logger()

EVENT_STREAM_TYPE = b"text/event-stream; charset=utf-8"
KEEPALIVE_SECONDS = 15.0
MAX_PENDING = 256
# What a browser's EventSource waits before connecting again (ms).
RETRY_MS = 2000
# Seconds a client refused a stream (the streams' caps full) is told to wait.
STREAMS_FULL_RETRY = b"30"


def event_bytes(kind, data):
    """One server-sent event: ``kind`` and ``data`` (JSON on one line)."""
    return (f"event: {kind}\ndata: " + json.dumps(data, separators=(",", ":")) + "\n\n"
            ).encode("utf-8")


KEEPALIVE = b": keep-alive\n\n"

@implementer(IPushProducer)
class EventStream:
    """One open /events answer; registered as its request's producer."""

    def __init__(self, hub, request, max_pending):
        self.hub = hub
        self.request = request
        # Who reads it: only the events of projects it sees are sent.
        self.identity = identity_of(request)
        self._max_pending = max_pending
        self._paused = False
        self._pending = OrderedDict()
        self.closed = False

    def send(self, key, data):
        if self.closed:
            return
        if not self._paused:
            self.request.write(data)
            return
        self._pending[key] = data
        self._pending.move_to_end(key)
        if len(self._pending) > self._max_pending:
            log.info("an /events reader fell {n} events behind: closing its stream",
                     n=len(self._pending))
            self.close()
            transport = getattr(self.request.channel, "transport", None)
            if transport is not None:
                transport.abortConnection()

    def keepalive(self):
        # A paused stream has data waiting already.
        if not self.closed and not self._paused:
            self.request.write(KEEPALIVE)

    def pending(self):
        """How many events wait for the transport (for tests)."""
        return len(self._pending)

    # IPushProducer

    def pauseProducing(self):
        self._paused = True

    def resumeProducing(self):
        self._paused = False
        while self._pending and not self._paused and not self.closed:
            _, data = self._pending.popitem(last=False)
            self.request.write(data)

    def stopProducing(self):
        self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            self._pending.clear()
            self.hub.remove(self)


class EventHub:
    """Hears job events and schedule changes, and sends each to every
    stream. ``clock`` provides IReactorTime (the keep-alive timer);
    ``running_stats(jobid)`` is ``ILauncher.running_stats``; ``time`` gives
    the events' wall-clock time. Tell it the Timetable with
    ``show_schedules(timetable)`` for the schedule events' times and
    ``deleted``."""

    def __init__(self, clock, running_stats, keepalive=KEEPALIVE_SECONDS,
                 max_pending=MAX_PENDING, time=time.time, admission_every=0.5):
        # admission(): a Deferred of a function saying whether a stream's
        # identity still stands (access.tokens.TokenBook.still_admits);
        # while a token's stream is open it is asked every admission_every
        # seconds, and a stream whose token was revoked, expired or changed
        # is ended. None: streams are never ended for that.
        self.admission = None
        self._admission_every = admission_every
        self._admission_timer = None
        self._clock = clock
        self._running_stats = running_stats
        self._keepalive = keepalive
        self._max_pending = max_pending
        self._time = time
        self._timetable = None
        self._streams = []
        self._timer = None

    def show_schedules(self, timetable):
        self._timetable = timetable

    def subscribe(self, events):
        # Every node's jobs: the other nodes' come from cluster/jobs.py.
        return events.subscribe(self.job_heard, elsewhere=True)

    def streams(self):
        return len(self._streams)

    # -- events ------------------------------------------------------------------

    def job_heard(self, kind, record):
        if self._streams:
            self._send_job(record)

    def _send_job(self, record):
        entry = job_entry(record, times=True)
        entry["state"] = record.state
        entry["time"] = round(self._time(), 3)
        if record.state == RUNNING:
            # Read here while it runs here; for a job running on another
            # node, the stats that node last saved (as jobstats.json shows).
            entry["stats"] = self._running_stats(record.id) or record.stats
            entry["cancel_requested"] = record.cancel_requested
        elif record.state == FINISHED:
            entry["stats"] = record.stats
        self._broadcast(("job", fold(record.id)), event_bytes("job", entry), record.project)

    def resync(self):
        """Changes may have been missed: every stream reads the listings again."""
        self._broadcast(("resync",), event_bytes("resync", {"time": round(self._time(), 3)}))

    def schedule_changed(self, record):
        if not self._streams or self._timetable is None:
            return
        entry = schedule_entry(record, self._timetable.zone_of(record))
        entry["deleted"] = not self._timetable.has(record.name)
        self._broadcast(("schedule", fold(record.name)), event_bytes("schedule", entry),
                        record.project)

    def _broadcast(self, key, data, project=None):
        """Sends ``data`` to every stream, or (``project`` given) to those
        whose identity sees that project: another's are absent."""
        for stream in list(self._streams):
            if project is None or stream.identity.sees(project):
                stream.send(key, data)

    # -- streams -----------------------------------------------------------------

    def open(self, request):
        """Starts the answer to ``request`` and keeps it open; the stream."""
        stream = EventStream(self, request, self._max_pending)
        request.setHeader(b"content-type", EVENT_STREAM_TYPE)
        request.setHeader(b"cache-control", b"no-store")
        # nginx and other proxies would otherwise hold the events back.
        request.setHeader(b"x-accel-buffering", b"no")
        request.registerProducer(stream, True)
        self._streams.append(stream)
        request.notifyFinish().addBoth(lambda _: stream.close())
        # Sends the headers now, so that the client's "open" fires at once.
        request.write(f"retry: {RETRY_MS}\n: connected\n\n".encode("ascii"))
        self._arm()
        self._arm_admission()
        return stream

    def remove(self, stream):
        if stream in self._streams:
            self._streams.remove(stream)
        if not self._streams and self._timer is not None and self._timer.active():
            self._timer.cancel()
            self._timer = None
        if not self._token_streams() and self._admission_timer is not None \
                and self._admission_timer.active():
            self._admission_timer.cancel()
            self._admission_timer = None

    def _token_streams(self):
        return [s for s in self._streams if s.identity.token]

    def _arm_admission(self):
        if self.admission is None or not self._token_streams():
            return
        if self._admission_timer is None or not self._admission_timer.active():
            self._admission_timer = self._clock.callLater(self._admission_every,
                                                          self._check_admission)

    def _check_admission(self):
        self._admission_timer = None
        d = self.admission()
        d.addCallback(self._end_unadmitted)
        d.addErrback(lambda f: log.failure("the streams' tokens could not be checked", f))
        d.addBoth(lambda _: self._arm_admission())

    def _end_unadmitted(self, stands):
        for stream in self._token_streams():
            if not stands(stream.identity):
                log.info("an /events stream of token {who} ended: the token was revoked,"
                         " expired or changed", who=stream.identity.who)
                self._end(stream)

    def _arm(self):
        if self._timer is None or not self._timer.active():
            self._timer = self._clock.callLater(self._keepalive, self._beat)

    def _beat(self):
        self._timer = None
        for stream in list(self._streams):
            stream.keepalive()
        if self._streams:
            self._arm()

    def close_all(self):
        """Ends every stream (the service stops)."""
        for stream in list(self._streams):
            self._end(stream)

    @staticmethod
    def _end(stream):
        stream.close()
        if not stream.request.finished:
            stream.request.unregisterProducer()
            stream.request.finish()


class Events(Resource):
    """The /events resource."""

    isLeaf = True

    def __init__(self, hub):
        super().__init__()
        self.hub = hub

    def render(self, request):
        refused = refuse_leaf(request)
        if refused is not None:
            return refused
        if request.method == b"HEAD":
            request.setHeader(b"content-type", EVENT_STREAM_TYPE)
            request.setHeader(b"cache-control", b"no-store")
            return b""
        # A stream counts against caps of the streams' own, so that idle
        # streams never leave a plain request without room (web/limits.py).
        connection = getattr(request.channel, "connection", None)
        if connection is not None and not connection.become_stream():
            caps = connection.factory.caps
            request.setHeader(b"retry-after", STREAMS_FULL_RETRY)
            return write_error(
                request, 429,
                f"too many event streams: at most {caps.streams_per_address} from one"
                f" address and {caps.streams_total} in all are open at once; close one,"
                " or read the listings instead")
        self.hub.open(request)
        return NOT_DONE_YET
