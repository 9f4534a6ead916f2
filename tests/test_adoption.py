"""Restarts that keep crawls running (issue 14): real daemons, real crawls.

A service killed with ``kill -9`` or stopped for a handover (SIGUSR1)
leaves its running jobs running; the next start on the same --dir adopts
the ones whose process is still the very process started for them, and
gives every other job the outcome its status file records (``lost`` only
without one). Also here: nothing a job starts outlives it, even a process
in a session of its own, and the service's environment (its password) is
out of reach of the crawls it runs.

Every process these tests start carries a tag in its environment
(TAG_VARIABLE, passed on to the crawls and whatever they start), so a
test can find whatever is left of it in /proc, whoever its parent is now,
and the last cleanup of each test kills it and checks that nothing of it
is left.
"""

import json
import os
import pwd
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import datetime

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve import _proctree
from netweir_serve.jobs.adoption import settle_left_running
from netweir_serve.jobs.events import ENDED, JobEvents
from netweir_serve.jobs.files import job_files, read_exit_status
from netweir_serve.jobs.launcher import KILL_FALLBACK_SECONDS, Launcher
from netweir_serve.jobs.process import CANCEL_SIGNAL, KILL_SIGNAL, RUN_MARK_VARIABLE, run_mark
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.store.records import JobRecord, StoreError
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.projects import Project, ProjectTable

from .fakes import FakeProcessReactor, SignalLog
from .processes import Daemon, alive, kill_groups, wait_until
from .test_jobs import CrawlTestCase

TAG_VARIABLE = "NETWEIR_TEST_ADOPTION_TAG"

# Spiders of these tests, added to the "shop" project.
EXTRA_SPIDERS = {
    "loner.py": '''
import signal
import subprocess


class Loner(netweir.Spider):
    """On its first page, starts a child in a session of its own (as a
    spider calling a tool with start_new_session=True would) and records
    both pids and sessions in the file its pidfile argument names; then
    follows a chain of slow pages, ``pages`` of them. With a ``stubborn``
    argument it ignores SIGTERM and SIGINT from then on."""
    name = "loner"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/slow/0?d=0.1"]

    async def parse(self, page):
        n = int(page.url.split("/slow/")[1].split("?")[0])
        if n == 0:
            if getattr(self, "stubborn", None):
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, signal.SIG_IGN)
                signal.signal = lambda *args: None
            child = subprocess.Popen(["sleep", "600"], start_new_session=True)
            with open(self.pidfile + ".tmp", "w") as f:
                json.dump({"pid": os.getpid(), "child": child.pid,
                           "session": os.getsid(0), "child_session": os.getsid(child.pid)}, f)
            os.replace(self.pidfile + ".tmp", self.pidfile)
        yield {"n": n}
        if n + 1 < int(getattr(self, "pages", "100000")):
            yield page.follow(SITE + f"/slow/{n + 1}?d=0.1")
''',
    "peek.py": '''
def _parent_of(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rfind(b")") + 2:].split()[1])


class Peek(netweir.Spider):
    """Reads the environment of its parent and of its parent's parent, as
    a hostile spider would, and logs and yields what it found."""
    name = "peek"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        found = {"uid": os.getuid(), "own": sorted(os.environ)}
        pid = os.getppid()
        for who in ("parent", "grandparent", "great-grandparent"):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    text = f.read().decode("utf-8", "replace").replace("\\0", " ")
            except OSError as e:
                text = "refused: " + type(e).__name__
            self.logger.info("the environment of my %s (pid %d): %s", who, pid, text)
            found[who] = {"pid": pid, "environ": text}
            pid = _parent_of(pid)
        yield found
''',
}

# A project of its own: reading this file starts a child in a session of
# its own, at import, and records its pid (one line per import).
FORKY = '''
import subprocess

_child = subprocess.Popen(["sleep", "600"], start_new_session=True)
with open({pids!r}, "a") as _f:
    _f.write(f"{{_child.pid}}\\n")


class Forky(netweir.Spider):
    name = "forky"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        yield {{"ok": True}}
'''

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def parse_time(text):
    """Epoch seconds of a time as listjobs.json shows it (local time)."""
    return datetime.strptime(text, TIME_FORMAT).timestamp()


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tagged(tag):
    """Live pids whose environment carries ``tag`` (this runs as root, so
    every process's environ is readable, a non-dumpable one's too)."""
    marker = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if marker in environ.split(b"\0") and alive(int(name)):
            found.append(int(name))
    return found


def session_of(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rfind(b")") + 2:].split()[3])


def as_nobody(argv):
    """``argv`` run as the unprivileged user nobody, with no groups."""
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + list(argv)


class AdoptionTestCase(CrawlTestCase):
    """One or more daemons per test on a --dir of the test's."""

    def setUp(self):
        super().setUp()
        for name, body in EXTRA_SPIDERS.items():
            with open(os.path.join(self.shop, name), "w") as f:
                f.write(f"\nimport json\nimport os\nimport netweir\n\nSITE = {self.site.base!r}\n"
                        + body)
        self.tag = uuid.uuid4().hex
        # The first cleanup registered runs last: after the daemons and
        # the job groups the test knew of, whatever is left of it.
        self.addCleanup(self.sweep)

    def sweep(self):
        for _ in range(100):
            pids = tagged(self.tag)
            if not pids:
                return
            for pid in pids:
                try:
                    group = os.getpgid(pid)
                    if group != os.getpgrp():
                        os.killpg(group, signal.SIGKILL)
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)
        self.fail(f"processes of this test still alive after SIGKILL: {tagged(self.tag)}")

    def new_dir(self):
        return tempfile.mkdtemp(prefix="dir-", dir=self.base)

    def serve(self, directory, *args, projects=("shop", "news"), env=None, command=None,
              auth=None):
        paths = {"shop": self.shop, "news": self.news}
        paths.update(getattr(self, "projects", {}))
        env = {TAG_VARIABLE: self.tag, **(env or {})}
        if "--max-jobs" not in args:
            args += ("--max-jobs", "4")
        daemon = Daemon(directory, [f"{p}={paths[p]}" for p in projects], list(args), env=env,
                        command=command, auth=auth)
        self.addCleanup(daemon.kill)
        return daemon.start()

    def running_pid(self, daemon, jobid):
        """The pid of the running job's parent, once the table has it; its
        group is killed at cleanup whatever happens to the daemon."""
        entry = wait_until(lambda: (lambda s, e: e if s == "running" and e.get("pid")
                                    else None)(*daemon.find(jobid)), 30, f"{jobid} running")
        self.addCleanup(kill_groups, [entry["pid"]])

        def own_group():
            # Once the parent has made its session (a moment after it
            # started), a group kill reaches it.
            try:
                return os.getpgid(entry["pid"]) == entry["pid"]
            except OSError:
                return True

        wait_until(own_group, 10, f"{jobid}'s parent to make its session")
        return entry["pid"]

    def kill_9(self, daemon):
        daemon.process.kill()
        daemon.process.wait()
        daemon._output.close()

    def hand_over(self, daemon, pids=()):
        """SIGUSR1: the daemon exits 0 and the jobs ``pids`` run on."""
        self.assertEqual(daemon.stop(signal.SIGUSR1, timeout=30), 0, daemon.output())
        self.assertIn("handover", daemon.output())
        for pid in pids:
            self.assertTrue(alive(pid), f"job process {pid} ended with the handover")

    def leftovers(self, daemon=None):
        """This test's live processes that are not the daemon (or its spider
        readers): what a job left behind, once no job runs."""
        pids = set(tagged(self.tag))
        if daemon is not None and daemon.process.poll() is None:
            pids.discard(daemon.process.pid)
            pids -= set(_proctree.descendants(daemon.process.pid))
        return sorted(pids)

    def assertNothingLeft(self, daemon=None, timeout=5):
        try:
            wait_until(lambda: not self.leftovers(daemon), timeout, "no process to be left")
        except AssertionError:
            self.fail(f"left behind: {self.describe(self.leftovers(daemon))}")

    def describe(self, pids):
        described = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    described.append((pid, f.read().replace(b"\0", b" ")[:120].decode()))
            except OSError:
                described.append((pid, "?"))
        return described

    def wait_pidfile(self, path):
        pids = wait_until(lambda: read_json(path), 30, f"the pids in {path}")
        self.addCleanup(kill_groups, [pids["pid"]])
        self.addCleanup(kill_groups, [pids["child"]])
        return pids

    def pidfile(self):
        return os.path.join(tempfile.mkdtemp(dir=self.base), "pids.json")

    def items(self, daemon, entry):
        status, _, body = daemon.call("GET", entry["items_url"])
        self.assertEqual(status, 200)
        return [json.loads(line) for line in body.splitlines()]

    def log(self, daemon, entry):
        status, _, body = daemon.call("GET", entry["log_url"])
        self.assertEqual(status, 200)
        return body.decode()

    def pages_logged(self, daemon, entry):
        return self.log(daemon, entry).count("slow page")

    def assertComplete(self, daemon, entry, pages):
        """The slow job of ``pages`` pages has every item once, every page
        in its log once, and the stats footer once, at the end."""
        self.assertEqual(sorted(i["n"] for i in self.items(daemon, entry)), list(range(pages)))
        log = self.log(daemon, entry)
        for n in range(pages):
            self.assertEqual(log.count(f"slow page {n}\n"), 1, n)
        self.assertEqual(log.count("Dumping Scrapy stats"), 1)
        self.assertIn(f"'item_scraped_count': {pages},", log)
        self.assertIn("'netweir_serve/outcome': 'finished'", log)
        self.assertTrue(log.endswith("Spider closed (finished)\n"), log[-300:])

    def status_path(self, directory, jobid, spider="slow", project="shop"):
        return job_files(directory, project, spider, jobid).status


