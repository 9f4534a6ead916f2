"""Tokens: their secrets, the salted hashes kept of them, and checking a
secret a request gives, with a KDF at most once a minute per secret.

A secret is ``NAME.RANDOM`` (43 characters of URL-safe base64 from
``secrets``): its name says which token to check it against, so a Bearer
secret alone finds its token, and a basic auth pair (name, secret) is
checked the same way. The job table keeps ``scrypt$N$r$p$SALT$HASH`` (hex),
never the secret.

``TokenBook`` keeps the table's tokens in memory, read again at most a
second after the last read when asked (another process's ``token revoke``
on an SQLite table is seen within a second) and at once when another node
says a token changed (a TOKEN notice on PostgreSQL). ``TokenChecker`` is
the twisted.cred checker of token credentials.
"""

import hashlib
import hmac
import os
import secrets
import sqlite3
from collections import OrderedDict

from twisted.cred import error as cred_error
from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IUsernamePassword
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

from ..names import fold
from ..store.notices import CHANGED, TOKEN
from .roles import Identity

log = Logger()

# scrypt's cost: 16 MB and about 50 ms a check; once per secret per minute.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1
SALT_BYTES = 16
SECRET_BYTES = 32

# How long a secret's verified hash is trusted without the KDF again.
VERIFIED_FOR = 60.0
# How long the tokens read from the table are trusted without reading again.
READ_FOR = 1.0
# How long the last tokens read stand while the table cannot be read again
# (a connection down): past it, requests are refused rather than a token
# revoked meanwhile elsewhere still let in.
STALE_FOR = 30.0
# A secret that matches no token read at least this long ago has the table
# read again at once (a token added, or rotated, by another process a
# moment ago works at once), and is checked again.
READ_AGAIN_AFTER = 0.1
# At most one last_used write per token in this long.
USE_RECORDED_EVERY = 60.0
# Checks remembered at most (the oldest forgotten first): wrong secrets
# sent by the thousand cost memory no more than this.
MAX_REMEMBERED = 4096
MAX_REMEMBERED_FAILED = 1024


def new_secret(name):
    """A new secret for the token ``name``."""
    return f"{name}.{secrets.token_urlsafe(SECRET_BYTES)}"


def token_name_of(secret):
    """The token name a secret starts with, or None if it has none."""
    name, dot, rest = secret.rpartition(".")
    return name if dot and name and rest else None


