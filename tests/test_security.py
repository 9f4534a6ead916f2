"""The front door on the real daemon: credentials stay secret, refusals hold,
and the default request deadline cuts a slow client."""

import os
import socket
import subprocess
import sys
import time
import unittest

from netweir_serve import _proctree

from .processes import ROOT, alive, wait_until
from .test_jobs import CrawlTestCase

USER, PASSWORD = "operator", "s3cr:et-pass"


def descendants_of(pid):
    return _proctree.descendants(pid)
SECRET_ENV = {"NETWEIR_SERVE_USERNAME": USER, "NETWEIR_SERVE_PASSWORD": PASSWORD}


class CredentialTests(CrawlTestCase):
    def test_credentials_reach_no_job_no_log_and_no_listing(self):
        daemon = self.daemon(env=SECRET_ENV, auth=(USER, PASSWORD))
        jobid = daemon.must_schedule("shop", "slow", delay="0.2")
        pid = daemon.wait_state(jobid, "running")["pid"]
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        self.assertNotIn(PASSWORD.encode(), environ)
        self.assertNotIn(b"NETWEIR_SERVE_", environ)
        status, headers, listing = daemon.call("GET", "/listjobs.json")
        self.assertNotIn(PASSWORD.encode(), listing)
        daemon.post("cancel.json", {"project": "shop", "job": jobid})
        entry = daemon.wait_state(jobid, "finished")
        self.assertNotIn(PASSWORD.encode(), daemon.call("GET", entry["log_url"])[2])
        self.assertFalse(alive(pid))
        daemon.stop()
        self.assertNotIn(PASSWORD, daemon.output())

    def test_a_site_password_given_as_a_setting_is_not_listed(self):
        daemon = self.daemon("--max-jobs", "1")
        blocker = daemon.must_schedule("shop", "slow", delay="0.2")
        daemon.wait_state(blocker, "running")
        waiting = daemon.must_schedule("shop", "echo", ["http_auth=me:site-pass",
                                                        "http_auth_domain=example.com"])
        _, listing = daemon.get("listjobs.json")
        [entry] = [e for e in listing["pending"] if e["id"] == waiting]
        self.assertEqual(entry["settings"]["http_auth"], "me:***")
        self.assertNotIn(b"site-pass", daemon.call("GET", "/listjobs.json")[2])
        for jobid in (waiting, blocker):
            daemon.post("cancel.json", {"project": "shop", "job": jobid})
        daemon.wait_state(blocker, "finished")

    def test_every_kind_of_path_needs_the_credentials(self):
        daemon = self.daemon(env=SECRET_ENV, auth=(USER, PASSWORD))
        jobid = daemon.must_schedule("shop", "echo")
        daemon.wait_state(jobid, "finished")
        daemon.auth = None
        for path in ("/", "/daemonstatus.json", "/listjobs.json", f"/logs/shop/echo/{jobid}.log",
                     f"/items/shop/echo/{jobid}.jl", "/nosuch"):
            status, headers, _ = daemon.call("GET", path)
            self.assertEqual(status, 401, path)
            self.assertIn("Basic", headers["WWW-Authenticate"])
        daemon.auth = (USER, "wrong")
        self.assertEqual(daemon.call("GET", "/daemonstatus.json")[0], 401)
        daemon.auth = (USER, PASSWORD)
        self.assertEqual(daemon.call("GET", f"/logs/shop/echo/{jobid}.log")[0], 200)

    def test_pages_cannot_reach_it(self):
        daemon = self.daemon()
        for headers in ({"Origin": "null"}, {"Origin": ""}, {"Origin": "http://evil.example"},
                        {"Host": "evil.example"}, {"Host": "evil.example:6800"}):
            status, _, body = daemon.call("POST", "/schedule.json",
                                          [("project", "shop"), ("spider", "echo"),
                                           ("jobid", "from-a-page")], headers=headers)
            self.assertEqual(status, 403, headers)
        self.assertEqual(daemon.find("from-a-page"), (None, None))
        for host in ("localhost:1234", "127.0.0.1", "[::1]"):
            self.assertEqual(daemon.call("GET", "/daemonstatus.json",
                                         headers={"Host": host})[0], 200, host)