class KillNineTests(AdoptionTestCase):
    def test_one_job_ends_before_the_restart_and_the_other_is_adopted(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        late = daemon.must_schedule("shop", "slow", jobid="late", pages="120", delay="0.1")
        late_pid = self.running_pid(daemon, late)
        wait_until(lambda: daemon.stats(late)["stats"], 15, "the late job's first stats")
        early = daemon.must_schedule("shop", "slow", jobid="early", pages="6", delay="0.1")
        early_pid = self.running_pid(daemon, early)
        early_entry = daemon.find(early)[1]
        wait_until(lambda: self.pages_logged(daemon, early_entry) >= 1, 15, "an early page")
        self.kill_9(daemon)
        # The early job ends while no service runs.
        wait_until(lambda: not alive(early_pid), 20, "the early job to end unwatched")
        written = read_exit_status(self.status_path(directory, early))
        self.assertEqual(written["exit_status"], 0)
        self.assertTrue(alive(late_pid))
        at_restart = read_json(job_files(directory, "shop", "slow", late).stats)
        restarted = time.time()
        again = self.serve(directory)

        state, entry = again.find(early)
        self.assertEqual((state, entry["outcome"], entry["exit_status"]),
                         ("finished", "finished", 0))
        self.assertLess(parse_time(entry["end_time"]), restarted)
        self.assertAlmostEqual(parse_time(entry["end_time"]), written["end_time"], places=4)
        stats = again.stats(early)
        self.assertEqual((stats["state"], stats["outcome"]), ("finished", "finished"))
        self.assertEqual((stats["stats"]["items"], stats["stats"]["finish_reason"]),
                         (6, "finished"))
        self.assertComplete(again, entry, 6)

        state, entry = again.find(late)
        self.assertEqual((state, entry["pid"]), ("running", late_pid))
        self.assertIn("job late adopted", again.output())

        def fresh():
            answer = again.stats(late)
            stats = answer["stats"]
            return (answer["state"] == "running" and stats
                    and stats["items"] > at_restart["items"] and stats)

        fresh_stats = wait_until(fresh, 15, "the adopted job's stats to move on")
        self.assertIsNone(fresh_stats["finish_reason"])
        # Its end is noticed at once (a pidfd), not on some later round.
        wait_until(lambda: not alive(late_pid), 30, "the adopted job to end")
        gone = time.monotonic()
        entry = again.wait_state(late, "finished", timeout=10)
        self.assertLess(time.monotonic() - gone, 1.5)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))
        self.assertEqual(again.stats(late)["stats"]["items"], 120)
        self.assertComplete(again, entry, 120)
        self.assertFalse(alive(late_pid))
        self.assertNothingLeft(again)


class HandoverTests(AdoptionTestCase):
    def test_handover_then_a_smaller_max_jobs_and_one_more_project(self):
        directory = self.new_dir()
        daemon = self.serve(directory, "--max-jobs", "3", projects=("shop",))
        short = daemon.must_schedule("shop", "slow", jobid="short", pages="25", delay="0.3")
        long = daemon.must_schedule("shop", "slow", jobid="long", pages="45", delay="0.3")
        pids = {jobid: self.running_pid(daemon, jobid) for jobid in (short, long)}
        self.hand_over(daemon, pids.values())
        # Both still running, in /proc, after the service left.
        time.sleep(0.3)
        for pid in pids.values():
            self.assertTrue(alive(pid))

        again = self.serve(directory, "--max-jobs", "1", projects=("shop", "news"))
        for jobid, pid in pids.items():
            state, entry = again.find(jobid)
            self.assertEqual((state, entry["pid"]), ("running", pid))
        # The new project is served...
        status, answer = again.get("listspiders.json", {"project": "news"})
        self.assertIn("echo", answer["spiders"])
        # ...but two adopted jobs fill --max-jobs 1: nothing new starts.
        waiting = again.must_schedule("news", "echo", jobid="waiting")
        self.assertEqual(again.get("daemonstatus.json")[1]["running"], 2)
        time.sleep(1)
        self.assertEqual(again.find(waiting)[0], "pending")
        again.wait_state(short, "finished", timeout=30)
        # One adopted job still runs: still no free slot.
        self.assertEqual(again.find(long)[0], "running")
        self.assertEqual(again.find(waiting)[0], "pending")
        time.sleep(1)
        self.assertEqual(again.find(waiting)[0], "pending")
        long_entry = again.wait_state(long, "finished", timeout=30)
        entry = again.wait_state(waiting, "finished", timeout=30)
        self.assertEqual(entry["outcome"], "finished")
        self.assertGreaterEqual(parse_time(entry["start_time"]),
                                parse_time(long_entry["end_time"]))
        for jobid, pages in ((short, 25), (long, 45)):
            state, entry = again.find(jobid)
            self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))
            self.assertComplete(again, entry, pages)
        self.assertNothingLeft(again)

    def test_job_ending_between_a_handover_and_the_next_start(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="gap", pages="8", delay="0.3")
        pid = self.running_pid(daemon, jobid)
        self.hand_over(daemon, [pid])
        wait_until(lambda: not alive(pid), 20, "the job to end with no service")
        written = read_exit_status(self.status_path(directory, jobid))
        restarted = time.time()
        again = self.serve(directory)
        state, entry = again.find(jobid)
        self.assertEqual((state, entry["outcome"], entry["exit_status"]),
                         ("finished", "finished", 0))
        self.assertAlmostEqual(parse_time(entry["end_time"]), written["end_time"], places=4)
        self.assertLess(parse_time(entry["end_time"]), restarted)
        self.assertEqual(again.stats(jobid)["stats"]["items"], 8)
        self.assertComplete(again, entry, 8)
        self.assertIn("ended while no service watched it", again.output())
        self.assertNothingLeft(again)

    def test_restarts_in_a_row(self):
        # A handover, a handover of the adopted job, a kill -9 of the
        # service that adopted it again: the fourth start sees it end.
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="again", pages="40", delay="0.5")
        pid = self.running_pid(daemon, jobid)
        self.hand_over(daemon, [pid])
        second = self.serve(directory)
        self.assertEqual(second.find(jobid)[1]["pid"], pid)
        self.hand_over(second, [pid])
        third = self.serve(directory)
        self.assertEqual(third.find(jobid)[1]["pid"], pid)
        self.kill_9(third)
        self.assertTrue(alive(pid))
        fourth = self.serve(directory)
        state, entry = fourth.find(jobid)
        self.assertEqual((state, entry["pid"]), ("running", pid))
        entry = fourth.wait_state(jobid, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))
        self.assertEqual(fourth.stats(jobid)["stats"]["items"], 40)
        self.assertComplete(fourth, entry, 40)
        self.assertNothingLeft(fourth)


