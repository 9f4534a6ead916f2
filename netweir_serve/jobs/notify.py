"""Word when a job ends: a POST of JSON to each --notify URL.

The body is ``{"event": "job.ended", "node_name": ..., "text": ...,
"job": ENTRY}``: ENTRY is the job's listjobs.json entry with its ``state``
(finished), ``outcome``, ``health`` and ``health_reasons`` (run health:
"degraded" and why, for a run that finished below its checks) and final
``stats``; ``text`` is one line for
people ("job first (example/books) failed after 0:01:02: 20 items, 29
pages"), which is what a Slack incoming webhook posts, so one can be given
to --notify as it is. When the end queued a retry, the body has a
top-level ``retry``: ``{"id": ..., "not_before": ...}`` (the time as
``start_time`` is shown), and the text says so. With a secret, each POST carries
``X-Netweir-Signature: sha256=HEX``, the HMAC-SHA256 of the body's bytes
under the secret, for the receiver to check the POST is the service's.

When a job's end paused its schedule (``pause_after``), a second POST
follows, whatever --notify-on says: ``{"event": "schedule_paused",
"node_name": ..., "text": ..., "schedule": {"name", "project", "spider",
"note", "pause_after", "failed_in_row"}, "job": ID}`` (``job``: the run
whose end paused it; ``text`` one line for people, with the note).

Sent with Twisted's Agent, on the reactor, never blocking it. Each try has
``timeout`` seconds (10) for the whole answer. A refused connection, a
timeout, any other failure to connect or a 5xx answer is tried again
``RETRY_DELAYS`` (1, 5 and 25 s) after each failure; a 2xx answer is
delivered, anything else (a 4xx: a wrong URL, a bad token) is not tried
again. A delivery that fails for good is logged once, as a warning naming
the job and the URL; nothing else is lost or held back by it.
"""

import hashlib
import hmac
import json

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from .events import ENDED, RECORDED_LATE
from .replies import NOTICE_REPLY_LIMIT, read_capped
from ..health.checks import DEGRADED
from ..store.records import OUTCOMES

RETRY_DELAYS = (1.0, 5.0, 25.0)
TIMEOUT_SECONDS = 10.0
SIGNATURE_HEADER = b"X-Netweir-Signature"
USER_AGENT = b"netweir-serve"


def signature(secret, body):
    """The value of the signature header for ``body`` (bytes)."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return "sha256=" + digest


def duration_text(seconds):
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def summary(record):
    """The ``text`` line of a job's notification."""
    text = f"job {record.id} ({record.project}/{record.spider}) {record.outcome}"
    if record.start_time is not None and record.end_time is not None:
        text += f" after {duration_text(record.end_time - record.start_time)}"
    stats = record.stats or {}
    counts = [f"{stats[key]} {word}" for key, word in (("items", "items"), ("fetched", "pages"))
              if isinstance(stats.get(key), int)]
    if counts:
        text += ": " + ", ".join(counts)
    if record.reason:
        text += f" ({record.reason})"
    if record.health == DEGRADED:
        text += f", degraded: {'; '.join(record.health_reasons)}"
    if record.retry is not None:
        text += f"; retry {record.retry.id} (attempt {record.retry.attempt}) queued"
    return text


@implementer(IBodyProducer)
class _Bytes:
    def __init__(self, body):
        self.body = body
        self.length = len(body)

    def startProducing(self, consumer):
        consumer.write(self.body)
        return defer.succeed(None)

    def pauseProducing(self):
        pass

    def resumeProducing(self):
        pass

    def stopProducing(self):
        pass


class RetryableAnswer(Exception):
    """A 5xx answer: try again."""


class RefusedAnswer(Exception):
    """Any other answer but a 2xx: not tried again."""


