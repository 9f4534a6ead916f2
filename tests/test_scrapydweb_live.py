"""ScrapydWeb 1.6.0 manages the service with a token as basic auth (issue 26).

A real ScrapydWeb, installed into a venv of its own (its pinned Flask and
friends would clash with ours), runs as a process with two nodes: the
service with an operator token of shop (``oshop:SECRET@127.0.0.1:PORT``
in its SCRAPYD_SERVERS), and the same service with a wrong secret. Its own
pages are asked over HTTP, so that it is ScrapydWeb that asks the service:
the first node is up, its Jobs page lists shop's job and not news's, and
its Run Spider queues a job; the second node shows the service refusing it
(401), in the status the Servers page shows and on its Jobs page.

The venv is made once per test run, in trial's temp dir; when pip cannot
make it the tests are skipped saying why, except under CI=true, where they
fail (tests/scrapydweb-requirements.txt pins everything it installs).
"""

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile

from twisted.trial import unittest

from .processes import ROOT, Daemon, free_port, request, shared, shared_site, wait_until
from .spiders import write_project

REQUIREMENTS = os.path.join(ROOT, "tests", "scrapydweb-requirements.txt")


def token_command(*args):
    done = subprocess.run([sys.executable, "-m", "netweir_serve", "token", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def clean_environ():
    """This environment without what points Python at our own packages
    (trial's workers get a PYTHONPATH of ours: pip would count our requests
    as installed in ScrapydWeb's venv), nor ScrapydWeb's own variables."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PYTHON") and k not in ("VIRTUAL_ENV", "DATA_PATH",
                                                        "DATABASE_URL")}


def run_folder():
    """This test run's temp dir: trial's, shared by its workers under -j."""
    here = os.getcwd()
    parent = os.path.dirname(here)
    if os.path.basename(here).isdigit() and os.path.basename(parent).startswith("_trial_temp"):
        return parent
    return here


def make_scrapydweb_venv():
    """(python, None) of a venv holding ScrapydWeb in this run's temp dir,
    made by the first worker that asks; (None, pip's complaint) when it
    cannot be made."""
    folder = run_folder()
    venv = os.path.join(folder, "scrapydweb-venv")
    python = os.path.join(venv, "bin", "python")
    made = os.path.join(venv, "installed")
    steps = ([sys.executable, "-m", "venv", "--clear", venv],
             [python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
              "-r", REQUIREMENTS])
    # Under trial -j the other worker may be making it at this moment.
    with open(os.path.join(folder, "scrapydweb-venv.flock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(made):
            return python, None
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900,
                                  stdin=subprocess.DEVNULL, env=clean_environ())
            if done.returncode != 0:
                return None, (f"{' '.join(step)} exited {done.returncode}:\n"
                              f"{done.stderr[-3000:]}")
        open(made, "w").close()
    return python, None


def scrapydweb_python():
    python, why = shared("scrapydweb-venv", make_scrapydweb_venv, lambda made: None)
    if python is None:
        if os.environ.get("CI", "").lower() == "true":
            raise AssertionError(f"ScrapydWeb could not be installed (CI=true: "
                                 f"this test must run): {why}")
        raise unittest.SkipTest(f"ScrapydWeb could not be installed: {why}")
    return python


SETTINGS = '''\
# Written by tests/test_scrapydweb_live.py.
SCRAPYDWEB_BIND = "127.0.0.1"
SCRAPYDWEB_PORT = {port}
ENABLE_AUTH = False
SCRAPYD_SERVERS = {servers!r}
DATA_PATH = {data!r}
ENABLE_LOGPARSER = False
ENABLE_MONITOR = False
ENABLE_EMAIL_ALERT = False
ENABLE_SLACK_ALERT = False
ENABLE_TELEGRAM_ALERT = False
SCHEDULE_ADDITIONAL = ""
'''


class ScrapydWeb:
    """ScrapydWeb as a real process on a free port, its settings and data
    in a folder of its own."""

    def __init__(self, python, folder, servers):
        self.port = free_port()
        os.makedirs(folder)
        with open(os.path.join(folder, "scrapydweb_settings_v11.py"), "w") as f:
            f.write(SETTINGS.format(port=self.port, servers=list(servers),
                                    data=os.path.join(folder, "data")))
        self.output_path = os.path.join(folder, "scrapydweb.out")
        self._output = open(self.output_path, "ab")
        # Its settings file is found in, and imported from, its working folder.
        self.process = subprocess.Popen(
            [python, "-m", "scrapydweb.run"], cwd=folder, stdin=subprocess.DEVNULL,
            stdout=self._output, stderr=subprocess.STDOUT, start_new_session=True,
            env=clean_environ())
        try:
            wait_until(self.answers, 40, "ScrapydWeb to answer")
        except BaseException:
            self.stop()
            raise

    def answers(self):
        if self.process.poll() is not None:
            raise AssertionError(f"ScrapydWeb exited with {self.process.returncode}:\n"
                                 f"{self.output()}")
        try:
            return self.get("hello")[0] == 200
        except OSError:
            return False

    def get(self, path):
        status, _, body = request(self.port, "GET", "/" + path, timeout=60)
        return status, body.decode("utf-8", "replace")

    def output(self):
        with open(self.output_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._output.close()


class Setup:
    """The service (projects shop and news, a finished job each) and a
    ScrapydWeb whose node 1 is the service with an operator token of shop
    and node 2 the same service with a wrong secret."""

    def __init__(self, python):
        site = shared_site()
        base = tempfile.mkdtemp(prefix="scrapydweb-", dir=os.getcwd())
        directory = os.path.join(base, "dir")
        projects = [f"{name}={write_project(os.path.join(base, name), site.base)}"
                    for name in ("shop", "news")]
        add = ("add", "--dir", directory)
        secret = token_command(*add, "oshop", "--role", "operator", "--project", "shop")
        root = token_command(*add, "root", "--role", "admin")
        self.daemon = Daemon(directory, projects, auth=("root", root))
        self.daemon.start()
        self.web = None
        try:
            for project in ("shop", "news"):
                self.daemon.wait_state(self.daemon.must_schedule(
                    project, "echo", jobid=f"{project}-job"), "finished")
            port = self.daemon.port
            self.servers = [f"127.0.0.1:{port}", f"localhost:{port}"]
            # ScrapydWeb names a node's table after its address, so the second
            # node reaches the same service by another name.
            self.web = ScrapydWeb(python, os.path.join(base, "scrapydweb"),
                                  [f"oshop:{secret}@{self.servers[0]}",
                                   f"oshop:{secret}x@{self.servers[1]}"])
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.web is not None:
            self.web.stop()
        self.daemon.kill()


class ScrapydWebTests(unittest.TestCase):
    def setUp(self):
        python = scrapydweb_python()
        self.setup = shared("scrapydweb", lambda: Setup(python), Setup.stop)
        self.web = self.setup.web

    def daemonstatus(self, node):
        """What the Servers page shows of a node: it asks this of each."""
        status, answer = self.web.get(f"{node}/api/daemonstatus/")
        self.assertEqual(status, 200, answer)
        return json.loads(answer)

    def test_scrapydweb_shows_the_node_up_and_its_projects_jobs(self):
        status, page = self.web.get("1/servers/")
        self.assertEqual(status, 200, page)
        for server in self.setup.servers:
            self.assertIn(f"SCRAPYD_SERVER: '{server}'", page)
        answer = self.daemonstatus(1)
        self.assertEqual((answer["status_code"], answer["status"]), (200, "ok"), answer)
        # The token sees shop alone: news's finished job is not counted.
        # (Shop's count, read as the service's own: the other tests of the
        # shared setup may have run a shop job first.)
        shop = self.setup.daemon.get("listjobs.json", {"project": "shop"})[1]
        self.assertGreaterEqual(len(shop["finished"]), 1)
        self.assertEqual(answer["finished"], len(shop["finished"]), answer)
        # The Jobs page, which ScrapydWeb builds from the service's /jobs.
        status, page = self.web.get("1/jobs/")
        self.assertEqual(status, 200, page)
        self.assertIn("project: 'shop',\n        spider: 'echo',\n        job: 'shop-job',",
                      page)
        self.assertNotIn("news-job", page)
        self.assertNotIn("project: 'news'", page)

    def test_scrapydweb_runs_a_spider_with_an_operator_token(self):
        status, answer = self.web.get("1/api/start/shop/echo/")
        self.assertEqual(status, 200, answer)
        answer = json.loads(answer)
        self.assertEqual(answer["status"], "ok", answer)
        self.setup.daemon.wait_state(answer["jobid"], "finished")

    def test_a_wrong_secret_shows_the_node_refusing(self):
        answer = self.daemonstatus(2)
        self.assertEqual((answer["status_code"], answer["status"]), (401, "error"), answer)
        status, page = self.web.get("2/jobs/")
        self.assertEqual(status, 200, page)
        self.assertIn("<h3>status_code: 401</h3>", page)
        self.assertNotIn("shop-job", page)
