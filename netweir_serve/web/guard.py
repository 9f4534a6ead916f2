"""The front door: who may talk to the service at all.

Every request, whatever its path or method, passes three checks in turn
before any resource sees it:

1. It carries no ``Origin`` header: browsers add one to the requests web
   pages make, and no other client of the service needs it.
2. While the service listens on a loopback address, its ``Host`` header (if
   any) names ``localhost`` or a loopback address: a page that pointed a
   host name of its own at 127.0.0.1 (DNS rebinding) sends that name.
3. When the service has a username and password, it carries them with
   HTTP basic auth.

A refused request gets the service's JSON error answer: 403 for the first
two, 401 with a ``WWW-Authenticate`` challenge for the third.
"""

import binascii
import hashlib
import hmac
import functools
import ipaddress
import re
from base64 import b64decode

from twisted.web.resource import IResource, Resource
from zope.interface import implementer

from netweir_serve.web.answer import write_error

REALM = b'Basic realm="netweir-serve"'

_PORT = re.compile(r"[0-9]*")
_BRACKETED = re.compile(r"\[([^\[\]]*)\](?::([0-9]*))?")


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
    403, "Requests from web pages are refused: this one carries an Origin header."
)
REBOUND = Refusal(
    403,
    "The Host header must be localhost or a loopback address while the service "
    "listens on loopback: another host name is what a web page using DNS "
    "rebinding would send.",
)
UNAUTHORIZED = Refusal(
    401,
    "Authentication required: give the service's username and password with "
    "HTTP basic auth.",
    [(b"www-authenticate", REALM)],
)


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


def basic_credentials(authorization):
    """The ``(username, password)`` bytes an ``Authorization`` header value
    gives with the Basic scheme, or ``None`` if it isn't a well-formed one
    (other scheme, bad base64, no colon, not UTF-8). The password may
    contain colons: the first one ends the username."""
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
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


def _digest(value):
    return hashlib.sha256(value).digest()


@implementer(IResource)
class GuardedResource:
    """Wraps the site's root resource ``wrapped`` so that every request is
    checked (see this module) before ``wrapped`` or any resource under it
    sees it.

    ``credentials`` is ``None`` (no authentication) or a
    ``(username, password)`` pair of strings. ``loopback_only`` says the
    service listens on a loopback address, which turns the Host check on.
    """

    def __init__(self, wrapped, credentials=None, loopback_only=True):
        self._wrapped = wrapped
        self._loopback_only = loopback_only
        # Only digests are kept: equal-length values to compare in constant
        # time, which hides the lengths too, and nothing to leak in a repr.
        self._credentials = None
        if credentials is not None:
            username, password = credentials
            self._credentials = (
                _digest(username.encode("utf-8")),
                _digest(password.encode("utf-8")),
            )

    def check(self, request):
        """The ``Refusal`` to answer ``request`` with, or ``None`` if it
        may go on. Usable on its own by code outside this resource tree."""
        headers = request.requestHeaders
        if headers.hasHeader(b"origin"):
            return FROM_A_PAGE
        if self._loopback_only and not _host_is_loopback(headers.getRawHeaders(b"host")):
            return REBOUND
        if self._credentials is not None and not self._authorized(
            headers.getRawHeaders(b"authorization")
        ):
            return UNAUTHORIZED
        return None

    def _authorized(self, values):
        if values is None or len(values) != 1:
            return False
        given = basic_credentials(values[0])
        if given is None:
            return False
        username, password = given
        expected_username, expected_password = self._credentials
        # Both compared whatever the first gives, so that the time taken
        # doesn't tell a right username from a wrong one.
        username_ok = hmac.compare_digest(_digest(username), expected_username)
        password_ok = hmac.compare_digest(_digest(password), expected_password)
        return username_ok and password_ok

    # IResource. Site traverses from the root with getChildWithDefault, and
    # renders the root itself only when it is a leaf: checking in both
    # covers every path, "/" and "//x.json" included, once per request.

    @property
    def isLeaf(self):
        return self._wrapped.isLeaf

    def getChildWithDefault(self, name, request):
        refusal = self.check(request)
        if refusal is not None:
            return refusal
        return self._wrapped.getChildWithDefault(name, request)

    def putChild(self, path, child):
        self._wrapped.putChild(path, child)

    def render(self, request):
        refusal = self.check(request)
        if refusal is not None:
            return refusal.render(request)
        return self._wrapped.render(request)


def _host_is_loopback(values):
    # No Host at all is HTTP/1.0, which browsers don't send; two are a
    # malformed request, refused rather than guessed at.
    if values is None:
        return True
    return len(values) == 1 and is_loopback_host(values[0])