class AdoptedCancelTests(AdoptionTestCase):
    def test_cancel_of_an_adopted_job(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="adopted", delay="0.1")
        pid = self.running_pid(daemon, jobid)
        self.kill_9(daemon)
        again = self.serve(directory)
        entry = again.find(jobid)[1]
        wait_until(lambda: self.pages_logged(again, entry) >= 3, 15, "a few pages")
        status, answer = again.post("cancel.json", {"project": "shop", "job": jobid})
        self.assertEqual((status, answer["prevstate"]), (200, "running"))
        asked = time.monotonic()
        entry = again.wait_state(jobid, "finished", timeout=20)
        self.assertLess(time.monotonic() - asked, 10)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", 130))
        self.assertEqual(again.stats(jobid)["stats"]["finish_reason"], "interrupted")
        self.assertTrue(self.items(again, entry))
        self.assertFalse(alive(pid))
        self.assertNothingLeft(again)

    def test_sigterm_to_the_service_cancels_adopted_jobs_and_waits(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="adopted", delay="0.1")
        pid = self.running_pid(daemon, jobid)
        self.hand_over(daemon, [pid])
        again = self.serve(directory)
        entry = again.find(jobid)[1]
        self.assertEqual(entry["pid"], pid)
        wait_until(lambda: self.pages_logged(again, entry) >= 1, 15, "a page")
        self.assertEqual(again.stop(signal.SIGTERM, timeout=30), 0)
        self.assertFalse(alive(pid))
        self.assertNothingLeft()
        third = self.serve(directory)
        state, entry = third.find(jobid)
        self.assertEqual((state, entry["outcome"], entry["exit_status"]),
                         ("finished", "cancelled", 130))

    def test_a_cancel_asked_before_the_restart_is_carried_through(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        polite = daemon.must_schedule("shop", "slow", jobid="polite", delay="0.1")
        pidfile = self.pidfile()
        stubborn = daemon.must_schedule("shop", "stubborn", jobid="stubborn", pidfile=pidfile)
        polite_pid = self.running_pid(daemon, polite)
        stubborn_pid = self.running_pid(daemon, stubborn)
        pids = self.wait_pidfile(pidfile)
        # Crawling: a SIGTERM now is the crawl's to handle (exit status 130).
        entry = daemon.find(polite)[1]
        wait_until(lambda: self.pages_logged(daemon, entry) >= 1, 15, "a polite page")
        for jobid in (polite, stubborn):
            daemon.post("cancel.json", {"project": "shop", "job": jobid})
        # The service goes before its 30 s grace is over.
        self.kill_9(daemon)
        wait_until(lambda: not alive(polite_pid), 20, "the polite job to end unwatched")
        self.assertTrue(alive(stubborn_pid))
        again = self.serve(directory, env={"NETWEIR_SERVE_CANCEL_GRACE": "2"})
        state, entry = again.find(polite)
        self.assertEqual((state, entry["outcome"], entry["exit_status"]),
                         ("finished", "cancelled", 130))
        # The cancel asked of the last service still ends the stubborn job:
        # killed once this one's grace is over.
        self.assertEqual(again.find(stubborn)[0], "running")
        entry = again.wait_state(stubborn, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", -9))
        for process in (stubborn_pid, pids["pid"], pids["child"]):
            wait_until(lambda: not alive(process), 5, f"process {process} to end")
        self.assertNothingLeft(again)

    def test_kill_after_the_grace_and_second_cancel_of_adopted_stubborn_jobs(self):
        directory = self.new_dir()
        daemon = self.serve(directory, "--max-jobs", "2")
        jobs = {}
        for jobid in ("graced", "twice"):
            pidfile = self.pidfile()
            daemon.must_schedule("shop", "stubborn", jobid=jobid, pidfile=pidfile)
            jobs[jobid] = (self.running_pid(daemon, jobid), self.wait_pidfile(pidfile))
        self.hand_over(daemon, [pid for pid, _ in jobs.values()])
        again = self.serve(directory, env={"NETWEIR_SERVE_CANCEL_GRACE": "2"})
        for jobid, (pid, _) in jobs.items():
            self.assertEqual(again.find(jobid)[1]["pid"], pid)

        # Timed from before its cancel is asked: the grace runs from the
        # cancel, and the next request may take a while on a busy machine.
        graced_asked = time.monotonic()
        again.post("cancel.json", {"project": "shop", "job": "graced"})
        again.post("cancel.json", {"project": "shop", "job": "twice"})
        asked = time.monotonic()
        self.assertEqual(again.post("cancel.json", {"project": "shop", "job": "twice"})[1]
                         ["prevstate"], "running")
        entry = again.wait_state("twice", "finished", timeout=10)
        self.assertLess(time.monotonic() - asked, 1.8)
        self.assertEqual(entry["outcome"], "cancelled")
        self.assertEqual(again.find("graced")[0], "running")
        entry = again.wait_state("graced", "finished", timeout=15)
        self.assertGreater(time.monotonic() - graced_asked, 1.9)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", -9))
        for jobid, (pid, pids) in jobs.items():
            for process in (pid, pids["pid"], pids["child"]):
                wait_until(lambda: not alive(process), 5, f"{jobid}'s process {process} to end")
        self.assertNothingLeft(again)


class SessionChildTests(AdoptionTestCase):
    def loner(self, daemon, jobid, pages, **arguments):
        pidfile = self.pidfile()
        daemon.must_schedule("shop", "loner", jobid=jobid, pidfile=pidfile, pages=str(pages),
                             **arguments)
        pids = self.wait_pidfile(pidfile)
        # A session of its own, really: a group kill of the job misses it.
        self.assertEqual(pids["child_session"], pids["child"])
        self.assertNotEqual(pids["child_session"], pids["session"])
        return pids

    def test_a_child_in_a_session_of_its_own_ends_with_its_job(self):
        directory = self.new_dir()
        daemon = self.serve(directory, "--max-jobs", "4")
        finishing = self.loner(daemon, "finishing", 5)
        cancelled = self.loner(daemon, "cancelled", 100000)
        # Ignores the first cancel's SIGTERM: the second one kills it.
        killed = self.loner(daemon, "killed", 100000, stubborn="1")
        daemon.post("cancel.json", {"project": "shop", "job": "cancelled"})
        daemon.post("cancel.json", {"project": "shop", "job": "killed"})
        time.sleep(0.5)
        self.assertEqual(daemon.find("killed")[0], "running")
        daemon.post("cancel.json", {"project": "shop", "job": "killed"})
        for jobid, ended, pids in (("finishing", ("finished", 0), finishing),
                                   ("cancelled", ("cancelled", 130), cancelled),
                                   ("killed", ("cancelled", -9), killed)):
            entry = daemon.wait_state(jobid, "finished", timeout=20)
            self.assertEqual((entry["outcome"], entry["exit_status"]), ended, jobid)
            wait_until(lambda: not alive(pids["child"]), 5, f"{jobid}'s child to end")
        self.assertNothingLeft(daemon)

        # The service's stop (SIGTERM) cancels the job: its child goes too.
        stopped = self.loner(daemon, "stopped", 100000)
        self.assertEqual(daemon.stop(signal.SIGTERM, timeout=30), 0)
        wait_until(lambda: not alive(stopped["child"]), 5, "the child to end with the service")
        self.assertNothingLeft()
        again = self.serve(directory)
        self.assertEqual(again.find("stopped")[1]["outcome"], "cancelled")

    def test_a_child_a_spider_file_starts_as_it_is_read_ends_with_the_reading(self):
        forky = os.path.join(self.base, "forky")
        os.makedirs(forky)
        pids_path = os.path.join(self.base, "forky-pids")
        with open(os.path.join(forky, "forky.py"), "w") as f:
            f.write(f"\nimport netweir\n\nSITE = {self.site.base!r}\n"
                    + FORKY.format(pids=pids_path))
        self.projects = {"forky": forky}
        daemon = self.serve(self.new_dir(), projects=("forky",))

        def started():
            try:
                with open(pids_path) as f:
                    return [int(line) for line in f.read().split()]
            except OSError:
                return []

        problems = []
        status, answer = daemon.get("listspiders.json", {"project": "forky"})
        self.assertEqual(answer.get("spiders"), ["forky"], answer)
        after_listing = started()
        self.assertTrue(after_listing)
        try:
            wait_until(lambda: not any(alive(p) for p in after_listing), 5,
                       "the listing's child to end")
        except AssertionError:
            problems.append(("after listspiders.json", self.describe(
                [p for p in after_listing if alive(p)])))
        jobid = daemon.must_schedule("forky", "forky")
        entry = daemon.wait_state(jobid, "finished", timeout=30)
        self.assertEqual(entry["outcome"], "finished")
        after_job = started()
        # The schedule's check read the file again, and so did the crawl.
        self.assertGreater(len(after_job), len(after_listing))
        try:
            wait_until(lambda: not any(alive(p) for p in after_job), 5,
                       "the check's and the job's children to end")
        except AssertionError:
            problems.append(("after a schedule and its job", self.describe(
                [p for p in after_job if alive(p)])))
        self.assertEqual(problems, [])
        self.assertNothingLeft(daemon)


class EdgeTests(AdoptionTestCase):
    def test_a_project_no_longer_served_is_watched_to_its_end(self):
        directory = self.new_dir()
        daemon = self.serve(directory, "--max-jobs", "2")
        jobid = daemon.must_schedule("news", "slow", jobid="unserved", pages="25", delay="0.2")
        killed = daemon.must_schedule("news", "stubborn", jobid="killed",
                                      pidfile=self.pidfile())
        pid = self.running_pid(daemon, jobid)
        killed_pid = self.running_pid(daemon, killed)
        queued = daemon.must_schedule("news", "echo", jobid="queued")
        self.kill_9(daemon)
        again = self.serve(directory, "--max-jobs", "3", projects=("shop",))
        state, entry = again.find(jobid)
        self.assertEqual((state, entry["pid"]), ("running", pid))
        status, answer = again.schedule("news", "echo")
        self.assertEqual(answer["status"], "error")
        # Its jobs can still be cancelled, killed at once here.
        answer = again.post("cancel.json", {"project": "news", "job": killed,
                                            "signal": "KILL"})[1]
        self.assertEqual(answer["prevstate"], "running")
        entry = again.wait_state(killed, "finished", timeout=10)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", -9))
        self.assertFalse(alive(killed_pid))
        entry = again.wait_state(jobid, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))
        self.assertEqual(again.stats(jobid)["stats"]["items"], 25)
        self.assertComplete(again, entry, 25)
        # Nothing new starts for it, though a slot is free.
        time.sleep(1)
        self.assertEqual(again.find(queued)[0], "pending")
        self.assertNothingLeft(again)

    def test_a_process_that_is_not_the_jobs_is_neither_adopted_nor_signalled(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="other", delay="0.1")
        pid = self.running_pid(daemon, jobid)
        self.kill_9(daemon)
        # As if the pid had been reused: the same boot, another start time;
        # and the process carries another run's mark (a job's process that
        # is not this run's would), so nothing finds it as what is left of it.
        boot, ticks = _proctree.start_time(pid).rsplit(":", 1)
        db = sqlite3.connect(os.path.join(directory, "jobs.db"))
        try:
            with db:
                db.execute("UPDATE jobs SET proc_start = ?, start_time = start_time - 1"
                           " WHERE id = ?", (f"{boot}:{int(ticks) + 1}", jobid))
        finally:
            db.close()
        again = self.serve(directory)
        state, entry = again.find(jobid)
        self.assertEqual((state, entry["outcome"]), ("finished", "lost"))
        self.assertNotIn("adopted", again.output())
        # Left alone: the process runs on, nobody signalled it.
        log = job_files(directory, "shop", "slow", jobid).log
        size = os.path.getsize(log)
        time.sleep(1)
        self.assertTrue(alive(pid))
        self.assertGreater(os.path.getsize(log), size)
        self.assertEqual(again.get("daemonstatus.json")[1]["running"], 0)
        self.assertEqual(again.post("cancel.json", {"project": "shop", "job": jobid})[1]
                         ["prevstate"], None)
        time.sleep(0.5)
        self.assertTrue(alive(pid))

    def test_a_job_whose_parent_died_with_a_garbled_status_is_lost(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        garbled = daemon.must_schedule("shop", "slow", jobid="garbled", delay="0.1")
        missing = daemon.must_schedule("shop", "slow", jobid="missing", delay="0.1")
        pids = [self.running_pid(daemon, j) for j in (garbled, missing)]
        self.kill_9(daemon)
        kill_groups(pids)
        wait_until(lambda: not any(alive(p) for p in pids), 5, "the jobs to be killed")
        with open(self.status_path(directory, garbled), "w") as f:
            f.write('{"exit_status": 0, "end_ti')
        again = self.serve(directory)
        for jobid in (garbled, missing):
            state, entry = again.find(jobid)
            self.assertEqual((state, entry["outcome"]), ("finished", "lost"), jobid)
        self.assertNothingLeft(again)


class UnrecordedAndOrphanedTests(AdoptionTestCase):
    """Two breaks found by trying (issue 23): a service that died before it
    recorded its job's pid, and a job's parent killed while no service ran."""

    def test_a_job_whose_pid_was_never_recorded_gets_the_end_its_status_file_says(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="unrecorded", pages="6",
                                     delay="0.1")
        pid = self.running_pid(daemon, jobid)
        self.kill_9(daemon)
        # As if the service had died between the spawn and the write of the
        # pid: the table has the claim alone.
        db = sqlite3.connect(os.path.join(directory, "jobs.db"))
        try:
            with db:
                db.execute("UPDATE jobs SET pid = NULL, proc_start = NULL WHERE id = ?",
                           (jobid,))
        finally:
            db.close()
        wait_until(lambda: not alive(pid), 20, "the job to end unwatched")
        written = read_exit_status(self.status_path(directory, jobid))
        self.assertEqual(written["exit_status"], 0)
        again = self.serve(directory)
        state, entry = again.find(jobid)
        self.assertEqual((state, entry["outcome"], entry["exit_status"]),
                         ("finished", "finished", 0))
        self.assertAlmostEqual(parse_time(entry["end_time"]), written["end_time"], places=4)
        self.assertEqual(again.stats(jobid)["stats"]["items"], 6)
        self.assertNothingLeft(again)

    def test_a_lost_jobs_crawl_left_running_is_ended_at_the_next_start(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="orphan", pages="400", delay="0.1")
        parent = self.running_pid(daemon, jobid)
        [crawl] = wait_until(lambda: _proctree.children(parent), 10, "the crawl to fork")
        self.addCleanup(kill_groups, [crawl])
        # A process of the same user carrying another run's mark, and one
        # that took nothing of the job: neither is touched.
        strangers = [subprocess.Popen(["sleep", "60"], env={RUN_MARK_VARIABLE: "0" * 32}),
                     subprocess.Popen(["sleep", "60"])]
        for stranger in strangers:
            self.addCleanup(lambda p=stranger: (p.kill(), p.wait()))
        self.kill_9(daemon)
        os.kill(parent, signal.SIGKILL)
        wait_until(lambda: not alive(parent), 10, "the job's parent to die")
        log = job_files(directory, "shop", "slow", jobid).log
        size = os.path.getsize(log)
        wait_until(lambda: os.path.getsize(log) > size, 10, "the orphaned crawl to go on")
        again = self.serve(directory)
        state, entry = again.find(jobid)
        self.assertEqual((state, entry["outcome"]), ("finished", "lost"))
        wait_until(lambda: not alive(crawl), 10, "the orphaned crawl to be ended")
        self.assertIn("its processes ran on", again.output())
        for stranger in strangers:
            self.assertIsNone(stranger.poll())
        self.assertNothingLeft(again)


class EnvironmentTests(AdoptionTestCase):
    def python_for_nobody(self):
        """A Python with this one's packages that nobody may run (and that
        starts the crawls and readers as nobody): this one, or, when it
        lives where nobody can't reach (a pyenv under /root), a virtual
        environment made of the system's Python of the same version and
        these site-packages."""
        probe = "import subprocess, sys; subprocess.run([sys.executable, '-c', '0'], check=True)"
        if subprocess.run(as_nobody([sys.executable, "-c", probe]), cwd="/",
                          capture_output=True).returncode == 0:
            return sys.executable
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        system = os.path.join("/usr/bin", version)
        if not os.path.exists(system):
            raise unittest.SkipTest(f"nobody cannot run {sys.executable}, and there is no"
                                    f" {system}")
        venv = os.path.join(self.base, "venv")
        os.makedirs(os.path.join(venv, "bin"))
        os.makedirs(os.path.join(venv, "lib", version))
        os.symlink(system, os.path.join(venv, "bin", "python"))
        os.symlink(os.path.join(sys.prefix, "lib", version, "site-packages"),
                   os.path.join(venv, "lib", version, "site-packages"))
        with open(os.path.join(venv, "pyvenv.cfg"), "w") as f:
            f.write("home = /usr/bin\ninclude-system-site-packages = false\n")
        return os.path.join(venv, "bin", "python")

    def test_the_services_environment_is_out_of_reach_of_its_user_and_its_crawls(self):
        nobody = pwd.getpwnam("nobody")
        password = "pw-" + uuid.uuid4().hex
        # nobody must reach the projects and --dir: open the test's folders
        # (trial's temporary folder, the working directory, and those in it).
        folder, top = self.base, os.getcwd()
        while os.path.commonpath([folder, top]) == top:
            os.chmod(folder, os.stat(folder).st_mode | 0o055)
            folder = os.path.dirname(folder)
        directory, home = self.new_dir(), self.new_dir()
        for folder in (directory, home):
            os.chown(folder, nobody.pw_uid, nobody.pw_gid)
        python = self.python_for_nobody()
        daemon = self.serve(
            directory, env={"NETWEIR_SERVE_USERNAME": "me", "NETWEIR_SERVE_PASSWORD": password,
                            "HOME": home},
            auth=("me", password), command=as_nobody([python, "-m", "netweir_serve"]))
        with open(f"/proc/{daemon.process.pid}/status") as f:
            self.assertIn(f"Uid:\t{nobody.pw_uid}\t", f.read())
        # Another process of the same user: refused the service's environ,
        # not the environ of a process of that user that is dumpable.
        sibling = subprocess.Popen(as_nobody(["sleep", "60"]), env={TAG_VARIABLE: self.tag})
        self.addCleanup(lambda: (sibling.kill(), sibling.wait()))
        wait_until(lambda: os.stat(f"/proc/{sibling.pid}").st_uid == nobody.pw_uid, 5,
                   "the sibling to run as nobody")
        reader = ("import sys\n"
                  "for pid in sys.argv[1:]:\n"
                  "    try:\n"
                  "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
                  "        print(pid, 'read', len(data))\n"
                  "    except OSError as e:\n"
                  "        print(pid, 'refused', type(e).__name__)\n")
        answer = subprocess.run(
            as_nobody([sys.executable, "-S", "-c", reader, str(daemon.process.pid),
                       str(sibling.pid)]), capture_output=True, text=True, cwd="/",
            timeout=30)
        lines = answer.stdout.splitlines()
        self.assertEqual(len(lines), 2, answer.stderr)
        self.assertEqual(lines[0], f"{daemon.process.pid} refused PermissionError")
        self.assertTrue(lines[1].startswith(f"{sibling.pid} read "), lines[1])

        jobid = daemon.must_schedule("shop", "peek")
        entry = daemon.wait_state(jobid, "finished", timeout=30)
        self.assertEqual(entry["outcome"], "finished", self.log(daemon, entry))
        [item] = self.items(daemon, entry)
        self.assertEqual(item["uid"], nobody.pw_uid)
        # The service is the crawl's grandparent, or, with a warm start
        # (jobs/warm), its great-grandparent, past the warm process the
        # parent forked from, which has the jobs' own environment.
        ancestors = [item["grandparent"], item["great-grandparent"]]
        [service] = [a for a in ancestors if a["pid"] == daemon.process.pid]
        self.assertEqual(service["environ"], "refused: PermissionError")
        for between in ancestors[:ancestors.index(service)]:
            self.assertIn(TAG_VARIABLE, between["environ"])
            self.assertNotIn("NETWEIR_SERVE_", between["environ"])
            self.assertNotIn(password, between["environ"])
        # Its parent (the crawl's parent) was readable: nothing secret in it.
        self.assertIn(TAG_VARIABLE, item["parent"]["environ"])
        self.assertNotIn("NETWEIR_SERVE_", item["parent"]["environ"])
        self.assertNotIn("NETWEIR_SERVE_PASSWORD", item["own"])
        log = self.log(daemon, entry)
        self.assertIn("the environment of my grandparent", log)
        for name, body in (("log", log.encode()),
                           ("items", daemon.call("GET", entry["items_url"])[2]),
                           ("listjobs", daemon.call("GET", "listjobs.json")[2]),
                           ("jobstats", daemon.call("GET", "jobstats.json",
                                                    {"job": jobid})[2])):
            self.assertNotIn(password.encode(), body, name)
        for kind in ("logs", "items", "stats", "status"):
            for folder, _, names in os.walk(os.path.join(directory, kind)):
                for name in names:
                    with open(os.path.join(folder, name), "rb") as f:
                        self.assertNotIn(password.encode(), f.read(), name)


# -- unit level: the status file, and what a start decides ---------------------------

class FakeLauncher:
    def __init__(self, gone=()):
        self.adopted = []
        self.announced = []
        self.gone = set(gone)
        self.swept = 0

    def adopt(self, record):
        if record.id in self.gone:
            raise ProcessLookupError(record.pid)
        self.adopted.append(record.id)

    def settled(self, record):
        self.announced.append((record.id, record.state, record.outcome))

    def sweep_groups(self):
        self.swept += 1


class ReadExitStatusTests(unittest.TestCase):
    def write(self, content):
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        return path

    def test_a_whole_file(self):
        path = self.write('{"exit_status": -9, "end_time": 12, "crawl_pid": 5}')
        self.assertEqual(read_exit_status(path), {"exit_status": -9, "end_time": 12.0})
        path = self.write('{"exit_status": null, "end_time": 1.5}')
        self.assertEqual(read_exit_status(path), {"exit_status": None, "end_time": 1.5})
        path = self.write('{"exit_status": 0, "end_time": 2, "crawl_pid": 5, "run": "ab"}')
        self.assertEqual(read_exit_status(path),
                         {"exit_status": 0, "end_time": 2.0, "run": "ab"})
        # The kernel killed in the crawl's control group for memory.
        path = self.write('{"exit_status": -9, "end_time": 2, "crawl_pid": 5, "oom": true}')
        self.assertEqual(read_exit_status(path),
                         {"exit_status": -9, "end_time": 2.0, "oom": True})
        path = self.write('{"exit_status": -9, "end_time": 2, "oom": 1}')
        self.assertEqual(read_exit_status(path), {"exit_status": -9, "end_time": 2.0})
        # The crawl could not join its control group: it never started.
        path = self.write('{"exit_status": 127, "end_time": 2, "not_started": "why"}')
        self.assertEqual(read_exit_status(path),
                         {"exit_status": 127, "end_time": 2.0, "not_started": "why"})

    def test_missing_or_garbled(self):
        self.assertIsNone(read_exit_status(self.mktemp()))
        self.assertIsNone(read_exit_status(os.path.dirname(os.path.abspath(self.mktemp()))))
        for content in ("", '{"exit_status": 0, "end_ti', "[0, 1]", "0", "null",
                        b"\xff\xfe{}", '{"exit_status": 0}', '{"end_time": 1}',
                        '{"exit_status": "0", "end_time": 1}',
                        '{"exit_status": true, "end_time": 1}',
                        '{"exit_status": 1.0, "end_time": 1}',
                        '{"exit_status": 0, "end_time": "1"}',
                        '{"exit_status": 0, "end_time": null}',
                        '{"exit_status": 0, "end_time": true}',
                        '{"exit_status": 0, "end_time": 1, "run": 5}',
                        '{"exit_status": 0, "end_time": NaN}',
                        '{"exit_status": 0, "end_time": Infinity}',
                        '{"exit_status": 0, "end_time": -1e300}',
                        '{"exit_status": 0, "end_time": 1e300}',
                        '{"exit_status": 0, "end_time": ' + "1" * 5000 + "}"):
            self.assertIsNone(read_exit_status(self.write(content)), content)


class SettleTests(unittest.TestCase):
    """settle_left_running with a real table, a fake launcher and a fake
    identity of processes."""

    def setUp(self):
        self.clock = Clock()
        self.clock.advance(1000)
        self.store = SQLiteJobStore(":memory:", self.clock)
        self.addCleanup(self.store.close)
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        self.identities = {}

    def running(self, jobid, pid=None, proc_start=None, cancel=False):
        self.successResultOf(self.store.add(JobRecord(id=jobid, project="p", spider="s",
                                                      spider_file="/p/s.py")))
        self.assertEqual(self.successResultOf(self.store.claim_next("node", ["p"], 10.0)).id,
                         jobid)
        if pid is not None:
            self.successResultOf(self.store.mark_started(jobid, pid, proc_start))
        if cancel:
            self.successResultOf(self.store.mark_cancel_requested(jobid))

    def status(self, jobid, content):
        path = job_files(self.dir, "p", "s", jobid).status
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))

    def settle(self, launcher=None):
        launcher = launcher or FakeLauncher()
        adopted, ended = self.successResultOf(settle_left_running(
            self.store, launcher, self.dir, None, self.clock, identify=self.identities.get))
        # Every job ended here is announced, as recorded.
        self.assertEqual(launcher.announced, [(r.id, "finished", r.outcome) for r in ended])
        return launcher, [r.id for r in adopted], {r.id: r for r in ended}

    def get(self, jobid):
        return self.successResultOf(self.store.get(jobid))

    def test_the_same_process_is_adopted(self):
        self.running("a", 100, "boot:5")
        self.identities[100] = "boot:5"
        launcher, adopted, ended = self.settle()
        self.assertEqual((launcher.adopted, adopted, ended), (["a"], ["a"], {}))
        self.assertEqual(self.get("a").state, "running")

    def test_a_reused_pid_is_not_adopted_and_its_status_or_lost_decides(self):
        # pid 100 and 101 now belong to other processes; 102 is gone.
        self.running("lost", 100, "boot:5")
        self.running("ended", 101, "boot:6")
        self.running("gone", 102, "boot:7")
        self.running("otherboot", 103, "boot:8")
        self.identities.update({100: "boot:9", 101: "boot:10", 103: "other-boot:8"})
        self.status("ended", {"exit_status": 0, "end_time": 500.5, "crawl_pid": 1})
        launcher, adopted, ended = self.settle()
        self.assertEqual((launcher.adopted, adopted), ([], []))
        self.assertEqual({k: r.outcome for k, r in ended.items()},
                         {"lost": "lost", "ended": "finished", "gone": "lost",
                          "otherboot": "lost"})
        self.assertEqual(self.get("ended").end_time, 500.5)
        self.assertEqual(self.get("lost").end_time, 1000)

    def test_an_end_whose_answer_was_lost_is_settled_with_its_retry(self):
        # The end and its retry are committed, but the answer is lost (on
        # PostgreSQL, CommitUnknown: the connection broke at the commit).
        # Tried again, the settle would find the job no longer running:
        # the table is read, and the end there is this one, retry and all.
        policy = JobPolicy.parse({"retries": "1", "backoff": "1m"}).to_json()
        self.successResultOf(self.store.add(JobRecord(id="a", project="p", spider="s",
                                                      spider_file="/p/s.py", policy=policy)))
        self.successResultOf(self.store.claim_next("node", ["p"], 10.0))
        write = self.store.mark_finished
        self.store.mark_finished = lambda *a, **k: write(*a, **k).addCallback(
            lambda _: defer.fail(StoreError("the connection was lost as it was committed")))
        launcher = FakeLauncher()
        retries = []
        launcher.settled = lambda record: (launcher.announced.append(
            (record.id, record.state, record.outcome)), retries.append(record.retry))
        _, _, ended = self.settle(launcher)
        self.assertEqual((ended["a"].outcome, ended["a"].reason), ("lost", "lost"))
        (retry,) = retries
        self.assertEqual((retry.id, retry.state, retry.attempt), ("a.r1", "pending", 2))

    def test_an_end_not_written_after_all_is_settled_again_later(self):
        self.running("a")
        self.store.mark_finished = lambda *a, **k: defer.fail(StoreError("disk full"))
        failure = self.failureResultOf(settle_left_running(
            self.store, FakeLauncher(), self.dir, None, self.clock), StoreError)
        self.assertEqual(failure.value.message, "disk full")
        self.assertEqual(self.get("a").state, "running")

    def test_no_identity_recorded_is_never_adopted(self):
        # A table written before identities were recorded.
        self.running("old", 100, None)
        self.identities[100] = None
        launcher, adopted, ended = self.settle()
        self.assertEqual((launcher.adopted, ended["old"].outcome), ([], "lost"))

    def test_outcomes_from_the_status_file(self):
        self.running("ok", 1, "b:1")
        self.running("bad", 2, "b:2")
        self.running("killed", 3, "b:3")
        self.running("cancelled", 4, "b:4", cancel=True)
        self.running("garbled", 5, "b:5")
        self.running("missing", 6, "b:6")
        self.running("never", None)
        self.status("ok", {"exit_status": 0, "end_time": 101.0})
        self.status("bad", {"exit_status": 1, "end_time": 102.0})
        self.status("killed", {"exit_status": -9, "end_time": 103.0})
        self.status("cancelled", {"exit_status": 0, "end_time": 104.0})
        self.status("garbled", '{"exit_status": 0, "end_time": 1')
        # A claimed job never started: a status file there is no job's.
        self.status("never", {"exit_status": 0, "end_time": 106.0})
        _, adopted, ended = self.settle()
        self.assertEqual(adopted, [])
        self.assertEqual(
            {k: (r.outcome, r.exit_status, r.end_time) for k, r in ended.items()},
            {"ok": ("finished", 0, 101.0), "bad": ("failed", 1, 102.0),
             "killed": ("failed", -9, 103.0), "cancelled": ("cancelled", 0, 104.0),
             "garbled": ("lost", None, 1000), "missing": ("lost", None, 1000),
             "never": ("lost", None, 1000)})
        for jobid in ended:
            self.assertEqual(self.get(jobid).state, "finished")

    def test_a_status_of_this_run_counts_though_its_pid_was_never_recorded(self):
        self.running("unrecorded")
        self.running("earlier")
        self.running("unmarked")
        self.status("unrecorded", {"exit_status": 0, "end_time": 1001.5, "crawl_pid": 7,
                                   "run": run_mark(self.dir, self.get("unrecorded"))})
        # A file left by an earlier job of the same id: another claim's mark.
        earlier = replace(self.get("earlier"), start_time=5.0)
        self.status("earlier", {"exit_status": 0, "end_time": 6.0,
                                "run": run_mark(self.dir, earlier)})
        self.status("unmarked", {"exit_status": 0, "end_time": 1001.0})
        _, adopted, ended = self.settle()
        self.assertEqual(
            {k: (r.outcome, r.exit_status, r.end_time) for k, r in ended.items()},
            {"unrecorded": ("finished", 0, 1001.5), "earlier": ("lost", None, 1000),
             "unmarked": ("lost", None, 1000)})

    def test_a_mark_of_another_run_is_not_this_runs_status(self):
        self.running("a", 100, "boot:5")
        self.status("a", {"exit_status": 0, "end_time": 900.0, "run": "ab" * 16})
        _, _, ended = self.settle()
        self.assertEqual(ended["a"].outcome, "lost")

    def test_a_crawl_the_kernel_killed_for_memory_ends_failed_with_reason_memory(self):
        self.running("oom", 1, "b:1")
        self.running("plain", 2, "b:2")
        self.status("oom", {"exit_status": -9, "end_time": 101.0, "oom": True})
        self.status("plain", {"exit_status": -9, "end_time": 102.0})
        launcher, _, ended = self.settle()
        self.assertEqual({k: (r.outcome, r.reason) for k, r in ended.items()},
                         {"oom": ("failed", "memory"), "plain": ("failed", "signal 9")})
        self.assertEqual(self.get("oom").reason, "memory")
        # The control groups of jobs no longer running are swept once settled.
        self.assertEqual(launcher.swept, 1)

    def test_a_crawl_that_could_not_join_its_group_ends_not_started(self):
        self.running("nojoin", 1, "b:1")
        self.status("nojoin", {"exit_status": 127, "end_time": 101.0,
                               "not_started": "the crawl could not join its control group"})
        _, _, ended = self.settle()
        record = self.get("nojoin")
        self.assertEqual((ended["nojoin"].outcome, record.reason, record.detail),
                         ("failed", "not started", "the crawl could not join its control group"))

    def test_a_process_that_ends_as_it_is_adopted_is_settled(self):
        self.running("a", 100, "boot:5")
        self.identities[100] = "boot:5"
        self.status("a", {"exit_status": 0, "end_time": 900.0})
        launcher, adopted, ended = self.settle(FakeLauncher(gone={"a"}))
        self.assertEqual(adopted, [])
        self.assertEqual((ended["a"].outcome, ended["a"].end_time), ("finished", 900.0))

    def test_stats_and_the_log_footer_of_a_settled_job(self):
        self.running("a", 100, "boot:5")
        files = job_files(self.dir, "p", "s", "a")
        for path in (files.stats, files.log):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(files.stats, "w") as f:
            json.dump({"items": 7, "finish_reason": "finished"}, f)
        with open(files.log, "w") as f:
            f.write("a line\n")
        self.status("a", {"exit_status": 0, "end_time": 900.0})
        _, _, ended = self.settle()
        self.assertEqual(self.get("a").stats["items"], 7)
        with open(files.log) as f:
            log = f.read()
        self.assertEqual(log.count("Dumping Scrapy stats"), 1)
        self.assertIn("'item_scraped_count': 7", log)


