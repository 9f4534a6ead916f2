"""--notify: the POST, its signature and its retries, on a Clock with a
fake agent, against a local receiver on real connections, and from a real
daemon."""

import hashlib
import hmac
import http.server
import json
import threading

from twisted.internet import defer, error, reactor
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial import unittest
from twisted.web.resource import Resource
from twisted.web.server import Site

from netweir_serve.jobs.events import ENDED, RECORDED_LATE, JobEvents
from netweir_serve.jobs.notify import Notifier, signature, summary
from netweir_serve.store.records import FINISHED, JobRecord
from netweir_serve.store.schedule_records import ScheduleRecord
from netweir_serve.web.views import job_entry

from .processes import wait_until
from .test_jobs import CrawlTestCase

SECRET = "s3cret"


def ended(outcome="failed", **changes):
    fields = dict(id="j1", project="shop", spider="books", spider_file="/x.py",
                  state=FINISHED, outcome=outcome, start_time=100.0, end_time=162.0,
                  exit_status=1, stats={"items": 20, "fetched": 29})
    fields.update(changes)
    return JobRecord(**fields)


class FakeResponse:
    phrase = b"whatever"
    length = 2

    def __init__(self, code):
        self.code = code

    def deliverBody(self, protocol):
        from twisted.web.client import ResponseDone
        from twisted.python.failure import Failure
        protocol.dataReceived(b"ok")
        protocol.connectionLost(Failure(ResponseDone()))


class FakeAgent:
    """Answers each request with the next of ``answers``: a code, an
    exception, or None for an answer that never comes."""

    def __init__(self, clock, answers):
        self.clock = clock
        self.answers = list(answers)
        self.requests = []

    def request(self, method, uri, headers, body):
        self.requests.append((self.clock.seconds(), method, uri, headers, body.body))
        answer = self.answers.pop(0)
        if answer is None:
            return defer.Deferred()
        if isinstance(answer, Exception):
            return defer.fail(answer)
        return defer.succeed(FakeResponse(answer))


class Logged:
    def __init__(self, test):
        self.events = []
        globalLogPublisher.addObserver(self.events.append)
        test.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def warnings(self):
        return [e for e in self.events if e.get("log_level") is not None
                and e["log_level"].name == "warn" and "notify" in e.get("log_format", "")]


