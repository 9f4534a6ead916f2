"""The command line: one set of options for every way to start the service.

The flags are those of ``netweir serve``, so either command line works with
the other. Everything is checked here, before anything is written to disk.
"""

import os
import re
import socket
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from twisted.python import usage

from . import __version__
from .access.throttle import same_address
from .health.checks import HEALTHS
from .jobs.outcomes import REASONS
from .store.records import OUTCOMES
from .listening import PUBLIC, ListenError, is_loopback, parse_listener, tcp_listener
from .store import store_location
from .names import name_problem
from .projects import ProjectError, ProjectTable, parse_project
from .reliability.cgroups import JobGroups
from .reliability.policy import PolicyError
from .reliability.rules import PolicyRules, parse_rule
from .schedules.times import local_zone_name

USERNAME_VARIABLE = "NETWEIR_SERVE_USERNAME"
PASSWORD_VARIABLE = "NETWEIR_SERVE_PASSWORD"

# How much the service logs: info unless this says debug (each request),
# warn, error or critical.
LOG_LEVEL_VARIABLE = "NETWEIR_SERVE_LOG_LEVEL"
LOG_LEVELS = ("debug", "info", "warn", "error", "critical")

# The key that signs each --notify POST (X-Netweir-Signature), if set.
NOTIFY_SECRET_VARIABLE = "NETWEIR_SERVE_NOTIFY_SECRET"
# --notify URLs kept off the command line (where every user of the machine
# reads them, a token in a URL with them): separated by white space.
NOTIFY_VARIABLE = "NETWEIR_SERVE_NOTIFY"

# Seconds between a cancel and the kill: 30 unless this says otherwise. Not
# an option, so the command line stays that of `netweir serve`; tests set it.
GRACE_VARIABLE = "NETWEIR_SERVE_CANCEL_GRACE"
# "0" starts every job's parent as a fresh interpreter (jobs/warm): for
# comparison, and for a machine where forking the warm process misbehaves.
WARM_STARTS_VARIABLE = "NETWEIR_SERVE_WARM_STARTS"

EXPOSED_WARNING = (
    "listening on {bind} without a username and password (--insecure-no-auth):"
    " anyone who can reach this port can run any spider with any settings, and"
    " any web page open in a browser that can reach it can read job listings,"
    " logs and items by pointing a host name of its own at this address (DNS"
    " rebinding)"
)


def default_max_jobs():
    return os.cpu_count() or 1


