"""The shell blocks of the docs, run as written against real services.

A page is read as a list of fenced blocks. Those that talk to the service
(curl lines, ``netweir-serve``, ``twistd``, ``psql``/``createdb``) become
*steps*: a command, and the answer the page shows for it, if any. Two ways
of showing an answer are understood:

- a block of ``$ command`` lines, each followed by its answer;
- a ```` ```sh ```` block directly followed (blank lines only between) by a
  ```` ```json ```` block: the answer of the block's last command.

A block that cannot run in a test says so just before its fence, with
why: ``<!-- docs-test: not run: needs systemd -->``; the tests list those.

``Session`` runs a page's steps in order, the way a person would: the
service address of the docs (127.0.0.1:6800, and 6801-6803 for the nodes
of cluster.md) is made the address of a service the session started on a
free port; a ``schedule.json`` of the example project gets the example
shop's address as its ``site`` argument; before a line that reads a job,
the session waits for the job to be in the state the page shows. Shown
answers are compared with real ones on every field that is not random:
ids the service made up, times, pids, paths and node names are masked.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from .docsanswers import DUE_TIME, compare_text, is_log, masked_log, parse_shown
from .processes import ROOT, Daemon, wait_until

DOCS_SHOP = "http://127.0.0.1:8000"   # examples/site.py's own port
MARK = re.compile(r"<!--\s*docs-test:\s*not run:\s*(.+?)\s*-->")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
PROGRAMS = {"curl", "netweir-serve", "twistd", "psql", "createdb"}


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    not_run: str = None     # why, when the page marks it
    follows: "Block" = None  # the block just before it, blank lines only between

    def where(self):
        return f"{os.path.relpath(self.page, ROOT)}:{self.line}"

    def console(self):
        return any(line.startswith("$ ") for line in self.text.splitlines())

    def talks_to_service(self):
        if self.lang == "sh":
            return any(_program(c) in PROGRAMS for c in _expand_loops(_logical_lines(self.text)))
        if self.lang == "":
            return any(_program(line[2:]) in PROGRAMS for line in self.text.splitlines()
                       if line.startswith("$ "))
        return False


@dataclass
class Step:
    block: Block
    command: str
    shown: str = None   # the answer the page shows, as text
    log: str = None     # the log lines the page shows a service starting with
    capture: bool = False   # inside $(...): its standard output is a value

    def words(self):
        return shlex.split(self.command, comments=True)


def blocks(page):
    """Every fenced block of ``page``, in order."""
    with open(page, encoding="utf-8") as f:
        text = f.read()
    found, previous_end = [], None
    for match in FENCE.finditer(text):
        before = text[:match.start()]
        last_line = before.rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(last_line)
        block = Block(page, before.count("\n") + 1, match.group(1), match.group(2),
                      mark.group(1) if mark else None)
        if found and text[previous_end:match.start()].strip() == "":
            block.follows = found[-1]
        found.append(block)
        previous_end = match.end()
    return found


def service_blocks(page):
    return [b for b in blocks(page) if b.talks_to_service()]


def _logical_lines(text):
    """Shell lines with backslash continuations joined, comments and blank
    lines left out."""
    lines, current = [], ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip() and not current.strip().startswith("#"):
            lines.append(current.strip())
        current = ""
    return lines


def _program(line):
    """The program a shell line runs (after VAR=value words), by its base name."""
    line = re.sub(r"\$\([^)]*\)", "X", line)   # a command substitution is a value here
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    words = [w for w in words if not re.match(r"^[A-Za-z_]\w*=", w)]
    return os.path.basename(words[0]) if words else None


def _expand_loops(lines):
    """``for n in 1 2 3; do ... done`` made the lines it runs, $n put in."""
    out, i = [], 0
    while i < len(lines):
        loop = re.match(r"for (\w+) in ([^;]+); do$", lines[i])
        if not loop:
            out.append(lines[i])
            i += 1
            continue
        end = lines.index("done", i)
        for value in loop.group(2).split():
            out += [re.sub(r"\$" + loop.group(1) + r"\b", value, body)
                    for body in lines[i + 1:end]]
        i = end + 1
    return out


def steps(block, answer=None):
    """The steps of ``block``; ``answer`` is the json block after it."""
    if block.console():
        found = []
        for line in block.text.splitlines():
            if line.startswith("$ "):
                found.append(Step(block, line[2:]))
            elif found:
                found[-1].shown = (found[-1].shown + "\n" if found[-1].shown else "") + line
        return found
    found = [Step(block, line) for line in _expand_loops(_logical_lines(block.text))]
    if answer is not None and found:
        found[-1].shown = answer.text
    return found


def page_steps(page):
    """(steps to run, blocks marked not run) of ``page``, in order."""
    every = blocks(page)
    run, skipped = [], []
    for block in every:
        if not block.talks_to_service():
            continue
        if block.not_run:
            skipped.append(block)
            continue
        after = [b for b in every if b.follows is block and b.lang == "json"]
        found = steps(block, after[0] if after else None)
        shown_log = _next_block(every, block)
        if found and shown_log is not None and is_log(shown_log.text):
            found[-1].log = shown_log.text
        run += found
    return run, skipped


def _next_block(every, block):
    at = every.index(block)
    return every[at + 1] if at + 1 < len(every) else None


# -- running a page -------------------------------------------------------

@dataclass
class Session:
    """Runs steps against services of its own. ``site`` is the example
    shop (tests.test_docs.ExampleSite) or None; ``services`` maps a port
    of the docs to a running Daemon (a test may put one there first, as
    ./serve-example would); ``ids`` maps the ids a page shows to those
    the service made up; ``databases`` a database a page creates to the
    test's own."""

    testcase: object
    site: object = None
    services: dict = field(default_factory=dict)
    ids: dict = field(default_factory=dict)
    scratch: str = None
    databases: dict = field(default_factory=dict)   # a page's name -> the test's
    variables: dict = field(default_factory=dict)   # NAME=$(...) a page set

    def __post_init__(self):
        self.scratch = tempfile.mkdtemp(prefix="docsrun-", dir=os.path.abspath("."))

    def run(self, step):
        # NAME=$(command): the command's standard output, for $NAME later.
        assigned = re.match(r"^([A-Za-z_]\w*)=\$\((.*)\)$", step.command.strip())
        if assigned:
            name, inner = assigned.groups()
            self.variables[name] = self.run(Step(step.block, inner, capture=True)).strip()
            return None
        for name, value in self.variables.items():
            step = Step(step.block, re.sub(r"\$\{?" + name + r"\b\}?", value, step.command),
                        step.shown, step.log, step.capture)
        words = step.words()
        env = {}
        while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        program = os.path.basename(words[0])
        if program == "curl":
            return self.curl(step, words)
        if program == "netweir-serve" and words[1:2] == ["token"]:
            return self.token(step, words, env)
        if program == "netweir-serve":
            return self.serve(step, words, env)
        if program in ("createdb", "psql"):
            return self.database(step, words)
        if program.startswith("python") and words[1:2] == ["examples/site.py"] and self.site:
            return None   # the test's shop is up already, on a port of its own
        raise AssertionError(f"{step.block.where()}: no way to run {step.command!r}")

    # -- the service

    def serve(self, step, words, env):
        """A netweir-serve line: started in the background as written, on
        a free port in place of the docs' (6800 when it names none), with
        its --dir (relative to the checkout) made a scratch folder."""
        args = words[1:]
        if args and args[-1] == "&":
            args = args[:-1]
        port = "6800"
        if "--port" in args:
            port = args[args.index("--port") + 1]
            del args[args.index("--port"):args.index("--port") + 2]
        if args[:1] in (["--help"], ["--version"]) or "--help" in args:
            return self.command([sys.executable, "-m", "netweir_serve"] + args, env=env)
        directory = os.path.join(self.scratch, f"dir-{port}-{len(os.listdir(self.scratch))}")
        if "--dir" in args:
            at = args.index("--dir")
            directory = os.path.join(self.scratch, args[at + 1].strip("/").replace("/", "_"))
            if os.path.exists(directory + ".out"):
                directory += f"-{len(os.listdir(self.scratch))}"
            del args[at:at + 2]
        args = [self.database_url(a) if a.startswith("postgresql://") else a for a in args]
        daemon = Daemon(directory, args=args, env=env)
        try:
            daemon.spawn()
            daemon.wait_ready(60)
        except AssertionError:
            daemon.kill()
            if step.shown is None:
                raise   # a line that should have served
            # A line that shows a refusal: its answer is the error it prints.
            return daemon.output()
        self.testcase.addCleanup(daemon.kill)
        self.services[port] = daemon
        if step.log is not None:
            shown = [masked_log(line) for line in step.log.splitlines()]
            # The service answers as soon as it listens; the lines it logs
            # then may reach its output a moment after the first answer.
            wait_until(lambda: len(daemon.output().splitlines()) >= len(shown), 10,
                       f"{step.block.where()}: the start-up log of {step.command}")
            real = [masked_log(line) for line in daemon.output().splitlines()[:len(shown)]]
            self.testcase.assertEqual(real, shown, f"{step.block.where()}: the log of"
                                                   f" {step.command}")
        return None

    def token(self, step, words, env):
        """A ``netweir-serve token`` line, its --dir made the scratch folder
        the page's service of that --dir has (or will have). Its standard
        output alone when captured (``$(...)``)."""
        args = words[1:]
        if "--dir" in args:
            at = args.index("--dir")
            args[at + 1] = self.directory_of(args[at + 1])
        argv = [sys.executable, "-m", "netweir_serve"] + args
        if step.capture:
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, **env})
            if done.returncode != 0:
                raise AssertionError(f"{step.block.where()}: {step.command} exited with"
                                     f" {done.returncode}: {done.stderr}")
            return done.stdout
        return self.command(argv, env=env, check=step.shown is None)

    def directory_of(self, given):
        """The scratch folder of the page's ``--dir given``: that of the
        service last started with it, if any."""
        wanted = os.path.join(self.scratch, given.strip("/").replace("/", "_"))
        used = [d.directory for d in self.services.values()
                if d.directory == wanted or d.directory.startswith(wanted + "-")]
        return used[-1] if used else wanted

    def service(self, port="6800"):
        return self.services[port]

    # -- databases

    def database_url(self, url):
        """The page's PostgreSQL URL, naming the test's database in place
        of the one the page created (the server is the page's)."""
        name = urlsplit(url).path.strip("/")
        if name not in self.databases:
            raise AssertionError(f"{url}: the page never creates database {name!r}")
        return urlunsplit(urlsplit(url)._replace(path="/" + self.databases[name]))

    def database(self, step, words):
        """createdb NAME, run as the page writes it (its server, its user)
        but with a name of the test's own, dropped after the test with
        dropdb and the same options; the page's later URLs naming NAME
        are given that name."""
        if os.path.basename(words[0]) != "createdb":
            raise AssertionError(f"{step.block.where()}: only createdb is run: {step.command}")
        name, options = words[-1], words[1:-1]
        own = f"netweir_serve_docs_{os.getpid()}_{len(self.databases)}"
        self.databases[name] = own
        out = self.command(words[:-1] + [own])
        self.testcase.addCleanup(self.command, ["dropdb"] + options + ["--force", own])
        return out

    # -- curl

    def curl(self, step, words):
        argv, port = [], None
        for word in words:
            match = re.match(r"(https?://)127\.0\.0\.1:(\d+)(/.*)?$", word)
            if match:
                port = match.group(2)
                path = match.group(3) or "/"
                for doc_id, real_id in self.ids.items():
                    path = path.replace(doc_id, real_id)
                word = f"http://127.0.0.1:{self.service(port).port}{path}"
            elif word.startswith("job=") or word.startswith("-d"):
                for doc_id, real_id in self.ids.items():
                    word = word.replace(doc_id, real_id)
            argv.append(word)
        if port is None:
            raise AssertionError(f"{step.block.where()}: {step.command!r} names no service")
        daemon = self.service(port)
        form = _form(argv)
        url = [w for w in argv if w.startswith("http://")][0]
        if url.split("?")[0].endswith(("/schedule.json", "/addschedule.json")):
            if self.site is not None and "site" not in form:
                argv += ["-d", f"site={self.site.base}"]
        self.wait_as_a_person(daemon, url, form, step)
        done = subprocess.run(argv, capture_output=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"{step.block.where()}: {step.command} exited with"
                                 f" {done.returncode}: {done.stderr.decode()}")
        return done.stdout.decode("utf-8", "replace")

    def wait_as_a_person(self, daemon, url, form, step):
        """Before a line that reads a job: wait until the job is where
        the page shows it (finished, by default, for its files)."""
        shown = None
        for text in ([step.shown, step.shown.splitlines()[0]] if step.shown else []):
            try:
                shown = parse_shown(text)
                break
            except ValueError:
                pass
        query = dict(p.split("=", 1) for p in url.partition("?")[2].split("&") if "=" in p)
        job = form.get("job") or query.get("job")
        files = re.search(r"/(?:logs|items)/[^/]+/[^/]+/([^/?]+)\.(?:log|jl|jsonl)$",
                          url.split("?")[0])
        if files:
            job = files.group(1)
        if job is None:
            if isinstance(shown, dict) and "pending" in shown:
                for state in ("pending", "running", "finished"):
                    for entry in shown.get(state) or []:
                        if isinstance(entry, dict) and "id" in entry:
                            if DUE_TIME.search(entry["id"]):
                                continue   # its time is the run's: read again until it shows
                            jobid = self.ids.get(entry["id"], entry["id"])
                            daemon.wait_state(jobid, state)
            return
        state = "finished"
        if isinstance(shown, dict) and (shown.get("status") == "error" or any(
                key in shown and shown[key] is None for key in ("prevstate", "currstate", "state"))):
            return   # the page shows an unknown job: nothing to wait for
        if isinstance(shown, dict):
            state = {"running": "running", "pending": "pending"}.get(
                shown.get("prevstate") or shown.get("state") or shown.get("currstate"),
                "finished")
        if "/cancel.json" in url and shown is None:
            state = "running"   # what a person cancels, unless the page shows otherwise
        entry = daemon.wait_state(job, state)
        if "/cancel.json" in url and state == "running":
            # A person cancels a crawl seen under way, with its first stats
            # (a cancel before the crawl is up ends it -15, without any).
            wait_until(lambda: daemon.stats(entry["id"]).get("stats"), 60,
                       f"job {job}'s first stats")

    def command(self, argv, check=True, env=None):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, **(env or {})})
        if done.returncode != 0 and check:
            raise AssertionError(f"{' '.join(argv)} exited with {done.returncode}:"
                                 f" {done.stdout}{done.stderr}")
        return done.stdout + done.stderr

    def problems(self, step, real):
        """Where ``real`` differs from the answer the page shows."""
        if real is None:
            real = ""
        if self.site is not None:
            # The shop where the page has it, and no site argument the page did not give.
            real = real.replace(self.site.base, DOCS_SHOP)
            for form in (',"site":"%s"', '"site":"%s",', '"site":"%s"'):
                real = real.replace(form % DOCS_SHOP, "")
        return compare_text(step.shown, real.rstrip("\n"), self.ids)

    def check(self, step, real):
        """Fails ``testcase`` where ``real`` differs from what the page shows."""
        if step.shown is None:
            return
        problems = self.problems(step, real)
        self.testcase.assertEqual(
            problems, [], f"{step.block.where()}: {step.command}\nshown: {step.shown}\n"
                          f"real:  {real}")


def _form(argv):
    return dict(argv[i + 1].split("=", 1) for i, w in enumerate(argv[:-1])
                if w == "-d" and "=" in argv[i + 1])


REREAD = 30   # seconds a person would go on reading a page that changes


def run_page(testcase, page, session):
    """Runs ``page``'s steps in order, each checked against its shown
    answer; returns the blocks the page marks not run. A read (a curl
    without -d) whose answer does not agree yet is read again, as a
    person would reload, for up to REREAD seconds: a running job's
    stats come every 5 s."""
    todo, skipped = page_steps(page)
    for step in todo:
        real = session.run(step)
        if step.shown is not None and _reads(step):
            deadline = time.monotonic() + REREAD
            while session.problems(step, real) and time.monotonic() < deadline:
                time.sleep(0.5)
                real = session.run(step)
        session.check(step, real)
    return skipped


def _reads(step):
    words = step.words()
    return words[0] == "curl" and "-d" not in words
