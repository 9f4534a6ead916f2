"""The front door, over real sockets through a real Site."""

import json
from base64 import b64encode

from twisted.cred.checkers import (
    AllowAnonymousAccess, ICredentialsChecker, InMemoryUsernamePasswordDatabaseDontUse)
from twisted.cred.credentials import IUsernamePassword
from twisted.cred.error import UnauthorizedLogin
from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from twisted.web.resource import IResource, Resource
from twisted.web.server import Site
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import implementer
from zope.interface.verify import verifyObject

from netweir_serve.web.guard import GuardedResource, basic_credentials, is_loopback_host

USERNAME = "me"
PASSWORD = "pa:ss:wörd"
CREDENTIALS = (USERNAME, PASSWORD)

PATHS = [b"/", b"/listjobs.json", b"/logs/p/s/j.log", b"//listprojects.json"]


def basic(username, password):
    """An Authorization header value for these credentials (bytes)."""
    return b"Basic " + b64encode(username + b":" + password)


GOOD = basic(USERNAME.encode(), PASSWORD.encode("utf-8"))


class Says(Resource):
    """Answers with a fixed text, or the path for a leaf: proof of which
    resource a request reached."""

    def __init__(self, text=None, leaf=False):
        super().__init__()
        self.text = text
        self.isLeaf = leaf

    def render(self, request):
        return self.text if self.text is not None else b"leaf:" + request.path


def tree():
    root = Resource()
    root.putChild(b"", Says(b"home"))
    root.putChild(b"listjobs.json", Says(b'{"status":"ok"}'))
    root.putChild(b"logs", Says(leaf=True))
    return root


class Answer:
    def __init__(self, raw):
        head, _, self.body = raw.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        self.code = int(status.split(b" ")[1])
        self.headers = {}
        for line in lines:
            name, _, value = line.partition(b":")
            self.headers.setdefault(name.strip().lower(), []).append(value.strip())

    def json(self):
        return json.loads(self.body)


class Exchange(Protocol):
    def __init__(self, request):
        self.request = request
        self.received = b""
        self.done = Deferred()

    def connectionMade(self):
        self.transport.write(self.request)

    def dataReceived(self, data):
        self.received += data

    def connectionLost(self, reason):
        self.done.callback(Answer(self.received))


class GuardTestCase(TestCase):
    """Serves ``tree()`` behind a guard on 127.0.0.1."""

    @inlineCallbacks
    def fetch(self, guard, path=b"/", host=b"127.0.0.1", headers=(), method=b"GET",
              version=b"HTTP/1.1"):
        """The ``Answer`` to one request, sent raw so that every header is
        exactly as given; ``host=None`` sends no Host header."""
        port = reactor.listenTCP(0, Site(guard, reactor=reactor), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        lines = [method + b" " + path + b" " + version]
        if host is not None:
            lines.append(b"Host: " + host)
        lines += [name + b": " + value for name, value in headers]
        lines.append(b"Connection: close")
        exchange = Exchange(b"\r\n".join(lines) + b"\r\n\r\n")
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port, timeout=5)
        yield connectProtocol(endpoint, exchange)
        answer = yield exchange.done.addTimeout(5, reactor)
        return answer

    def assertUnauthorized(self, answer):
        self.assertEqual(answer.code, 401)
        self.assertEqual(answer.headers[b"www-authenticate"], [b'Basic realm="netweir-serve"'])
        self.assertEqual(answer.headers[b"content-type"], [b"application/json"])
        body = answer.json()
        self.assertEqual(body["status"], "error")
        self.assertIn("basic auth", body["message"])
        self.assertIn("node_name", body)

    def assertRefused(self, answer, reason):
        self.assertEqual(answer.code, 403)
        self.assertNotIn(b"www-authenticate", answer.headers)
        body = answer.json()
        self.assertEqual(body["status"], "error")
        self.assertIn(reason, body["message"])

    def assertReached(self, answer, path):
        self.assertEqual(answer.code, 200 if path != b"//listprojects.json" else 404)
        expected = {b"/": b"home", b"/listjobs.json": b'{"status":"ok"}'}
        if path in expected:
            self.assertEqual(answer.body, expected[path])
        if path.startswith(b"/logs/"):
            self.assertEqual(answer.body, b"leaf:" + path)


