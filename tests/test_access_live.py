"""Tokens and roles on the real service, over real HTTP (issue 26).

One daemon serves projects shop and news; its tokens are added with
``netweir-serve token add`` before it starts. The matrix asks every
endpoint and page, for each project, as every kind of caller, and checks
the documented answer (docs/security.md): no credentials, a revoked or
expired token or a wrong secret get 401; the metrics role gets /metrics
alone; a viewer reads its projects, a write on one of them is 403 naming
the operator role; a project a token cannot see answers exactly as a
project that does not exist; and no listing, stream, count or page shows
another project's job.
"""

import base64
import http.client
import json
import os
import select
import sqlite3
import subprocess
import sys
import tempfile
import time

from twisted.trial import unittest

from netweir_serve.access.endpoints import ENDPOINT_RULES
from .processes import Daemon, request, shared, shared_site
from .spiders import write_project

IDENTITIES = ("none", "vshop", "vnews", "oshop", "root", "prom", "gone", "old", "wrong")
UNAUTHENTICATED = ("none", "gone", "old", "wrong")
SEES = {"vshop": "shop", "vnews": "news", "oshop": "shop"}
# What a project, a job and a schedule that do not exist are called.
ABSENT = {"{P}": "nosuch", "{J}": "nosuch-job", "{S}": "nosuch-sched"}