class DeadlineTests(CrawlTestCase):
    def test_slow_sender_is_cut_at_the_default_15_seconds(self):
        daemon = self.daemon()
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=30) as s:
            s.sendall(b"GET /daemonstatus.json HTTP/1.1\r\n")
            closed_at = None
            for _ in range(20):
                try:
                    s.sendall(b"X")
                    time.sleep(1.0)
                except OSError:
                    closed_at = time.monotonic()
                    break
                s.settimeout(0.01)
                try:
                    if s.recv(1) == b"":
                        closed_at = time.monotonic()
                        break
                except socket.timeout:
                    pass
                except OSError:
                    closed_at = time.monotonic()
                    break
                s.settimeout(30)
        self.assertIsNotNone(closed_at, "the connection was never closed")
        self.assertGreaterEqual(closed_at - started, 14)
        self.assertLess(closed_at - started, 18)
        self.assertEqual(daemon.get("daemonstatus.json")[1]["status"], "ok")


class EventStreamCapTests(CrawlTestCase):
    """Issue 26: idle /events streams count against caps of their own (4
    an address, 64 in all), so plain requests always have room."""

    def test_streams_past_their_caps_get_429_and_plain_requests_still_get_in(self):
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.18", 0))
        except OSError:
            self.skipTest("needs loopback addresses 127.0.0.2-18")
        finally:
            probe.close()
        daemon = self.daemon()

        def open_stream(source):
            conn = socket.create_connection(("127.0.0.1", daemon.port), timeout=10,
                                            source_address=(source, 0))
            self.addCleanup(conn.close)
            conn.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                self.assertTrue(chunk, "closed before an answer")
                head += chunk
            return int(head.split(b" ")[1])

        # One address: its first four are streams, the fifth is refused.
        codes = [open_stream("127.0.0.2") for _ in range(5)]
        self.assertEqual(codes, [200, 200, 200, 200, 429])
        # Sixteen more addresses, four each: 64 in all, then none more.
        codes = [open_stream(f"127.0.0.{n}") for n in range(3, 18) for _ in range(4)]
        self.assertEqual(codes.count(200), 60)
        self.assertEqual(codes.count(429), 0)
        self.assertEqual(open_stream("127.0.0.18"), 429)
        # Plain requests, from an address holding streams and from others.
        for source in ("127.0.0.2", "127.0.0.1", "127.0.0.18"):
            conn = socket.create_connection(("127.0.0.1", daemon.port), timeout=10,
                                            source_address=(source, 0))
            self.addCleanup(conn.close)
            conn.sendall(b"GET /daemonstatus.json HTTP/1.1\r\nHost: localhost\r\n\r\n")
            self.assertTrue(conn.recv(4096).startswith(b"HTTP/1.1 200"), source)


