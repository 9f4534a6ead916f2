"""Where a policy is given (--policy, addschedule.json, schedule.json's
_KEY parameters), how the three combine, and the reason every ended job
gets: over real HTTP against a real service, and end_of's rule alone."""

import os

from twisted.trial import unittest

from netweir_serve.jobs.outcomes import end_of, exit_reason
from netweir_serve.options import ServeOptions
from netweir_serve.store.records import JobRecord
from twisted.python import usage

from .processes import Daemon, wait_until

SPIDERS = '''
import netweir

class Quick(netweir.Spider):
    name = "quick"
    start_urls = ["http://127.0.0.1:9/"]

class Other(netweir.Spider):
    name = "other"
    start_urls = ["http://127.0.0.1:9/"]

import socket

# A socket that listens and never answers: a request to it waits. (An
# address nothing answers, as 10.255.255.1 was, is answered at once where
# a network's gateway takes every connection.)
_silent = socket.socket()
_silent.bind(("127.0.0.1", 0))
_silent.listen(8)


class Stuck(netweir.Spider):
    name = "stuck"
    start_urls = [f"http://127.0.0.1:{_silent.getsockname()[1]}/"]
'''


class EndOfTests(unittest.TestCase):
    """One rule for outcome and reason, wherever an end is seen."""

    def test_the_crawls_own_end(self):
        job = JobRecord(id="a", project="p", spider="s", spider_file="f")
        self.assertEqual(end_of(job, 0), ("finished", "exit 0"))
        self.assertEqual(end_of(job, 1), ("failed", "exit 1"))
        self.assertEqual(end_of(job, -9), ("failed", "signal 9"))
        self.assertEqual(end_of(job, None), ("failed", "lost"))
        self.assertEqual(exit_reason(130), "exit 130")

    def test_a_cancel_gives_its_reason_whatever_the_status(self):
        job = JobRecord(id="a", project="p", spider="s", spider_file="f")
        self.assertEqual(end_of(job, 130, "timeout"), ("cancelled", "timeout"))
        self.assertEqual(end_of(job, 0, "service stopped"), ("cancelled", "service stopped"))
        # Asked through the table (an adopted job): the reason recorded then.
        asked = JobRecord(id="a", project="p", spider="s", spider_file="f",
                          cancel_requested=True, reason="stalled")
        self.assertEqual(end_of(asked, -9), ("cancelled", "stalled"))
        # A cancel recorded before reasons were: the user's.
        old = JobRecord(id="a", project="p", spider="s", spider_file="f",
                        cancel_requested=True)
        self.assertEqual(end_of(old, 130), ("cancelled", "cancel.json"))

    def test_the_kernels_memory_kill_is_memory(self):
        job = JobRecord(id="a", project="p", spider="s", spider_file="f")
        self.assertEqual(end_of(job, -9, oom=True), ("failed", "memory"))
        # A cancel asked first stands: the job was being stopped anyway.
        self.assertEqual(end_of(job, -9, "timeout", oom=True), ("cancelled", "timeout"))

    def test_a_memory_kill_the_crawl_outlived_is_not_its_end(self):
        # A worker killed at the limit while the crawl itself exited 0.
        job = JobRecord(id="a", project="p", spider="s", spider_file="f")
        self.assertEqual(end_of(job, 0, oom=True), ("finished", "exit 0"))
        self.assertEqual(end_of(job, 1, oom=True), ("failed", "memory"))


