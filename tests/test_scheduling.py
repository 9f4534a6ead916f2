"""Schedule-time checks over real HTTP: every refusal names what was wrong,
and nothing is queued for a refused job."""

import os
import tempfile
import threading
import time

from twisted.trial import unittest

from .processes import Daemon, shared

SPIDERS = {
    "plain.py": '''
import netweir

class Plain(netweir.Spider):
    name = "plain"
    start_urls = ["http://127.0.0.1:9/"]

class NoName(netweir.Spider):
    start_urls = ["http://127.0.0.1:9/"]
''',
    "proxied.py": '''
import netweir

class Proxied(netweir.Spider):
    name = "proxied"
    settings = netweir.Settings(proxies=("http://127.0.0.1:9",))
''',
}

HANGING = "import time\ntime.sleep(120)\n"


def _write(folder, files):
    os.makedirs(folder)
    for name, body in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(body)
    return folder


def _start():
    base = tempfile.mkdtemp(prefix="scheduling-", dir=os.getcwd())
    shop = _write(os.path.join(base, "shop"), SPIDERS)
    stuck = _write(os.path.join(base, "stuck"), {"hang.py": HANGING})
    return Daemon(os.path.join(base, "dir"), [f"shop={shop}", f"stuck={stuck}"]).start()


class ScheduleCheckTests(unittest.TestCase):
    """One daemon for all: refused jobs change nothing, and accepted ones
    are cancelled while they wait (--max-jobs 1 never reaches them)."""

    def setUp(self):
        self.daemon = shared("scheduling-daemon", _start, Daemon.kill)

    def refused(self, settings=(), spider="plain", status=400, arguments=None):
        arguments = arguments or {}
        jobid = f"refused-{time.monotonic_ns()}"
        form = [("project", "shop"), ("spider", spider), ("jobid", jobid)]
        form += [("setting", s) for s in settings] + list(arguments.items())
        code, answer = self.daemon.post("schedule.json", form)
        self.assertEqual((code, answer["status"]), (status, "error"), (settings, arguments))
        self.assertEqual(self.daemon.find(jobid), (None, None))
        return answer["message"]

    def accepted(self, settings=(), spider="plain", **arguments):
        code, answer = self.daemon.schedule("shop", spider, settings, **arguments)
        self.assertEqual((code, answer["status"]), (200, "ok"), answer)
        self.daemon.post("cancel.json", {"project": "shop", "job": answer["jobid"]})
        return answer["jobid"]

    def test_unknown_and_mistyped_settings(self):
        for setting, words in (("nosuch=1", "nosuch"), ("DOWNLOAD_DELAY=2", "DOWNLOAD_DELAY"),
                               ("concurrency=abc", "concurrency"),
                               ("concurrency=1.5", "concurrency"),
                               ("obey_robots=perhaps", "obey_robots"),
                               ("concurrency", "concurrency"), ("=5", "=5")):
            self.assertIn(words, self.refused([setting]), setting)

    def test_settings_the_crawl_would_refuse(self):
        for settings, words in ((["concurrency=0"], "concurrency"),
                                (["min_delay=5", "max_delay=1"], "min_delay"),
                                (["profile=no-such-browser"], "no-such-browser"),
                                (["proxy_rotation=per_request"], "prox")):
            self.assertIn(words, self.refused(settings), settings)

    def test_accepted_counterparts(self):
        self.accepted(["concurrency=8", "max_delay=2", "min_delay=1"])
        self.accepted(["proxy_rotation=per_request"], spider="proxied")
        self.accepted(["max_time=none", "retry_http_codes=500,503", "obey_robots=no"])
        self.accepted(spider="NoName")

    def test_spider_arguments(self):
        for name, words in (("9lives", "identifier"), ("_private", "_"),
                            ("settings", "settings"), ("parse", "parse")):
            self.assertIn(words, self.refused(arguments={name: "x"}), name)
        self.accepted(category="fiction", _version="r1")

    def test_path_settings_stay_inside_the_project_data_directory(self):
        for setting in ("checkpoint=/tmp/ck", "cache=../x", "deltafetch=a/../../x",
                        "har=..", "cache=s3://bucket/x", "warc=file:///tmp/x.warc",
                        "checkpoint="):
            key = setting.split("=")[0]
            self.assertIn(key, self.refused([setting]), setting)
        data = os.path.join(self.daemon.directory, "data", "shop")
        os.makedirs(data, exist_ok=True)
        link = os.path.join(data, "outside")
        if not os.path.islink(link):
            os.symlink(tempfile.gettempdir(), link)
        message = self.refused(["checkpoint=outside/ck"])
        self.assertIn("checkpoint", message)
        self.assertIn("symlink", message)
        self.accepted(["checkpoint=books", "warc=runs/one.warc", "deltafetch=seen"])

    def test_a_job_id_that_ends_as_a_retrys_is_refused(self):
        # A retry of job J is J.r1, J.r2...: a user's job so named would
        # take a retry's id, and that retry would never be queued.
        for jobid in ("nightly.r1", "nightly.R12"):
            code, answer = self.daemon.post("schedule.json", {
                "project": "shop", "spider": "plain", "jobid": jobid})
            self.assertEqual((code, answer["status"]), (400, "error"))
            self.assertEqual(answer["message"], f"parameter 'jobid': job id {jobid!r} ends in"
                             f" {jobid[7:]}: job ids ending in .rN are kept for retries")
            self.assertEqual(self.daemon.find(jobid), (None, None))
        for jobid in (f"nightly.r-{time.monotonic_ns()}", f"r1.{time.monotonic_ns()}"):
            code, answer = self.daemon.post("schedule.json", {
                "project": "shop", "spider": "plain", "jobid": jobid})
            self.assertEqual((code, answer["jobid"]), (200, jobid))
            self.daemon.post("cancel.json", {"project": "shop", "job": jobid})

    def test_unknown_project_spider_and_bad_priority(self):
        code, answer = self.daemon.schedule("nosuch", "plain")
        self.assertEqual(code, 404)
        self.assertIn("nosuch", answer["message"])
        message = self.refused(spider="nosuch-spider")
        self.assertIn("nosuch-spider", message)
        self.assertIn("plain", message)
        for priority in ("high", "nan", "inf"):
            self.assertIn("priority", self.refused(arguments={"priority": priority}))

    def test_listing_stuck_in_a_hanging_file_leaves_the_daemon_answering(self):
        result = {}
        thread = threading.Thread(target=lambda: result.update(
            answer=self.daemon.get("listspiders.json", {"project": "stuck"})))
        thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        self.assertEqual(self.daemon.get("daemonstatus.json")[1]["status"], "ok")
        self.assertEqual(self.daemon.get("listspiders.json", {"project": "shop"})[1]["spiders"],
                         ["NoName", "plain", "proxied"])
        self.assertLess(time.monotonic() - started, 2)
        thread.join(60)
        code, answer = result["answer"]
        self.assertEqual(answer["status"], "error")
        self.assertIn("too long", answer["message"])


