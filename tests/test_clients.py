"""scrapyd's own client libraries against the real daemon, over real HTTP.

python-scrapyd-api (also what Gerapy uses) and scrapyd-client, library and
command line, used the way their users use them; then the daemon is asked
what it actually did. One daemon serves every test here and in
test_pages: each test schedules jobs of its own and looks only at those.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import requests
from scrapyd_api import ScrapydAPI
from scrapyd_api.exceptions import ScrapydResponseError
from scrapyd_client.exceptions import ErrorResponse
from scrapyd_client.pyclient import ScrapydClient
from twisted.trial import unittest

from .processes import Daemon, request, shared, shared_site, wait_until
from .spiders import FILES, write_project

SPIDERS = sorted(name[:-3] for name in FILES)


def serve():
    """The daemon shared by these tests: projects shop and news, two slots."""
    return shared("clients-daemon", _start, Daemon.kill)


def _start():
    site = shared_site()
    base = tempfile.mkdtemp(prefix="clients-", dir=os.getcwd())
    projects = [f"{name}={write_project(os.path.join(base, name), site.base)}"
                for name in ("shop", "news")]
    return Daemon(os.path.join(base, "dir"), projects, ["--max-jobs", "2"]).start()


def url(daemon):
    return f"http://127.0.0.1:{daemon.port}"


def echo_job():
    """(jobid, listjobs entry) of an echo job scheduled once through
    python-scrapyd-api with a setting, an argument and scrapyd's
    ``_version``, and finished."""
    return shared("clients-echo", _run_echo, lambda job: None)


def _run_echo():
    daemon = serve()
    jobid = ScrapydAPI(url(daemon)).schedule(
        "shop", "echo", settings={"max_items": "5"}, category="fiction", _version="r1")
    return jobid, daemon.wait_state(jobid, "finished")


def items_of(daemon, entry):
    status, _, body = daemon.call("GET", entry["items_url"])
    assert status == 200, status
    return [json.loads(line) for line in body.splitlines()]


class PythonScrapydApiTests(unittest.TestCase):
    def setUp(self):
        self.daemon = serve()
        self.api = ScrapydAPI(url(self.daemon))

    def test_lists_projects_spiders_and_no_versions(self):
        self.assertEqual(sorted(self.api.list_projects()), ["news", "shop"])
        self.assertEqual(sorted(self.api.list_spiders("shop")), SPIDERS)
        self.assertEqual(self.api.list_versions("shop"), [])

    def test_scheduled_job_ran_with_its_argument_and_its_log_reads(self):
        jobid, entry = echo_job()
        self.assertEqual(len(jobid), 32)
        self.assertEqual(self.api.job_status("shop", jobid), "finished")
        self.assertEqual(entry["outcome"], "finished")
        [item] = items_of(self.daemon, entry)
        self.assertEqual(item["category"], "fiction")
        listing = self.api.list_jobs("shop")
        self.assertIn(jobid, [e["id"] for e in listing["finished"]])
        status, headers, log = self.daemon.call("GET", entry["log_url"])
        self.assertEqual((status, headers["Content-Type"]), (200, "text/plain"))
        self.assertIn(b"crawl finished", log)

    def test_refusal_raises_with_the_status_and_the_message(self):
        # python-scrapyd-api raises on any non-2xx answer before reading the
        # JSON: its message is "Scrapyd returned a 400 error: " and the body.
        with self.assertRaises(ScrapydResponseError) as caught:
            self.api.schedule("shop", "echo", settings={"concurrency": "0"})
        self.assertIn("400 error", str(caught.exception))
        self.assertIn("concurrency", str(caught.exception))
        with self.assertRaises(ScrapydResponseError) as caught:
            self.api.list_spiders("nosuch")
        self.assertIn("404 error", str(caught.exception))
        self.assertIn("nosuch", str(caught.exception))

    def test_scrapy_setting_names_are_refused_not_translated(self):
        # What ScrapydWeb's run form sends by default, and its own fields.
        for name, value in (("CLOSESPIDER_TIMEOUT", "60"), ("DOWNLOAD_DELAY", "2"),
                            ("CONCURRENT_REQUESTS", "8")):
            with self.assertRaises(ScrapydResponseError) as caught:
                self.api.schedule("shop", "echo", settings={name: value})
            self.assertIn("400 error", str(caught.exception))
            self.assertIn(name, str(caught.exception))


    def test_a_capitalised_netweir_setting_reaches_the_crawl(self):
        # What ScrapydWeb's run form can send: MAX_ITEMS=3 is max_items=3.
        jobid = self.api.schedule("shop", "books", settings={"MAX_ITEMS": "3"})
        entry = self.daemon.wait_state(jobid, "finished")
        self.assertEqual(entry["outcome"], "finished")
        self.assertEqual(len(items_of(self.daemon, entry)), 3)
        stats = self.daemon.stats(jobid)["stats"]
        self.assertEqual((stats["items"], stats["finish_reason"]), (3, "max_items"))


class CancelTests(unittest.TestCase):
    """Two slow jobs fill both slots, so a third waits: each state, then
    each way of cancelling."""

    def test_pending_and_running_jobs_cancelled_as_scrapyd_clients_ask(self):
        daemon = serve()
        api, client = ScrapydAPI(url(daemon)), ScrapydClient(url(daemon))
        gentle = api.schedule("shop", "slow", delay="0.02")
        hard = api.schedule("shop", "slow", delay="0.02")
        running = {jobid: daemon.wait_state(jobid, "running") for jobid in (gentle, hard)}
        waiting = api.schedule("shop", "echo", jobid="cancel-waiting")

        state, entry = daemon.find(waiting)
        self.assertEqual(state, "pending")
        self.assertEqual((entry["start_time"], entry["end_time"]), (None, None))
        self.assertEqual(entry["log_url"], "/logs/shop/echo/cancel-waiting.log")
        self.assertEqual(entry["items_url"], "/items/shop/echo/cancel-waiting.jl")
        for entry in running.values():
            self.assertIsInstance(entry["pid"], int)
            self.assertIsNone(entry["end_time"])
        self.assertEqual(client.status(waiting)["currstate"], "pending")
        self.assertEqual(client.status(gentle, "shop")["currstate"], "running")

        self.assertEqual(client.cancel("shop", waiting)["prevstate"], "pending")
        log_url = running[gentle]["log_url"]
        wait_until(lambda: len(daemon.call("GET", log_url)[2]) > 1500, 30, "log lines")
        # scrapyd's signal: KILL (or SIGKILL, 9) kills at once; any other is
        # the usual cancel, which lets the crawl close cleanly.
        self.assertEqual(api.cancel("shop", gentle, signal="TERM"), "running")
        self.assertEqual(api.cancel("shop", hard, signal="KILL"), "running")
        gentle_entry = daemon.wait_state(gentle, "finished")
        hard_entry = daemon.wait_state(hard, "finished")

        self.assertEqual(daemon.find(waiting)[1]["outcome"], "cancelled")
        self.assertEqual(gentle_entry["outcome"], "cancelled")
        self.assertNotEqual(gentle_entry["exit_status"], -9)
        self.assertEqual(daemon.stats(gentle)["stats"]["finish_reason"], "interrupted")
        self.assertEqual((hard_entry["outcome"], hard_entry["exit_status"]), ("cancelled", -9))
        for entry in (gentle_entry, hard_entry):
            self.assertEqual(len(entry["start_time"]), len("2026-01-01 00:00:00.000000"))
            self.assertEqual(len(entry["end_time"]), len("2026-01-01 00:00:00.000000"))
        self.assertEqual(client.status(gentle)["currstate"], "finished")

        # Gerapy shows the end of a log with a suffix range.
        whole = daemon.call("GET", log_url)[2]
        status, headers, tail = daemon.call("GET", log_url, headers={"Range": "bytes=-1000"})
        self.assertEqual(status, 206)
        self.assertEqual(tail, whole[-1000:])
        self.assertEqual(headers["Content-Type"], "text/plain")


class ScrapydClientTests(unittest.TestCase):
    def setUp(self):
        self.daemon = serve()

    def test_library_lists_schedules_with_a_setting_and_reads_status(self):
        # A url ending in "/", as scrapy startproject writes it: every
        # request then starts with "//".
        client = ScrapydClient(url(self.daemon) + "/")
        self.assertEqual(sorted(client.projects()), ["news", "shop"])
        self.assertEqual(client.projects("sh*"), ["shop"])
        self.assertEqual(sorted(client.spiders("shop")), SPIDERS)
        self.assertEqual(client.versions("shop"), [])
        self.assertEqual(client.daemonstatus()["status"], "ok")
        jobid = client.schedule("shop", "books", [("setting", "max_pages=5"), ("_version", "r1")])
        entry = self.daemon.wait_state(jobid, "finished")
        self.assertEqual(entry["outcome"], "finished")
        stats = self.daemon.stats(jobid)["stats"]
        self.assertEqual((stats["fetched"], stats["items"]), (5, 5))
        self.assertEqual(len(items_of(self.daemon, entry)), 5)
        self.assertEqual(client.status(jobid)["currstate"], "finished")
        self.assertEqual(client.jobs("shop")["status"], "ok")

    def test_errors_raise_with_the_message_whatever_the_http_status(self):
        client = ScrapydClient(url(self.daemon))
        with self.assertRaises(ErrorResponse) as caught:
            client.schedule("shop", "nosuch")
        self.assertIn("nosuch", str(caught.exception))
        with self.assertRaises(ErrorResponse) as caught:
            client.delproject("shop")
        self.assertIn("--project", str(caught.exception))

    def test_status_json_as_scrapyd_answers_it(self):
        jobid, _ = echo_job()
        client = ScrapydClient(url(self.daemon))
        answer = client.status(jobid)
        self.assertEqual((answer["status"], answer["currstate"]), ("ok", "finished"))
        self.assertIn("node_name", answer)
        self.assertEqual(client.status(jobid.upper(), "SHOP")["currstate"], "finished")
        self.assertIsNone(client.status(jobid, "news")["currstate"])
        self.assertIsNone(client.status("nosuch")["currstate"])

    def test_command_line_with_scrapy_cfg_url_ending_in_slash(self):
        folder = tempfile.mkdtemp(prefix="cfg-", dir=os.getcwd())
        with open(os.path.join(folder, "scrapy.cfg"), "w") as f:
            f.write(f"[settings]\ndefault = nosuch.settings\n\n"
                    f"[deploy]\nurl = {url(self.daemon)}/\nproject = shop\n")
        command = os.path.join(os.path.dirname(sys.executable), "scrapyd-client")
        env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
        projects = subprocess.run([command, "projects"], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(projects.returncode, 0, projects.stderr)
        self.assertEqual(sorted(projects.stdout.split()), ["news", "shop"])
        spiders = subprocess.run([command, "spiders", "-p", "shop", "-v"], cwd=folder, env=env,
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(spiders.returncode, 0, spiders.stderr)
        self.assertEqual(sorted(spiders.stdout.splitlines()),
                         [f"shop {name}" for name in SPIDERS])


class CompatibilityTests(unittest.TestCase):
    def setUp(self):
        self.daemon = serve()

    def test_doubled_leading_slash_is_the_endpoint(self):
        status, headers, body = request(self.daemon.port, "GET", "//listprojects.json")
        self.assertEqual((status, headers["Content-Type"]), (200, "application/json"))
        self.assertEqual(sorted(json.loads(body)["projects"]), ["news", "shop"])

    def test_content_types_are_exact(self):
        jobid, entry = echo_job()
        for path in ("/daemonstatus.json", "/listjobs.json", "/nosuch.json",
                     f"/jobstats.json?job={jobid}"):
            self.assertEqual(self.daemon.call("GET", path)[1]["Content-Type"],
                             "application/json", path)
        self.assertEqual(self.daemon.call("GET", entry["log_url"])[1]["Content-Type"],
                         "text/plain")

    def test_suffix_range_longer_than_the_log_is_the_whole_log(self):
        # Gerapy asks every log for bytes=-1000, and most logs are shorter.
        _, entry = echo_job()
        whole = self.daemon.call("GET", entry["log_url"])[2]
        status, headers, body = self.daemon.call(
            "GET", entry["log_url"], headers={"Range": f"bytes=-{len(whole) + 500}"})
        self.assertEqual((status, body), (206, whole))

    def test_version_parameter_is_ignored_where_clients_send_it(self):
        # ScrapydWeb sends _version to listspiders.json; the clients to schedule.json.
        status, answer = self.daemon.get("listspiders.json", {"project": "shop", "_version": "r1"})
        self.assertEqual((status, sorted(answer["spiders"])), (200, SPIDERS))
        _, entry = echo_job()
        self.assertNotIn("_version", json.dumps(entry))

    def test_top_of_the_trees_lists_the_projects(self):
        # scrapyd-api's logs() and ScrapydWeb's Logs and Items menus.
        for tree in ("logs", "items"):
            answer = requests.get(f"{url(self.daemon)}/{tree}", timeout=30)
            self.assertEqual(answer.status_code, 200)
            self.assertTrue(answer.url.endswith(f"/{tree}/"))
            self.assertIn(f"Directory listing for /{tree}/", answer.text)
            self.assertEqual(re.findall(r'<td><a href="(\w+)/">', answer.text),
                             ["news", "shop"])

    def test_logparser_stats_as_scrapydweb_reads_them(self):
        # ScrapydWeb's job list: datas[project][spider][job]["pages"/"items"],
        # trusted only with the logparser_version it was installed with.
        jobid, entry = echo_job()
        answer = requests.get(f"{url(self.daemon)}/logs/stats.json", timeout=30)
        self.assertEqual((answer.status_code, answer.headers["Content-Type"]),
                         (200, "application/json"))
        stats = answer.json()
        self.assertEqual((stats["status"], stats["logparser_version"]), ("ok", "0.8.4"))
        job = stats["datas"]["shop"]["echo"][jobid]
        self.assertEqual((job["pages"], job["items"], job["finish_reason"]), (1, 1, "finished"))
        self.assertEqual(job["first_log_time"], entry["start_time"][:19])
        self.assertEqual(job["latest_log_time"], entry["end_time"][:19])
        self.assertRegex(job["runtime"], r"^\d+:\d\d:\d\d$")
        self.assertIsInstance(stats["last_update_timestamp"], int)

    def test_requests_follows_a_listing_redirect(self):
        # scrapyd-api asks for /logs/P/S without the slash.
        jobid, _ = echo_job()
        answer = requests.get(f"{url(self.daemon)}/logs/shop/echo", timeout=30)
        self.assertEqual(answer.status_code, 200)
        self.assertTrue(answer.url.endswith("/logs/shop/echo/"))
        self.assertIn(f"{jobid}.log", answer.text)
