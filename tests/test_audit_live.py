"""The audit on the real service, over real HTTP (issue 26, "Audit"):
who scheduled and cancelled each job of a run, as audit.json and
listjobs.json's ``by`` tell it; no row of a write that answered ok lost
to a ``kill -9`` right after the answer; and the throttle of wrong
passwords, one address refused while another is served meanwhile.
"""

import base64
import http.client
import json
import os
import pwd
import tempfile
import threading
import time
import urllib.parse

from twisted.trial import unittest

from .processes import Daemon, request, shared_site
from .spiders import write_project
from .test_access_live import token_command


def project_dirs(base, names=("shop", "news")):
    site = shared_site()
    return [f"{name}={write_project(os.path.join(base, name), site.base)}" for name in names]


class Tokens:
    """A daemon serving shop and news, with an operator of shop, a viewer
    of shop and an admin."""

    def __init__(self, test, args=(), jobs_db=None):
        base = tempfile.mkdtemp(prefix="audit-", dir=os.getcwd())
        self.directory = os.path.join(base, "dir")
        table = ("--dir", self.directory) if jobs_db is None else ("--jobs-db", jobs_db)
        args = tuple(args) + (() if jobs_db is None else ("--jobs-db", jobs_db))
        add = ("add", *table)
        self.secrets = {
            "oshop": token_command(*add, "oshop", "--role", "operator", "--project", "shop"),
            "vshop": token_command(*add, "vshop", "--role", "viewer", "--project", "shop"),
            "root": token_command(*add, "root", "--role", "admin"),
        }
        self.daemon = Daemon(self.directory, project_dirs(base), ["--max-jobs", "1", *args])
        self.daemon.auth = ("root", self.secrets["root"])
        self.daemon.start()
        test.addCleanup(self.daemon.kill)

    def ask(self, who, method, path, params=None):
        status, _, body = request(self.daemon.port, method, "/" + path, params,
                                  headers={"Authorization": "Bearer " + self.secrets[who]})
        return status, json.loads(body)

    def audit(self, who="root", **params):
        status, answer = self.ask(who, "GET", "audit.json", params)
        assert status == 200, answer
        return answer["audit"]


def rows_of(audit):
    return [(r["who"], r["endpoint"], r["project"], r["target"], r["status"]) for r in audit]