class AuthTests(GuardTestCase):
    def setUp(self):
        self.guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)

    @inlineCallbacks
    def test_missing_credentials_refused_on_every_path(self):
        for path in PATHS:
            self.assertUnauthorized((yield self.fetch(self.guard, path)))

    @inlineCallbacks
    def test_wrong_credentials_refused_on_every_path(self):
        wrong = [
            basic(b"me", b"pa:ss"),
            basic(b"me", b"pa"),
            basic(b"me", PASSWORD.encode("utf-8") + b"x"),
            basic(b"you", PASSWORD.encode("utf-8")),
            basic(b"", b""),
            basic(b"ME", PASSWORD.encode("utf-8")),
        ]
        for path in PATHS:
            for authorization in wrong:
                answer = yield self.fetch(
                    self.guard, path, headers=[(b"Authorization", authorization)]
                )
                self.assertUnauthorized(answer)

    @inlineCallbacks
    def test_malformed_credentials_refused_not_crashed(self):
        malformed = [
            b"Basic !!!not base64!!!",
            b"Basic " + GOOD.split(b" ")[1].rstrip(b"="),  # padding cut
            b"Basic " + b64encode(b"mepassword"),  # no colon
            b"Basic " + b64encode(b"m\xff\xfe:pa:ss:w\xf6rd"),  # not UTF-8
            b"Bearer " + GOOD.split(b" ")[1],
            b"Basic",
            b"",
            b"Basic \xff\xfe",
        ]
        for authorization in malformed:
            answer = yield self.fetch(self.guard, b"/listjobs.json",
                                      headers=[(b"Authorization", authorization)])
            self.assertUnauthorized(answer)

    @inlineCallbacks
    def test_two_authorization_headers_refused(self):
        answer = yield self.fetch(self.guard, headers=[(b"Authorization", GOOD)] * 2)
        self.assertUnauthorized(answer)

    @inlineCallbacks
    def test_correct_credentials_reach_every_path(self):
        for path in PATHS:
            answer = yield self.fetch(self.guard, path, headers=[(b"Authorization", GOOD)])
            self.assertReached(answer, path)

    @inlineCallbacks
    def test_scheme_is_case_insensitive(self):
        answer = yield self.fetch(self.guard, headers=[(b"Authorization", b"bASIC " + GOOD[6:])])
        self.assertReached(answer, b"/")

    @inlineCallbacks
    def test_other_methods_refused_too(self):
        for method in [b"POST", b"DELETE", b"OPTIONS"]:
            answer = yield self.fetch(self.guard, b"/listjobs.json", method=method)
            self.assertUnauthorized(answer)
        answer = yield self.fetch(self.guard, b"/listjobs.json", method=b"HEAD")
        self.assertEqual(answer.code, 401)
        self.assertEqual(answer.headers[b"www-authenticate"], [b'Basic realm="netweir-serve"'])
        self.assertEqual(answer.body, b"")

    @inlineCallbacks
    def test_leaf_root_guarded_too(self):
        guard = GuardedResource(Says(leaf=True), credentials=CREDENTIALS, loopback_only=True)
        self.assertUnauthorized((yield self.fetch(guard, b"/x.json")))
        answer = yield self.fetch(guard, b"/x.json", headers=[(b"Authorization", GOOD)])
        self.assertEqual(answer.body, b"leaf:/x.json")

    @inlineCallbacks
    def test_credentials_never_logged(self):
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        for authorization in [GOOD, basic(b"me", b"guess:work")]:
            yield self.fetch(self.guard, headers=[(b"Authorization", authorization)])
        self.assertTrue(events)
        logged = "\n".join(str(formatEvent(event)) + repr(event) for event in events)
        for secret in [PASSWORD, "pa:ss", "guess:work", GOOD.decode()[6:]]:
            self.assertNotIn(secret, logged)

    @inlineCallbacks
    def test_no_credentials_means_no_authentication(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=True)
        for path in PATHS:
            self.assertReached((yield self.fetch(guard, path)), path)