def token_command(*args):
    done = subprocess.run([sys.executable, "-m", "netweir_serve", "token", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


class Service:
    """The daemon, its secrets by name, and a job and schedule per project."""

    def __init__(self):
        site = shared_site()
        base = tempfile.mkdtemp(prefix="access-", dir=os.getcwd())
        directory = os.path.join(base, "dir")
        projects = [f"{name}={write_project(os.path.join(base, name), site.base)}"
                    for name in ("shop", "news")]
        add = ("add", "--dir", directory)
        self.secrets = {
            "vshop": token_command(*add, "vshop", "--role", "viewer", "--project", "shop"),
            "vnews": token_command(*add, "vnews", "--role", "viewer", "--project", "news"),
            "oshop": token_command(*add, "oshop", "--role", "operator", "--project", "shop"),
            "root": token_command(*add, "root", "--role", "admin"),
            "prom": token_command(*add, "prom", "--role", "metrics"),
            "gone": token_command(*add, "gone", "--role", "admin"),
            "old": token_command(*add, "old", "--role", "admin", "--expires", "1m"),
        }
        self.secrets["wrong"] = self.secrets["vshop"] + "x"
        token_command("revoke", "gone", "--dir", directory)
        # Expired a while ago (the least --expires is a minute).
        with sqlite3.connect(os.path.join(directory, "jobs.db")) as db:
            db.execute("UPDATE tokens SET expires = 1 WHERE key = 'old'")
        # The matrix gives wrong secrets hundreds of times from one address
        # on purpose: the throttle (tests.test_throttle) is not what it asks.
        self.daemon = Daemon(directory, projects, ["--max-jobs", "2",
                                                   "--max-auth-failures", "100000"])
        self.daemon.auth = ("root", self.secrets["root"])
        self.daemon.start()
        self.jobs = {}
        for project in ("shop", "news"):
            self.jobs[project] = self.daemon.must_schedule(project, "echo",
                                                           jobid=f"{project}-job")
            status, answer = self.daemon.post("addschedule.json", {
                "project": project, "spider": "echo", "every": "1h",
                "name": f"{project}-sched"})
            assert status == 200, answer
        for jobid in self.jobs.values():
            self.daemon.wait_state(jobid, "finished")

    def headers(self, who, basic=False):
        if who == "none":
            return {}
        name = "vshop" if who == "wrong" else who
        if basic:
            pair = f"{name}:{self.secrets[who]}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {"Authorization": "Bearer " + self.secrets[who]}

    def ask(self, who, method, path, params=None, basic=False):
        """(status, body) of a request as ``who``."""
        status, _, body = request(self.daemon.port, method, "/" + path, params,
                                  headers=self.headers(who, basic))
        return status, body

    def stop(self):
        self.daemon.kill()


def service():
    return shared("access-service", Service, Service.stop)


# Requests about one project ({P}), its job ({J}) and its schedule ({S}).
READS = (
    ("GET", "listspiders.json", {"project": "{P}"}),
    ("GET", "listpolicies.json", {"project": "{P}"}),
    ("GET", "listversions.json", {"project": "{P}"}),
    ("GET", "listjobs.json", {"project": "{P}"}),
    ("GET", "listschedules.json", {"project": "{P}"}),
    ("GET", "runs.json", {"project": "{P}", "spider": "echo"}),
    ("GET", "jobstats.json", {"job": "{J}"}),
    ("GET", "job.json", {"job": "{J}"}),
    ("GET", "status.json", {"job": "{J}"}),
    ("GET", "status.json", {"job": "{J}", "project": "{P}"}),
    ("GET", "logs/{P}/echo/{J}.log", None),
    ("GET", "items/{P}/echo/{J}.jl", None),
    ("GET", "logs/{P}/", None),
    ("GET", "logs/{P}/echo/", None),
    ("GET", "items/{P}", None),
)
WRITES = (
    ("POST", "schedule.json", {"project": "{P}", "spider": "nosuchspider"}),
    ("POST", "cancel.json", {"project": "{P}", "job": "{J}"}),
    ("POST", "addschedule.json", {"project": "{P}", "spider": "nosuchspider", "every": "1h"}),
    ("POST", "editschedule.json", {"project": "{P}", "name": "{S}", "priority": "0"}),
    ("POST", "pauseschedule.json", {"project": "{P}", "name": "{S}"}),
    ("POST", "resumeschedule.json", {"project": "{P}", "name": "{S}"}),
    ("POST", "backfillschedule.json", {"project": "{P}", "name": "{S}",
                                       "from": "2020-01-01T00:00:00Z",
                                       "to": "2020-01-01T00:00:01Z"}),
    ("POST", "delschedule.json", {"project": "{P}", "name": "{S}-not-this"}),
)
# Requests about no project in particular, and what each needs.
GLOBAL = (
    ("GET", "", None), ("GET", "jobs", None), ("GET", "console/console.js", None),
    ("GET", "favicon.ico", None), ("GET", "daemonstatus.json", None),
    ("GET", "listprojects.json", None), ("GET", "listjobs.json", None),
    ("GET", "listschedules.json", None), ("GET", "listnodes.json", None),
    ("GET", "logs/", None), ("GET", "items/", None),
    ("GET", "logs/stats.json", None), ("GET", "metrics", None),
    ("POST", "delproject.json", {"project": "shop"}),
    ("POST", "addversion.json", {"project": "shop"}),
    ("POST", "delversion.json", {"project": "shop"}),
)


def filled(text, names):
    for mark, name in names.items():
        text = text.replace(mark, name)
    return text


def made(entry, names):
    method, path, params = entry
    return method, filled(path, names), (
        None if params is None else {k: filled(v, names) for k, v in params.items()})


def names_of(project):
    return {"{P}": project, "{J}": f"{project}-job", "{S}": f"{project}-sched"}


class MatrixTests(unittest.TestCase):
    def setUp(self):
        self.service = service()

    def test_every_caller_without_a_valid_token_gets_401_everywhere(self):
        for who in UNAUTHENTICATED:
            for entry in READS + WRITES:
                for project in ("shop", "news"):
                    method, path, params = made(entry, names_of(project))
                    status, body = self.service.ask(who, method, path, params)
                    self.assertEqual(status, 401, (who, path, body))
            for method, path, params in GLOBAL + (("GET", "events", None),):
                for basic in (False, True):
                    status, body = self.service.ask(who, method, path, params, basic=basic)
                    self.assertEqual(status, 401, (who, path, body))
                    self.assertIn(b"Authentication required", body)

    def test_the_metrics_role_gets_metrics_alone(self):
        for entry in READS + WRITES:
            method, path, params = made(entry, names_of("shop"))
            status, body = self.service.ask("prom", method, path, params)
            self.assertEqual((status, json.loads(body)["message"]),
                             (403, "this needs the viewer role"
                              if method == "GET" else "this needs the operator role"), path)
        for method, path, params in GLOBAL:
            status, body = self.service.ask("prom", method, path, params)
            if path == "metrics":
                self.assertEqual(status, 200)
                self.assertIn(b"netweir_serve_info", body)
            else:
                self.assertEqual(status, 403, (path, body))

    def test_metrics_need_the_metrics_or_admin_role(self):
        for who in ("vshop", "oshop"):
            status, body = self.service.ask(who, "GET", "metrics")
            self.assertEqual((status, json.loads(body)["message"]),
                             (403, "this needs the metrics or admin role"))
        self.assertEqual(self.service.ask("root", "GET", "metrics")[0], 200)

    def test_a_project_a_token_cannot_see_answers_as_one_that_does_not_exist(self):
        for who, seen in SEES.items():
            unseen = "news" if seen == "shop" else "shop"
            for entry in READS + WRITES:
                method, path, params = made(entry, names_of(unseen))
                status, body = self.service.ask(who, method, path, params)
                absent = made(entry, ABSENT)
                absent_status, absent_body = self.service.ask(who, *absent)
                # The same answer, the names aside.
                shown = body.decode()
                for mark, name in names_of(unseen).items():
                    shown = shown.replace(name, ABSENT[mark])
                self.assertEqual((status, shown), (absent_status, absent_body.decode()),
                                 (who, path))

    def test_a_viewer_reads_its_project_as_an_admin_does_and_may_not_write_there(self):
        for who, seen in SEES.items():
            for entry in READS:
                method, path, params = made(entry, names_of(seen))
                status, body = self.service.ask(who, method, path, params)
                # (A folder without its slash is redirected to it.)
                self.assertIn(status, (200, 302), (who, path, body))
                self.assertEqual((status, body),
                                 self.service.ask("root", method, path, params), path)
            for entry in WRITES:
                method, path, params = made(entry, names_of(seen))
                status, body = self.service.ask(who, method, path, params)
                if who.startswith("v"):
                    self.assertEqual((status, json.loads(body)["message"]),
                                     (403, "this needs the operator role"), path)
                else:
                    self.assertNotIn(status, (401, 403), (who, path, body))

    def test_a_refused_write_does_nothing(self):
        daemon = self.service.daemon
        for method, path, params in (
                ("POST", "schedule.json", {"project": "shop", "spider": "echo",
                                           "jobid": "viewer-tried"}),
                ("POST", "pauseschedule.json", {"project": "shop", "name": "shop-sched"}),
                ("POST", "delschedule.json", {"project": "shop", "name": "shop-sched"})):
            self.assertEqual(self.service.ask("vshop", method, path, params)[0], 403)
        self.assertEqual(daemon.find("viewer-tried"), (None, None))
        [sched] = daemon.get("listschedules.json", {"name": "shop-sched"})[1]["schedules"]
        self.assertFalse(sched["paused"])

    def test_an_operator_writes_on_its_project(self):
        status, body = self.service.ask("oshop", "POST", "schedule.json", {
            "project": "shop", "spider": "echo", "jobid": "by-operator"})
        self.assertEqual(status, 200, body)
        self.service.daemon.wait_state("by-operator", "finished")
        status, body = self.service.ask("oshop", "POST", "schedule.json", {
            "project": "news", "spider": "echo", "jobid": "by-operator-news"})
        self.assertEqual((status, json.loads(body)["message"]),
                         (404, "no project 'news' (projects: shop)"))

    def test_admin_gets_everything(self):
        for method, path, params in GLOBAL:
            status, body = self.service.ask("root", method, path, params)
            expected = 400 if path in ("delproject.json", "addversion.json",
                                       "delversion.json") else 200
            self.assertEqual(status, expected, (path, body))
        for who in ("vshop", "oshop"):
            for path in ("delproject.json", "addversion.json", "delversion.json"):
                status, body = self.service.ask(who, "POST", path, {"project": "shop"})
                self.assertEqual((status, json.loads(body)["message"]),
                                 (403, "this needs the admin role"))

    def test_no_listing_count_or_page_shows_another_projects_job(self):
        for who, seen in SEES.items():
            unseen = "news" if seen == "shop" else "shop"
            for method, path, params in GLOBAL:
                status, body = self.service.ask(who, method, path, params)
                if status != 200:
                    continue
                for hidden in (f"{unseen}-job", f"{unseen}-sched", f"{unseen}/"):
                    self.assertNotIn(hidden.encode(), body, (who, path))
            _, body = self.service.ask(who, "GET", "listprojects.json")
            self.assertEqual(json.loads(body)["projects"], [seen])
            _, body = self.service.ask(who, "GET", "listjobs.json")
            listed = json.loads(body)
            self.assertEqual({e["project"] for state in ("pending", "running", "finished")
                              for e in listed[state]}, {seen})
            _, mine = self.service.ask("root", "GET", "listjobs.json", {"project": seen})
            mine = json.loads(mine)
            _, counted = self.service.ask(who, "GET", "daemonstatus.json")
            counted = json.loads(counted)
            self.assertEqual([counted[s] for s in ("pending", "running", "finished")],
                             [len(mine[s]) for s in ("pending", "running", "finished")])
            _, body = self.service.ask(who, "GET", "listschedules.json")
            self.assertEqual([s["name"] for s in json.loads(body)["schedules"]],
                             [f"{seen}-sched"])
            _, body = self.service.ask(who, "GET", "listnodes.json")
            self.assertEqual([n["projects"] for n in json.loads(body)["nodes"]], [[seen]])

    def test_the_event_stream_carries_only_the_projects_a_token_sees(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.service.daemon.port,
                                                timeout=30)
        self.addCleanup(connection.close)
        connection.request("GET", "/events", headers=self.service.headers("vshop"))
        answer = connection.getresponse()
        self.assertEqual(answer.status, 200)
        daemon = self.service.daemon
        shop = daemon.must_schedule("shop", "echo", jobid="streamed-shop")
        news = daemon.must_schedule("news", "echo", jobid="streamed-news")
        for jobid in (shop, news):
            daemon.wait_state(jobid, "finished")
        read = b""
        deadline = time.monotonic() + 10
        while b"streamed-shop" not in read or b'"state":"finished"' not in read \
                and time.monotonic() < deadline:
            if select.select([answer.fp], [], [], 0.5)[0]:
                read += answer.fp.read1(65536)
            if time.monotonic() > deadline:
                break
        time.sleep(0.5)
        if select.select([answer.fp], [], [], 0.5)[0]:
            read += answer.fp.read1(65536)
        self.assertIn(b"streamed-shop", read)
        self.assertNotIn(b"streamed-news", read)

    def test_basic_auth_with_the_token_name_as_the_username(self):
        status, body = self.service.ask("vshop", "GET", "listprojects.json", basic=True)
        self.assertEqual((status, json.loads(body)["projects"]), (200, ["shop"]))


class WhileItRunsTests(unittest.TestCase):
    def setUp(self):
        self.service = service()

    def test_a_token_added_while_it_runs_works_and_a_revocation_takes_effect_in_a_second(self):
        directory = self.service.daemon.directory
        secret = token_command("add", "passing", "--role", "viewer", "--project", "shop",
                               "--dir", directory)
        headers = {"Authorization": "Bearer " + secret}
        port = self.service.daemon.port

        def status():
            return request(port, "GET", "/listprojects.json", headers=headers)[0]

        self.assertEqual(status(), 200)
        token_command("revoke", "passing", "--dir", directory)
        revoked = time.monotonic()
        while status() != 401:
            self.assertLess(time.monotonic() - revoked, 1.0)
            time.sleep(0.02)


    def test_an_event_stream_of_a_token_revoked_ends_within_a_second(self):
        directory = self.service.daemon.directory
        secret = token_command("add", "streamer", "--role", "viewer", "--project", "shop",
                               "--dir", directory)
        connection = http.client.HTTPConnection("127.0.0.1", self.service.daemon.port,
                                                timeout=30)
        self.addCleanup(connection.close)
        connection.request("GET", "/events", headers={"Authorization": "Bearer " + secret})
        answer = connection.getresponse()
        self.assertEqual(answer.status, 200)
        self.assertIn(b"connected", answer.read1(65536))
        token_command("revoke", "streamer", "--dir", directory)
        revoked = time.monotonic()
        ended = False
        while time.monotonic() - revoked < 1.0:
            if select.select([answer.fp], [], [], 0.05)[0]:
                # The answer ends (its last chunk): the reader sees its end.
                if answer.read1(65536) == b"" or answer.isclosed():
                    ended = True
                    break
        self.assertTrue(ended, "the stream of a revoked token is still open after a second")


class ScrapydClientsTests(unittest.TestCase):
    """scrapyd's clients give a token as basic auth: its name, its secret."""

    def setUp(self):
        self.service = service()
        self.url = f"http://127.0.0.1:{self.service.daemon.port}"

    def test_python_scrapyd_api(self):
        from scrapyd_api import ScrapydAPI

        secrets = self.service.secrets
        viewer = ScrapydAPI(self.url, auth=("vshop", secrets["vshop"]))
        self.assertEqual(viewer.list_projects(), ["shop"])
        self.assertIn("echo", viewer.list_spiders("shop"))
        self.assertEqual(viewer.job_status("shop", "shop-job"), "finished")
        operator = ScrapydAPI(self.url, auth=("oshop", secrets["oshop"]))
        jobid = operator.schedule("shop", "echo")
        self.service.daemon.wait_state(jobid, "finished")

    def test_scrapyd_client(self):
        from scrapyd_client.pyclient import ScrapydClient

        client = ScrapydClient(self.url, username="oshop",
                               password=self.service.secrets["oshop"])
        self.assertEqual(client.projects(), ["shop"])
        jobid = client.schedule("shop", "echo", [])
        self.service.daemon.wait_state(jobid, "finished")
        self.assertEqual(client.status(jobid)["currstate"], "finished")
        anonymous = ScrapydClient(self.url)
        from scrapyd_client.exceptions import ErrorResponse
        with self.assertRaises(Exception) as caught:
            anonymous.projects()
        self.assertNotIsInstance(caught.exception, AssertionError)
        del ErrorResponse


class EndpointTableTests(unittest.TestCase):
    def test_the_table_names_every_path_the_root_serves(self):
        from types import SimpleNamespace

        from netweir_serve.service import site_resources
        from netweir_serve.store.sqlite import SQLiteJobStore
        from netweir_serve.web.api import Api
        from netweir_serve.web.root import Root
        from twisted.internet.task import Clock

        store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(store.close)
        api = Api(projects=None, store=store, scheduler=None, launcher=None, reader=None,
                  submitter=None, timetable=None)
        watching = SimpleNamespace(hub=None, metrics=None)
        root = Root(api, self.mktemp(), pages=site_resources(api, watching))
        self.assertEqual(set(root.children), set(ENDPOINT_RULES))
