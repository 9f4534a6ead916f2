"""The front door: who may talk to the service at all.

Every request, whatever its path or method, passes three checks in turn
before any resource sees it:

1. Its ``Origin`` header, if it has one, names the service itself: the
   scheme of the connection (``https`` on a TLS endpoint, else ``http``)
   and the host and port of the request's ``Host`` header. Browsers add an
   ``Origin`` to the requests web pages make; the service's own pages (the
   dashboard's buttons) send their own origin, any other page another one,
   and no other client of the service sends one at all.
2. On a loopback endpoint, its ``Host`` header (if any) names ``localhost``
   or a loopback address: a page that pointed a host name of its own at
   127.0.0.1 (DNS rebinding) sends that name.
3. When the service checks credentials (a password is set, or the job
   table has a token), it carries a username and password with HTTP basic
   auth, or a token's secret as ``Authorization: Bearer SECRET``, that a
   ``twisted.cred`` checker accepts: loopback included. With neither a
   password nor a token, a loopback service asks for nothing.

A refused request gets the service's JSON error answer: 403 for the first
two, 401 with a ``WWW-Authenticate`` challenge for the third, so that a
browser asks for the password.

Credentials go through ``twisted.cred``: a ``Portal`` whose realm gives
each identity the resource tree as it may enter it (web/gate.py:
``request.netweir_identity``, and the rule of each path), and credentials
checkers. ``PasswordChecker`` is the one for ``--username``/``--password``
(an admin of every project); access.tokens.TokenChecker the tokens'; any
other ``ICredentialsChecker`` of ``IUsernamePassword`` (a file of users and
hashed passwords, say) plugs in beside them, its users admins too.
"""

import binascii
import functools
import hashlib
import hmac
import ipaddress
import re
from base64 import b64decode

from twisted.cred import error as cred_error
from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import Anonymous, IUsernamePassword, UsernamePassword
from twisted.cred.portal import IRealm, Portal
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.guard import BasicCredentialFactory
from twisted.web.resource import IResource, Resource
from twisted.web.util import DeferredResource
from zope.interface import implementer

from netweir_serve.access.roles import ADMIN, NOBODY, Identity
from netweir_serve.access.tokens import BearerSecret, KdfBusy, token_name_of
from netweir_serve.web.answer import write_error
from netweir_serve.web.audit import client_address

log = Logger()

REALM_NAME = b"netweir-serve"
REALM = b'Basic realm="netweir-serve"'

