"""Where the service listens: Twisted endpoint descriptions (``--listen``).

A description is what ``twisted.internet.endpoints.serverFromString`` and
``twistd web --listen`` take: a type, then ``:``-separated arguments,
``key=value`` for the named ones and ``\\`` escaping a ``:``, ``=`` or
``\\``. The service listens on five types:

- ``tcp:PORT[:interface=ADDRESS][:backlog=N]`` (every IPv4 address unless
  ``interface`` says otherwise; an IPv6 ``interface`` such as ``\\:\\:1``
  works too), and ``tcp6:PORT[:interface=ADDRESS]`` (every IPv6 address);
- ``ssl:PORT:privateKey=KEY.pem[:certKey=CERT.pem][:extraCertChain=CHAIN.pem]
  [:dhParameters=DH.pem][:sslmethod=METHOD][:interface=...][:backlog=N]``,
  HTTPS with Twisted's TLS, the options of Twisted's ``ssl:``;
- ``unix:PATH[:mode=660][:lockfile=1][:backlog=N]``;
- ``systemd:domain=INET|INET6|UNIX:index=N`` (or ``name=NAME``), a socket
  systemd passed on (socket activation, ``LISTEN_FDS``).

This module only reads descriptions (standard library only, so that
parsing options loads neither Twisted's endpoints nor TLS) and opens
endpoints for them (``open_endpoint``, which imports what it needs).

Who may connect decides what the guard asks (``Listener.reach``): a TCP or
TLS endpoint on a loopback address is this machine's only, and its Host
header is checked; one on any other address lets other machines in, so it
needs a password (or ``--insecure-no-auth``); a Unix socket is guarded by
its file's mode, like any file.
"""

import ipaddress
import os
import socket
from dataclasses import dataclass

# Twisted's default is 50: bursts of connections from dashboards and
# scripts wait in the kernel's queue instead of being refused.
LISTEN_BACKLOG = 1024

KINDS = ("tcp", "tcp6", "ssl", "unix", "systemd")
_NAMED = {
    "tcp": ("interface", "backlog"),
    "tcp6": ("interface", "backlog"),
    "ssl": ("privateKey", "certKey", "extraCertChain", "dhParameters", "sslmethod",
            "interface", "backlog"),
    "unix": ("mode", "lockfile", "backlog"),
    "systemd": ("domain", "index", "name"),
}
_TLS_FILES = ("privateKey", "certKey", "extraCertChain", "dhParameters")
_DOMAINS = ("INET", "INET6", "UNIX")

# Listener.reach
LOOPBACK, PUBLIC, LOCAL_FILE, UNKNOWN = "loopback", "public", "unix socket", "unknown"


class ListenError(ValueError):
    """A description the service cannot listen on; the message says why."""


