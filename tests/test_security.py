"""The front door on the real daemon: credentials stay secret, refusals hold,
and the default request deadline cuts a slow client."""

import socket
import time

from .processes import alive
from .test_jobs import CrawlTestCase

USER, PASSWORD = "operator", "s3cr:et-pass"
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