_PORT = re.compile(r"[0-9]*")
_BRACKETED = re.compile(r"\[([^\[\]]*)\](?::([0-9]*))?")
_ORIGIN = re.compile(r"(https?)://([^/?#@\\\s]+)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Refusal(Resource):
    """A leaf resource answering any request with one JSON error."""

    isLeaf = True

    def __init__(self, code, message, headers=()):
        super().__init__()
        self.code = code
        self.message = message
        self.headers = tuple(headers)

    def render(self, request):
        for name, value in self.headers:
            request.setHeader(name, value)
        body = write_error(request, self.code, self.message)
        # Twisted drops a HEAD answer's body itself, but logs a warning each
        # time: a refused client shouldn't be able to fill the log with them.
        return b"" if request.method == b"HEAD" else body


FROM_A_PAGE = Refusal(
    403, "Requests from other web pages are refused: this one carries an Origin header"
    " that is not the service's own.",
)
REBOUND = Refusal(
    403,
    "The Host header must be localhost or a loopback address while the service "
    "listens on loopback: another host name is what a web page using DNS "
    "rebinding would send.",
)
UNAUTHORIZED = Refusal(
    401,
    "Authentication required: give the service's username and password, or a"
    " token's name and secret, with HTTP basic auth, or the secret as"
    " 'Authorization: Bearer SECRET'.",
    [(b"www-authenticate", REALM)],
)
TOO_MANY_FAILURES = Refusal(
    429, "Too many wrong credentials from this address: try again in a minute.",
    [(b"retry-after", b"60")],
)
CHECKER_FAILED = Refusal(500, "internal error checking the password; see the service's log")
CHECKS_BUSY = Refusal(503, "too many credentials are being checked at once: try again in a"
                           " moment", [(b"retry-after", b"1")])


def _split_host(text):
    """``(host, port)`` of a ``Host`` header or an origin's authority
    (``text``): the host lower case, IPv6 addresses still in brackets, the
    port a string (empty when not given); None when malformed."""
    bracketed = _BRACKETED.fullmatch(text)
    if bracketed:
        return "[" + bracketed.group(1).lower() + "]", bracketed.group(2) or ""
    host, _, port = text.partition(":")
    if not host or not _PORT.fullmatch(port):
        return None
    return host.lower(), port


@functools.lru_cache(maxsize=256)
def is_loopback_host(value):
    """Whether the ``Host`` header value ``value`` (bytes) names
    ``localhost`` or a loopback address, with or without a port.

    IPv6 addresses count only in brackets (``[::1]:6800``), as in URLs;
    IPv4 addresses only in full dotted-quad form (``127.0.0.2``).
    """
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return False
    bracketed = _BRACKETED.fullmatch(text)
    if bracketed:
        return _is_loopback_ip(bracketed.group(1), ipaddress.IPv6Address)
    host, _, port = text.partition(":")
    if not _PORT.fullmatch(port):
        return False
    return host.lower() == "localhost" or _is_loopback_ip(host, ipaddress.IPv4Address)


def _is_loopback_ip(text, kind):
    try:
        return kind(text).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)
def is_own_origin(origin, host, secure):
    """Whether ``origin`` (an ``Origin`` header value, bytes) is the
    service's own for a request whose ``Host`` header is ``host`` (bytes,
    or None when it has none) on a connection that is ``secure`` (TLS):
    the same scheme, the same host (ignoring case) and the same port, a
    port left out being the scheme's default, as browsers leave it out."""
    if host is None:
        return False
    try:
        origin_text, host_text = origin.decode("ascii"), host.decode("ascii")
    except UnicodeDecodeError:
        return False
    match = _ORIGIN.fullmatch(origin_text)
    if match is None:
        return False  # "null", a path, credentials, another scheme...
    scheme, authority = match.groups()
    if scheme != ("https" if secure else "http"):
        return False
    given, served = _split_host(authority), _split_host(host_text)
    if given is None or served is None:
        return False
    default = str(_DEFAULT_PORTS[scheme])
    return (given[0], given[1] or default) == (served[0], served[1] or default)


def basic_credentials(authorization):
    """The ``(username, password)`` bytes an ``Authorization`` header value
    gives with the Basic scheme, or ``None`` if it isn't a well-formed one
    (other scheme, bad base64, no colon, not UTF-8). The password may
    contain colons: the first one ends the username."""
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    return _decode_basic(token)


def _decode_basic(token):
    try:
        pair = b64decode(token.strip(), validate=True)
        # RFC 7617 has credentials in UTF-8; other bytes can't be ours.
        pair.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    username, colon, password = pair.partition(b":")
    if not colon:
        return None
    return username, password


class StrictBasicCredentialFactory(BasicCredentialFactory):
    """Twisted's basic auth credential factory, decoding as RFC 7617 says:
    padded base64 and UTF-8, or no credentials at all (Twisted's own pads
    and skips what isn't base64)."""

    def decode(self, response, request):
        pair = _decode_basic(response)
        if pair is None:
            raise cred_error.LoginFailed("malformed basic credentials")
        return UsernamePassword(*pair)


def _digest(value):
    return hashlib.sha256(value).digest()


