"""The documentation against the code: every option documented, every
endpoint of docs/api.md served, and the README's curl session run as
written against the example project, on the example site."""

import glob
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import warnings

from twisted.trial import unittest

from netweir_serve import cli, options
from netweir_serve.web.api import endpoints

from . import docsrun
from .processes import ROOT, Daemon, free_port, wait_until

DOCS = os.path.join(ROOT, "docs")
README = os.path.join(ROOT, "README.md")
API_DOC = os.path.join(DOCS, "api.md")
SERVE_EXAMPLE = os.path.join(ROOT, "serve-example")
EXAMPLE_SITE = os.path.join(ROOT, "examples", "site.py")

# Where the README's curl lines expect the service.
README_SERVICE = "http://127.0.0.1:6800"

# Values for the placeholders of docs/api.md's paths.
PLACEHOLDERS = {"PROJECT": "example", "SPIDER": "books", "JOB": "no-such-job"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def all_docs():
    """README.md and every page of docs/, as one text."""
    return "\n".join(read(p) for p in [README] + sorted(glob.glob(os.path.join(DOCS, "*.md"))))


def help_options():
    """The long options ``netweir-serve --help`` lists."""
    out = subprocess.run([sys.executable, "-m", "netweir_serve", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return sorted(set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)", out, re.M)))


def mentions(text, option):
    """Whether ``text`` has ``option`` as a whole option, not a prefix of one."""
    return re.search(re.escape(option) + r"(?![a-z-])", text) is not None


def serve_example_argv():
    """The arguments serve-example gives netweir-serve, from its exec line."""
    for line in read(SERVE_EXAMPLE).splitlines():
        if not line.startswith("exec "):
            continue
        words = shlex.split(line, comments=True)
        if words[1].endswith("netweir-serve"):
            return [w for w in words[2:] if w != '"$@"' and w != "$@"]
    raise AssertionError("serve-example has no 'exec .../netweir-serve' line")


def option_values(argv, name):
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == name]


def readme_session():
    """The curl lines of the README's first session, each split as a shell
    would (shlex), in order."""
    text = read(README)
    marker = text.index("<!-- curl-session")
    block = re.search(r"```sh\n(.*?)```", text[marker:], re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.startswith("curl ")]


class ExampleSite:
    """examples/site.py on a free port, as a process of its own."""

    def __init__(self):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, EXAMPLE_SITE, "--port", str(self.port), "--quiet"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, 30, "the example site to answer")

    def _answers(self):
        if self.process.poll() is not None:
            raise AssertionError(f"examples/site.py exited with {self.process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
            return True
        except OSError:
            return False

    def stop(self):
        self.process.kill()
        self.process.wait()


def example_daemon(testcase, args=(), env=None):
    """netweir-serve on the example project, with serve-example's --project
    options (and ``args``), on a free port and a fresh --dir."""
    projects = option_values(serve_example_argv(), "--project")
    directory = os.path.join(tempfile.mkdtemp(prefix="docs-", dir=os.path.abspath(".")), "dir")
    daemon = Daemon(directory, projects, args=args, env=env).start()
    testcase.addCleanup(daemon.kill)
    return daemon


def run_curl(argv):
    """(exit status, stdout) of a curl command line; with urllib when there
    is no curl (it understands the URL and -d, which is all the README uses)."""
    if shutil.which("curl"):
        done = subprocess.run(argv, capture_output=True, timeout=60)
        return done.returncode, done.stdout
    url, data, words = None, [], iter(argv[1:])
    for word in words:
        if word == "-d":
            data.append(next(words))
        elif word.startswith("http"):
            url = word
        else:
            raise AssertionError(f"no urllib translation for curl's {word!r}")
    body = "&".join(data).encode() if data else None
    try:
        with urllib.request.urlopen(url, data=body, timeout=60) as answer:
            return 0, answer.read()
    except urllib.error.HTTPError as e:
        return 0, e.read()


class OptionsDocumentedTests(unittest.TestCase):
    def test_every_option_in_help_is_in_the_docs(self):
        found = help_options()
        self.assertIn("--project", found)
        self.assertIn("--insecure-no-auth", found)
        text = all_docs()
        self.assertEqual([o for o in found if not mentions(text, o)], [])

    def test_every_environment_variable_is_in_the_docs(self):
        text = all_docs()
        for name in (options.USERNAME_VARIABLE, options.PASSWORD_VARIABLE,
                     cli.TAC_OPTIONS_VARIABLE, options.GRACE_VARIABLE,
                     options.NOTIFY_SECRET_VARIABLE):
            self.assertIn(name, text)


class InstallDocumentedTests(unittest.TestCase):
    def test_no_page_installs_from_an_index(self):
        """netweir-serve is on no package index: every pip line of the docs
        installs a checkout or a wheel by its path (issue 22: `pip install
        'netweir-serve[postgresql]'` fails in a fresh virtualenv)."""
        text = all_docs()
        self.assertIn("pip install '/path/to/netweir-serve[postgresql]'", text)
        self.assertEqual(re.findall(r"pip install (?:-U |--upgrade )?['\"]?netweir-serve\b.*", text),
                         [])


class ApiDocumentedTests(unittest.TestCase):
    def documented(self):
        """(method, path) of every endpoint heading of docs/api.md."""
        return re.findall(r"^### (GET|POST|HEAD) (/\S*)\s*$", read(API_DOC), re.M)

    def test_every_json_endpoint_is_documented(self):
        paths = {path for _, path in self.documented()}
        missing = [name.decode() for name in endpoints(None)
                   if "/" + name.decode() not in paths]
        self.assertEqual(missing, [])

    def test_every_documented_endpoint_exists(self):
        documented = self.documented()
        self.assertGreater(len(documented), 12)
        daemon = example_daemon(self)
        for method, path in documented:
            concrete = re.sub("|".join(PLACEHOLDERS), lambda m: PLACEHOLDERS[m.group()], path)
            if path == "/events":
                method = "HEAD"  # a stream never ends; its headers say it is there
            status, headers, body = daemon.call(method, concrete)
            message = ""
            if headers.get("Content-Type") == "application/json":
                message = json.loads(body).get("message", "")
            self.assertFalse(
                status == 404 and message.startswith("no such endpoint"),
                f"{method} {path} of docs/api.md: {status} {message}")
            self.assertNotEqual(status, 405, f"{method} {path}: the doc gives the wrong method")

    def test_summary_table_lists_every_json_endpoint(self):
        text = read(API_DOC)
        for name in endpoints(None):
            self.assertIn(f"`{name.decode()}`", text)


class ReadmeTests(unittest.TestCase):
    def test_the_two_commands_come_first(self):
        text = read(README)
        commands = text.index("```sh\n./serve-example")
        self.assertLess(commands, text.index("<!-- curl-session"))
        self.assertIn("./run-tests", text[commands:commands + 200])
        self.assertIn("./run-tests", read(os.path.join(ROOT, ".ci", "run")))
        for script in ("serve-example", "run-tests"):
            self.assertTrue(os.access(os.path.join(ROOT, script), os.X_OK), script)

    def test_serve_example_serves_the_example_project(self):
        argv = serve_example_argv()
        self.assertEqual(option_values(argv, "--project"), ["example=examples/spiders"])
        self.assertIn("examples/site.py", read(SERVE_EXAMPLE))

    def test_curl_session_runs_as_written(self):
        """Each line as the README has it, with the service's address made
        this daemon's and the example site's address given as the spiders'
        ``site`` argument. Between lines, the test waits as a person would:
        for a job to finish before fetching its items, and for one to be
        running before cancelling it."""
        site = ExampleSite()
        self.addCleanup(site.stop)
        daemon = example_daemon(self)
        base = f"http://127.0.0.1:{daemon.port}"
        session = readme_session()
        self.assertEqual(len(session), 5)
        seen = set()
        for words in session:
            self.assertEqual(words[0], "curl")
            urls = [w for w in words if w.startswith(README_SERVICE + "/")]
            self.assertEqual(len(urls), 1, words)
            path = urllib.parse.urlsplit(urls[0]).path
            argv = [base + w[len(README_SERVICE):] if w in urls else w for w in words]
            form = dict(argv[i + 1].split("=", 1) for i, w in enumerate(argv[:-1]) if w == "-d")
            if path == "/schedule.json":
                self.assertNotIn("site", form)
                argv += ["-d", f"site={site.base}"]
            elif path.startswith("/items/"):
                jobid = path.rsplit("/", 1)[1].rsplit(".", 1)[0]
                self.assertEqual(daemon.wait_state(jobid, "finished")["outcome"], "finished")
            elif path == "/cancel.json":
                daemon.wait_state(form["job"], "running")
            status, out = run_curl(argv)
            self.assertEqual(status, 0, argv)
            seen.add(path.rsplit("/", 1)[0] + "/" if path.startswith("/items/") else path)
            if path.startswith("/items/"):
                items = [json.loads(line) for line in out.splitlines()]
                self.assertEqual(len(items), 20)
                self.assertTrue(all(item["title"] for item in items))
                self.assertTrue(all(item["url"].startswith(site.base) for item in items))
                continue
            answer = json.loads(out)
            self.assertEqual(answer["status"], "ok", (argv, answer))
            if path == "/schedule.json":
                self.assertEqual(answer["jobid"], form["jobid"])
            elif path == "/listjobs.json":
                listed = [e["id"] for s in ("pending", "running", "finished") for e in answer[s]]
                self.assertTrue(listed, answer)
            elif path == "/cancel.json":
                self.assertEqual(answer["prevstate"], "running")
                entry = daemon.wait_state(form["job"], "finished")
                self.assertEqual(entry["outcome"], "cancelled")
        self.assertEqual(
            seen, {"/schedule.json", "/listjobs.json", "/items/example/books/", "/cancel.json"})


class PagesRunTests(unittest.TestCase):
    """Every shell block of the pages that talks to the service, run in
    the order written against real services (tests/docsrun.py), each
    shown answer compared with the real one. Each test checks that the
    blocks its page marks not run are the ones it expects."""

    def run_page(self, name, example=True, site=True, args=(), env=None):
        """Runs the page ``name`` (README.md or a page of docs/); with
        ``example``, against what ./serve-example starts (with ``args``),
        unless the page starts its own service first. Returns the reasons of the blocks it
        marks not run."""
        shop = None
        if site:
            shop = ExampleSite()
            self.addCleanup(shop.stop)
        session = docsrun.Session(self, site=shop)
        if example:
            session.services["6800"] = example_daemon(self, args, env)
        page = README if name == "README.md" else os.path.join(DOCS, name)
        return [b.not_run for b in docsrun.run_page(self, page, session)]

    def test_readme(self):
        self.assertEqual(self.run_page("README.md"), [])

    def test_getting_started(self):
        self.assertEqual(self.run_page("getting-started.md", example=False), [
            "./serve-example runs it (tests.test_docs.ReadmeTests);"
            " the lines below use the service started above"])

    def test_getting_started_option_table_is_help(self):
        """The table of getting-started, option for option, is what
        ``netweir-serve --help`` lists."""
        text = read(os.path.join(DOCS, "getting-started.md"))
        table = text[text.index("| option | default |"):]
        table = table[:table.index("\n\n")]
        rows = [line.split("|")[1] for line in table.splitlines()[2:]]
        documented = sorted({o for row in rows for o in re.findall(r"--[a-z][a-z-]*", row)})
        self.assertEqual(documented, help_options())

    def test_cluster(self):
        """The one-machine recipe of cluster.md: createdb (a database of
        the test's own, on the local PostgreSQL), three nodes, a job."""
        from . import pg
        pg.database_url()   # skips, or fails under CI=true, without a server
        self.assertEqual(self.run_page("cluster.md", example=False), [
            "a PostgreSQL server of another machine, and a password to type",
            "three machines"])

    def test_stopping(self):
        self.assertEqual(self.run_page("stopping.md"), [])

    def test_scheduling(self):
        self.assertEqual(self.run_page("scheduling.md"), [])

    def test_watching(self):
        self.assertEqual(self.run_page("watching.md", args=["--max-jobs", "2"]), [
            "a stream that ends only with Ctrl-C (tests.test_events reads it)",
            "a receiver of notices on another machine", "a Slack webhook"])

    def test_schedules(self):
        # The page's answers come from a service in Berlin.
        self.assertEqual(self.run_page("schedules.md", env={"TZ": "Europe/Berlin"}), [
            'the schedule "A first schedule" adds and runs below',
            "a spider file deleted under a running service (tests.test_timetable)"])

    def test_security(self):
        self.assertEqual(self.run_page("security.md", example=False), [
            "writes /etc/netweir-serve (tests.test_guard checks checkers of one's own)",
            "a certificate for crawl.example.com (tests.test_listen serves ssl: with one of its"
            " own)"])

    def test_projects(self):
        self.assertEqual(self.run_page("projects.md", example=False, site=False), [])

    def test_reliability(self):
        self.assertEqual(self.run_page("reliability.md", example=False), [])

    def test_api(self):
        self.assertEqual(self.run_page("api.md", args=["--max-jobs", "2"],
                                       env={"TZ": "Europe/Berlin"}), [
            "the run policies' own service (scheduling.md; tests.test_policies)",
            "a spider file deleted under a running service (tests.test_timetable)"])


# The pages PagesRunTests runs, each by a test of its own.
RUN_PAGES = ["README.md", "getting-started.md", "cluster.md", "stopping.md", "scheduling.md",
             "watching.md", "schedules.md", "security.md", "projects.md", "api.md",
             "reliability.md"]


class DocsNotRun(UserWarning):
    """The blocks of the docs that the docs test does not run, listed."""


class EveryBlockTests(unittest.TestCase):
    def test_every_block_that_talks_to_the_service_is_run_or_says_why_not(self):
        """Every shell block of README.md and docs/ that talks to the
        service is on a page PagesRunTests runs, or is marked not run with
        a reason; those are printed, so that none is left out silently."""
        pages = [README] + sorted(glob.glob(os.path.join(DOCS, "*.md")))
        unrun, not_run = [], []
        for page in pages:
            name = os.path.basename(page)
            for block in docsrun.service_blocks(page):
                if block.not_run:
                    not_run.append(f"{block.where()}: {block.not_run}")
                elif name not in RUN_PAGES:
                    unrun.append(block.where())
        # A warning: trial lists it after the run (under -j, as ./run-tests
        # runs, in _trial_temp/test.log), where a print would be lost.
        warnings.warn("blocks of the docs not run by the docs test (marked in the page):\n"
                      + "\n".join("  " + line for line in not_run), DocsNotRun)
        self.assertEqual(unrun, [])
        self.assertLess(len(not_run), 25)
        for page in RUN_PAGES:
            self.assertTrue(hasattr(PagesRunTests, "test_" + page.split(".")[0].replace("-", "_")
                                    .lower()), page)

    def test_a_mark_is_read_only_right_before_its_block(self):
        blocks = docsrun.blocks(os.path.join(DOCS, "watching.md"))
        marked = [b for b in blocks if b.not_run]
        self.assertEqual([b.text.split()[0] for b in marked], ["curl", "NETWEIR_SERVE_NOTIFY_SECRET=$(cat", "netweir-serve"])