@dataclass(frozen=True)
class ServeConfig:
    """Everything the service is set up with, checked: the input of
    ``makeService``. Options and environment variables are read once, into
    this; nothing below reads either again."""

    projects: ProjectTable
    bind: str = "127.0.0.1"
    port: int = 6800
    directory: str = "netweir-serve"
    max_jobs: int = 1
    # At most this many running jobs of one project's spider (None: no limit).
    max_jobs_per_spider: int = None
    keep: int = 100
    # How many days the audit keeps a row (--keep-audit).
    keep_audit: int = 90
    # Wrong credentials an address may give in a minute before it is
    # refused (429) for a minute (access.throttle).
    max_auth_failures: int = 10
    # Proxies whose X-Forwarded-For names the client, for the throttle
    # and the audit (--trusted-proxy; web/audit.client_address).
    trusted_proxies: tuple = ()
    credentials: tuple = None
    # More twisted.cred checkers of basic auth (a .tac file plugs them in).
    checkers: tuple = ()
    # Endpoints other machines reach may go without a password.
    insecure_no_auth: bool = False
    # The job table had a token when the options were checked: every
    # request needs credentials (access.tokens), so other machines may
    # reach the service without --username.
    tokens_exist: bool = False
    # Where it listens (listening.Listener each, from --listen); none: the
    # tcp endpoint of bind and port.
    listeners: tuple = ()
    # The name this service claims jobs under (--node-name).
    node: str = socket.gethostname()
    # The job table's URL (--jobs-db); None: sqlite:///DIR/jobs.db.
    jobs_db: str = None
    # Where other nodes reach this one (--node-url); None: from its
    # first listening address.
    node_url: str = None
    # Seconds a node may be silent before the others declare it dead.
    node_timeout: float = 30.0
    # The zone a recurring schedule added without tz= runs in: the
    # machine's, as TZ or /etc/localtime say at start.
    local_zone: str = "UTC"
    # The interpreter jobs and spider readers run in (it needs netweir).
    python: str = sys.executable
    # Seconds from a cancel to the kill of the job's whole process group.
    grace: float = 30.0
    # Jobs' parents fork from a warm process that has imported netweir.
    warm_starts: bool = True
    # Seconds between looks at a running job's stats file.
    stats_interval: float = 1.0
    # Seconds a project's spider files may take to load in a reader.
    reader_timeout: float = 10.0
    # Seconds a client has to send each request.
    request_deadline: float = 15.0
    # Seconds between the poller's safety-net rounds.
    poll_interval: float = 5.0
    # debug logs each request; info, warn, error, critical.
    log_level: str = "info"
    # URLs to POST to when a job ends (--notify), the outcomes that are
    # sent (--notify-on), the key that signs them, seconds each try has.
    notify: tuple = ()
    notify_on: tuple = OUTCOMES
    notify_secret: str = None
    notify_timeout: float = 10.0
    # The --policy rules of projects and spiders (reliability.rules).
    policies: PolicyRules = PolicyRules()

    @property
    def endpoints(self):
        """The Listeners to listen on: --listen's, or --bind and --port's."""
        return self.listeners or (tcp_listener(self.bind, self.port),)

    def secrets(self):
        """The service's own secrets, as given: its password, the --notify
        secret and the job table's password (in --jobs-db's URL). No job's
        environment holds one (jobs.process.job_environment)."""
        # A --notify URL may carry a token (a Slack webhook's path is one).
        found = [self.notify_secret, *self.notify]
        if self.credentials is not None:
            found.append(self.credentials[1])
        if self.jobs_db:
            from urllib.parse import unquote, urlsplit
            try:
                found.append(unquote(urlsplit(self.jobs_db).password or ""))
            except ValueError:
                pass
        return tuple(secret for secret in found if secret)

    @property
    def authenticated(self):
        """Whether every request needs credentials: a username and
        password, or a token (one existed at start)."""
        return self.credentials is not None or bool(self.checkers) or self.tokens_exist

    def warnings(self, reaches=None):
        """Sentences to log at start about how this configuration is exposed;
        ``reaches`` are the endpoints' reach as found when listening (a
        systemd socket's is known only then)."""
        found = []
        if not len(self.projects):
            found.append("no --project given: there are no spiders to run")
        reaches = reaches or [e.reach for e in self.endpoints]
        for endpoint, reach in zip(self.endpoints, reaches):
            if reach == PUBLIC and not self.authenticated:
                shown = self.bind if not self.listeners else endpoint.description
                found.append(EXPOSED_WARNING.format(bind=shown))
        return found


def exposed_refusal(given):
    """The usage error for an endpoint other machines reach, without auth."""
    return (f"{given} lets other machines reach the service, and"
            " no username and password are set, nor any token: set NETWEIR_SERVE_USERNAME"
            " and NETWEIR_SERVE_PASSWORD, add a token (netweir-serve token add), or give"
            " --insecure-no-auth if you really"
            " mean to let anyone who can reach it run spiders")


# The .tac file for twistd -y, package data (the checkout's top-level
# netweir-serve.tac is a copy of it, kept equal by tests/test_options.py).
TAC_FILE = "netweir-serve.tac"


def tac_text():
    """The text of the .tac file installed with the package."""
    from importlib.resources import files

    return files(__package__).joinpath(TAC_FILE).read_text(encoding="utf-8")


# The command twistd runs the service as, which a refusal names.
TWISTD_COMMAND = "twistd netweir-serve"


