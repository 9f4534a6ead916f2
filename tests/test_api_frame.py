"""The daemon as a real process: its JSON frame, errors, and ways to start."""

import json
import os
import random
import socket
import subprocess
import sys
import tempfile

from twisted.trial import unittest

from netweir_serve.reliability.cgroups import JobGroups

from .processes import ROOT, Daemon, free_port, shared

SPIDER = '''
import netweir

class Echo(netweir.Spider):
    name = "echo"
    start_urls = ["http://127.0.0.1:9/"]

    async def parse(self, page):
        yield {}
'''


def make_project(base):
    folder = os.path.join(base, "shop")
    os.makedirs(folder)
    with open(os.path.join(folder, "echo.py"), "w") as f:
        f.write(SPIDER)
    return folder


class FrameTests(unittest.TestCase):
    """One daemon for every test of the class: these tests change nothing."""

    def setUp(self):
        self.daemon = shared("frame-daemon", self._start, Daemon.kill)

    @staticmethod
    def _start():
        base = tempfile.mkdtemp(prefix="frame-", dir=os.getcwd())
        return Daemon(os.path.join(base, "dir"), [f"shop={make_project(base)}"]).start()

    def test_daemonstatus(self):
        status, answer = self.daemon.get("daemonstatus.json")
        self.assertEqual(status, 200)
        self.assertEqual(answer["status"], "ok")
        self.assertEqual(answer["node_name"], socket.gethostname())
        for key in ("pending", "running", "finished"):
            self.assertIsInstance(answer[key], int)
        # What this machine's control groups allow (reliability/cgroups.py).
        self.assertEqual(answer["limits"],
                         JobGroups.detect(self.daemon.directory).available())

    def test_listprojects(self):
        self.assertEqual(self.daemon.get("listprojects.json")[1]["projects"], ["shop"])

    def test_listversions_always_empty(self):
        for project in ("shop", "other", "SHOP"):
            status, answer = self.daemon.get("listversions.json", {"project": project})
            self.assertEqual((status, answer["status"], answer["versions"]), (200, "ok", []))

    def test_delproject_is_an_error_that_says_what_to_do(self):
        status, answer = self.daemon.post("delproject.json", {"project": "shop"})
        self.assertEqual((status, answer["status"]), (400, "error"))
        self.assertIn("--project", answer["message"])
        self.assertIn("shop", self.daemon.get("listprojects.json")[1]["projects"])

    def test_deploying_is_refused(self):
        for endpoint in ("addversion.json", "delversion.json"):
            status, answer = self.daemon.post(endpoint, {"project": "x", "version": "1"})
            self.assertEqual((status, answer["status"]), (400, "error"))
            self.assertIn("not deployed", answer["message"])

    def test_unknown_endpoint_is_a_json_404(self):
        for path in ("/nosuch.json", "/listjobs", "/listjobs.json/extra", "/schedule.json.bak"):
            status, headers, body = self.daemon.call("GET", path)
            self.assertEqual(status, 404, path)
            self.assertEqual(headers["Content-Type"], "application/json")
            self.assertEqual(json.loads(body)["status"], "error")

    def test_wrong_method_is_a_405_naming_the_method(self):
        status, answer = self.daemon.get("schedule.json", {"project": "shop", "spider": "echo"})
        self.assertEqual(status, 405)
        self.assertIn("POST", answer["message"])
        status, answer = self.daemon.post("daemonstatus.json")
        self.assertEqual(status, 405)
        status, headers, _ = self.daemon.call("DELETE", "/listjobs.json")
        self.assertEqual(status, 405)
        self.assertIn("GET", headers["Allow"])

    def test_head_works_where_get_does(self):
        status, headers, body = self.daemon.call("HEAD", "/daemonstatus.json")
        self.assertEqual((status, body), (200, b""))
        self.assertEqual(headers["Content-Type"], "application/json")

    def test_body_over_one_mebibyte_is_413(self):
        body = b"project=" + b"x" * (1 << 20)
        status, _, answer = self.daemon.call(
            "POST", "/schedule.json", body=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 413)
        self.assertIn("1 MiB", json.loads(answer)["message"])

    def test_body_that_is_not_utf8_form_data_is_400(self):
        for body, kind in ((b"project=%ff%fe", "application/x-www-form-urlencoded"),
                           (b"project=\xff", "application/x-www-form-urlencoded"),
                           (b'{"project": "shop"}', "application/json")):
            status, _, answer = self.daemon.call("POST", "/schedule.json", body=body,
                                                 headers={"Content-Type": kind})
            self.assertIn(status, (400, 415), body)
            self.assertEqual(json.loads(answer)["status"], "error")

    def test_nul_character_in_any_parameter_is_refused(self):
        for form in ([("project", "shop"), ("spider", "echo"), ("category", "a\0b")],
                     [("project", "shop"), ("spider", "echo"), ("setting", "robots_agent=a\0")]):
            status, answer = self.daemon.post("schedule.json", form)
            self.assertEqual(status, 400)
            self.assertIn("NUL", answer["message"])
        self.assertEqual(self.daemon.get("daemonstatus.json")[1]["pending"], 0)

    def test_parameters_from_query_and_body_together(self):
        status, _, body = self.daemon.call(
            "POST", "/cancel.json?project=shop", body=b"job=nosuch",
            headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["prevstate"], None)

    def test_names_are_checked_with_a_message_naming_the_parameter(self):
        status, answer = self.daemon.get("listspiders.json", {"project": "../etc"})
        self.assertEqual(status, 400)
        self.assertIn("project", answer["message"])
        self.assertIn("../etc", answer["message"])
        status, answer = self.daemon.get("jobstats.json", {"job": "a/b"})
        self.assertEqual(status, 400)
        self.assertIn("job", answer["message"])
        status, answer = self.daemon.get("listspiders.json")
        self.assertEqual(status, 400)
        self.assertIn("missing parameter 'project'", answer["message"])

    def test_double_slash_paths_as_scrapyd_client_builds_them(self):
        status, _, body = self.daemon.call("GET", "//listprojects.json")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["projects"], ["shop"])

    def test_hundreds_of_malformed_requests_leave_it_answering(self):
        rng = random.Random(1234)
        junk = [
            b"GET /%zz%%%.json HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET /logs/../../etc/passwd HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"BREW /coffee HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"POST /schedule.json HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\n\xff\xfe\x00\x01\x02",
            b"POST /schedule.json HTTP/1.1\r\nHost: localhost\r\nContent-Length: -1\r\n\r\n",
            b"POST /schedule.json HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"\x00\x01\x02\x03\r\n\r\n",
            b"GET " + b"/a" * 5000 + b" HTTP/1.1\r\n\r\n",
            b"GET /listjobs.json?project=%C0%AF HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET /items/a/b/c.jl%00.txt HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ]
        for i in range(300):
            if i % 3 == 0:
                payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            else:
                payload = rng.choice(junk)
            with socket.create_connection(("127.0.0.1", self.daemon.port), timeout=10) as s:
                try:
                    s.sendall(payload)
                    s.shutdown(socket.SHUT_WR)
                    answer = s.recv(65536)
                except OSError:
                    continue
                self.assertNotIn(b"Traceback", answer)
                if answer.startswith(b"HTTP/1.1 5"):
                    self.fail(f"server error for {payload[:80]!r}: {answer[:200]!r}")
        self.assertEqual(self.daemon.get("daemonstatus.json")[1]["status"], "ok")


class DirectoryLockTests(unittest.TestCase):
    def test_second_service_on_a_locked_dir_exits_and_the_first_keeps_serving(self):
        directory = os.path.abspath(self.mktemp())
        first = Daemon(directory).start()
        self.addCleanup(first.kill)
        before = sorted(os.listdir(directory))
        with open(os.path.join(directory, "lock")) as f:
            lock_text = f.read()
        second = subprocess.run(
            [sys.executable, "-m", "netweir_serve", "--dir", directory, "--port",
             str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(second.returncode, 1)
        self.assertIn(directory, second.stderr)
        self.assertIn("in use", second.stderr)
        self.assertEqual(sorted(os.listdir(directory)), before)
        with open(os.path.join(directory, "lock")) as f:
            self.assertEqual(f.read(), lock_text)
        self.assertEqual(first.get("daemonstatus.json")[1]["status"], "ok")

    def test_lock_dies_with_a_killed_service(self):
        directory = os.path.abspath(self.mktemp())
        first = Daemon(directory).start()
        first.kill()
        again = Daemon(directory).start()
        self.addCleanup(again.kill)
        self.assertEqual(again.get("daemonstatus.json")[1]["status"], "ok")

    def test_port_in_use_is_a_clear_error_with_status_1(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            done = subprocess.run(
                [sys.executable, "-m", "netweir_serve", "--dir", os.path.abspath(self.mktemp()),
                 "--port", str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn(f"cannot listen on 127.0.0.1:{port}", done.stderr)


class StartMethodTests(unittest.TestCase):
    """Each of the four ways to start serves daemonstatus.json."""

    def check(self, command, use_options=True):
        directory = os.path.abspath(self.mktemp())
        daemon = Daemon(directory, command=command)
        if not use_options:
            daemon.port = free_port()
            daemon.argv = lambda: list(command)
            daemon.env = {"NETWEIR_SERVE_OPTIONS": f"--port {daemon.port} --dir {directory}"}
        self.addCleanup(daemon.kill)
        daemon.start()
        status, answer = daemon.get("daemonstatus.json")
        self.assertEqual((status, answer["status"]), (200, "ok"))
        self.assertEqual(daemon.stop(), 0)

    def test_console_script(self):
        self.check([os.path.join(os.path.dirname(sys.executable), "netweir-serve")])

    def test_python_m(self):
        self.check([sys.executable, "-m", "netweir_serve"])

    def test_twistd_plugin(self):
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        self.check([twistd, "--pidfile=", "-n", "netweir-serve"])

    def test_tac_file(self):
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        self.check([twistd, "--pidfile=", "-ny", os.path.join(ROOT, "netweir-serve.tac")],
                   use_options=False)
