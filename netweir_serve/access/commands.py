"""``netweir-serve token``: add, list, revoke and rotate the service's tokens.

Run against the same ``--dir`` or ``--jobs-db`` as the service, while it
runs or not: the tokens are rows of the job table, written in the store's
own transactions (SQLite's locking, PostgreSQL's notice to every node).
A secret is printed once, alone on a line of standard output, so that
``$(netweir-serve token add ...)`` captures it; only its hash is kept.
Exit status 0, 1 when the job table cannot be used, 2 for bad input.

Every add, revoke and rotation, done or refused, is a row of the audit
(endpoint ``token add``...; who: the OS user the command runs as, or
``cli``). A change is written in one transaction with its row (never one
without the other), before the command says it is done (a secret is
printed once both are in).
"""

import argparse
import os
import pwd
import sys
from datetime import datetime, timezone

from twisted.internet import defer

from ..names import name_problem
from ..reliability.policy import PolicyError, parse_duration
from ..store.audit_records import AuditEntry
from ..store.records import StoreError
from ..store.token_records import DuplicateToken, TokenRecord
from .roles import ROLES, role_problem
from .tokens import hash_secret, new_secret

PROG = "netweir-serve token"
# The shortest life a token may be given (--expires).
LEAST_EXPIRY = 60


class BadInput(Exception):
    """Input the command refuses: a sentence; exit status 2."""


def _parser():
    parser = argparse.ArgumentParser(
        prog=PROG, description="Add, list, revoke and rotate the service's tokens.")
    where = argparse.ArgumentParser(add_help=False)
    place = where.add_mutually_exclusive_group()
    place.add_argument("--dir", default="netweir-serve",
                       help="the service's --dir (its job table DIR/jobs.db)")
    place.add_argument("--jobs-db", help="the service's --jobs-db URL")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = commands.add_parser("add", parents=[where], help="add a token; print its secret")
    add.add_argument("name")
    add.add_argument("--role", required=True, help=", ".join(ROLES))
    add.add_argument("--project", action="append", default=[],
                     help="a project it may see (viewer, operator); again for more")
    add.add_argument("--expires", help="its life from now (90d, 12h, 30m; at least 1m)")
    commands.add_parser("list", parents=[where], help="list the tokens (never a secret)")
    revoke = commands.add_parser("revoke", parents=[where], help="delete a token")
    revoke.add_argument("name")
    rotate = commands.add_parser("rotate", parents=[where],
                                 help="give a token a new secret; print it")
    rotate.add_argument("name")
    rotate.add_argument("--grace", help="how long the old secret still works (default: not)")
    return parser


def parse(argv, err=None):
    """The parsed ``argv`` (after ``token``); a usage error is printed on
    ``err`` (stderr) and exits with status 2."""
    parser = _parser()
    if err is not None:
        parser._print_message = lambda message, file=None: err.write(message)
    arguments = parser.parse_args(argv)
    try:
        _check(arguments)
    except BadInput as e:
        parser.error(str(e))
    return arguments


def _check(arguments):
    if getattr(arguments, "name", None) is not None:
        problem = name_problem("the token name", arguments.name)
        if problem:
            raise BadInput(problem)
    if arguments.command == "add":
        for project in arguments.project:
            problem = name_problem("--project", project)
            if problem:
                raise BadInput(problem)
        problem = role_problem(arguments.role, arguments.project)
        if problem:
            raise BadInput(problem)
        arguments.expires = _duration("--expires", arguments.expires, LEAST_EXPIRY)
    if arguments.command == "rotate":
        arguments.grace = _duration("--grace", arguments.grace, 1)


def _duration(key, text, least):
    if text is None:
        return None
    try:
        return parse_duration(key, text, least=least)
    except PolicyError as e:
        raise BadInput(str(e)) from None