class AuditTests(unittest.TestCase):
    def test_the_audit_shows_who_scheduled_and_cancelled_each_job(self):
        service = Tokens(self)
        ask = service.ask
        secret_url = "http://me:hunter2@shop.example/"
        status, a1 = ask("oshop", "POST", "schedule.json", {
            "project": "shop", "spider": "slow", "jobid": "a1", "delay": "1"})
        self.assertEqual(status, 200, a1)
        status, a2 = ask("root", "POST", "schedule.json", {
            "project": "shop", "spider": "echo", "category": secret_url})
        self.assertEqual(status, 200, a2)
        service.daemon.wait_state("a1", "running")
        # (a2 waits for a1's slot: --max-jobs 1.)
        self.assertEqual(ask("root", "POST", "cancel.json",
                             {"project": "shop", "job": a2["jobid"]})[1]["prevstate"], "pending")
        self.assertEqual(ask("oshop", "POST", "cancel.json",
                             {"project": "shop", "job": "a1"})[1]["prevstate"], "running")
        # Refused: a viewer's write (403 at the door), a duplicate id (409),
        # a spider that does not exist (400).
        self.assertEqual(ask("vshop", "POST", "schedule.json",
                             {"project": "shop", "spider": "echo"})[0], 403)
        self.assertEqual(ask("oshop", "POST", "schedule.json",
                             {"project": "shop", "spider": "echo", "jobid": "a1"})[0], 409)
        self.assertEqual(ask("oshop", "POST", "schedule.json",
                             {"project": "shop", "spider": "nosuch"})[0], 400)
        status, added = ask("oshop", "POST", "addschedule.json", {
            "project": "shop", "spider": "echo", "every": "1h", "name": "tick"})
        self.assertEqual(status, 200, added)
        self.assertEqual(ask("oshop", "POST", "pauseschedule.json",
                             {"project": "shop", "name": "tick", "note": "a look"})[0], 200)
        self.assertEqual(ask("oshop", "POST", "runschedule.json",
                             {"project": "shop", "name": "tick"})[0], 200)
        self.assertEqual(ask("oshop", "POST", "delschedule.json",
                             {"project": "shop", "name": "tick"})[0], 200)
        # A write on another project: not in shop's audit.
        self.assertEqual(ask("root", "POST", "schedule.json",
                             {"project": "news", "spider": "echo", "jobid": "n1"})[0], 200)

        audit = service.audit(project="shop")
        self.assertEqual(rows_of(audit), [
            ("oshop", "delschedule.json", "shop", "tick", 200),
            ("oshop", "runschedule.json", "shop", "tick", 200),
            ("oshop", "pauseschedule.json", "shop", "tick", 200),
            ("oshop", "addschedule.json", "shop", "tick", 200),
            ("oshop", "schedule.json", "shop", None, 400),
            ("oshop", "schedule.json", "shop", "a1", 409),
            ("vshop", "schedule.json", "shop", None, 403),
            ("oshop", "cancel.json", "shop", "a1", 200),
            ("root", "cancel.json", "shop", a2["jobid"], 200),
            ("root", "schedule.json", "shop", a2["jobid"], 200),
            ("oshop", "schedule.json", "shop", "a1", 200),
        ])
        self.assertEqual({r["address"] for r in audit}, {"127.0.0.1"})
        self.assertEqual(audit[-1]["change"], {"spider": "slow", "delay": "1"})
        self.assertEqual(audit[-2]["change"],
                         {"spider": "echo", "category": "http://***@shop.example/"})
        self.assertNotIn("hunter2", json.dumps(audit))
        self.assertEqual(audit[-3]["change"], {"prevstate": "pending"})
        self.assertEqual(audit[-4]["change"], {"prevstate": "running"})
        self.assertEqual(audit[2]["change"], {"note": "a look"})
        # listjobs.json: who queued each job.
        _, jobs = ask("root", "GET", "listjobs.json", {"project": "shop"})
        by = {e["id"]: e.get("by") for state in ("pending", "running", "finished")
              for e in jobs[state]}
        self.assertEqual(by["a1"], "oshop")
        self.assertEqual(by[a2["jobid"]], "root")
        fired = [jobid for jobid in by if jobid.startswith("tick-")]
        self.assertEqual([by[j] for j in fired], ["schedule:tick"])

        # since: from the cancel of a1 on (inclusive).
        since = audit[7]["time"]
        self.assertEqual(len(service.audit(project="shop", since=since)), 8)
        self.assertEqual(len(service.audit(project="shop", limit="2")), 2)
        # An operator reads its project's; a viewer is refused naming the
        # role; a project it cannot see is as one that does not exist.
        self.assertEqual(service.audit("oshop", project="shop"), audit)
        status, answer = ask("vshop", "GET", "audit.json", {"project": "shop"})
        self.assertEqual((status, answer["message"]), (403, "this needs the operator role"))
        status, answer = ask("oshop", "GET", "audit.json", {"project": "news"})
        self.assertEqual(status, 404)
        self.assertIn("no project 'news'", answer["message"])
        self.assertEqual(ask("oshop", "GET", "audit.json", {})[0], 400)
        self.assertEqual(ask("root", "GET", "audit.json", {"project": "shop",
                                                            "since": "yesterday"})[0], 400)
        # An admin without a project: every row, the tokens' changes too.
        everything = service.audit(limit="1000")
        tokens = [r for r in everything if r["endpoint"] == "token add"]
        self.assertEqual(sorted(r["target"] for r in tokens), ["oshop", "root", "vshop"])
        self.assertEqual({r["who"] for r in tokens}, {pwd.getpwuid(os.geteuid()).pw_name})
        self.assertIn(("root", "schedule.json", "news", "n1", 200), rows_of(everything))

    def test_kill_9_right_after_a_write_answered_ok_loses_no_audit_row(self):
        self.kill_9_loses_no_row(Tokens(self))

    def test_kill_9_right_after_a_write_answered_ok_loses_no_audit_row_on_postgresql(self):
        from . import pg
        self.kill_9_loses_no_row(Tokens(self, jobs_db=pg.fresh_url(self)))

    def kill_9_loses_no_row(self, service):
        daemon = service.daemon
        answered = []
        for n in range(4):
            status, answer = service.ask("oshop", "POST", "schedule.json", {
                "project": "shop", "spider": "echo", "jobid": f"k{n}"})
            self.assertEqual(status, 200, answer)
            answered.append(("schedule.json", f"k{n}"))
            status, answer = service.ask("oshop", "POST", "cancel.json",
                                         {"project": "shop", "job": f"k{n}"})
            self.assertEqual(status, 200, answer)
            answered.append(("cancel.json", f"k{n}"))
            daemon.kill()
            daemon.start()
        kept = [(r["endpoint"], r["target"]) for r in service.audit(project="shop")]
        self.assertEqual(list(reversed(kept)), answered)

    def test_behind_a_trusted_proxy_the_row_has_the_forwarded_address(self):
        service = Tokens(self, args=("--trusted-proxy", "127.0.0.1"))
        status, _, body = request(service.daemon.port, "POST", "/schedule.json", {
            "project": "shop", "spider": "echo", "jobid": "p1"}, headers={
            "Authorization": "Bearer " + service.secrets["oshop"],
            "X-Forwarded-For": "10.1.1.1, 203.0.113.5"})
        self.assertEqual(status, 200, body)
        [row] = service.audit(project="shop")
        self.assertEqual((row["target"], row["address"]), ("p1", "203.0.113.5"))

    def test_a_backfill_whose_client_went_away_is_done_and_recorded(self):
        self.backfill_left(Tokens(self))

    def test_a_backfill_whose_client_went_away_is_done_and_recorded_on_postgresql(self):
        from . import pg
        self.backfill_left(Tokens(self, jobs_db=pg.fresh_url(self)))

    def backfill_left(self, service):
        # The client sends a backfill of 90 due times and goes away at once:
        # the backfill is not cut short by its leaving (no job of it half
        # queued, no data folder undone), and its row says what was done.
        status, answer = service.ask("oshop", "POST", "addschedule.json", {
            "project": "shop", "spider": "echo", "every": "1m", "name": "tick"})
        self.assertEqual(status, 200, answer)
        now = time.time()
        start = time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(now - 92 * 60))
        end = time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(now - 2 * 60))
        body = urllib.parse.urlencode({"project": "shop", "name": "tick", "from": start,
                                       "to": end}).encode()
        connection = http.client.HTTPConnection("127.0.0.1", service.daemon.port, timeout=30)
        connection.request("POST", "/backfillschedule.json", body=body, headers={
            "Authorization": "Bearer " + service.secrets["oshop"],
            "Content-Type": "application/x-www-form-urlencoded"})
        connection.close()
        deadline = time.monotonic() + 120
        while True:
            rows = [r for r in service.audit(project="shop")
                    if r["endpoint"] == "backfillschedule.json"]
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        [row] = rows
        self.assertEqual((row["who"], row["target"], row["status"]), ("oshop", "tick", 200))
        _, jobs = service.ask("root", "GET", "listjobs.json", {"project": "shop"})
        listed = {e["id"] for state in ("pending", "running", "finished")
                  for e in jobs[state]}
        # (The schedule's own firings may have queued one more since.)
        self.assertEqual(len(row["change"]["queued"]), 90)
        self.assertLessEqual(set(row["change"]["queued"]), listed)


