"""HTTPS with Twisted's own TLS: the key and certificate files of an ``ssl:``
endpoint, read again on demand (SIGHUP) for the connections that follow.

Imported only when an ``ssl:`` endpoint is asked for: it loads pyOpenSSL,
which the service otherwise keeps out (see cli.py).

The options are those of Twisted's ``ssl:`` endpoint description and mean
the same: ``privateKey`` (a PEM file; ``server.pem`` unless given),
``certKey`` (the certificate, PEM; the key file unless given),
``extraCertChain`` (the intermediate certificates, PEM), ``dhParameters``
and ``sslmethod`` (a method of ``OpenSSL.SSL``, such as
``TLS_SERVER_METHOD``). The context is Twisted's ``CertificateOptions``:
its defaults for protocol versions and ciphers.
"""

import re

from OpenSSL import SSL
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLContextFactory
from twisted.logger import Logger
from twisted.python.filepath import FilePath
from zope.interface import implementer

log = Logger()

_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----",
                          re.S)


class TLSError(ValueError):
    """Files that do not make a TLS context; the message says which."""


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TLSError(f"{what} {path}: {e.strerror}") from None


def load_options(named):
    """A ``CertificateOptions`` from the files ``named`` gives (the
    description's key=value options); TLSError when they do not make one."""
    key_path = named.get("privateKey", "server.pem")
    cert_path = named.get("certKey") or key_path
    key, cert = _read(key_path, "privateKey"), _read(cert_path, "certKey")
    try:
        pair = ssl.PrivateCertificate.loadPEM(cert + b"\n" + key)
    except Exception as e:
        raise TLSError(f"the key {key_path} and certificate {cert_path} do not load"
                       f" together: {_reason(e)}") from None
    chain = None
    if named.get("extraCertChain"):
        found = _CERTIFICATE.findall(_read(named["extraCertChain"], "extraCertChain"))
        if not found:
            raise TLSError(f"extraCertChain {named['extraCertChain']} holds no PEM certificate")
        try:
            chain = [ssl.Certificate.loadPEM(pem).original for pem in found]
        except Exception as e:
            raise TLSError(f"extraCertChain {named['extraCertChain']}: {_reason(e)}") from None
    extra = {}
    if named.get("dhParameters"):
        _read(named["dhParameters"], "dhParameters")
        extra["dhParameters"] = ssl.DiffieHellmanParameters.fromFile(
            FilePath(named["dhParameters"]))
    if named.get("sslmethod"):
        method = getattr(SSL, named["sslmethod"], None)
        if not isinstance(method, int):
            raise TLSError(f"sslmethod={named['sslmethod']} is no method of OpenSSL.SSL")
        extra["method"] = method
    try:
        options = ssl.CertificateOptions(privateKey=pair.privateKey.original,
                                         certificate=pair.original, extraCertChain=chain,
                                         **extra)
        options.getContext()
    except Exception as e:
        raise TLSError(f"the TLS context cannot be made: {_reason(e)}") from None
    return options


def _reason(error):
    text = str(error) or type(error).__name__
    return text if len(text) < 300 else text[:300] + "..."


@implementer(IOpenSSLContextFactory)
class TLSFiles:
    """The TLS context of one ``ssl:`` endpoint, for Twisted's
    ``TLSMemoryBIOFactory``: each new connection gets the context loaded
    last. ``reload()`` reads the files again; a connection already open
    keeps the context it started with. Raises TLSError at once when the
    files do not make a context."""

    def __init__(self, named):
        self.named = dict(named)
        self._options = load_options(self.named)

    def getContext(self):
        return self._options.getContext()

    def reload(self):
        """Reads the files again. Returns whether they made a context; when
        they did not, the one before stays, and the reason is logged."""
        try:
            options = load_options(self.named)
        except TLSError as e:
            log.error("TLS files for {files} not reloaded, the ones before stay in use: {e}",
                      files=self.files(), e=str(e))
            return False
        self._options = options
        log.info("TLS files reloaded for new connections: {files}", files=self.files())
        return True

    def files(self):
        return ", ".join(self.named[k] for k in ("privateKey", "certKey", "extraCertChain")
                         if self.named.get(k))