def shown_time(seconds):
    """An epoch time as the list shows it (UTC, to the second), or ``-``."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_lines(records):
    """The lines of ``token list``: a heading, then a token each."""
    rows = [("NAME", "ROLE", "PROJECTS", "CREATED", "LAST_USED", "EXPIRES")]
    rows += [(r.name, r.role, ",".join(r.projects) or "*", shown_time(r.created),
              shown_time(r.last_used), shown_time(r.expires)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [" ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


@defer.inlineCallbacks
def run(arguments, store, wall, out=sys.stdout, err=sys.stderr):
    """A Deferred of the exit status of the parsed ``arguments`` run on
    ``store`` (an ITokenStore); ``wall`` gives the epoch time."""
    try:
        yield _COMMANDS[arguments.command](arguments, store, wall, out, err)
    except (BadInput, DuplicateToken) as e:
        if arguments.command in _WRITES:
            try:
                yield _audit(store, wall, arguments, 409 if isinstance(e, DuplicateToken)
                             else 404)
            except StoreError as failure:
                err.write(f"{PROG}: error: the audit could not be written: {failure}\n")
        err.write(f"{PROG}: error: {e}\n")
        return 2
    except StoreError as e:
        err.write(f"{PROG}: error: {e}\n")
        return 1
    return 0


@defer.inlineCallbacks
def _add(arguments, store, wall, out, err):
    secret = new_secret(arguments.name)
    now = wall.seconds()
    expires = None if arguments.expires is None else now + arguments.expires
    change = {"role": arguments.role, "projects": list(arguments.project), "expires": expires}
    yield store.add_token(TokenRecord(
        name=arguments.name, role=arguments.role, projects=tuple(arguments.project),
        created=now, expires=expires, hash=hash_secret(secret)),
        audit=lambda added: _entry(wall, arguments, 200, change))
    out.write(secret + "\n")
    err.write(f"{PROG}: added {arguments.name} ({_what(arguments.role, arguments.project)},"
              f" expires {shown_time(expires)}); its secret is shown this once\n")


def _what(role, projects):
    return f"{role} of {', '.join(projects)}" if projects else f"{role} of every project"


@defer.inlineCallbacks
def _list(arguments, store, wall, out, err):
    records = yield store.tokens()
    for line in token_lines(records):
        out.write(line + "\n")


@defer.inlineCallbacks
def _revoke(arguments, store, wall, out, err):
    gone = yield store.revoke_token(arguments.name, audit=lambda gone: None if gone is None
                                    else _entry(wall, arguments, 200, {"role": gone.role}))
    if gone is None:
        raise BadInput(f"no token named {arguments.name!r}")
    err.write(f"{PROG}: revoked {gone.name}\n")


@defer.inlineCallbacks
def _rotate(arguments, store, wall, out, err):
    until = None if arguments.grace is None else wall.seconds() + arguments.grace
    # The name as the token spells it: a secret begins with it.
    found = yield store.get_token(arguments.name)
    if found is None:
        raise BadInput(f"no token named {arguments.name!r}")
    secret = new_secret(found.name)
    rotated = yield store.rotate_token(
        found.name, hash_secret(secret), until, audit=lambda rotated: None if rotated is None
        else _entry(wall, arguments, 200, {"grace_until": until}))
    if rotated is None:
        raise BadInput(f"no token named {arguments.name!r}")
    out.write(secret + "\n")
    err.write(f"{PROG}: rotated {rotated.name}; the old secret works"
              f" {'until ' + shown_time(until) if until else 'no more'}\n")


def _who():
    """Who runs the command, as the audit names them: the user of the
    process's effective uid (not getpass's LOGNAME or USER, which whoever
    runs it may set to any name), or ``cli`` when it has no passwd entry."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return "cli"


def _entry(wall, arguments, status, change=None):
    """The audit row of ``arguments``' command: never a secret, the
    token's name and role."""
    return AuditEntry(
        time=wall.seconds(), who=_who(), address=None, endpoint=f"token {arguments.command}",
        project=None, target=arguments.name, change=change, status=status)


def _audit(store, wall, arguments, status, change=None):
    """A Deferred of the audit row of a refused command written
    (store.audit_table)."""
    return store.add_audit(_entry(wall, arguments, status, change))


# The commands that change the tokens: audited.
_WRITES = ("add", "revoke", "rotate")

_COMMANDS = {"add": _add, "list": _list, "revoke": _revoke, "rotate": _rotate}