class PolicyOptionTests(unittest.TestCase):
    def setUp(self):
        self.folder = os.path.abspath(self.mktemp())
        os.makedirs(self.folder)
        with open(os.path.join(self.folder, "shop.py"), "w") as f:
            f.write(SPIDERS)

    def parse(self, *args):
        options = ServeOptions(environ={})
        options.parseOptions(["--project", f"shop={self.folder}", *args])
        return options.config().policies

    def test_rules_by_project_and_spider_the_later_key_winning(self):
        rules = self.parse("--policy", "shop:timeout=6h,retries=2",
                           "--policy", "Shop/quick:expire=1d,timeout=2h",
                           "--policy", "shop:retries=3")
        self.assertEqual(rules.for_spider("shop", "quick").shown(),
                         {"timeout": "2h", "expire": "1d", "retries": 3})
        self.assertEqual(rules.for_spider("SHOP", "other").shown(),
                         {"timeout": "6h", "retries": 3})

    def test_run_health_checks_are_rules_as_the_other_keys_are(self):
        rules = self.parse("--policy", "shop:min_items=5,items_drop=50,history=7",
                           "--policy", "shop/quick:slower=2.5,max_errors=12.5,min_pages=0")
        self.assertEqual(rules.for_spider("shop", "quick").shown(),
                         {"min_items": 5, "min_pages": 0, "items_drop": "50",
                          "max_errors": "12.5", "slower": "2.5", "history": 7})

    def test_a_bad_rule_or_an_unserved_project_is_a_usage_error(self):
        for args, words in [
                (["--policy", "shop:timeout=6x"], "timeout '6x' is not a duration"),
                (["--policy", "shop:retries=11"], "the most is 10"),
                (["--policy", "shop:tiemout=1h"], "'tiemout' is not a policy key"),
                (["--policy", "shop"], "is not a rule"),
                (["--policy", "nope:timeout=1h"], "names project 'nope', which no --project"),
                (["--policy", "shop:retry_on=cancelled"], "'cancelled' is not an outcome"),
                (["--policy", "shop:items_drop=150"], "items_drop '150' is not a percentage"),
                (["--policy", "shop:min_items=-1"], "min_items '-1' is not a whole number"),
                (["--policy", "shop:history=101"], "history '101' is not a number of runs"),
                (["--policy", "shop:history=\u00b2"], "history '\u00b2' is not a number of runs"),
                (["--policy", "shop:retries=\u00b2"], "retries '\u00b2' is not a whole number")]:
            with self.assertRaises(usage.UsageError) as raised:
                self.parse(*args)
            self.assertIn(words, str(raised.exception))