class KillMarkedTests(unittest.TestCase):
    """_proctree.kill_marked on real processes."""

    def start(self, mark):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if mark is not None:
            env[RUN_MARK_VARIABLE] = mark
        process = subprocess.Popen(["sleep", "60"], env=env)
        self.addCleanup(lambda: (process.kill(), process.wait()))
        wait_until(lambda: os.path.exists(f"/proc/{process.pid}/environ")
                   and RUN_MARK_VARIABLE.encode() in open(f"/proc/{process.pid}/environ",
                                                           "rb").read() or mark is None,
                   5, "the process to exec")
        return process

    def test_only_the_marked_processes_are_killed(self):
        mine, other, unmarked = self.start("a1" * 16), self.start("b2" * 16), self.start(None)
        found = _proctree.kill_marked(RUN_MARK_VARIABLE, ["a1" * 16, "c3" * 16])
        self.assertEqual(found, {"a1" * 16: [mine.pid]})
        self.assertEqual(mine.wait(timeout=10), -signal.SIGKILL)
        self.assertIsNone(other.poll())
        self.assertIsNone(unmarked.poll())
        self.assertEqual(_proctree.kill_marked(RUN_MARK_VARIABLE, []), {})


class FakeWatch:
    """watch_process for the launcher: records what it watches; ``end(pid)``
    is the process ending."""

    def __init__(self):
        self.watching = {}
        self.stopped = []

    def __call__(self, reactor, pid, identity, ended):
        self.watching[pid] = (identity, ended)
        watch = self

        class Handle:
            def stop(self):
                watch.stopped.append(pid)

        return Handle()

    def end(self, pid):
        self.watching.pop(pid)[1]()