class OriginTests(GuardTestCase):
    ORIGINS = [b"null", b"", b"http://evil.example", b"http://127.0.0.1:6800"]

    @inlineCallbacks
    def test_origin_refused_with_valid_credentials(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        for origin in self.ORIGINS:
            for path in PATHS:
                answer = yield self.fetch(
                    guard, path, headers=[(b"Origin", origin), (b"Authorization", GOOD)]
                )
                self.assertRefused(answer, "web pages")

    @inlineCallbacks
    def test_origin_refused_before_asking_for_credentials(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        for origin in self.ORIGINS:
            answer = yield self.fetch(guard, headers=[(b"Origin", origin)])
            self.assertRefused(answer, "web pages")

    @inlineCallbacks
    def test_origin_refused_without_authentication_or_host_check(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=False)
        for origin in self.ORIGINS:
            answer = yield self.fetch(guard, b"/logs/p/s/j.log", headers=[(b"Origin", origin)])
            self.assertRefused(answer, "web pages")


class OwnOriginTests(GuardTestCase):
    """A page of the service itself posts with its own origin: the scheme
    of the connection and the host and port of its Host header."""

    OWN = [(b"localhost:6800", b"http://localhost:6800"),
           (b"LocalHost:6800", b"http://localhost:6800"),
           (b"localhost", b"http://localhost:80"),
           (b"localhost:80", b"http://localhost"),
           (b"127.0.0.1:6800", b"http://127.0.0.1:6800"),
           (b"[::1]:6800", b"http://[::1]:6800")]
    OTHERS = [(b"localhost:6800", b"http://localhost:6801"),
              (b"localhost:6800", b"https://localhost:6800"),
              (b"localhost:6800", b"http://127.0.0.1:6800"),
              (b"localhost:6800", b"http://localhost:6800/"),
              (b"localhost:6800", b"http://me@localhost:6800"),
              (b"localhost:6800", b"http://localhost:6800.evil.example"),
              (b"localhost:6800", b"null"),
              (b"localhost:6800", b""),
              (b"localhost", b"http://localhost:8080"),
              (b"localhost", b"ws://localhost")]

    def test_origin_matching(self):
        from netweir_serve.web.guard import is_own_origin
        for host, origin in self.OWN:
            self.assertTrue(is_own_origin(origin, host, False), (host, origin))
            self.assertFalse(is_own_origin(origin, host, True), (host, origin))
        for host, origin in self.OTHERS:
            self.assertFalse(is_own_origin(origin, host, False), (host, origin))
        self.assertTrue(is_own_origin(b"https://box.example", b"box.example:443", True))
        self.assertFalse(is_own_origin(b"http://localhost:6800", None, False))

    @inlineCallbacks
    def test_own_origin_reaches_every_path(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=True)
        for host, origin in self.OWN:
            for path in PATHS:
                answer = yield self.fetch(guard, path, host=host, headers=[(b"Origin", origin)],
                                          method=b"POST" if path != b"/" else b"GET")
                self.assertReached(answer, path)

    @inlineCallbacks
    def test_own_origin_is_still_asked_for_the_password(self):
        # A browser prompts on the 401, then sends the password it was given.
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        origin = [(b"Origin", b"http://localhost:6800")]
        self.assertUnauthorized((yield self.fetch(guard, host=b"localhost:6800", headers=origin)))
        answer = yield self.fetch(guard, host=b"localhost:6800",
                                  headers=origin + [(b"Authorization", GOOD)])
        self.assertReached(answer, b"/")

    @inlineCallbacks
    def test_other_origins_refused_on_every_path(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=False)
        for host, origin in self.OTHERS:
            for path in PATHS:
                answer = yield self.fetch(guard, path, host=host, headers=[(b"Origin", origin)])
                self.assertRefused(answer, "web pages")

    @inlineCallbacks
    def test_origin_without_a_host_or_twice_refused(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=False)
        answer = yield self.fetch(guard, host=None, version=b"HTTP/1.0",
                                  headers=[(b"Origin", b"http://localhost")])
        self.assertRefused(answer, "web pages")
        answer = yield self.fetch(guard, host=b"localhost:6800",
                                  headers=[(b"Origin", b"http://localhost:6800")] * 2)
        self.assertRefused(answer, "web pages")

    @inlineCallbacks
    def test_rebinding_page_with_its_own_origin_still_refused(self):
        # Its origin is its own host name's, which the Host check refuses.
        guard = GuardedResource(tree(), credentials=None, loopback_only=True)
        answer = yield self.fetch(guard, host=b"evil.example:6800",
                                  headers=[(b"Origin", b"http://evil.example:6800")])
        self.assertRefused(answer, "DNS rebinding")


@implementer(ICredentialsChecker)
class OneUserLater:
    """A checker that answers on a later turn of the reactor, as one
    asking a database would."""

    credentialInterfaces = (IUsernamePassword,)

    def requestAvatarId(self, credentials):
        d = Deferred()
        ok = (credentials.username, credentials.password) == (b"later", b"pw")
        reactor.callLater(0.01, (d.callback if ok else d.errback),
                          b"later" if ok else UnauthorizedLogin())
        return d


@implementer(ICredentialsChecker)
class Broken:
    credentialInterfaces = (IUsernamePassword,)

    def requestAvatarId(self, credentials):
        raise OSError("the user file is gone")


class CheckerTests(GuardTestCase):
    """Passwords go through twisted.cred: other checkers plug in."""

    @inlineCallbacks
    def test_a_checker_beside_the_password(self):
        checker = InMemoryUsernamePasswordDatabaseDontUse()
        checker.addUser(b"other", b"secret")
        guard = GuardedResource(tree(), credentials=CREDENTIALS, checkers=[checker])
        for authorization in (GOOD, basic(b"other", b"secret")):
            answer = yield self.fetch(guard, b"/listjobs.json",
                                      headers=[(b"Authorization", authorization)])
            self.assertReached(answer, b"/listjobs.json")
        self.assertUnauthorized((yield self.fetch(guard, b"/listjobs.json", headers=[
            (b"Authorization", basic(b"other", b"wrong"))])))

    @inlineCallbacks
    def test_a_checker_that_answers_later(self):
        guard = GuardedResource(tree(), checkers=[OneUserLater()])
        for path in PATHS:
            answer = yield self.fetch(guard, path,
                                      headers=[(b"Authorization", basic(b"later", b"pw"))])
            self.assertReached(answer, path)
            self.assertUnauthorized((yield self.fetch(guard, path, headers=[
                (b"Authorization", basic(b"later", b"no"))])))
        leaf = GuardedResource(Says(leaf=True), checkers=[OneUserLater()])
        answer = yield self.fetch(leaf, b"/x.json",
                                  headers=[(b"Authorization", basic(b"later", b"pw"))])
        self.assertEqual(answer.body, b"leaf:/x.json")

    @inlineCallbacks
    def test_anonymous_access_is_a_checker_too(self):
        guard = GuardedResource(tree(), checkers=[AllowAnonymousAccess()])
        self.assertReached((yield self.fetch(guard, b"/listjobs.json")), b"/listjobs.json")

    @inlineCallbacks
    def test_a_failing_checker_is_a_500_and_logged(self):
        guard = GuardedResource(tree(), checkers=[Broken()])
        answer = yield self.fetch(guard, headers=[(b"Authorization", GOOD)])
        self.assertEqual(answer.code, 500)
        self.assertEqual(answer.json()["status"], "error")
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)


class HostTests(GuardTestCase):
    ACCEPTED = [b"localhost:6800", b"localhost", b"LOCALHOST", b"127.0.0.1", b"127.0.0.2:80",
                b"127.255.255.254:6800", b"[::1]", b"[::1]:6800"]
    REFUSED = [b"evil.example", b"evil.example:6800", b"localhost.evil.example",
               b"127.0.0.1.evil.example", b"[::1", b"::1", b"::1:6800", b"[::1]x",
               b"[::1]:80:80", b"localhost:x", b"10.0.0.1", b"0.0.0.0", b"127.1",
               b"0177.0.0.1", b"[::2]", b"", b"local host", b"l\xf6calhost"]

    def test_host_parsing(self):
        for host in self.ACCEPTED:
            self.assertTrue(is_loopback_host(host), host)
        for host in self.REFUSED:
            self.assertFalse(is_loopback_host(host), host)

    @inlineCallbacks
    def test_foreign_host_refused_when_loopback_only(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        for host in [b"evil.example", b"localhost.evil.example", b"127.0.0.1.evil.example"]:
            for path in PATHS:
                answer = yield self.fetch(
                    guard, path, host=host, headers=[(b"Authorization", GOOD)]
                )
                self.assertRefused(answer, "DNS rebinding")

    @inlineCallbacks
    def test_foreign_host_refused_before_asking_for_credentials(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        self.assertRefused((yield self.fetch(guard, host=b"evil.example")), "DNS rebinding")

    @inlineCallbacks
    def test_two_host_headers_refused(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=True)
        answer = yield self.fetch(guard, headers=[(b"Host", b"evil.example")])
        self.assertRefused(answer, "DNS rebinding")

    @inlineCallbacks
    def test_loopback_hosts_accepted(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        for host in [b"localhost:6800", b"127.0.0.1", b"[::1]", b"[::1]:6800", b"LOCALHOST"]:
            answer = yield self.fetch(guard, b"/listjobs.json", host=host,
                                      headers=[(b"Authorization", GOOD)])
            self.assertReached(answer, b"/listjobs.json")

    @inlineCallbacks
    def test_missing_host_accepted(self):
        guard = GuardedResource(tree(), credentials=None, loopback_only=True)
        answer = yield self.fetch(guard, host=None, version=b"HTTP/1.0")
        self.assertReached(answer, b"/")

    @inlineCallbacks
    def test_host_not_checked_unless_loopback_only(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=False)
        for path in PATHS:
            answer = yield self.fetch(guard, path, host=b"evil.example",
                                      headers=[(b"Authorization", GOOD)])
            self.assertReached(answer, path)
        self.assertUnauthorized((yield self.fetch(guard, host=b"evil.example")))


class ParsingTests(TestCase):
    def test_basic_credentials_split_on_first_colon(self):
        self.assertEqual(basic_credentials(basic(b"me", b"a:b:")), (b"me", b"a:b:"))
        self.assertEqual(basic_credentials(basic(b"", b"")), (b"", b""))

    def test_basic_credentials_malformed(self):
        for value in [b"Basic", b"Digest abc", b"Basic ***", b"Basic " + b64encode(b"nocolon"),
                      b"Basic " + b64encode(b"\xff:x")]:
            self.assertIsNone(basic_credentials(value), value)

    def test_guard_is_a_resource(self):
        verifyObject(IResource, GuardedResource(tree()))

    def test_check_reusable_on_its_own(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, loopback_only=True)
        request = DummyRequest([b""])
        self.assertEqual(guard.check(request).code, 401)
        request.requestHeaders.setRawHeaders(b"authorization", [GOOD])
        self.assertIsNone(guard.check(request))
        request.requestHeaders.setRawHeaders(b"origin", [b"null"])
        self.assertEqual(guard.check(request).code, 403)


class TokenTests(GuardTestCase):
    """Tokens beside the password: Bearer secrets and basic auth, and no
    credentials asked for on loopback while there is no token and no
    password."""

    def setUp(self):
        import os

        from netweir_serve.access.tokens import TokenBook, TokenChecker, hash_secret, new_secret
        from netweir_serve.store.sqlite import SQLiteJobStore
        from netweir_serve.store.token_records import TokenRecord
        from twisted.internet.task import Clock

        self.clock = Clock()
        self.table = SQLiteJobStore(os.path.abspath(self.mktemp()), self.clock)
        self.addCleanup(self.table.close)
        book = TokenBook(self.table, self.clock, self.clock)
        self.tokens = (book, TokenChecker(book, self.clock))
        self.secret = new_secret("ci")
        self.record = TokenRecord(name="ci", role="admin", hash=hash_secret(self.secret))

    def add_token(self):
        self.successResultOf(self.table.add_token(self.record))
        self.clock.advance(1)   # read again

    @inlineCallbacks
    def test_open_on_loopback_until_a_token_exists_then_every_path_needs_one(self):
        guard = GuardedResource(tree(), tokens=self.tokens)
        self.assertReached((yield self.fetch(guard, b"/listjobs.json")), b"/listjobs.json")
        self.add_token()
        bearer = b"Bearer " + self.secret.encode()
        for path in PATHS:
            self.assertUnauthorized((yield self.fetch(guard, path)))
            for authorization in (bearer, basic(b"ci", self.secret.encode())):
                answer = yield self.fetch(guard, path, headers=[(b"Authorization", authorization)])
                self.assertReached(answer, path)

    @inlineCallbacks
    def test_a_public_endpoint_stays_shut_once_its_last_token_is_revoked(self):
        # Review of issue 26: it started because a token existed; revoking
        # the last one opened it to everyone, as an admin.
        guard = GuardedResource(tree(), loopback_only=False, tokens=self.tokens,
                                may_be_open=False)
        self.add_token()
        self.assertUnauthorized((yield self.fetch(guard, b"/listjobs.json")))
        self.successResultOf(self.table.revoke_token("ci"))
        self.clock.advance(1)   # read again
        for path in PATHS:
            self.assertUnauthorized((yield self.fetch(guard, path)))

    @inlineCallbacks
    def test_malformed_or_wrong_bearer_secrets_are_refused(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS, tokens=self.tokens)
        self.add_token()
        for headers in ([(b"Authorization", b"Bearer")],
                        [(b"Authorization", b"Bearer ci.wrong")],
                        [(b"Authorization", b"Bearer \xff\xfe")],
                        [(b"Authorization", b"Bearer " + self.secret.encode()),
                         (b"Authorization", b"Bearer " + self.secret.encode())]):
            self.assertUnauthorized((yield self.fetch(guard, b"/listjobs.json",
                                                      headers=headers)))
        # The password still lets its user in beside the tokens.
        self.assertReached((yield self.fetch(guard, b"/listjobs.json",
                                             headers=[(b"Authorization", GOOD)])),
                           b"/listjobs.json")

    @inlineCallbacks
    def test_without_a_token_book_a_bearer_secret_is_no_credentials(self):
        guard = GuardedResource(tree(), credentials=CREDENTIALS)
        self.assertUnauthorized((yield self.fetch(guard, b"/listjobs.json", headers=[
            (b"Authorization", b"Bearer " + self.secret.encode())])))