class Notifier:
    """Posts each ended job whose outcome or reason is in ``outcomes`` (a
    list of both, as --notify-on gives it) to ``urls``.

    ``reactor`` provides IReactorTime and IReactorTCP (IReactorSSL for
    https); ``describe(record)`` gives a job's entry (web.views'
    job_entry); ``show_time(seconds)`` a time as the entry shows its times
    (web.views' format_time); ``node`` is the node_name of the body; ``secret`` (a
    string, or None) signs it. ``agent`` is for tests."""

    log = Logger()

    def __init__(self, reactor, urls, describe, node, outcomes=OUTCOMES, secret=None,
                 timeout=TIMEOUT_SECONDS, retry_delays=RETRY_DELAYS, agent=None,
                 show_time=str):
        self._reactor = reactor
        self._urls = tuple(urls)
        self._describe = describe
        self._show_time = show_time
        self._node = node
        self._outcomes = frozenset(outcomes)
        self._secret = secret
        self._timeout = timeout
        self._delays = tuple(retry_delays)
        if agent is None and self._urls:
            # Imported only when there is a URL: twisted.web.client brings
            # TLS (pyOpenSSL, cryptography) with it, 14 MB of memory.
            from twisted.web.client import Agent, HTTPConnectionPool

            # A connection per POST: notifications are rare, and a kept-alive
            # connection a receiver closed meanwhile would fail a try.
            agent = Agent(reactor, connectTimeout=timeout,
                          pool=HTTPConnectionPool(reactor, persistent=False))
        self._agent = agent
        self._sending = set()

    def subscribe(self, events):
        if self._urls:
            return events.subscribe(self.job_heard, kinds=(ENDED, RECORDED_LATE))
        return lambda: None

    def job_heard(self, kind, record):
        # A health is chosen as an outcome is (--notify-on degraded). An end
        # recorded late was told already by its outcome and reason; what
        # the table's write added, its health, is told now.
        chosen = {record.health} if kind == RECORDED_LATE else {
            record.outcome, record.reason, record.health}
        if chosen & self._outcomes:
            body = self.body(record)
            for url in self._urls:
                self.deliver(url, body, record.id)
        if record.paused_schedule is not None:
            body = self.pause_body(record)
            for url in self._urls:
                self.deliver(url, body, record.id)

    def pause_body(self, record):
        """The schedule_paused notice of ``record``, whose end paused its
        schedule (``record.paused_schedule``)."""
        paused = record.paused_schedule
        body = {"event": "schedule_paused", "node_name": self._node,
                "text": f"schedule {paused.name} ({paused.project}/{paused.spider})"
                        f" {paused.note}",
                "schedule": {"name": paused.name, "project": paused.project,
                             "spider": paused.spider, "note": paused.note,
                             "pause_after": paused.pause_after,
                             "failed_in_row": paused.failed_in_row},
                "job": record.id}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def body(self, record):
        entry = dict(self._describe(record))
        entry["state"] = record.state
        entry["stats"] = record.stats
        if record.reason:
            entry["reason"] = record.reason
        if record.detail:
            entry["detail"] = record.detail
        body = {"event": "job.ended", "node_name": self._node, "text": summary(record),
                "job": entry}
        if record.retry is not None:
            # The retry its end queued (store.retrying): where to look next.
            body["retry"] = {"id": record.retry.id,
                             "not_before": self._show_time(record.retry.not_before)}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def headers(self, body):
        headers = Headers({b"content-type": [b"application/json"],
                           b"user-agent": [USER_AGENT]})
        if self._secret:
            headers.addRawHeader(SIGNATURE_HEADER, signature(self._secret, body).encode("ascii"))
        return headers

    def deliver(self, url, body, jobid):
        """Sends ``body`` to ``url`` with its retries; a Deferred that fires
        with True (delivered) or False (given up), never failing."""
        done = self._attempt(url, body, jobid, 0)
        self._sending.add(done)
        done.addBoth(lambda result: (self._sending.discard(done), result)[1])
        return done

    def pending(self):
        """Deliveries not settled yet (for tests, and for stopping)."""
        return len(self._sending)

    @defer.inlineCallbacks
    def _attempt(self, url, body, jobid, tries):
        while True:
            try:
                yield self._post(url, body)
                return True
            except RefusedAnswer as e:
                self._give_up(url, jobid, tries + 1, str(e))
                return False
            except Exception as e:
                reason = _reason(e)
            if tries >= len(self._delays):
                self._give_up(url, jobid, tries + 1, reason)
                return False
            delay = self._delays[tries]
            self.log.debug("job {jobid}: notifying {url} failed ({why}); trying again in"
                           " {s:g} s", jobid=jobid, url=url, why=reason, s=delay)
            tries += 1
            yield _sleep(self._reactor, delay)

    def _give_up(self, url, jobid, tries, reason):
        self.log.warn("job {jobid}: could not notify {url} ({tries} tries): {why}",
                      jobid=jobid, url=url, tries=tries, why=reason)

    def _post(self, url, body):
        d = self._agent.request(b"POST", url.encode("ascii"), self.headers(body), _Bytes(body))
        d.addCallback(self._answered)
        d.addTimeout(self._timeout, self._reactor)
        return d

    @staticmethod
    def _answered(response):
        code = response.code

        def judged(_):
            if 200 <= code < 300:
                return None
            if code >= 500:
                raise RetryableAnswer(f"HTTP {code}")
            raise RefusedAnswer(f"HTTP {code}, not tried again")

        # The answer's body is read (and dropped) so the connection ends,
        # a few KB of it at most (replies.py).
        return read_capped(response, NOTICE_REPLY_LIMIT).addBoth(judged)


def _reason(error):
    if isinstance(error, defer.TimeoutError):
        return "no answer in time"
    return str(error) or type(error).__name__


def _sleep(clock, seconds):
    d = defer.Deferred()
    clock.callLater(seconds, d.callback, None)
    return d