class GivenOverHttpTests(unittest.TestCase):
    """A real service with two rules: what each place gives, and what wins."""

    def setUp(self):
        base = os.path.abspath(self.mktemp())
        folder = os.path.join(base, "shop")
        os.makedirs(folder)
        with open(os.path.join(folder, "shop.py"), "w") as f:
            f.write(SPIDERS)
        self.daemon = Daemon(os.path.join(base, "dir"), [f"shop={folder}"], args=[
            "--policy", "shop:timeout=6h,retries=2,backoff=5m",
            "--policy", "shop/quick:stall=10m,timeout=2h", "--max-jobs", "1",
            "--policy", "shop/Quick:retries=5"]).start()
        self.addCleanup(self.daemon.stop)

    def test_listpolicies_answers_each_spiders_policy_from_the_rules(self):
        status, answer = self.daemon.get("listpolicies.json", {"project": "SHOP"})
        self.assertEqual(status, 200)
        self.assertEqual(answer["project"], "shop")
        self.assertEqual(answer["policy"], {"timeout": "6h", "retries": 2, "backoff": "5m"})
        self.assertEqual(answer["spiders"], {
            "other": {"timeout": "6h", "retries": 2, "backoff": "5m"},
            "quick": {"timeout": "2h", "stall": "10m", "retries": 2, "backoff": "5m"},
            "stuck": {"timeout": "6h", "retries": 2, "backoff": "5m"}})
        # Spider names are the spiders' own (case and all): a rule for
        # another name applies to none, and the answer says so.
        self.assertEqual(answer["no_such_spider"], ["Quick"])
        status, answer = self.daemon.get("listpolicies.json", {"project": "nope"})
        self.assertEqual((status, answer["status"]), (404, "error"))

    def test_a_jobs_own_values_go_over_the_rules_and_are_no_spider_arguments(self):
        # The one slot taken, the job waits: its listing shows its arguments.
        blocker = self.daemon.must_schedule("shop", "stuck")
        self.daemon.wait_state(blocker, "running")
        jobid = self.daemon.must_schedule("shop", "quick", _timeout="30m", _retries="0",
                                          _version="1.0", _expire="1d", colour="red")
        entry = self.daemon.wait_state(jobid, "pending")
        self.assertEqual(entry["policy"], {"timeout": "30m", "stall": "10m", "expire": "1d",
                                           "retries": 0, "backoff": "5m"})
        self.assertEqual(entry["attempt"], 1)
        self.assertEqual(entry["arguments"], {"colour": "red"})
        # Cancelled while it waits, and the running one: each says why.
        self.daemon.post("cancel.json", {"project": "shop", "job": jobid})
        self.daemon.post("cancel.json", {"project": "shop", "job": blocker})
        for job in (jobid, blocker):
            finished = self.daemon.wait_state(job, "finished")
            self.assertEqual((finished["outcome"], finished["reason"]),
                             ("cancelled", "cancel.json"))

    def test_every_bad_key_or_value_is_a_400_naming_it_and_queues_nothing(self):
        for params, words in [
                ({"_timout": "1h"}, "'_timout' is not a policy key"),
                ({"_timeout": "0"}, "_timeout '0' is too short"),
                ({"_timeout": "-5"}, "_timeout '-5' is not a duration"),
                ({"_stall": "1w"}, "_stall '1w' is not a duration"),
                ({"_stall": "3s"}, "_stall '3s' is too short: the least is 10s (progress is"
                                   " seen every 5 s)"),
                ({"_retries": "11"}, "_retries '11' is too many: the most is 10"),
                ({"_retries": "\u00b2"}, "_retries '\u00b2' is not a whole number"),
                ({"_retry_on": "cancelled"}, "'cancelled' is not an outcome or reason"),
                ({"_backoff": "0s"}, "_backoff '0s' is too short"),
                ({"_memory": "63M"}, "_memory '63M' is too small: the least is 64M"),
                ({"_cpu": "0"}, "_cpu '0' is not a number of cores")]:
            status, answer = self.daemon.schedule("shop", "quick", **params)
            self.assertEqual((status, answer["status"]), (400, "error"), params)
            self.assertIn(words, answer["message"])
        _, listed = self.daemon.get("listjobs.json")
        self.assertEqual(listed["pending"] + listed["running"] + listed["finished"], [])

    def test_a_schedules_values_are_kept_shown_and_given_to_its_jobs(self):
        status, added = self.daemon.post("addschedule.json", [
            ("project", "shop"), ("spider", "other"), ("every", "2s"), ("name", "nightly"),
            ("timeout", "1h"), ("retry_on", "failed,stalled"), ("_expire", "2h")])
        self.assertEqual(status, 200, added)
        # A key given as schedule.json spells it counts the same.
        self.assertEqual(added["policy"], {"timeout": "1h", "expire": "2h",
                                           "retry_on": "failed,stalled"})
        self.assertEqual(added["arguments"], {})
        _, listed = self.daemon.get("listschedules.json")
        self.assertEqual(listed["schedules"][0]["policy"], added["policy"])
        # Its first job: the schedule's values over the project's rule.
        first = wait_until(lambda: self.daemon.get("listschedules.json")[1]["schedules"][0][
            "last_job"], 30, "the schedule to queue a job")
        self.daemon.post("delschedule.json", {"project": "shop", "name": "nightly"})
        entry = self.daemon.wait_state(first, "finished")
        self.assertEqual(entry["policy"], {"timeout": "1h", "expire": "2h", "retries": 2,
                                           "retry_on": "failed,stalled", "backoff": "5m"})
        self.assertEqual(entry["reason"], "exit 0" if entry["outcome"] == "finished"
                         else f"exit {entry['exit_status']}")
        status, refused = self.daemon.post("addschedule.json", [
            ("project", "shop"), ("spider", "other"), ("every", "1d"), ("stall", "soon")])
        self.assertEqual(status, 400)
        self.assertIn("stall 'soon' is not a duration", refused["message"])
        status, refused = self.daemon.post("addschedule.json", [
            ("project", "shop"), ("spider", "other"), ("every", "1d"), ("stall", "1h"),
            ("_stall", "2h")])
        self.assertEqual(status, 400)
        self.assertIn("stall and _stall are the same key", refused["message"])