def is_loopback(address):
    """Whether only programs on this machine can reach ``address``."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def split_description(text):
    """``(positional, named)`` of a description, by Twisted's grammar: the
    first ``=`` of a part makes it named; ``\\`` takes the next character
    as it is."""
    parts, current, key, escaped = [], "", None, False
    for char in text:
        if escaped:
            current, escaped = current + char, False
        elif char == "\\":
            escaped = True
        elif char == ":":
            parts.append((key, current))
            current, key = "", None
        elif char == "=" and key is None:
            key, current = current, ""
        else:
            current += char
    parts.append((key, current))
    positional = [value for key, value in parts if key is None]
    named = {}
    for key, value in parts:
        if key is not None:
            if key in named:
                raise ListenError(f"--listen {text}: {key}= is given twice")
            named[key] = value
    return positional, named


def escape(value):
    """``value`` as it goes in a description."""
    return "".join("\\" + c if c in ":=\\" else c for c in value)


@dataclass(frozen=True)
class Listener:
    """One endpoint, checked: ``description`` as given, its ``kind`` (one
    of KINDS), ``args`` (the positional arguments after the kind) and
    ``named`` (the key=value ones, as pairs)."""

    description: str
    kind: str
    args: tuple = ()
    named: tuple = ()

    def option(self, key, default=None):
        return dict(self.named).get(key, default)

    @property
    def tls(self):
        return self.kind == "ssl"

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    @property
    def interface(self):
        return self.option("interface", "::" if self.kind == "tcp6" else "")

    @property
    def port(self):
        return int(self.args[0]) if self.kind in ("tcp", "tcp6", "ssl") else None

    @property
    def backlog(self):
        return int(self.option("backlog", LISTEN_BACKLOG))

    @property
    def reach(self):
        """Who can connect: LOOPBACK (this machine, by TCP), PUBLIC (other
        machines too), LOCAL_FILE (a Unix socket), or UNKNOWN until a
        socket systemd passed on is looked at (``adopted_reach``)."""
        if self.kind == "unix" or (self.kind == "systemd"
                                   and self.option("domain") == "UNIX"):
            return LOCAL_FILE
        if self.kind == "systemd":
            return UNKNOWN
        return LOOPBACK if is_loopback(self.interface) else PUBLIC

    def twisted_description(self):
        """The description for serverFromString, with the service's backlog
        unless one was given."""
        if self.kind == "systemd" or "backlog" in dict(self.named):
            return self.description
        return f"{self.description}:backlog={LISTEN_BACKLOG}"

    def shown(self):
        """How the log names it."""
        if self.kind == "unix":
            return f"unix:{self.args[0]}"
        if self.kind == "systemd":
            return self.description
        host = self.interface or "0.0.0.0"
        host = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{host}:{self.port}/"


def tcp_listener(bind, port):
    """The Listener of ``--bind ADDRESS --port N``."""
    return parse_listener(f"tcp:{port}:interface={escape(bind)}")


def parse_listener(text):
    """The Listener for description ``text``; ListenError saying what is
    wrong with it."""
    if not text:
        raise ListenError("--listen needs a description, such as tcp:6800:interface=127.0.0.1")
    positional, named = split_description(text)
    kind = positional[0]
    if kind not in KINDS:
        raise ListenError(f"--listen {text}: the service listens on tcp:, tcp6:, ssl:, unix:"
                          f" and systemd: endpoints, not {kind}:")
    args = positional[1:]
    unknown = [key for key in named if key not in _NAMED[kind]]
    if unknown:
        raise ListenError(f"--listen {text}: {kind}: takes no {unknown[0]}= (it takes"
                          f" {', '.join(k + '=' for k in _NAMED[kind])})")
    expected = 0 if kind == "systemd" else 1
    if len(args) != expected:
        what = {"unix": "a socket path", "systemd": "no positional argument"}.get(kind, "a port")
        raise ListenError(f"--listen {text}: {kind}: takes {what}")
    if kind in ("tcp", "tcp6", "ssl"):
        _check_number(text, "port", args[0], 0, 65535)
    if "backlog" in named:
        _check_number(text, "backlog", named["backlog"], 1, 1 << 20)
    if kind == "unix":
        _check_unix(text, args[0], named)
    if kind == "ssl":
        _check_tls_files(text, named)
    if kind == "systemd":
        _check_systemd(text, named)
    return Listener(text, kind, tuple(args), tuple(named.items()))


def _check_number(text, what, value, low, high):
    if not value.isdigit() or not low <= int(value) <= high:
        raise ListenError(f"--listen {text}: the {what} must be a whole number from {low}"
                          f" to {high}, not {value!r}")


def _check_unix(text, path, named):
    if not path:
        raise ListenError(f"--listen {text}: unix: takes a socket path")
    mode = named.get("mode", "666")
    try:
        int(mode, 8)
    except ValueError:
        raise ListenError(f"--listen {text}: mode= is an octal file mode such as 660,"
                          f" not {mode!r}") from None
    if named.get("lockfile", "1") not in ("0", "1"):
        raise ListenError(f"--listen {text}: lockfile= is 0 or 1")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ListenError(f"--listen {text}: the folder {folder} does not exist")


def _check_tls_files(text, named):
    named.setdefault("privateKey", "server.pem")
    for key in _TLS_FILES:
        path = named.get(key)
        if path is not None and not os.path.isfile(path):
            raise ListenError(f"--listen {text}: {key}={path}: no such file")
        if path is not None and not os.access(path, os.R_OK):
            raise ListenError(f"--listen {text}: {key}={path}: cannot be read")


def _check_systemd(text, named):
    if named.get("domain") not in _DOMAINS:
        raise ListenError(f"--listen {text}: systemd: takes domain=INET, INET6 or UNIX")
    if ("index" in named) == ("name" in named):
        raise ListenError(f"--listen {text}: systemd: takes index=N or name=NAME (one of them)")
    if "index" in named and not named["index"].isdigit():
        raise ListenError(f"--listen {text}: index= is a whole number")


def adopted_reach(endpoint, listener):
    """The ``reach`` of a systemd socket, from the address it is bound to
    (``endpoint`` an AdoptedStreamServerEndpoint)."""
    if listener.reach != UNKNOWN:
        return listener.reach
    probe = socket.fromfd(endpoint.fileno, endpoint.addressFamily, socket.SOCK_STREAM)
    try:
        address = probe.getsockname()
    finally:
        probe.close()
    if endpoint.addressFamily == socket.AF_UNIX:
        return LOCAL_FILE
    return LOOPBACK if is_loopback(address[0]) else PUBLIC


def open_endpoint(listener, reactor):
    """``(endpoint, tls)`` for ``listener``: an IStreamServerEndpoint on
    ``reactor``, and for ssl: the ``TLSFiles`` the factory must speak TLS
    with (the endpoint itself is then plain TCP: the connection caps come
    before the TLS handshake), else None. Raises ListenError when the
    endpoint cannot be made (a systemd socket that was not passed on, TLS
    files that do not load)."""
    from twisted.internet import endpoints

    if listener.kind == "ssl":
        from .tls import TLSError, TLSFiles

        try:
            tls = TLSFiles(dict(listener.named))
        except TLSError as e:
            raise ListenError(f"--listen {listener.description}: {e}") from None
        endpoint = endpoints.TCP4ServerEndpoint(reactor, listener.port, listener.backlog,
                                                listener.interface)
        return endpoint, tls
    try:
        return endpoints.serverFromString(reactor, listener.twisted_description()), None
    except (KeyError, IndexError):
        raise ListenError(f"--listen {listener.description}: systemd passed on no such"
                          " socket (is the service started by a socket unit, with"
                          " LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID set?)") from None
    except (ValueError, OSError) as e:
        raise ListenError(f"--listen {listener.description}: {e}") from None