class NotifierTests(unittest.TestCase):
    def notifier(self, answers, **kw):
        self.clock = Clock()
        self.agent = FakeAgent(self.clock, answers)
        kw.setdefault("secret", SECRET)
        notifier = Notifier(self.clock, ["http://127.0.0.1:1/hook"], job_entry, "box",
                            agent=self.agent, **kw)
        self.events = JobEvents()
        notifier.subscribe(self.events)
        return notifier

    def test_the_body_is_the_entry_with_outcome_and_final_stats_signed(self):
        self.notifier([200])
        self.events.publish(ENDED, ended())
        [(_, method, uri, headers, body)] = self.agent.requests
        self.assertEqual((method, uri), (b"POST", b"http://127.0.0.1:1/hook"))
        sent = json.loads(body)
        self.assertEqual(sent["event"], "job.ended")
        self.assertEqual(sent["node_name"], "box")
        job = sent["job"]
        self.assertEqual((job["id"], job["state"], job["outcome"], job["exit_status"]),
                         ("j1", "finished", "failed", 1))
        self.assertEqual(job["stats"], {"items": 20, "fetched": 29})
        self.assertEqual(job["log_url"], "/logs/shop/books/j1.log")
        self.assertEqual(sent["text"], "job j1 (shop/books) failed after 0:01:02: 20 items,"
                                       " 29 pages")
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        self.assertEqual(headers.getRawHeaders(b"x-netweir-signature"), [expected.encode()])
        self.assertEqual(headers.getRawHeaders(b"content-type"), [b"application/json"])

    def test_no_signature_without_a_secret(self):
        self.notifier([200], secret=None)
        self.events.publish(ENDED, ended())
        self.assertIsNone(self.agent.requests[0][3].getRawHeaders(b"x-netweir-signature"))

    def test_only_the_outcomes_asked_for(self):
        self.notifier([200, 200], outcomes=("failed", "lost"))
        for outcome in ("finished", "cancelled", "failed", "lost"):
            self.events.publish(ENDED, ended(outcome, id=outcome))
        self.assertEqual([json.loads(r[4])["job"]["id"] for r in self.agent.requests],
                         ["failed", "lost"])

    def test_notify_on_degraded_sends_only_runs_that_finished_degraded(self):
        from netweir_serve.options import parse_outcomes
        self.notifier([200], outcomes=parse_outcomes("degraded"))
        reasons = ("items 2 < 50% of median 20 over 5 runs",)
        self.events.publish(ENDED, ended("finished", id="fine", exit_status=0, health="healthy"))
        self.events.publish(ENDED, ended("failed", id="broke"))
        self.events.publish(ENDED, ended("finished", id="thin", exit_status=0,
                                         health="degraded", health_reasons=reasons))
        [request] = self.agent.requests
        sent = json.loads(request[4])
        self.assertEqual((sent["job"]["id"], sent["job"]["outcome"], sent["job"]["health"],
                          sent["job"]["health_reasons"]),
                         ("thin", "finished", "degraded", list(reasons)))
        self.assertEqual(sent["text"], "job thin (shop/books) finished after 0:01:02: 20 items,"
                                       " 29 pages, degraded: items 2 < 50% of median 20 over"
                                       " 5 runs")

    def test_an_end_recorded_late_is_told_for_its_health_alone(self):
        # Its end was announced (and told, by outcome) before the table
        # took it; the health its late write gave is told now.
        self.notifier([200, 200], outcomes=("failed", "degraded"))
        self.events.publish(ENDED, ended("finished", id="thin", exit_status=0))
        self.events.publish(RECORDED_LATE, ended("failed", id="broke"))
        self.events.publish(RECORDED_LATE, ended("finished", id="fine", exit_status=0,
                                                 health="healthy"))
        self.assertEqual(self.agent.requests, [])
        self.events.publish(RECORDED_LATE, ended("finished", id="thin", exit_status=0,
                                                 health="degraded",
                                                 health_reasons=("items 1 < min_items 5",)))
        [request] = self.agent.requests
        sent = json.loads(request[4])
        self.assertEqual((sent["job"]["id"], sent["job"]["health"]), ("thin", "degraded"))

    def test_the_body_of_a_healthy_run_says_so(self):
        self.notifier([200])
        self.events.publish(ENDED, ended("finished", exit_status=0, health="healthy"))
        job = json.loads(self.agent.requests[0][4])["job"]
        self.assertEqual((job["health"], job["health_reasons"]), ("healthy", []))

    def test_a_pause_its_end_made_is_a_notice_of_its_own_whatever_notify_on_says(self):
        self.notifier([200, 200], outcomes=("finished",))
        paused = ScheduleRecord(name="nightly", project="shop", spider="books", kind="every",
                                rule="1h", tz="UTC", paused=True, pause_after=2,
                                failed_in_row=2, note="paused after 2 runs in a row failed"
                                " or degraded; the last: j1 (failed, exit 1)")
        self.events.publish(ENDED, ended(paused_schedule=paused, schedule="nightly"))
        [(_, _, _, headers, body)] = self.agent.requests
        self.assertEqual(json.loads(body), {
            "event": "schedule_paused", "node_name": "box", "job": "j1",
            "text": "schedule nightly (shop/books) paused after 2 runs in a row failed or"
                    " degraded; the last: j1 (failed, exit 1)",
            "schedule": {"name": "nightly", "project": "shop", "spider": "books",
                         "note": paused.note, "pause_after": 2, "failed_in_row": 2}})
        self.assertTrue(headers.getRawHeaders(b"x-netweir-signature"))

    def test_three_retries_about_1_5_and_25_seconds_after_each_failure(self):
        logged = Logged(self)
        notifier = self.notifier([error.ConnectionRefusedError(), None, 503, 502])
        self.events.publish(ENDED, ended())
        self.clock.advance(1)                # refused at 0, tried again at 1
        self.clock.advance(10)               # no answer in 10 s: a timeout at 11
        self.clock.advance(5)                # tried again at 16: a 503
        self.clock.advance(25)               # tried again at 41: a 502, given up
        self.assertEqual([r[0] for r in self.agent.requests], [0, 1, 16, 41])
        self.assertEqual(notifier.pending(), 0)
        self.assertEqual(len(logged.warnings()), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_a_4xx_is_not_tried_again_and_the_next_job_still_goes(self):
        logged = Logged(self)
        notifier = self.notifier([404, 200])
        self.events.publish(ENDED, ended(id="first"))
        self.events.publish(ENDED, ended(id="second"))
        self.assertEqual(len(self.agent.requests), 2)
        self.assertEqual(len(logged.warnings()), 1)
        self.assertEqual(notifier.pending(), 0)

    def test_summary_of_a_job_cancelled_before_it_started(self):
        record = ended("cancelled", start_time=None, stats=None,
                       reason="cancelled before it started")
        self.assertEqual(summary(record), "job j1 (shop/books) cancelled (cancelled before it"
                                          " started)")


class FailingTwice(Resource):
    isLeaf = True

    def __init__(self):
        super().__init__()
        self.received = []

    def render_POST(self, request):
        self.received.append((request.getHeader(b"x-netweir-signature"),
                              request.content.read()))
        if len(self.received) <= 2:
            request.setResponseCode(503)
            return b"busy"
        return b"ok"


class ReceiverTests(unittest.TestCase):
    """Real connections: a local receiver that fails twice first."""

    @defer.inlineCallbacks
    def test_delivered_on_the_third_try_and_signed(self):
        receiver = FailingTwice()
        port = reactor.listenTCP(0, Site(receiver), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        url = f"http://127.0.0.1:{port.getHost().port}/hook"
        notifier = Notifier(reactor, [url], job_entry, "box", secret=SECRET, timeout=5,
                            retry_delays=(0.05, 0.1, 0.2))
        delivered = yield notifier.deliver(url, notifier.body(ended()), "j1")
        self.assertTrue(delivered)
        self.assertEqual(len(receiver.received), 3)
        for sig, body in receiver.received:
            self.assertEqual(sig, signature(SECRET, body).encode())
        self.assertEqual(json.loads(receiver.received[-1][1])["job"]["outcome"], "failed")

    @defer.inlineCallbacks
    def test_a_refused_connection_is_given_up_after_three_retries(self):
        port = reactor.listenTCP(0, Site(Resource()), interface="127.0.0.1")
        url = f"http://127.0.0.1:{port.getHost().port}/hook"
        yield port.stopListening()
        notifier = Notifier(reactor, [url], job_entry, "box", timeout=5,
                            retry_delays=(0.01, 0.01, 0.01))
        delivered = yield notifier.deliver(url, notifier.body(ended()), "j1")
        self.assertFalse(delivered)


class EndlessReply(Resource):
    """Answers a POST 200 with a reply that never ends, counting what it
    managed to write before the client went away."""

    isLeaf = True

    def __init__(self):
        super().__init__()
        self.written = 0
        self.gone = defer.Deferred()

    def render_POST(self, request):
        chunk = b"x" * 65536

        def more():
            if request.finished or getattr(request, "_disconnected", False):
                return
            request.write(chunk)
            self.written += len(chunk)
            reactor.callLater(0, more)

        request.notifyFinish().addBoth(lambda _: self.gone.callback(None)
                                       if not self.gone.called else None)
        more()
        from twisted.web.server import NOT_DONE_YET
        return NOT_DONE_YET


class BoundedReplyTests(unittest.TestCase):
    """Issue 26: a webhook receiver's reply was read whole (a 300 MB reply
    took the daemon to 522 MB); now a few KB of it at most."""

    @defer.inlineCallbacks
    def test_an_endless_reply_is_read_a_few_kb_and_the_delivery_ends(self):
        receiver = EndlessReply()
        port = reactor.listenTCP(0, Site(receiver), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        url = f"http://127.0.0.1:{port.getHost().port}/hook"
        notifier = Notifier(reactor, [url], job_entry, "box", timeout=5,
                            retry_delays=(0.01,))
        delivered = yield notifier.deliver(url, notifier.body(ended()), "j1")
        self.assertTrue(delivered)
        yield receiver.gone
        # What the kernel's buffers took before the connection closed, not
        # the reply: far less than the 5 s at loopback speed would write.
        self.assertLess(receiver.written, 16 << 20)

    @defer.inlineCallbacks
    def test_read_capped_keeps_the_first_bytes_and_says_it_stopped(self):
        from netweir_serve.jobs.replies import read_capped
        receiver = EndlessReply()
        port = reactor.listenTCP(0, Site(receiver), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        from twisted.web.client import Agent
        answer = yield Agent(reactor).request(
            b"POST", f"http://127.0.0.1:{port.getHost().port}/".encode())
        body, whole = yield read_capped(answer, 1000)
        self.assertEqual((body, whole), (b"x" * 1000, False))
        yield receiver.gone


class NodeAnswerBoundTests(unittest.TestCase):
    """Issue 26: another node's answer is read with a bound too."""

    @defer.inlineCallbacks
    def test_a_node_answering_without_end_for_a_history_is_refused_not_read_whole(self):
        from twisted.web.test.requesthelper import DummyRequest
        from netweir_serve.web import elsewhere

        receiver = EndlessReply()
        receiver.render_GET = receiver.render_POST
        port = reactor.listenTCP(0, Site(receiver), interface="127.0.0.1")
        self.addCleanup(port.stopListening)

        class Store:
            def get(self, jobid):
                return defer.succeed(ended(id=jobid, node="other"))

            def nodes(self):
                return defer.succeed([{"name": "other", "dead": False,
                                       "url": f"http://127.0.0.1:{port.getHost().port}"}])

        self.patch(elsewhere, "NODE_ANSWER_LIMIT", 1 << 20)
        owners = elsewhere.Owners(Store(), "here", reactor)
        with self.assertRaises(elsewhere.OwnerAnswered) as raised:
            yield owners.history("j1", DummyRequest([b""]))
        self.assertIn("more than", raised.exception.message)
        yield receiver.gone
        self.assertLess(receiver.written, 64 << 20)


class Receiver:
    """An HTTP server in a thread of the test process that records POSTs."""

    def __init__(self, failures=0):
        received = self.received = []
        remaining = [failures]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((dict(self.headers), body))
                code = 500 if remaining[0] > 0 else 204
                remaining[0] -= 1
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class LiveNotifyTests(CrawlTestCase):
    def test_a_daemon_notifies_the_outcomes_asked_for_signed(self):
        first, second = Receiver(failures=1), Receiver()
        self.addCleanup(first.stop)
        self.addCleanup(second.stop)
        daemon = self.daemon("--notify", first.url, "--notify", second.url,
                             "--notify-on", "failed,cancelled",
                             env={"NETWEIR_SERVE_NOTIFY_SECRET": SECRET})
        fine = daemon.must_schedule("shop", "echo")
        daemon.wait_state(fine, "finished")
        failed = daemon.must_schedule("shop", "failing")
        daemon.wait_state(failed, "finished")
        # The first receiver fails once: its POST comes again about 1 s later.
        wait_until(lambda: len(first.received) >= 2 and second.received, 30,
                   "the notifications")
        for receiver in (first, second):
            headers, body = receiver.received[-1]
            sent = json.loads(body)
            self.assertEqual((sent["event"], sent["job"]["id"], sent["job"]["outcome"]),
                             ("job.ended", failed, "failed"))
            self.assertEqual(sent["job"]["stats"]["items"], 1)
            self.assertEqual(headers["X-Netweir-Signature"], signature(SECRET, body))
            self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(len(second.received), 1)
        self.assertEqual(first.received[0][1], first.received[1][1])