def ask_from(source, port, authorization):
    """The status of daemonstatus.json asked from the address ``source``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                            source_address=(source, 0))
    try:
        connection.request("GET", "/daemonstatus.json",
                           headers={"Authorization": authorization})
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class ThrottleLiveTests(unittest.TestCase):
    def test_a_hundred_wrong_passwords_get_429s_while_another_address_is_served(self):
        base = tempfile.mkdtemp(prefix="throttle-", dir=os.getcwd())
        daemon = Daemon(os.path.join(base, "dir"), project_dirs(base, ("shop",)),
                        env={"NETWEIR_SERVE_USERNAME": "me",
                             "NETWEIR_SERVE_PASSWORD": "right"}, auth=("me", "right"))
        daemon.start()
        self.addCleanup(daemon.kill)
        others, stop = [], threading.Event()

        def other_address():
            while not stop.is_set():
                others.append(ask_from("127.0.0.2", daemon.port, basic("me", "right")))

        beside = threading.Thread(target=other_address)
        beside.start()
        try:
            wrong = [ask_from("127.0.0.1", daemon.port, basic("me", f"wrong{n}"))
                     for n in range(100)]
        finally:
            stop.set()
            beside.join(30)
        self.assertEqual(wrong, [401] * 10 + [429] * 90)
        self.assertGreater(len(others), 10)
        self.assertEqual(set(others), {200})
        # The right password from the refused address waits its minute out.
        self.assertEqual(ask_from("127.0.0.1", daemon.port, basic("me", "right")), 429)
        self.assertEqual(daemon.output().count("gave wrong credentials more than 10"), 1)