class AdoptingLauncherTests(unittest.TestCase):
    """Launcher.adopt on a Clock, with recorded signals and a fake watch."""

    GRACE = 30.0

    def setUp(self):
        self.reactor = FakeProcessReactor()
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(self.dir, "project"))
        self.store = SQLiteJobStore(":memory:", self.reactor)
        self.addCleanup(self.store.close)
        self.events = JobEvents()
        self.ended = []
        self.events.subscribe(lambda kind, record: self.ended.append(record), kinds=(ENDED,))
        self.signals = SignalLog()
        self.watch = FakeWatch()
        self.launcher = Launcher(
            self.reactor, self.store, self.events,
            ProjectTable([Project("shop", os.path.join(self.dir, "project"))]), self.dir, 1,
            grace=self.GRACE, signal_process=self.signals, watch_process=self.watch)

    def left_running(self, jobid, pid, cancel=False, kill=False, policy=None):
        self.successResultOf(self.store.add(JobRecord(id=jobid, project="shop", spider="s",
                                                      spider_file="/p/s.py", policy=policy)))
        self.successResultOf(self.store.claim_next("node", ["shop"], 10.0))
        self.successResultOf(self.store.mark_started(jobid, pid, f"boot:{pid}"))
        if cancel or kill:
            self.successResultOf(self.store.mark_cancel_requested(jobid, kill=kill))
        return self.successResultOf(self.store.get(jobid))

    def end(self, jobid, pid, status):
        if status is not None:
            path = job_files(self.dir, "shop", "s", jobid).status
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                json.dump({"exit_status": status, "end_time": 77.0, "crawl_pid": 1}, f)
        self.watch.end(pid)
        self.reactor.advance(0)
        return self.successResultOf(self.store.get(jobid))

    def test_an_adopted_job_holds_a_slot_and_ends_with_its_status(self):
        self.launcher.adopt(self.left_running("a", 60_000_001))
        self.assertEqual(self.watch.watching[60_000_001][0], "boot:60000001")
        self.assertEqual((self.launcher.slots_free(), self.launcher.running_count()), (0, 1))
        record = self.end("a", 60_000_001, 3)
        self.assertEqual((record.outcome, record.exit_status, record.end_time),
                         ("failed", 3, 77.0))
        self.assertEqual(self.launcher.slots_free(), 1)
        self.assertEqual([r.id for r in self.ended], ["a"])
        self.assertEqual(self.watch.stopped, [60_000_001])
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_an_adopted_job_that_ends_with_no_status_is_lost(self):
        self.launcher.adopt(self.left_running("a", 60_000_001))
        record = self.end("a", 60_000_001, None)
        self.assertEqual((record.outcome, record.exit_status), ("lost", None))

    def test_cancel_then_the_kill_after_the_grace(self):
        pid = 60_000_001
        self.launcher.adopt(self.left_running("a", pid))
        self.assertTrue(self.launcher.cancel("a"))
        self.assertEqual(self.signals.sent, [(pid, CANCEL_SIGNAL, False)])
        self.reactor.advance(self.GRACE)
        self.assertEqual(self.signals.sent[-1], (pid, KILL_SIGNAL, False))
        self.reactor.advance(KILL_FALLBACK_SECONDS)
        self.assertEqual(self.signals.sent[-1], (pid, signal.SIGKILL, True))
        record = self.end("a", pid, -9)
        self.assertEqual((record.outcome, record.exit_status), ("cancelled", -9))
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_a_second_cancel_kills_at_once(self):
        pid = 60_000_001
        self.launcher.adopt(self.left_running("a", pid))
        self.launcher.cancel("a")
        self.launcher.cancel("a")
        self.assertEqual(self.signals.sent, [(pid, CANCEL_SIGNAL, False),
                                             (pid, KILL_SIGNAL, False)])

    def test_a_cancel_asked_of_the_last_service_ends_in_the_kill(self):
        # Its grace timer went with the last service: this one's takes over.
        pid = 60_000_001
        self.launcher.adopt(self.left_running("a", pid, cancel=True))
        self.assertEqual(self.signals.sent, [])
        self.reactor.advance(self.GRACE)
        self.assertEqual(self.signals.sent, [(pid, KILL_SIGNAL, False)])
        self.assertEqual(self.end("a", pid, 0).outcome, "cancelled")

    def test_a_kill_asked_of_the_last_service_is_carried_out_at_once(self):
        pid = 60_000_001
        self.launcher.adopt(self.left_running("a", pid, kill=True))
        self.reactor.advance(0)
        self.assertEqual(self.signals.sent, [(pid, KILL_SIGNAL, False)])
        self.assertEqual(self.end("a", pid, -9).outcome, "cancelled")

    def test_a_dropped_job_frees_its_stop_and_its_private_file(self):
        # Recorded lost by another node: its end is never recorded here.
        pid = 60_000_001
        self.launcher.adopt(self.left_running("a", pid))
        private = os.path.join(self.dir, "run", "a.json")
        os.makedirs(os.path.dirname(private))
        open(private, "w").close()
        stopped = []
        self.launcher.stop().addCallback(stopped.append)
        self.assertEqual(stopped, [])
        self.assertTrue(self.launcher.drop("a"))
        self.assertEqual(stopped, [None])
        self.assertFalse(os.path.exists(private))

    def fenced_pair(self):
        """Job "r", which an end as lost would retry, and "k", which it
        would not, both running; then the node's fence."""
        self.launcher = Launcher(
            self.reactor, self.store, self.events,
            ProjectTable([Project("shop", os.path.join(self.dir, "project"))]), self.dir, 2,
            grace=self.GRACE, signal_process=self.signals, watch_process=self.watch)
        self.launcher.adopt(self.left_running("r", 60_000_001, policy={"retries": 1}))
        self.launcher.adopt(self.left_running("k", 60_000_002))
        return self.launcher.fence(500.0, "its node n0 was cut off")

    def test_a_fence_kills_what_a_retry_would_repeat_and_records_its_end_when_it_can(self):
        self.assertEqual(self.fenced_pair(), ["r"])
        self.assertEqual(self.signals.sent, [(60_000_001, KILL_SIGNAL, False)])
        self.assertEqual(self.watch.stopped, [60_000_001])
        self.assertEqual(self.launcher.running_ids(), ["k"])
        self.assertEqual(self.launcher.slots_free(), 1)
        # The table did not take it at once (the node is cut off): tried
        # again, it is recorded lost, and its retry queued with it.
        self.reactor.advance(2.0)
        record = self.successResultOf(self.store.get("r"))
        self.assertEqual((record.outcome, record.reason, record.end_time, record.detail),
                         ("lost", "node lost", 500.0, "its node n0 was cut off"))
        self.assertEqual(self.successResultOf(self.store.get("r.r1")).state, "pending")
        self.assertEqual([r.id for r in self.ended], ["r"])
        # Its process's end, later, records nothing more.
        self.watch.watching.pop(60_000_001, None)
        self.launcher._process_ended("r", -9)
        self.reactor.advance(KILL_FALLBACK_SECONDS)
        self.assertEqual([r.id for r in self.ended], ["r"])
        self.assertEqual(self.successResultOf(self.store.get("k")).state, "running")

    def test_a_fenced_jobs_end_recorded_elsewhere_first_stands(self):
        self.fenced_pair()
        # Another node declared this one dead meanwhile, and queued the retry.
        other = self.successResultOf(self.store.mark_finished("r", "lost", 490.0,
                                                              reason="node lost"))
        self.assertIsNotNone(other.retry)
        self.reactor.advance(2.0)
        record = self.successResultOf(self.store.get("r"))
        self.assertEqual((record.outcome, record.end_time), ("lost", 490.0))
        self.assertEqual(self.ended, [])  # the declaring node announced it
        counts = self.successResultOf(self.store.counts())
        self.assertEqual(counts["pending"], 1)  # one retry, not two

    def test_an_end_whose_retry_id_is_taken_says_so(self):
        from twisted.logger import formatEvent, globalLogPublisher
        lines = []
        observer = lambda event: lines.append(formatEvent(event))
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        self.launcher.adopt(self.left_running("n", 60_000_001, policy={"retries": 2}))
        # A user's job took the retry's id (jobid=n.r1, before it was refused).
        self.successResultOf(self.store.add(JobRecord(id="n.r1", project="shop", spider="t",
                                                      spider_file="/p/t.py")))
        record = self.end("n", 60_000_001, 1)
        self.assertEqual((record.outcome, record.retry), ("failed", None))
        self.assertEqual([line for line in lines if "is taken" in line], [
            "job n (failed, exit 1): its policy asks for a retry, but the retry's id n.r1 is"
            " taken by another job: no retry is queued"])

    def test_hand_over_lets_an_adopted_job_go(self):
        pid = 60_000_001
        self.launcher.adopt(self.left_running("a", pid))
        self.launcher.cancel("a")
        self.assertEqual(self.successResultOf(self.launcher.hand_over()), 1)
        self.assertEqual(self.watch.stopped, [pid])
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.assertEqual(self.successResultOf(self.store.get("a")).state, "running")