@implementer(ICredentialsChecker)
class PasswordChecker:
    """Accepts one ``username`` and ``password`` (strings), compared in
    constant time. Only their digests are kept: values of equal length to
    compare, which hides the lengths too, and nothing to leak in a repr."""

    credentialInterfaces = (IUsernamePassword,)

    def __init__(self, username, password):
        self._username = _digest(username.encode("utf-8"))
        self._password = _digest(password.encode("utf-8"))

    def requestAvatarId(self, credentials):
        # Both compared whatever the first gives, so that the time taken
        # doesn't tell a right username from a wrong one. Never
        # credentials.checkPassword: it compares with ==.
        username_ok = hmac.compare_digest(_digest(credentials.username), self._username)
        password_ok = hmac.compare_digest(_digest(credentials.password), self._password)
        if username_ok and password_ok:
            return defer.succeed(credentials.username)
        return defer.fail(cred_error.UnauthorizedLogin())


@implementer(ICredentialsChecker)
class CheckerChain:
    """Asks ``checkers`` (of the same credentials) in turn: the first to
    accept lets the user in. A Portal keeps one checker per kind of
    credentials, so several of one kind sit behind one of these."""

    def __init__(self, checkers, interface):
        self.checkers = tuple(checkers)
        self.credentialInterfaces = (interface,)

    def requestAvatarId(self, credentials, _start=0):
        if _start == len(self.checkers):
            return defer.fail(cred_error.UnauthorizedLogin())
        d = defer.maybeDeferred(self.checkers[_start].requestAvatarId, credentials)

        def next_one(failure):
            failure.trap(cred_error.UnauthorizedLogin, cred_error.UnhandledCredentials)
            return self.requestAvatarId(credentials, _start + 1)

        return d.addErrback(next_one)


def portal_for(resource, checkers):
    """A Portal letting in whom ``checkers`` accept, to ``resource``."""
    by_interface = {}
    for checker in checkers:
        for interface in checker.credentialInterfaces:
            by_interface.setdefault(interface, []).append(checker)
    portal = Portal(SiteRealm(resource))
    for interface, found in by_interface.items():
        # Registered for this interface alone: a checker of several would
        # otherwise take over the others' chains.
        portal.registerChecker(
            found[0] if len(found) == 1 else CheckerChain(found, interface), interface)
    return portal


@implementer(IRealm)
class SiteRealm:
    """Every identity that gets in gets the ``resource`` tree as it may
    enter it (web/gate.Admitted). A token's checker gives its
    access.roles.Identity as the avatar id; any other checker a user name,
    an admin of every project."""

    def __init__(self, resource):
        self.resource = resource

    def requestAvatar(self, avatarId, mind, *interfaces):
        from .gate import Admitted

        if IResource not in interfaces:
            raise NotImplementedError("netweir-serve's realm gives only web resources")
        return IResource, Admitted(self.resource, identity_of_avatar(avatarId)), lambda: None


def identity_of_avatar(avatar_id):
    """The Identity a checker's avatar id stands for."""
    if isinstance(avatar_id, Identity):
        return avatar_id
    if isinstance(avatar_id, bytes):
        avatar_id = avatar_id.decode("utf-8", "replace")
    return Identity(str(avatar_id), ADMIN)