class UnservedProjectTests(unittest.TestCase):
    def test_a_pending_job_of_a_project_no_longer_served_waits_and_says_why(self):
        from twisted.internet.task import Clock

        from netweir_serve.store.records import JobRecord
        from netweir_serve.store.sqlite import SQLiteJobStore
        base = tempfile.mkdtemp(prefix="unserved-", dir=os.getcwd())
        directory = os.path.join(base, "dir")
        os.makedirs(directory)
        # Queued when the service served news too; started again without it.
        store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
        self.successResultOf(store.add(JobRecord(id="left", project="news", spider="plain",
                                                 spider_file=os.path.join(base, "plain.py"))))
        store.close()
        shop = os.path.join(base, "shop")
        _write(shop, {"plain.py": SPIDERS["plain.py"]})
        daemon = Daemon(directory, [f"shop={shop}"]).start()
        self.addCleanup(daemon.kill)
        # A job of a project it serves runs (the poller went by the other).
        ran = daemon.must_schedule("shop", "plain")
        self.assertEqual(daemon.wait_state(ran, "finished")["outcome"], "finished")
        state, entry = daemon.find("left")
        self.assertEqual(state, "pending")
        self.assertEqual(entry["waiting_for"], "a service that serves project news: this one"
                         " was started without --project news")