class SecretSettingTests(CrawlTestCase):
    """Issue 16, item 5: no credential a setting carries is listed, and no
    setting travels on a command line, where every user reads it."""

    def test_every_credential_in_a_setting_is_masked_in_every_listing(self):
        daemon = self.daemon("--max-jobs", "1")
        blocker = daemon.must_schedule("shop", "slow", delay="0.2")
        daemon.wait_state(blocker, "running")
        secrets = ["proxy=http://me:proxy-pass@127.0.0.1:3128",
                   "proxies=http://a:first-pass@127.0.0.1:1,socks5://b:second-pass@127.0.0.1:2",
                   "http_auth=me:site-pass", "http_auth_domain=example.com"]
        waiting = daemon.must_schedule("shop", "echo", secrets)
        _, listing = daemon.get("listjobs.json")
        [entry] = [e for e in listing["pending"] if e["id"] == waiting]
        self.assertEqual(entry["settings"]["proxy"], "http://***@127.0.0.1:3128")
        self.assertEqual(entry["settings"]["proxies"],
                         "http://***@127.0.0.1:1,socks5://***@127.0.0.1:2")
        added = daemon.post("addschedule.json", {
            "project": "shop", "spider": "echo", "every": "1d", "name": "masked",
            "setting": "proxy=http://me:sched-pass@127.0.0.1:3128"})
        self.assertEqual(added[0], 200, added)
        for path in ("/listjobs.json", "/listjobs.json?project=shop", "/jobs",
                     "/listschedules.json", f"/jobstats.json?job={waiting}"):
            body = daemon.call("GET", path)[2]
            for word in (b"proxy-pass", b"first-pass", b"second-pass", b"site-pass",
                         b"sched-pass"):
                self.assertNotIn(word, body, path)
        for jobid in (waiting, blocker):
            daemon.post("cancel.json", {"project": "shop", "job": jobid})
        daemon.wait_state(blocker, "finished")

    def test_credentials_in_any_spelling_are_masked_in_listings_schedules_and_events(self):
        # Issue 26: a proxy without a scheme, a password with a space, an
        # API key as the user name, and a login in a spider argument.
        daemon = self.daemon("--max-jobs", "1")
        stream = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
        self.addCleanup(stream.close)
        stream.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        blocker = daemon.must_schedule("shop", "slow", delay="0.2")
        daemon.wait_state(blocker, "running")
        spellings = ["proxy=me:bare-pass@127.0.0.1:3128",
                     "proxies=http://a:space pass@127.0.0.1:1,http://KEY-AS-USER:@127.0.0.1:2"]
        waiting = daemon.must_schedule("shop", "echo", spellings,
                                       feed="https://me:argument-pass@127.0.0.1/")
        _, listing = daemon.get("listjobs.json")
        [entry] = [e for e in listing["pending"] if e["id"] == waiting]
        self.assertEqual(entry["settings"], {
            "proxy": "***@127.0.0.1:3128",
            "proxies": "http://***@127.0.0.1:1,http://***@127.0.0.1:2"})
        added = daemon.post("addschedule.json", {
            "project": "shop", "spider": "echo", "every": "1d", "name": "spelt",
            "setting": "proxy=KEY-IN-SCHEDULE:@127.0.0.1:3128"})
        self.assertEqual(added[0], 200, added)
        secrets = (b"bare-pass", b"space pass", b"KEY-AS-USER", b"argument-pass",
                   b"KEY-IN-SCHEDULE")
        for path in ("/listjobs.json", "/jobs", "/listschedules.json",
                     f"/jobstats.json?job={waiting}"):
            body = daemon.call("GET", path)[2]
            for word in secrets:
                self.assertNotIn(word, body, path)
        for jobid in (waiting, blocker):
            daemon.post("cancel.json", {"project": "shop", "job": jobid})
        daemon.wait_state(blocker, "finished")
        seen = b""
        stream.settimeout(0.5)
        deadline = time.monotonic() + 10
        while b"event: schedule" not in seen or waiting.encode() not in seen:
            self.assertLess(time.monotonic(), deadline, seen[-2000:])
            try:
                seen += stream.recv(65536)
            except socket.timeout:
                pass
        for word in secrets:
            self.assertNotIn(word, seen)

    def test_settings_and_arguments_reach_the_crawl_but_no_command_line(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "slow", ["max_items=3"], delay="0.3",
                                     marker="argument-marker")
        parent = daemon.wait_state(jobid, "running")["pid"]
        wait_until(lambda: descendants_of(parent), 10, "the crawl under its parent")
        for pid in [parent] + descendants_of(parent):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            self.assertNotIn(b"max_items", cmdline)
            self.assertNotIn(b"argument-marker", cmdline)
        entry = daemon.wait_state(jobid, "finished")
        _, _, items = daemon.call("GET", entry["items_url"])
        # max_items=3 took effect: the slow chain stops after three pages.
        self.assertEqual(len(items.splitlines()), 3)
        private = os.path.join(daemon.directory, "run", jobid + ".json")
        self.assertFalse(os.path.exists(private))