@implementer(IResource)
class GuardedResource:
    """Wraps the site's root resource ``wrapped`` so that every request is
    checked (see this module) before ``wrapped`` or any resource under it
    sees it.

    ``credentials`` is ``None`` or a ``(username, password)`` pair of
    strings, checked by a ``PasswordChecker``; ``checkers`` are more
    ``ICredentialsChecker`` providers. ``tokens`` is None or a pair
    (access.tokens.TokenBook, its TokenChecker): while the book has no
    token, it asks nobody for anything. With none of them, nobody is asked
    for a password. ``loopback_only`` says the request came on a loopback
    endpoint, which turns the Host check on. ``throttle`` (an
    access.throttle.LoginThrottle, shared by every endpoint's guard)
    refuses an address that gave wrong credentials too often (429).
    """

    def __init__(self, wrapped, credentials=None, loopback_only=True, checkers=(),
                 tokens=None, may_be_open=True, throttle=None):
        self._wrapped = wrapped
        self._throttle = throttle
        self._loopback_only = loopback_only
        # Whether, with no password and no token, it lets everyone in: a
        # loopback or socket endpoint, or one started --insecure-no-auth.
        # One other machines reach that started because a token existed
        # stays shut when the last token goes (revoked, say).
        self._may_be_open = may_be_open
        self._shut_told = False
        checkers = list(checkers)
        if credentials is not None:
            checkers.insert(0, PasswordChecker(*credentials))
        # Without a token, the password's portal (or none); with one, the
        # tokens' checker beside the others.
        self._portal = portal_for(wrapped, checkers) if checkers else None
        self._book = None
        if tokens is not None:
            self._book, token_checker = tokens
            self._token_portal = portal_for(wrapped, checkers + [token_checker])
        self._open = _admitted(wrapped, NOBODY)
        self._factory = StrictBasicCredentialFactory(REALM_NAME)

    def check(self, request):
        """The ``Refusal`` to answer ``request`` with, or ``None`` if it may
        go on. Usable on its own by code outside this resource tree, with
        checkers that answer at once (``PasswordChecker`` does; for one that
        answers later, use ``screen`` and then ``authorized``)."""
        entered = self._enter(request)
        if isinstance(entered, _Waiting):
            raise RuntimeError("a credentials checker answers later: use authorized()")
        return entered if isinstance(entered, Refusal) else None

    def screen(self, request):
        """The ``Refusal`` the Origin and Host checks answer ``request``
        with, or ``None`` if it may go on to the password check."""
        headers = request.requestHeaders
        origin = headers.getRawHeaders(b"origin")
        host = headers.getRawHeaders(b"host")
        if origin is not None and not _origin_is_own(origin, host, _secure(request)):
            return FROM_A_PAGE
        if self._loopback_only and not _host_is_loopback(host):
            return REBOUND
        return None

    def authorized(self, request):
        """A Deferred of the resource tree ``request`` may enter (as its
        identity: web/gate.Admitted), or of the ``Refusal`` to answer it
        with (401, or 500 when a checker fails)."""
        if self._book is None:
            return self._login(self._portal, request)
        d = self._book.current()
        return d.addCallbacks(
            lambda tokens: self._login(self._token_portal if tokens else self._portal,
                                       request),
            self._refused)

    def _login(self, portal, request):
        if portal is None:
            if not self._may_be_open:
                if not self._shut_told:
                    self._shut_told = True
                    log.warn("no token and no password is left: this endpoint, which other"
                             " machines reach, answers every request 401 until a token is"
                             " added (netweir-serve token add)")
                return defer.succeed(UNAUTHORIZED)
            return defer.succeed(self._open)
        d = portal.login(self._credentials(request), None, IResource)
        return d.addCallbacks(lambda avatar: avatar[1], self._refused)

    def _credentials(self, request):
        values = request.requestHeaders.getRawHeaders(b"authorization")
        if values is None:
            return Anonymous()
        scheme, _, response = values[0].strip().partition(b" ")
        if len(values) == 1 and scheme.lower() == b"bearer" and self._book is not None \
                and response.strip():
            return BearerSecret(response.strip())
        if len(values) != 1 or scheme.lower() != self._factory.scheme:
            return _NO_CREDENTIALS
        try:
            return self._factory.decode(response, request)
        except cred_error.LoginFailed:
            return _NO_CREDENTIALS

    @staticmethod
    def _refused(failure):
        if failure.check(cred_error.LoginFailed, cred_error.Unauthorized):
            return UNAUTHORIZED
        if failure.check(KdfBusy):
            return CHECKS_BUSY
        log.failure("a credentials checker failed", failure)
        return CHECKER_FAILED

    def _enter(self, request):
        """The resource to go on with: a Refusal, the tree, or a
        DeferredResource while a checker has not answered yet."""
        refusal = self.screen(request)
        if refusal is not None:
            return refusal
        if self._throttle is not None:
            if self._throttle.refused(client_address(request)):
                return TOO_MANY_FAILURES
        if self._is_open():
            # What the login below would come to, without its Deferreds:
            # nothing to check (most requests of a loopback service).
            return self._open
        # Checkers in memory or in a file answer at once: then so does this.
        answered = []
        d = self.authorized(request).addCallback(self._counted, request)
        d.addCallback(lambda found: answered.append(found) or found)
        return answered[0] if answered else _Waiting(d)

    def _is_open(self):
        """Whether ``authorized`` would let anyone in as it stands: no
        password and no token (the tokens read lately, so that a token
        added elsewhere is seen as soon as ``authorized`` would see it),
        on an endpoint that may be open."""
        if not self._may_be_open or self._portal is not None:
            return False
        return self._book is None or self._book.fresh() == {}

    def _counted(self, found, request):
        """``found``, counted as a failure of its address when it is a 401
        to a guess (web/guard's throttle); a 429 from the failure that
        passes the limit on."""
        if found is UNAUTHORIZED and self._throttle is not None \
                and self._is_guess(self._credentials(request)):
            if self._throttle.failed(client_address(request)):
                return TOO_MANY_FAILURES
        return found

    @staticmethod
    def _is_guess(credentials):
        """Whether wrong ``credentials`` were a guess at a secret: a username
        and password, or a token's secret (NAME.SECRET). A malformed header,
        or a Bearer value that names no token, could match nothing and cost
        no KDF: not counted, so a client's mistakes in form do not lock
        its address out (the throttle is for guessing)."""
        if IUsernamePassword.providedBy(credentials):
            return True
        if isinstance(credentials, BearerSecret):
            try:
                return token_name_of(credentials.secret.decode("utf-8")) is not None
            except UnicodeDecodeError:
                return False
        return False

    # IResource. Site traverses from the root with getChildWithDefault, and
    # renders the root itself only when it is a leaf: checking in both
    # covers every path, "/" and "//x.json" included, once per request.

    @property
    def isLeaf(self):
        return self._wrapped.isLeaf

    def getChildWithDefault(self, name, request):
        entered = self._enter(request)
        if isinstance(entered, _Waiting):
            # Traversed again from the tree once a checker answers.
            request.postpath.insert(0, request.prepath.pop())
            return entered.resource()
        if isinstance(entered, Refusal):
            return entered
        return entered.getChildWithDefault(name, request)

    def putChild(self, path, child):
        self._wrapped.putChild(path, child)

    def render(self, request):
        entered = self._enter(request)
        if isinstance(entered, _Waiting):
            return entered.resource().render(request)
        return entered.render(request)


def _admitted(tree, identity):
    from .gate import Admitted

    return Admitted(tree, identity)


class _Waiting:
    """A login whose checker answers later."""

    def __init__(self, deferred):
        self.deferred = deferred

    def resource(self):
        return DeferredResource(self.deferred)


class _NoCredentials:
    """What a malformed Authorization header gives: no checker handles it."""


_NO_CREDENTIALS = _NoCredentials()


def _origin_is_own(values, host, secure):
    if len(values) != 1 or host is None or len(host) != 1:
        return False
    return is_own_origin(values[0], host[0], secure)


def _secure(request):
    # A test's DummyRequest has no isSecure; it is no TLS connection either.
    is_secure = getattr(request, "isSecure", None)
    return bool(is_secure and is_secure())


def _host_is_loopback(values):
    # No Host at all is HTTP/1.0, which browsers don't send; two are a
    # malformed request, refused rather than guessed at.
    if values is None:
        return True
    return len(values) == 1 and is_loopback_host(values[0])
