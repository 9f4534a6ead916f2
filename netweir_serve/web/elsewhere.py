"""Job files and stats history kept by another node of the cluster.

With a shared job table (--jobs-db postgresql://...), a job's log, items
and stats history stay in the --dir of the node that ran it. A request for
one of them on any other node is answered by the owner: the request goes on
to the owner's --node-url (twisted.web.proxy.ReverseProxyResource for
/logs/ and /items/; one GET for jobstats.json's history), with the
client's Authorization header as it came, and the owner's answer comes
back as it is. When the owner is declared dead, is unknown, or does not
answer, the answer is a JSON 404 naming it: "... is on node NAME, which is
down". A request that another node passed on is never passed on again
(the PASSED_ON header), so nodes with wrong URLs cannot bounce one around.
"""

import json
from urllib.parse import urlsplit

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from twisted.web.util import DeferredResource

from ..jobs.replies import read_capped
from ..names import fold
from .answer import write_error

log = Logger()

# Set on every request passed on to another node.
PASSED_ON = b"x-netweir-serve-passed-on"

# Seconds to wait for the owner's connection before calling it down.
CONNECT_TIMEOUT = 10
# The most of another node's answer read (a job's stats history: a
# snapshot every few seconds of a crawl of days is a few MB).
NODE_ANSWER_LIMIT = 32 << 20


class OwnerDown(Exception):
    """The node holding a job's files is down; ``message`` says which."""

    def __init__(self, jobid, node):
        self.message = f"job {jobid} is on node {node}, which is down"
        super().__init__(self.message)


class Owners:
    """Finds the node a job ran on, through the shared ``store``
    (IJobStore and IClusterStore), for the node named ``node``."""

    def __init__(self, store, node, reactor):
        self.store = store
        self.node = node
        self.reactor = reactor
        # twisted.web.client (Agent, readBody; 0.4 MB, with twisted.web's
        # HTTP/1.1 client) only where a node shares the job table and can
        # be asked for another's history: imported here, as the node
        # starts, not in the middle of the first request that needs it.
        from twisted.web import client

        self._client = client

    @defer.inlineCallbacks
    def owner_of(self, jobid, request, project=None, spider=None):
        """The record of job ``jobid`` and the node dict (IClusterStore.nodes)
        of its owner when that is another node and the request was not
        passed on already; None when the job is this node's, unknown, not
        of ``project``/``spider``, or never claimed. Fails with OwnerDown
        when the owner is declared dead or unknown."""
        if request.requestHeaders.hasHeader(PASSED_ON):
            return None
        record = yield self.store.get(jobid)
        if record is None or record.node is None or record.node == self.node:
            return None
        if project is not None and fold(record.project) != fold(project):
            return None
        if spider is not None and fold(record.spider) != fold(spider):
            return None
        nodes = yield self.store.nodes()
        owner = next((n for n in nodes if n["name"] == record.node), None)
        if owner is None or owner["dead"] or not owner.get("url"):
            raise OwnerDown(record.id, record.node)
        return record, owner

    def file(self, request, project, spider, jobid, here):
        """The resource for a job file missing from this node: the owner's
        answer, or ``here`` (this node's own answer, a 404)."""
        found = self.owner_of(jobid, request, project, spider)
        found.addCallback(lambda owned: here if owned is None else self._proxy(*owned, request))
        found.addErrback(_down_or_error)
        return DeferredResource(found)

    def _proxy(self, record, owner, request):
        place = urlsplit(owner["url"])
        tls = place.scheme == "https"
        port = place.port or (443 if tls else 80)
        try:
            connector = _Connector(self.reactor, place.hostname, tls)
        except ImportError:
            return _Error(502, f"job {record.id} is on node {record.node}, reached over"
                          " https, and this node was started without TLS (give it an ssl:"
                          " --listen endpoint too)")
        request.requestHeaders.setRawHeaders(PASSED_ON, [b"1"])
        resource = _passed_on_resource()(place.hostname, port, request.path, connector)
        resource.down = OwnerDown(record.id, record.node).message
        return resource

    @defer.inlineCallbacks
    def history(self, record_id, request):
        """The stats history of a job another node ran, from that node's
        jobstats.json; None when the job is this node's. Fails with
        OwnerDown when the owner is down, or with OwnerAnswered."""
        owned = yield self.owner_of(record_id, request)
        if owned is None:
            return None
        record, owner = owned
        headers = Headers({b"user-agent": [b"netweir-serve"], PASSED_ON: [b"1"]})
        authorization = request.getHeader(b"authorization")
        if authorization is not None:
            headers.setRawHeaders(b"authorization", [authorization])
        url = (owner["url"].rstrip("/") + "/jobstats.json?history=1&job=" + record.id)
        agent = self._client.Agent(self.reactor, connectTimeout=CONNECT_TIMEOUT)
        try:
            answer = yield agent.request(b"GET", url.encode("ascii"), headers)
            body, whole = yield read_capped(answer, NODE_ANSWER_LIMIT)
        except Exception as e:
            log.info("job {jobid}: its node {node} did not answer for its history: {e}",
                     jobid=record.id, node=record.node, e=e)
            raise OwnerDown(record.id, record.node) from None
        if not whole:
            raise OwnerAnswered(502, f"node {record.node} answered more than"
                                     f" {NODE_ANSWER_LIMIT >> 20} MB for the job's history")
        try:
            answered = json.loads(body)
        except ValueError:
            answered = {}
        if answer.code != 200 or "history" not in answered:
            raise OwnerAnswered(answer.code, answered.get("message") or
                                f"node {record.node} answered {answer.code}")
        return answered["history"]