def hash_secret(secret, salt=None):
    """The salted hash the job table keeps of ``secret`` (a string)."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.scrypt(secret.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R,
                            p=SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def secret_matches(secret, stored):
    """Whether ``secret`` is the one ``stored`` (hash_secret's) was made of.
    Runs the KDF: slow on purpose."""
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        given = hashlib.scrypt(secret.encode("utf-8"), salt=bytes.fromhex(salt), n=int(n),
                               r=int(r), p=int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(given, bytes.fromhex(digest))


class IBearerSecret(Interface):
    """Credentials of ``Authorization: Bearer SECRET``: ``secret`` (bytes)."""


@implementer(IBearerSecret)
class BearerSecret:
    def __init__(self, secret):
        self.secret = secret

    def __repr__(self):
        return "BearerSecret(***)"


class TokenBook:
    """The tokens of ``store`` (an ITokenStore) in memory, for checking.

    ``clock`` (IReactorTime) times the reads; ``wall`` (its ``seconds()``
    epoch time) says what has expired and when a token was last used."""

    def __init__(self, store, clock, wall):
        self._store = store
        self._clock = clock
        self._wall = wall
        self._tokens = None          # {folded name: TokenRecord} once read
        self._read_at = None
        self._good_at = None         # clock time of the last read that worked
        self._waiting = []           # Deferreds of the read under way
        self._recorded = {}          # {folded name: clock time of the last write}
        on_notice = getattr(store, "on_notice", None)
        if on_notice is not None:
            on_notice(self._heard)

    def _heard(self, notice):
        if notice.kind in (TOKEN, CHANGED):
            self._read_at = None

    def fresh(self, read_for=READ_FOR):
        """The tokens ``current`` would answer at once ({folded name:
        TokenRecord}), or None when it would read them again first."""
        if self._tokens is not None and self._read_at is not None \
                and self._clock.seconds() - self._read_at < read_for:
            return self._tokens
        return None

    def current(self, read_for=READ_FOR):
        """A Deferred of {folded name: TokenRecord}, read again if the last
        read is ``read_for`` seconds old (or a notice said a token
        changed). A read that fails keeps the last tokens read (logged), or
        fails if none."""
        tokens = self.fresh(read_for)
        if tokens is not None:
            return defer.succeed(tokens)
        now = self._clock.seconds()
        d = defer.Deferred()
        self._waiting.append(d)
        if len(self._waiting) == 1:
            self._store.tokens().addBoth(self._read, now)
        return d

    def _read(self, result, started):
        if isinstance(result, Failure):
            stale = self._good_at is None or started - self._good_at > STALE_FOR
            if self._tokens is None:
                log.failure("the tokens could not be read", result)
            elif stale:
                # A token revoked meanwhile on another node must not work on
                # here for as long as the table is out of reach: shut.
                log.failure(f"the tokens could not be read again, and the last read is"
                            f" over {STALE_FOR:g} s old: requests are refused until they"
                            " can be read", result)
            else:
                log.failure("the tokens could not be read again; the last read stands", result)
                result = self._tokens
        else:
            result = self._tokens = {fold(t.name): t for t in result}
            self._read_at = self._good_at = started
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            # (Each waiter gets a Failure of its own: one handled by one
            # request is not another's.)
            d.callback(result) if not isinstance(result, Failure) else d.errback(
                Failure(result.value, result.type, result.getTracebackObject()))

    def hashes_of(self, record):
        """The hashes a secret of ``record``'s token may match now: none
        once it has expired; its previous one too while a rotation's grace
        lasts."""
        now = self._wall.seconds()
        if record.expires is not None and record.expires <= now:
            return []
        hashes = [record.hash]
        if record.previous_hash is not None and record.previous_until is not None \
                and record.previous_until > now:
            hashes.append(record.previous_hash)
        return hashes

    def still_admits(self):
        """A Deferred of a function saying whether a token's Identity still
        stands (its token not revoked, not expired, its role and projects
        as they were): what an open /events stream is held to."""
        # Read again if not just read: asked twice a second at most.
        return self.current(READ_AGAIN_AFTER).addCallback(lambda tokens: lambda identity: (
            not identity.token or self._stands(identity, tokens.get(fold(identity.who)))))

    def _stands(self, identity, record):
        return (record is not None and bool(self.hashes_of(record))
                and Identity.of(record.name, record.role, record.projects, True) == identity)

    def used(self, record):
        """Notes a use of ``record``'s token: written at most once a
        USE_RECORDED_EVERY per token (a failure to write is logged)."""
        key = fold(record.name)
        now = self._clock.seconds()
        last = self._recorded.get(key)
        if last is not None and now - last < USE_RECORDED_EVERY:
            return
        self._recorded[key] = now
        self._store.tokens_used({record.name: self._wall.seconds()}).addErrback(
            lambda f: log.failure("the use of token {name} could not be recorded", f,
                                  name=record.name))


@implementer(ICredentialsChecker)
class TokenChecker:
    """Lets in the holder of a live token's secret, given as a Bearer
    secret or as basic auth (the token's name, its secret); the avatar id
    is the token's roles.Identity.

    ``kdf_aside(function, *args)`` runs the KDF and gives a Deferred of
    its result (a thread in the service: 50 ms each is not for the
    reactor's thread); at once if not given. ``clock`` times how long a
    check is remembered: by a key the secret cannot be read back from
    (an HMAC under a key of this process's own), with the hash it was
    checked against, so a rotation or a revocation is never missed."""

    credentialInterfaces = (IBearerSecret, IUsernamePassword)

    def __init__(self, book, clock, kdf_aside=None):
        self._book = book
        self._clock = clock
        self._kdf_aside = kdf_aside or (lambda f, *args: defer.maybeDeferred(f, *args))
        self._key = secrets.token_bytes(32)
        self._checked = OrderedDict()    # {(secret's HMAC, hash): (matched, clock time)}
        # Wrong secrets apart, in less room: a stream of them (each new)
        # never pushes a right one out, which would cost it the KDF again.
        self._failed = OrderedDict()

    def requestAvatarId(self, credentials):
        if IBearerSecret.providedBy(credentials):
            secret, name = credentials.secret, None
        else:
            secret, name = credentials.password, credentials.username
        try:
            secret = secret.decode("utf-8")
            name = token_name_of(secret) if name is None else name.decode("utf-8")
        except UnicodeDecodeError:
            return defer.fail(cred_error.UnauthorizedLogin())
        if name is None or token_name_of(secret) is None \
                or fold(token_name_of(secret)) != fold(name):
            return defer.fail(cred_error.UnauthorizedLogin())
        return self._book.current().addCallback(self._check, fold(name), secret)

    def _check(self, tokens, key, secret, again=True):
        record = tokens.get(key)
        hashes = [] if record is None else self._book.hashes_of(record)
        d = self._matches(secret, hashes)

        def checked(matched):
            if matched:
                self._book.used(record)
                return Identity.of(record.name, record.role, record.projects, token=True)
            if again:
                # Read again if not just read: the token may be new. A
                # hash unchanged costs no second KDF (remembered).
                return self._book.current(READ_AGAIN_AFTER).addCallback(
                    self._check, key, secret, False)
            raise cred_error.UnauthorizedLogin()

        return d.addCallback(checked)

    @defer.inlineCallbacks
    def _matches(self, secret, hashes):
        mark = hmac.new(self._key, secret.encode("utf-8"), hashlib.sha256).digest()
        for stored in hashes:
            matched = self._remembered(mark, stored)
            if matched is None:
                matched = yield self._kdf_aside(secret_matches, secret, stored)
                self._remember(mark, stored, matched)
            if matched:
                return True
        return False

    def _remembered(self, mark, stored):
        for memory in (self._checked, self._failed):
            found = memory.get((mark, stored))
            if found is None:
                continue
            matched, at = found
            if self._clock.seconds() - at >= VERIFIED_FOR:
                del memory[(mark, stored)]
                return None
            return matched
        return None

    def _remember(self, mark, stored, matched):
        memory, room = ((self._checked, MAX_REMEMBERED) if matched
                        else (self._failed, MAX_REMEMBERED_FAILED))
        memory[(mark, stored)] = (matched, self._clock.seconds())
        memory.move_to_end((mark, stored))
        while len(memory) > room:
            memory.popitem(last=False)


class KdfBusy(Exception):
    """Too many secrets wait for the KDF: the check is refused at once."""


class KdfPool:
    """Runs the KDF of token checks in threads of its own (``threads``),
    with at most ``waiting`` more waiting: a flood of wrong secrets (each
    new, so each a KDF) then costs its senders a refusal (KdfBusy), not
    every other client a slower service; the reactor's own pool, which
    builds listings and reconnects the database, is left alone."""

    def __init__(self, reactor, threads=2, waiting=32):
        self._reactor = reactor
        self._threads = threads
        self._most = threads + waiting
        self._busy = 0
        self._pool = None

    def __call__(self, function, *args):
        if self._busy >= self._most:
            return defer.fail(KdfBusy())
        if self._pool is None:
            from twisted.python.threadpool import ThreadPool

            self._pool = ThreadPool(1, self._threads, name="netweir-serve-kdf")
            self._pool.start()
            self._reactor.addSystemEventTrigger("during", "shutdown", self._pool.stop)
        self._busy += 1
        from twisted.internet import threads

        d = threads.deferToThreadPool(self._reactor, self._pool, function, *args)
        return d.addBoth(self._done)

    def _done(self, result):
        self._busy -= 1
        return result


def tokens_exist(directory, jobs_db=None):
    """Whether the job table of a service with ``directory`` and ``jobs_db``
    (its --dir and --jobs-db) has a token: read at once, before the
    reactor runs, when the options are checked (a --bind beyond loopback
    needs a password or a token). False when there is no table yet; a
    table that cannot be read has none that can be relied on either."""
    from ..store import POSTGRESQL, store_location

    backend, where = store_location(jobs_db, directory)
    try:
        if backend == POSTGRESQL:
            import psycopg

            with psycopg.connect(where, connect_timeout=10) as conn:
                found = conn.execute("SELECT to_regclass('tokens') IS NOT NULL").fetchone()[0]
                return bool(found and conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM tokens)").fetchone()[0])
        if not os.path.exists(where):
            return False
        with sqlite3.connect(f"file:{where}?mode=ro", uri=True, timeout=10) as conn:
            return conn.execute("SELECT EXISTS (SELECT 1 FROM tokens)").fetchone()[0] == 1
    except Exception:  # no table, no server, no driver: no token to count on
        return False
