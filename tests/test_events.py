"""GET /events: the hub and its streams on a Clock, the deadline and the
caps on real connections, and a real daemon's stream over real HTTP while
jobs are scheduled, run, cancelled and finish."""

import http.client
import json
import threading
import time

from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.task import Clock, deferLater
from twisted.trial import unittest
from twisted.web.resource import Resource
from twisted.web.server import Site

from netweir_serve.cluster.jobs import ClusterJobs
from netweir_serve.jobs.events import CHANGED, ENDED, QUEUED, STARTED, JobEvents
from netweir_serve.store.records import FINISHED, PENDING, RUNNING, JobRecord, StoreError
from netweir_serve.store import notices
from netweir_serve.store.notices import StoreNotice
from netweir_serve.web.events import KEEPALIVE, EventHub, Events
from netweir_serve.web.guard import GuardedResource
from netweir_serve.web.limits import limit

from .processes import wait_until
from .test_jobs import CrawlTestCase


def job(**changes):
    fields = dict(id="j1", project="shop", spider="books", spider_file="/x.py")
    fields.update(changes)
    return JobRecord(**fields)


class FakeTransport:
    aborted = False

    def abortConnection(self):
        self.aborted = True


class FakeChannel:
    def __init__(self):
        self.transport = FakeTransport()


class FakeRequest:
    """As much of a Request as the hub uses."""

    def __init__(self):
        self.written = []
        self.headers = {}
        self.producer = None
        self.finished = False
        self.channel = FakeChannel()
        self._finish = defer.Deferred()

    def setHeader(self, name, value):
        self.headers[name] = value

    def registerProducer(self, producer, streaming):
        self.producer = producer

    def unregisterProducer(self):
        self.producer = None

    def write(self, data):
        self.written.append(data)

    def notifyFinish(self):
        return self._finish

    def finish(self):
        self.finished = True

    def lose(self):
        self._finish.errback(Exception("gone"))

    def events(self):
        found = []
        for chunk in self.written:
            text = chunk.decode()
            if text.startswith("event: "):
                kind, data = text.split("\n")[:2]
                found.append((kind[len("event: "):], json.loads(data[len("data: "):])))
        return found


class HubTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.stats = {}
        self.events = JobEvents()
        self.hub = EventHub(self.clock, self.stats.get, max_pending=3, time=lambda: 123.0)
        self.hub.subscribe(self.events)

    def open(self):
        request = FakeRequest()
        self.hub.open(request)
        return request

    def test_job_events_carry_the_entry_state_and_stats(self):
        request = self.open()
        self.assertEqual(request.headers[b"content-type"], b"text/event-stream; charset=utf-8")
        self.assertTrue(request.written[0].startswith(b"retry: "))
        self.events.publish(QUEUED, job())
        self.events.publish(STARTED, job(state=RUNNING, pid=7, start_time=100.0))
        self.stats["j1"] = {"items": 3}
        self.events.publish(CHANGED, job(state=RUNNING, pid=7, start_time=100.0))
        self.events.publish(ENDED, job(state=FINISHED, outcome="finished", start_time=100.0,
                                       end_time=110.0, exit_status=0, stats={"items": 4}))
        kinds = [(k, e["state"], e.get("stats"), e.get("outcome")) for k, e in request.events()]
        self.assertEqual(kinds, [("job", PENDING, None, None), ("job", RUNNING, None, None),
                                 ("job", RUNNING, {"items": 3}, None),
                                 ("job", FINISHED, {"items": 4}, "finished")])
        first = request.events()[0][1]
        self.assertEqual((first["id"], first["log_url"], first["time"]),
                         ("j1", "/logs/shop/books/j1.log", 123.0))
        self.assertNotIn("health", first)

    def test_each_stream_gets_only_the_projects_its_identity_sees(self):
        from netweir_serve.access.roles import ADMIN, VIEWER, Identity
        shop_viewer, admin = FakeRequest(), FakeRequest()
        shop_viewer.netweir_identity = Identity.of("ci", VIEWER, ["SHOP"], token=True)
        admin.netweir_identity = Identity.of("root", ADMIN)
        for request in (shop_viewer, admin):
            self.hub.open(request)
        self.events.publish(QUEUED, job())
        self.events.publish(QUEUED, job(id="n1", project="news"))
        self.assertEqual([e["id"] for _, e in shop_viewer.events()], ["j1"])
        self.assertEqual([e["id"] for _, e in admin.events()], ["j1", "n1"])

    def test_a_tokens_stream_ends_once_its_token_no_longer_stands(self):
        from netweir_serve.access.roles import ADMIN, VIEWER, Identity
        standing = {"ci"}
        asked = []

        def admission():
            asked.append(self.clock.seconds())
            return defer.succeed(lambda identity: identity.who in standing)

        self.hub.admission = admission
        token, password = FakeRequest(), FakeRequest()
        token.netweir_identity = Identity.of("ci", VIEWER, ["shop"], token=True)
        password.netweir_identity = Identity.of("ops", ADMIN)
        self.hub.open(password)
        self.clock.advance(5)
        self.assertEqual(asked, [])      # no token's stream: nothing to ask
        self.hub.open(token)
        self.clock.advance(0.5)
        self.assertFalse(token.finished)
        standing.clear()
        self.clock.advance(0.5)
        self.assertTrue(token.finished)
        self.assertFalse(password.finished)
        self.assertEqual(self.hub.streams(), 1)
        self.clock.advance(5)
        self.assertEqual(len(asked), 2)  # asked no more once no token's stream is open

    def test_an_ended_event_carries_the_health_beside_the_outcome(self):
        request = self.open()
        reasons = ("items 4 < min_items 10",)
        self.events.publish(ENDED, job(state=FINISHED, outcome="finished", start_time=100.0,
                                       end_time=110.0, exit_status=0, health="degraded",
                                       health_reasons=reasons))
        [(_, ended)] = request.events()
        self.assertEqual((ended["outcome"], ended["health"], ended["health_reasons"]),
                         ("finished", "degraded", list(reasons)))

    def test_a_comment_every_15_seconds_while_streams_are_open(self):
        request = self.open()
        self.clock.advance(14.9)
        self.assertNotIn(KEEPALIVE, request.written)
        self.clock.advance(0.2)
        self.clock.advance(15)
        self.assertEqual(request.written.count(KEEPALIVE), 2)
        request.lose()
        self.assertEqual(self.hub.streams(), 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_slow_reader_gets_the_latest_event_of_each_job_when_it_drains(self):
        request = self.open()
        stream = request.producer
        stream.pauseProducing()
        before = len(request.written)
        for n in range(50):
            self.stats["j1"] = {"items": n}
            self.events.publish(CHANGED, job(state=RUNNING))
        self.events.publish(QUEUED, job(id="j2"))
        self.assertEqual(stream.pending(), 2)
        self.assertEqual(len(request.written), before)
        stream.resumeProducing()
        sent = [(e["id"], e.get("stats")) for _, e in request.events()]
        self.assertEqual(sent, [("j1", {"items": 49}), ("j2", None)])

    def test_a_reader_too_far_behind_is_disconnected(self):
        request = self.open()
        other = self.open()
        request.producer.pauseProducing()
        for n in range(5):
            self.events.publish(QUEUED, job(id=f"j{n}"))
        self.assertTrue(request.channel.transport.aborted)
        self.assertEqual(self.hub.streams(), 1)
        self.assertEqual(len(other.events()), 5)


class HeldStore:
    """The parts of a shared store the hub uses: ``get`` answers only when
    the test says (``answer``), with the record the table then holds."""

    def __init__(self):
        self.records = {}
        self.reads = []          # [(jobid, Deferred)], in the order asked
        self.heard = []

    def on_notice(self, callback):
        self.heard.append(callback)
        return lambda: self.heard.remove(callback)

    def tell(self, kind, jobid=None, node=None):
        for callback in list(self.heard):
            callback(StoreNotice(kind, 1, jobid, node))

    def get(self, jobid):
        d = defer.Deferred()
        self.reads.append((jobid, d))
        return d

    def waiting(self):
        return [jobid for jobid, d in self.reads if not d.called]

    def answer(self, error=None):
        """Answers the oldest read still waiting."""
        jobid, d = next((j, d) for j, d in self.reads if not d.called)
        if error is not None:
            d.errback(error)
        else:
            d.callback(self.records.get(jobid))


class ElsewhereTests(unittest.TestCase):
    def test_only_subscribers_that_ask_hear_the_other_nodes_jobs(self):
        events, local, every = JobEvents(), [], []
        events.subscribe(lambda kind, record: local.append(record.id))
        events.subscribe(lambda kind, record: every.append(record.id), elsewhere=True)
        events.publish(ENDED, job(id="here"))
        events.publish(ENDED, job(id="there", node="b"), elsewhere=True)
        self.assertEqual((local, every), (["here"], ["here", "there"]))


class ClusterHubTests(unittest.TestCase):
    """The other nodes' jobs, heard as store notices by cluster/jobs.py and
    published as job events, on the hub."""

    def setUp(self):
        self.events = JobEvents()
        self.store = HeldStore()
        self.stats = {}
        self.hub = EventHub(Clock(), self.stats.get, time=lambda: 50.0)
        self.hub.subscribe(self.events)
        ClusterJobs(self.store, self.events, "a", wanted=self.hub.streams,
                    resync=self.hub.resync).start()
        # What this node counts, records and notifies (metrics, history,
        # --notify) subscribes as these do: to its own jobs only.
        self.heard_locally = []
        self.events.subscribe(lambda kind, record: self.heard_locally.append(record.id))
        self.request = FakeRequest()
        self.hub.open(self.request)

    def jobs(self, request=None):
        return [e for k, e in (request or self.request).events() if k == "job"]

    def test_a_job_another_node_runs_shows_as_a_local_one_does(self):
        self.store.records["j1"] = job(created=1.0)
        self.store.tell(notices.QUEUED, "j1")
        self.store.answer()
        self.store.records["j1"] = job(state=RUNNING, node="b", start_time=2.0)
        self.store.tell(notices.CLAIMED, "j1", "b")
        self.store.answer()
        self.store.records["j1"] = job(state=RUNNING, node="b", start_time=2.0, pid=9,
                                       stats={"items": 4})
        self.store.tell(notices.STATS, "j1", "b")
        self.store.answer()
        self.store.records["j1"] = job(state=RUNNING, node="b", start_time=2.0, pid=9,
                                       stats={"items": 6}, cancel_requested=True)
        self.store.tell(notices.CANCEL, "j1", "b")
        self.store.answer()
        self.store.records["j1"] = job(state=FINISHED, node="b", start_time=2.0, end_time=3.0,
                                       outcome="cancelled", exit_status=130,
                                       stats={"items": 7, "finish_reason": "interrupted"})
        self.store.tell(notices.ENDED, "j1", "b")
        self.store.answer()
        shown = [(e["state"], e.get("node"), e.get("pid"), e.get("stats"),
                  e.get("cancel_requested"), e.get("outcome")) for e in self.jobs()]
        self.assertEqual(shown, [
            (PENDING, None, None, None, None, None),
            (RUNNING, "b", None, None, False, None),
            (RUNNING, "b", 9, {"items": 4}, False, None),
            (RUNNING, "b", 9, {"items": 6}, True, None),
            (FINISHED, "b", None, {"items": 7, "finish_reason": "interrupted"}, None,
             "cancelled")])
        self.assertEqual(self.heard_locally, [])
        # The very entry a local event of the same record gives.
        local = FakeRequest()
        self.hub.open(local)
        self.events.publish(ENDED, self.store.records["j1"])
        self.assertEqual(self.jobs(local), self.jobs()[-1:])

    def test_notices_heard_while_a_read_is_under_way_make_one_more_read(self):
        other = FakeRequest()
        self.hub.open(other)
        self.store.records["j1"] = job(state=RUNNING, node="b", stats={"items": 1})
        self.store.tell(notices.STATS, "j1", "b")
        for _ in range(10):
            self.store.tell(notices.STATS, "j1", "b")
        self.store.tell(notices.STATS, "j2", "b")
        self.assertEqual(self.store.waiting(), ["j1", "j2"])
        self.store.records["j1"] = job(state=RUNNING, node="b", stats={"items": 11})
        self.store.answer()
        # The burst heard meanwhile: one read more, not ten.
        self.assertEqual(self.store.waiting(), ["j2", "j1"])
        self.store.answer()
        self.store.answer()
        self.assertEqual(self.store.waiting(), [])
        self.assertEqual(len(self.store.reads), 3)
        # Each read is sent to every stream: no read per stream.
        for request in (self.request, other):
            self.assertEqual([(e["id"], e["stats"]) for e in self.jobs(request)],
                             [("j1", {"items": 11}), ("j1", {"items": 11})])

    def test_nothing_is_read_while_no_stream_is_open(self):
        self.request.lose()
        self.store.tell(notices.STATS, "j1", "b")
        self.store.tell(notices.CHANGED)
        self.assertEqual(self.store.reads, [])

    def test_this_nodes_own_jobs_are_told_by_its_events_but_an_end_recorded_elsewhere(self):
        for kind in (notices.CLAIMED, notices.STARTED, notices.CANCEL, notices.STATS):
            self.store.tell(kind, "mine", "a")
        self.assertEqual(self.store.reads, [])
        # Declared dead while cut off: another node recorded its jobs lost.
        self.store.records["mine"] = job(id="mine", state=FINISHED, node="a", outcome="lost")
        self.store.tell(notices.ENDED, "mine", "a")
        self.store.answer()
        self.assertEqual([(e["id"], e["outcome"]) for e in self.jobs()], [("mine", "lost")])

    def test_a_read_a_local_event_overtook_is_not_sent_and_the_job_is_read_again(self):
        # Queued here, claimed at once by b: its notice can come before the
        # queueing's own answer, so the read may be older than the event.
        self.store.records["j1"] = job(state=RUNNING, node="b")
        self.store.tell(notices.CLAIMED, "j1", "b")
        self.events.publish(QUEUED, job())
        self.store.records["j1"] = job(state=RUNNING, node="b", pid=9)
        self.store.answer()
        self.assertEqual([e["state"] for e in self.jobs()], [PENDING])
        self.assertEqual(self.store.waiting(), ["j1"])
        self.store.answer()
        self.assertEqual([(e["state"], e.get("pid")) for e in self.jobs()],
                         [(PENDING, None), (RUNNING, 9)])

    def test_a_failed_read_is_logged_once_with_the_job_and_the_hub_carries_on(self):
        logged = []
        from netweir_serve.cluster import jobs as module
        self.patch(module, "log", _Log(logged))
        self.store.tell(notices.STATS, "j1", "b")
        self.store.tell(notices.STATS, "j1", "b")
        self.store.answer(StoreError("the job table could not be read: gone"))
        self.assertEqual(len(logged), 1)
        self.assertEqual((logged[0]["jobid"], logged[0]["why"]),
                         ("j1", "the job table could not be read: gone"))
        # The notice heard meanwhile reads it again; later ones too.
        self.store.records["j1"] = job(state=RUNNING, node="b", stats={"items": 2})
        self.store.answer()
        self.assertEqual([e["stats"] for e in self.jobs()], [{"items": 2}])
        self.store.tell(notices.ENDED, "j1", "b")
        self.store.records["j1"] = job(state=FINISHED, node="b", outcome="finished")
        self.store.answer()
        self.assertEqual([e["state"] for e in self.jobs()], [RUNNING, FINISHED])
        self.assertEqual(len(logged), 1)

    def test_a_forgotten_job_sends_nothing(self):
        self.store.tell(notices.ENDED, "gone", "b")
        self.store.answer()
        self.assertEqual(self.request.events(), [])

    def test_changed_tells_the_streams_to_read_again_pruned_and_nodes_tell_nothing(self):
        self.store.tell(notices.PRUNED)
        self.store.tell(notices.NODE, node="c")
        self.store.tell(notices.SCHEDULE)
        self.assertEqual(self.request.events(), [])
        self.store.tell(notices.CHANGED)
        self.assertEqual(self.request.events(), [("resync", {"time": 50.0})])
        self.assertEqual(self.store.reads, [])


class _Log:
    """Stands in for a module's Logger: the warnings it is given."""

    def __init__(self, found):
        self.found = found

    def warn(self, format, **fields):
        self.found.append(fields)

    def failure(self, format, failure=None, **fields):
        self.found.append(dict(fields, failure=failure))

    info = warn


class _Reader(protocol.Protocol):
    def __init__(self):
        self.data = b""
        self.lost = defer.Deferred()

    def dataReceived(self, data):
        self.data += data

    def connectionLost(self, reason):
        self.lost.callback(None)


class DeadlineTests(unittest.TestCase):
    """A stream outlives the request deadline; the guard still applies."""

    @defer.inlineCallbacks
    def test_the_deadline_never_cuts_a_stream(self):
        hub = EventHub(reactor, lambda jobid: None, keepalive=0.2)
        root = Resource()
        root.putChild(b"events", Events(hub))
        site = Site(GuardedResource(root))
        port = reactor.listenTCP(0, limit(site, reactor, deadline=0.3), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port)

        stream = yield connectProtocol(endpoint, _Reader())
        stream.transport.write(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        refused = yield connectProtocol(endpoint, _Reader())
        refused.transport.write(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                b"Origin: http://evil.example\r\n\r\n")
        idle = yield connectProtocol(endpoint, _Reader())
        yield deferLater(reactor, 1.5, lambda: None)
        self.assertFalse(stream.lost.called)
        self.assertIn(b"200 OK", stream.data)
        self.assertGreaterEqual(stream.data.count(KEEPALIVE), 4)
        self.assertIn(b"403", refused.data)
        # The connection that sent nothing was closed by the deadline.
        self.assertTrue(idle.lost.called)
        stream.transport.loseConnection()
        refused.transport.loseConnection()
        yield stream.lost
        yield deferLater(reactor, 0.1, lambda: None)
        self.assertEqual(hub.streams(), 0)


class StreamReader:
    """Reads a daemon's /events in a thread, event by event."""

    def __init__(self, port, headers=None):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.connection.request("GET", "/events", headers=headers or {})
        self.answer = self.connection.getresponse()
        self.events = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        kind = None
        try:
            for raw in self.answer:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind:
                    self.events.append((kind, json.loads(line[6:])))
                    kind = None
        except Exception:  # closed by the test: the events so far stay
            pass

    def of(self, jobid):
        return [e for k, e in list(self.events) if k == "job" and e["id"] == jobid]

    def wait(self, check, what, timeout=60):
        return wait_until(lambda: check(list(self.events)), timeout, what)

    def close(self):
        self.connection.close()


class LiveEventsTests(CrawlTestCase):
    def test_events_while_jobs_are_scheduled_run_cancelled_and_finish(self):
        daemon = self.daemon("--max-jobs", "1")
        reader = StreamReader(daemon.port)
        self.addCleanup(reader.close)
        self.assertEqual(reader.answer.getheader("Content-Type"),
                         "text/event-stream; charset=utf-8")

        slow = daemon.must_schedule("shop", "slow", delay="0.1")
        echo = daemon.must_schedule("shop", "echo")
        # The slow job's stats come every 5 s: at least one snapshot.
        reader.wait(lambda _: any(e.get("stats") for e in reader.of(slow)), "slow's stats", 30)
        daemon.post("cancel.json", {"project": "shop", "job": slow})
        reader.wait(lambda _: any(e["state"] == "finished" for e in reader.of(echo)),
                    "echo to finish")
        states = [(e["state"], e.get("outcome")) for e in reader.of(slow)]
        self.assertEqual(states[0], ("pending", None))
        self.assertIn(("running", None), states)
        self.assertEqual(states[-1], ("finished", "cancelled"))
        self.assertTrue(any(e.get("cancel_requested") for e in reader.of(slow)))
        running = [e for e in reader.of(slow) if e["state"] == "running" and e.get("stats")]
        self.assertIsInstance(running[0]["stats"]["items"], int)
        self.assertEqual(reader.of(slow)[-1]["stats"]["finish_reason"], "interrupted")
        echoed = [(e["state"], e.get("outcome")) for e in reader.of(echo)]
        self.assertEqual(echoed[0], ("pending", None))
        self.assertEqual(echoed[-1], ("finished", "finished"))
        self.assertEqual(reader.of(echo)[-1]["log_url"], f"/logs/shop/echo/{echo}.log")

        status, answer = daemon.post("addschedule.json", {"project": "shop", "spider": "echo",
                                                          "every": "1h", "name": "hourly"})
        self.assertEqual(answer["status"], "ok", answer)
        daemon.post("delschedule.json", {"project": "shop", "name": "hourly"})
        reader.wait(lambda events: [e for k, e in events if k == "schedule"][1:], "schedules")
        changes = [(e["name"], e["deleted"]) for k, e in reader.events if k == "schedule"]
        self.assertEqual(changes, [("hourly", False), ("hourly", True)])
        # Other requests go on meanwhile, on connections of their own.
        self.assertEqual(daemon.get("daemonstatus.json")[1]["finished"], 2)

    def test_jobstats_history_of_a_finished_job(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", delay="0.1", pages="70")
        daemon.wait_state(jobid, "finished", timeout=60)
        answer = daemon.get("jobstats.json", {"job": jobid, "history": "1"})[1]
        history = answer["history"]
        self.assertGreaterEqual(len(history), 2)
        self.assertEqual(history[-1]["stats"], answer["stats"])
        times = [p["time"] for p in history]
        self.assertEqual(times, sorted(times))
        self.assertLess(abs(times[-1] - time.time()), 60)
        self.assertNotIn("history", daemon.stats(jobid))