def refuse(name, reason, hint):
    """Ends a start refused for bad options: the ``reason`` first, then
    ``hint`` (where the options are explained), on stderr, both lines
    signed with ``name``, the command that was run; exit status 2."""
    sys.stderr.write(f"{name}: error: {reason}\n{name}: {hint}\n")
    raise SystemExit(2)


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise usage.UsageError(f"--node-timeout takes seconds, not {text!r}") from None
    if not value >= 3:
        raise usage.UsageError(f"--node-timeout must be at least 3 seconds, not {text}")
    return value


def _jobs_db(text):
    """The --jobs-db URL, checked (sqlite:///PATH or postgresql://...)."""
    try:
        store_location(text, ".")
    except ValueError as e:
        raise usage.UsageError(str(e)) from None
    return text


def _whole_number(flag, minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise usage.UsageError(f"{flag} takes a whole number, not {text!r}") from None
        if value < minimum:
            raise usage.UsageError(f"{flag} must be at least {minimum}, not {value}")
        return value

    return parse


def notify_urls_in(path):
    """The --notify URLs of the file ``path``: one a line, blank lines and
    lines starting with # left out (a file only the service's user reads
    keeps a token in a URL off the command line)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise usage.UsageError(f"--notify @{path}: cannot read it ({e})") from None
    urls = [parse_notify_url(line.strip()) for line in lines
            if line.strip() and not line.strip().startswith("#")]
    if not urls:
        raise usage.UsageError(f"--notify @{path}: the file names no URL")
    return urls


def parse_notify_url(text):
    """A --notify URL, checked: http or https, with a host."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise usage.UsageError(f"--notify takes an http:// or https:// URL, not {text!r}")
    try:
        text.encode("ascii")
    except UnicodeEncodeError:
        raise usage.UsageError(f"--notify {text!r}: write the URL in ASCII"
                               " (percent-encoded, with an IDNA host name)") from None
    return text


# A reason of the crawl's own status: ``exit N``, ``signal N``.
_STATUS_REASON = re.compile(r"(exit|signal) [0-9]{1,3}\Z")


def parse_outcomes(text):
    """--notify-on's comma-separated outcomes, reasons (jobs.outcomes:
    ``timeout``, ``memory``, ``exit 1``...) and healths (``degraded``,
    ``healthy``: runs that finished so), checked: the outcomes in their
    order, then the others as given."""
    chosen = [" ".join(word.split()).lower() for word in text.split(",") if word.strip()]
    unknown = [word for word in chosen if word not in OUTCOMES and word not in REASONS
               and word not in HEALTHS and not _STATUS_REASON.match(word)]
    if not chosen or unknown:
        raise usage.UsageError(
            f"--notify-on takes outcomes ({', '.join(OUTCOMES)}), reasons"
            f" ({', '.join(REASONS)}, exit N, signal N) and healths ({', '.join(HEALTHS)}),"
            f" comma-separated, not {text!r}")
    return tuple(o for o in OUTCOMES if o in chosen) + tuple(
        dict.fromkeys(word for word in chosen if word not in OUTCOMES))


def unenforceable_rule(texts, groups):
    """A sentence naming the first of the --policy ``texts`` that asks for
    a limit ``groups`` (reliability.cgroups.JobGroups) cannot enforce on
    this machine, and why; None when there is none. Refused at start, as
    every job of such a rule would be."""
    for text in texts:
        _, policy = parse_rule(text)
        problem = groups.refusal(policy)
        if problem:
            return f"--policy {text!r}: {problem}"
    return None


class ServeOptions(usage.Options):
    """Options of ``netweir-serve``, ``twistd netweir-serve`` and the .tac."""

    synopsis = "[--project NAME=PATH ...] [options]"
    longdesc = (
        "Runs Netweir spiders as jobs over a scrapyd-shaped HTTP API. Give the"
        " username and password in NETWEIR_SERVE_USERNAME and"
        " NETWEIR_SERVE_PASSWORD rather than on the command line, where every"
        " user of the machine can read them (ps, /proc). Ctrl-C or SIGTERM stops"
        " it: running jobs are cancelled and waited for. SIGUSR1 stops it for a"
        " handover: running jobs keep running, and the next start on the same"
        " --dir adopts them (to upgrade or change options without cancelling"
        " crawls)."
    )
    optFlags = [
        ["insecure-no-auth", None,
         "allow --bind (or a --listen endpoint) on an address other machines can reach"
         " without a username and password"],
    ]
    optParameters = [
        ["bind", None, None, "the address to listen on (default 127.0.0.1)"],
        ["port", None, None, "the port to listen on (default 6800)",
         _whole_number("--port", 0)],
        ["dir", None, "netweir-serve", "where the job table, logs, items and stats go"],
        ["max-jobs", None, None,
         "how many jobs run at once (default: one per CPU)", _whole_number("--max-jobs", 1)],
        ["max-jobs-per-spider", None, None,
         "at most this many running jobs of one project's spider (default: no limit)",
         _whole_number("--max-jobs-per-spider", 1)],
        ["keep", None, 100, "how many finished jobs to remember", _whole_number("--keep", 0)],
        ["keep-audit", None, 90, "how many days the audit of the writes keeps a row",
         _whole_number("--keep-audit", 1)],
        ["max-auth-failures", None, 10,
         "wrong credentials one address may give in a minute; past them it is refused"
         " (429) for a minute", _whole_number("--max-auth-failures", 1)],
        ["jobs-db", None, None,
         "the job table: sqlite:///PATH (default: DIR/jobs.db) or postgresql://... shared by"
         " several nodes"],
        ["node-name", None, None,
         "this node's name among those sharing a --jobs-db (default: the host name)"],
        ["node-url", None, None,
         "where the other nodes reach this one, for logs and items of its jobs (default:"
         " from its first listening address)"],
        ["node-timeout", None, 30.0,
         "seconds a node may stay silent before the others declare it dead", _seconds],
        ["username", None, None,
         "require HTTP basic auth with this username (better: $NETWEIR_SERVE_USERNAME)"],
        ["password", None, None,
         "the password for --username (better: $NETWEIR_SERVE_PASSWORD, since a"
         " command line is readable by every user in ps and /proc)"],
    ]

    def __init__(self, environ=None, checkers=()):
        super().__init__()
        self.environ = os.environ if environ is None else environ
        # twisted.cred checkers a .tac plugs in: they count as a password.
        self.checkers = tuple(checkers)
        self["project"] = []
        self["listen"] = []
        self["notify"] = []
        self["notify-on"] = OUTCOMES
        self["policy"] = []
        self["trusted-proxy"] = []

    def parseOptions(self, options=None):
        if self.parent is None:
            return super().parseOptions(options)
        # Under twistd, whose own handling prints the usage of twistd and
        # of every option here (some 50 lines, to stdout) before the
        # reason, then exits 1: the reason alone, as netweir-serve says it.
        try:
            return super().parseOptions(options)
        except usage.UsageError as e:
            refuse(TWISTD_COMMAND, e, f"try '{TWISTD_COMMAND} --help'")

    def getSynopsis(self):
        # Under twistd the parent's usage line comes first; alone, ours.
        if self.parent is None:
            return f"Usage: netweir-serve {self.synopsis}"
        return super().getSynopsis()

    def opt_version(self):
        """print netweir-serve's version and exit"""
        print(f"netweir-serve {__version__}")
        raise SystemExit(0)

    def opt_print_tac(self):
        """print the .tac file for twistd -y and exit (netweir-serve --print-tac > netweir-serve.tac)"""  # noqa: E501 - usage.Options keeps a docstring's line breaks
        sys.stdout.write(tac_text())
        raise SystemExit(0)

    def opt_notify(self, url):
        """POST a JSON notice to URL when a job ends; give it once per URL, or @FILE for the URLs in a file, one a line (see --notify-on, $NETWEIR_SERVE_NOTIFY for URLs kept off the command line, and $NETWEIR_SERVE_NOTIFY_SECRET to sign them)"""  # noqa: E501 - usage.Options keeps a docstring's line breaks
        if url.startswith("@"):
            self["notify"] += notify_urls_in(url[1:])
        else:
            self["notify"].append(parse_notify_url(url))

    def opt_notify_on(self, value):
        """the outcomes, reasons and healths --notify sends, comma-separated (default: finished,failed,cancelled,lost; reasons such as timeout, memory, exit 1; degraded for runs that finished below their checks)"""  # noqa: E501
        self["notify-on"] = parse_outcomes(value)

    def opt_policy(self, rule):
        """a policy for a project's jobs or one spider's: PROJECT[/SPIDER]:KEY=VALUE[,KEY=VALUE...] with keys timeout, stall, expire, retries, retry_on, backoff, memory, cpu, min_items, min_pages, items_drop, pages_drop, max_errors, slower, history (--policy shop:timeout=6h,retries=2); give it once per rule"""  # noqa: E501 - usage.Options keeps a docstring's line breaks
        try:
            parse_rule(rule)
        except PolicyError as e:
            raise usage.UsageError(e.message) from None
        self["policy"].append(rule)

    def opt_trusted_proxy(self, address):
        """a proxy in front of the service (nginx) by its IP address, or unix for every client of a Unix socket: its requests are from the last address of their X-Forwarded-For, for the wrong-credentials throttle and the audit; give it once per proxy"""  # noqa: E501 - usage.Options keeps a docstring's line breaks
        shown = same_address(address.strip())
        if shown is None:
            raise usage.UsageError(f"--trusted-proxy: {address!r} is not an IP address"
                                   " (nor unix)")
        self["trusted-proxy"].append(shown)

    def opt_listen(self, description):
        """listen on this Twisted endpoint description (tcp:6800:interface=127.0.0.1, ssl:6443:privateKey=key.pem:certKey=cert.pem, unix:/run/netweir-serve.sock:mode=660, systemd:domain=INET:index=0); give it once per endpoint, in place of --bind and --port"""  # noqa: E501 - usage.Options keeps a docstring's line breaks
        try:
            self["listen"].append(parse_listener(description))
        except ListenError as e:
            raise usage.UsageError(str(e)) from None

    def opt_project(self, value):
        """serve a spider file or directory as project NAME (NAME=PATH; a bare PATH is named after it); give it once per project"""  # noqa: E501 - usage.Options keeps a docstring's line breaks
        try:
            self["project"].append(parse_project(value))
        except ProjectError as e:
            raise usage.UsageError(str(e)) from None

    def postOptions(self):
        self._environment_settings()
        if self["listen"] and (self["bind"] is not None or self["port"] is not None):
            given = "--bind" if self["bind"] is not None else "--port"
            raise usage.UsageError(
                f"{given} beside --listen: with --listen, the --listen options name every"
                " endpoint (for --bind A --port N, give --listen tcp:N:interface=A)")
        self["bind"] = "127.0.0.1" if self["bind"] is None else self["bind"]
        self["port"] = 6800 if self["port"] is None else self["port"]
        if self["port"] > 65535:
            raise usage.UsageError(f"--port must be at most 65535, not {self['port']}")
        try:
            self["projects"] = ProjectTable(self["project"])
        except ProjectError as e:
            raise usage.UsageError(str(e)) from None
        self["policies"] = PolicyRules.parse(self["policy"])
        for project in sorted(self["policies"].projects_named()):
            if self["projects"].get(project) is None:
                raise usage.UsageError(f"--policy names project {project!r}, which no"
                                       " --project serves")
        if self["max-jobs"] is None:
            self["max-jobs"] = default_max_jobs()
        if not self["dir"]:
            raise usage.UsageError("--dir must not be empty")
        unenforceable = unenforceable_rule(self["policy"], JobGroups.detect(self["dir"]))
        if unenforceable:
            raise usage.UsageError(unenforceable)
        username = self["username"] or self.environ.get(USERNAME_VARIABLE) or None
        password = self["password"] or self.environ.get(PASSWORD_VARIABLE) or None
        if (username is None) != (password is None):
            given, missing = ("username", "password") if username else ("password", "username")
            raise usage.UsageError(
                f"a {given} without a {missing}: give both (--username and --password,"
                f" or {USERNAME_VARIABLE} and {PASSWORD_VARIABLE}) or neither"
            )
        if username is not None and ":" in username:
            raise usage.UsageError("the username must not contain ':' (HTTP basic auth)")
        self["credentials"] = (username, password) if username is not None else None
        authenticated = self["credentials"] is not None or bool(self.checkers)
        if authenticated or self["insecure-no-auth"]:
            return
        if any(listener.reach == PUBLIC for listener in self["listen"]) or (
                not self["listen"] and not is_loopback(self["bind"])):
            from .access.tokens import tokens_exist

            self["tokens-exist"] = tokens_exist(self["dir"], self["jobs-db"])
            if self["tokens-exist"]:
                return
        if not self["listen"] and not is_loopback(self["bind"]):
            raise usage.UsageError(exposed_refusal(f"--bind {self['bind']}"))
        for listener in self["listen"]:
            if listener.reach == PUBLIC:
                raise usage.UsageError(exposed_refusal(f"--listen {listener.description}"))

    def _environment_settings(self):
        grace_text = self.environ.get(GRACE_VARIABLE, "")
        try:
            grace = float(grace_text) if grace_text else 30.0
        except ValueError:
            grace = -1.0
        if not grace >= 0:
            raise usage.UsageError(f"{GRACE_VARIABLE} must be a number of seconds,"
                                   f" not {grace_text!r}")
        level = self.environ.get(LOG_LEVEL_VARIABLE, "info").lower()
        if level not in LOG_LEVELS:
            raise usage.UsageError(f"{LOG_LEVEL_VARIABLE} must be debug, info, warn, error"
                                   f" or critical, not {level!r}")
        self["grace"], self["log-level"] = grace, level
        warm = self.environ.get(WARM_STARTS_VARIABLE, "1").strip().lower()
        if warm not in ("0", "1", "no", "yes", "off", "on", "false", "true"):
            raise usage.UsageError(f"{WARM_STARTS_VARIABLE} must be 1 or 0, not {warm!r}")
        self["warm-starts"] = warm in ("1", "yes", "on", "true")
        self["notify-secret"] = self.environ.get(NOTIFY_SECRET_VARIABLE) or None
        self["notify"] += [parse_notify_url(url)
                           for url in self.environ.get(NOTIFY_VARIABLE, "").split()]
        if self["jobs-db"] is not None:
            self["jobs-db"] = _jobs_db(self["jobs-db"])
        if self["node-name"] is not None and name_problem("--node-name", self["node-name"]):
            raise usage.UsageError(name_problem("--node-name", self["node-name"]))

    def config(self):
        """The checked options as a ServeConfig."""
        return ServeConfig(
            local_zone=local_zone_name(self.environ),
            grace=self["grace"],
            warm_starts=self["warm-starts"],
            log_level=self["log-level"],
            projects=self["projects"],
            bind=self["bind"],
            port=self["port"],
            directory=os.path.abspath(self["dir"]),
            max_jobs=self["max-jobs"],
            max_jobs_per_spider=self["max-jobs-per-spider"],
            keep=self["keep"],
            keep_audit=self["keep-audit"],
            max_auth_failures=self["max-auth-failures"],
            trusted_proxies=tuple(self["trusted-proxy"]),
            credentials=self["credentials"],
            checkers=self.checkers,
            insecure_no_auth=bool(self["insecure-no-auth"]),
            tokens_exist=bool(self.get("tokens-exist")),
            listeners=tuple(self["listen"]),
            notify=tuple(self["notify"]),
            notify_on=tuple(self["notify-on"]),
            notify_secret=self["notify-secret"],
            jobs_db=self["jobs-db"],
            node=self["node-name"] or socket.gethostname(),
            node_url=self["node-url"],
            node_timeout=self["node-timeout"],
            policies=self["policies"],
        )