class OwnerAnswered(Exception):
    """The owner refused a request passed on (its code and message)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _down_or_error(failure):
    if failure.check(OwnerDown):
        return _Error(404, failure.value.message)
    log.failure("could not find the node of a job", failure)
    return _Error(500, "internal error; see the service's log")


class _Error(Resource):
    isLeaf = True

    def __init__(self, code, message):
        super().__init__()
        self.code = code
        self.message = message

    def render(self, request):
        return write_error(request, self.code, self.message)


class _Connector:
    """The reactor as ReverseProxyResource uses it (connectTCP), with a
    timeout, and TLS for an https:// node URL."""

    def __init__(self, reactor, hostname, tls):
        self._reactor = reactor
        self._tls = None
        if tls:
            # Loaded only now: a node that speaks plain HTTP keeps pyOpenSSL
            # out (cli.main), and cannot reach an https:// node then.
            from twisted.internet import ssl
            self._tls = ssl.optionsForClientTLS(hostname)

    def connectTCP(self, host, port, factory):
        if self._tls is not None:
            return self._reactor.connectSSL(host, port, factory, self._tls,
                                            timeout=CONNECT_TIMEOUT)
        return self._reactor.connectTCP(host, port, factory, timeout=CONNECT_TIMEOUT)


_PROXY = {}


def _passed_on_resource():
    """The ReverseProxyResource class, made at the first request passed on:
    twisted.web.proxy imports the global reactor, which no module below the
    entry points may (tests/test_layers.py), and the classes below are given
    their connector and reactor explicitly."""
    if "resource" in _PROXY:
        return _PROXY["resource"]
    from twisted.web import proxy

    class _PassedOnClient(proxy.ProxyClient):
        """The owner's answer goes back as it comes, no faster than the client
        takes it (the connection to the owner is the producer of the answer:
        a slow client pauses it, and a big file is not held in memory here); a
        client that goes away meanwhile closes the connection to the owner."""

        def connectionMade(self):
            self.father.notifyFinish().addErrback(self._gone)
            self.father.registerProducer(self.transport, True)
            super().connectionMade()

        def handleResponseEnd(self):
            if not self._finished:
                self.father.unregisterProducer()
            super().handleResponseEnd()

        def _gone(self, _):
            self._finished = True
            self.transport.loseConnection()


    class _PassedOnFactory(proxy.ProxyClientFactory):
        protocol = _PassedOnClient
        down = "the job's node is down"

        def clientConnectionFailed(self, connector, reason):
            # Not listening, not reachable: it is down, whatever the table says.
            if not self.father.finished and not getattr(self.father, "_disconnected", False):
                self.father.write(write_error(self.father, 404, self.down))
                self.father.finish()


    class _PassedOn(proxy.ReverseProxyResource):
        isLeaf = True
        down = None

        def proxyClientFactoryClass(self, *args):
            factory = _PassedOnFactory(*args)
            factory.down = self.down
            return factory

        def render(self, request):
            super().render(request)
            return NOT_DONE_YET

    _PROXY["resource"] = _PassedOn
    return _PassedOn