class PlantedLinkTests(CrawlTestCase):
    def test_a_link_planted_under_logs_or_items_is_not_followed(self):
        daemon = self.daemon()
        jobid = daemon.must_schedule("shop", "echo")
        daemon.wait_state(jobid, "finished")
        outside = os.path.join(self.base, "outside")
        os.makedirs(os.path.join(outside, "echo"))
        with open(os.path.join(outside, "echo", "stolen.log"), "w") as f:
            f.write("outside DIR\n")
        logs = os.path.join(daemon.directory, "logs", "shop", "echo")
        os.symlink(os.path.join(outside, "echo", "stolen.log"), os.path.join(logs, "evil.log"))
        items = os.path.join(daemon.directory, "items")
        os.symlink(outside, os.path.join(items, "elsewhere"))
        for path in ("/logs/shop/echo/evil.log", "/items/elsewhere/echo/stolen.jl"):
            for method in ("GET", "HEAD"):
                status, _, body = daemon.call(method, path)
                self.assertEqual(status, 404, (method, path))
                self.assertNotIn(b"outside DIR", body)
        self.assertEqual(daemon.call("GET", f"/logs/shop/echo/{jobid}.log")[0], 200)

    def test_a_project_folder_linked_under_logs_is_not_listed(self):
        # Issue 26: the listings follow the files' rule, no link on the way.
        daemon = self.daemon()
        outside = os.path.join(self.base, "outside-listed")
        os.makedirs(os.path.join(outside, "secret-spider"))
        with open(os.path.join(outside, "secret-spider", "secretjob.log"), "w") as f:
            f.write("outside DIR\n" * 1000)
        logs = os.path.join(daemon.directory, "logs")
        os.makedirs(logs, exist_ok=True)
        # A served project whose folder is a link, and one served by no one.
        for name in ("shop", "linked"):
            os.symlink(outside, os.path.join(logs, name))
        for path in ("/logs/shop/", "/logs/shop/secret-spider/", "/logs/linked/",
                     "/logs/linked/secret-spider/", "/items/shop/secret-spider/"):
            status, _, body = daemon.call("GET", path)
            self.assertNotIn(b"secret", body, path)
            self.assertIn(status, (200, 404), path)


# Run in a fresh interpreter before an entry point: at the first import of
# WATCHED, print whether the process is dumpable (prctl PR_GET_DUMPABLE)
# and leave at once, the service never started.
_WATCH = """
import ctypes, os, sys
WATCHED = {watched!r}
libc = ctypes.CDLL(None)

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == WATCHED:
            print("dumpable", libc.prctl(3, 0, 0, 0, 0), flush=True)
            os._exit(0)
        return None

sys.meta_path.insert(0, Watch())
sys.argv = {argv!r}
"""


class EnvironmentWindowTests(unittest.TestCase):
    """Issue 26: a crawl left running across a restart read the new
    daemon's password from /proc/PID/environ in the 460-700 ms before the
    daemon made itself non-dumpable (after Twisted's import and the
    options). Every entry point now does so first."""

    def dumpable_at(self, watched, argv, start):
        source = _WATCH.format(watched=watched, argv=argv) + start
        done = subprocess.run([sys.executable, "-c", source], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(done.stdout.strip().splitlines()[-1:], ["dumpable 0"], done.stderr)

    def test_python_m_is_undumpable_before_it_imports_twisted(self):
        self.dumpable_at("twisted", ["netweir-serve", "--help"],
                         "import runpy\nrunpy.run_module('netweir_serve', run_name='__main__')")

    def test_the_console_script_is_undumpable_before_it_imports_twisted(self):
        self.dumpable_at("twisted", ["netweir-serve", "--help"],
                         "from importlib.metadata import entry_points\n"
                         "[script] = entry_points(group='console_scripts', name='netweir-serve')\n"
                         "script.load()()")

    def test_twistd_is_undumpable_before_it_reads_the_options(self):
        self.dumpable_at("netweir_serve.options", ["twistd", "-n", "netweir-serve", "--help"],
                         "from twisted.scripts.twistd import run\nrun()")

    def test_the_tac_file_is_undumpable_before_it_reads_the_options(self):
        self.dumpable_at("netweir_serve.options",
                         ["twistd", "--pidfile=", "-ny", os.path.join(ROOT, "netweir-serve.tac")],
                         "from twisted.scripts.twistd import run\nrun()")
