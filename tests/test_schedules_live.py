"""Recurring schedules and run policies with real daemons and real crawls.

Every firing, pause, restart and refusal here goes through a real daemon
over HTTP, and every job it queues is a real crawl of the test site. Times
are short (``every=1s`` to ``every=2s``, crawls of a few seconds) and the
tests poll with deadlines; what a test must see NOT happen it watches for a
few grid intervals.
"""

import json
import re
import signal
import tempfile
import threading
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from .processes import kill_groups, wait_until
from .test_jobs import CrawlTestCase

LOCAL_TIME = "%Y-%m-%d %H:%M:%S.%f"
# Fields of a listschedules.json entry that a firing changes.
MOVING = ("next_run", "last_run", "last_job", "runs", "skipped", "error")


def epoch(iso):
    """Epoch seconds of an ISO 8601 time that must carry an offset."""
    moment = datetime.fromisoformat(iso)
    assert moment.utcoffset() is not None, iso
    return moment.timestamp()


def local_epoch(text):
    """Epoch seconds of a listjobs.json start_time or end_time."""
    return datetime.strptime(text, LOCAL_TIME).timestamp()


def due_of(name, jobid):
    """The due time (epoch seconds) in a schedule's job id NAME-YYYYMMDDTHHMMSSZ."""
    match = re.fullmatch(re.escape(name) + r"-([0-9]{8}T[0-9]{6})Z", jobid)
    assert match, f"{jobid!r} is not {name}-YYYYMMDDTHHMMSSZ"
    stamp = datetime.strptime(match.group(1), "%Y%m%dT%H%M%S")
    return stamp.replace(tzinfo=timezone.utc).timestamp()


def add(daemon, settings=(), **params):
    """(status, answer) of addschedule.json; extra params are as given
    (spider arguments or the schedule's own)."""
    form = [("setting", s) for s in settings] + list(params.items())
    return daemon.post("addschedule.json", form)


def must_add(daemon, settings=(), **params):
    status, answer = add(daemon, settings, **params)
    assert (status, answer.get("status")) == (200, "ok"), (status, answer)
    return answer


def listed(daemon, project=None):
    """{name: entry} of listschedules.json."""
    status, answer = daemon.get("listschedules.json", {"project": project} if project else None)
    assert (status, answer["status"]) == (200, "ok"), answer
    return {entry["name"]: entry for entry in answer["schedules"]}


def action(daemon, endpoint, project, name):
    return daemon.post(endpoint, {"project": project, "name": name})


def jobs_of(daemon, name):
    """{jobid: (state, entry)} of the jobs listjobs.json says schedule ``name`` queued."""
    _, answer = daemon.get("listjobs.json")
    found = {}
    for state in ("pending", "running", "finished"):
        for entry in answer[state]:
            if entry.get("schedule") == name:
                found[entry["id"]] = (state, entry)
    return found


def active(jobs):
    return sorted(jobid for jobid, (state, _) in jobs.items() if state != "finished")


def settled(daemon, name):
    """(schedule entry, its jobs) read so that no firing came between the two."""
    def read():
        before = listed(daemon)[name]
        jobs = jobs_of(daemon, name)
        after = listed(daemon)[name]
        return (before, jobs) if before == after else None
    return wait_until(read, 10, f"a quiet moment of schedule {name}")


def next_firing(daemon, name, seen, timeout=10):
    """Waits for schedule ``name`` to queue a job not in ``seen`` (and for
    its listing to say so); returns (entry, jobs)."""
    def fired():
        entry, jobs = settled(daemon, name)
        fresh = set(jobs) - set(seen)
        return (entry, jobs) if fresh and entry["last_job"] in fresh else None
    return wait_until(fired, timeout, f"schedule {name} to fire")


def watch_overlap(daemon, ids, until, timeout, what, among=None):
    """Polls listjobs.json until ``until(jobs)`` (jobs: {id: (state, entry)}
    of ``ids``); returns the most of ``among`` (default ``ids``) seen running
    at once, and the last jobs."""
    among = set(ids if among is None else among)
    most = 0
    deadline = time.monotonic() + timeout
    while True:
        _, answer = daemon.get("listjobs.json")
        jobs = {e["id"]: (state, e) for state in ("pending", "running", "finished")
                for e in answer[state] if e["id"] in ids}
        most = max(most, sum(1 for jobid, (state, _) in jobs.items()
                             if state == "running" and jobid in among))
        if until(jobs):
            return most, jobs
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}: {jobs}")
        time.sleep(0.05)


class ScheduleTestCase(CrawlTestCase):
    def kill_nine(self, daemon):
        """kill -9 of the daemon; then its jobs and helpers, which are left behind."""
        pids = daemon.job_pids()
        self.addCleanup(kill_groups, pids + [daemon.process.pid])
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait()
        daemon._output.close()
        kill_groups(pids + [daemon.process.pid])


class FiringTests(ScheduleTestCase):
    def test_every_fires_jobs_on_its_grid_that_finish_and_moves_its_listing_on(self):
        daemon = self.daemon()
        before = time.time()
        added = must_add(daemon, project="shop", spider="echo", every="2s", name="tick",
                         tz="Europe/Berlin", category="poetry")
        after = time.time()
        self.assertEqual((added["name"], added["project"], added["spider"], added["every"],
                          added["tz"], added["overlap"], added["misfire"]),
                         ("tick", "shop", "echo", "2s", "Europe/Berlin", "skip", "once"))
        self.assertEqual((added["runs"], added["skipped"], added["last_run"],
                          added["last_job"], added["paused"]), (0, 0, None, None, False))
        self.assertEqual(added["arguments"], {"category": "poetry"})
        self.assertNotIn("error", added)
        # next_run is ISO 8601 with the zone's offset; the grid starts at
        # the add time (to the second) and is due first one interval later.
        shown = datetime.fromisoformat(added["next_run"])
        self.assertEqual(shown.utcoffset(), ZoneInfo("Europe/Berlin").utcoffset(shown))
        first = epoch(added["next_run"])
        self.assertTrue(int(before) + 2 <= first <= after + 2, (before, first, after))
        # The listing is the answer, and the rule in words (listschedules.json's alone).
        self.assertEqual(listed(daemon), {"tick": {**{k: v for k, v in added.items()
                                                      if k not in ("status", "node_name")},
                                                   "in_words": "every 2 s"}})

        def three_finished():
            jobs = jobs_of(daemon, "tick")
            return jobs if sum(s == "finished" for s, _ in jobs.values()) >= 3 else None

        jobs = wait_until(three_finished, 20, "three finished jobs of schedule tick")
        dues = sorted(due_of("tick", jobid) for jobid in jobs)
        self.assertEqual(dues[:3], [first, first + 2, first + 4])
        self.assertEqual([b - a for a, b in zip(dues, dues[1:])], [2] * (len(dues) - 1))
        for jobid, (state, entry) in jobs.items():
            self.assertEqual((entry["schedule"], entry["project"], entry["spider"]),
                             ("tick", "shop", "echo"))
            if state == "finished":
                self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))
                # It ran at its due time, not before.
                self.assertGreaterEqual(local_epoch(entry["start_time"]),
                                        due_of("tick", jobid))
        oldest = min(jobs, key=lambda j: due_of("tick", j))
        [item] = [json.loads(line) for line in
                  daemon.call("GET", jobs[oldest][1]["items_url"])[2].splitlines()]
        self.assertEqual(item["category"], "poetry")

        entry, jobs = settled(daemon, "tick")
        self.assertEqual(entry["runs"], len(jobs))
        self.assertEqual(entry["skipped"], 0)
        self.assertEqual(entry["last_job"], max(jobs, key=lambda j: due_of("tick", j)))
        self.assertEqual(epoch(entry["last_run"]), due_of("tick", entry["last_job"]))
        self.assertEqual(epoch(entry["next_run"]), epoch(entry["last_run"]) + 2)
        later, jobs = next_firing(daemon, "tick", jobs)
        self.assertEqual(later["runs"], entry["runs"] + 1)
        self.assertEqual(epoch(later["last_run"]), epoch(entry["next_run"]))
        self.assertEqual(epoch(later["next_run"]), epoch(entry["next_run"]) + 2)
        self.assertNotEqual(later["last_job"], entry["last_job"])

    def test_overlap_skip_fires_nothing_while_its_job_runs(self):
        daemon = self.daemon("--max-jobs", "4")
        added = must_add(daemon, project="shop", spider="slow", every="1s", name="long",
                         pages="20", delay="0.25")
        self.assertEqual(added["overlap"], "skip")
        [first] = wait_until(lambda: list(jobs_of(daemon, "long")), 10, "the first job")
        most = 0
        while True:
            entry, jobs = settled(daemon, "long")
            most = max(most, len(active(jobs)))
            state = jobs[first][0]
            if state == "finished":
                break
            self.assertEqual(list(jobs), [first])
            self.assertEqual((entry["runs"], entry["last_job"]), (1, first))
            self.assertLess(time.time(), due_of("long", first) + 30, "the slow job never ended")
            time.sleep(0.1)
        self.assertEqual(most, 1)
        ended = jobs[first][1]
        self.assertEqual(ended["outcome"], "finished")
        ran = local_epoch(ended["end_time"]) - local_epoch(ended["start_time"])
        self.assertGreater(ran, 4)
        entry = listed(daemon)["long"]
        # One firing a second while it ran, each skipped (give or take the
        # firing in which it ended).
        self.assertGreaterEqual(entry["skipped"], int(ran) - 1)
        if entry["runs"] == 1:
            # Every due time since the first was skipped.
            self.assertEqual(epoch(entry["last_run"]), due_of("long", first) + entry["skipped"])
        # Once it has ended, the next due time queues the next job.
        entry, jobs = next_firing(daemon, "long", [first])
        [second] = set(jobs) - {first}
        self.assertEqual(entry["runs"], 2)
        self.assertGreaterEqual(due_of("long", second) + 0.5, local_epoch(ended["end_time"]))
        daemon.post("cancel.json", {"project": "shop", "job": second})

    def test_overlap_queue_holds_one_job_until_the_running_one_ends(self):
        daemon = self.daemon("--max-jobs", "4")
        must_add(daemon, project="shop", spider="slow", every="1s", name="line",
                 overlap="queue", pages="16", delay="0.25")
        [first] = wait_until(lambda: list(jobs_of(daemon, "line")), 10, "the first job")
        daemon.wait_state(first, "running", timeout=10)
        waiting = None
        while True:
            entry, jobs = settled(daemon, "line")
            if jobs[first][0] == "finished":
                break
            self.assertEqual(jobs[first][0], "running")
            pending = [j for j, (state, _) in jobs.items() if state == "pending"]
            # At most one waits; it is the one queued first after the running one.
            self.assertLessEqual(len(pending), 1, jobs)
            self.assertEqual(len(jobs), 1 + len(pending), jobs)
            if pending:
                waiting = waiting or pending[0]
                self.assertEqual(pending, [waiting])
                self.assertEqual(due_of("line", waiting), due_of("line", first) + 1)
                self.assertIn("schedule line", jobs[waiting][1]["waiting_for"])
                self.assertIn(first, jobs[waiting][1]["waiting_for"])
                self.assertEqual(entry["runs"], 2)
            self.assertLess(time.time(), due_of("line", first) + 30, "the slow job never ended")
            time.sleep(0.1)
        self.assertIsNotNone(waiting)
        self.assertGreater(entry["skipped"], 0)
        started = daemon.wait_state(waiting, "running", timeout=10)
        self.assertGreaterEqual(local_epoch(started["start_time"]),
                                local_epoch(jobs[first][1]["end_time"]))
        daemon.post("cancel.json", {"project": "shop", "job": waiting})

    def test_pause_resume_and_delete(self):
        daemon = self.daemon("--max-jobs", "4")
        must_add(daemon, project="shop", spider="slow", every="1s", name="beat",
                 overlap="allow", pages="6", delay="0.25")
        # Right after a firing, so that none is under way as it is paused.
        entry, jobs = next_firing(daemon, "beat", [])
        status, paused = action(daemon, "pauseschedule.json", "shop", "beat")
        self.assertEqual((status, paused["status"], paused["name"], paused["paused"]),
                         (200, "ok", "beat", True))
        paused_at = time.monotonic()
        queued = set(jobs)
        # The jobs it queued carry on and end as they would have.
        for jobid in queued:
            self.assertEqual(daemon.wait_state(jobid, "finished", timeout=20)["outcome"],
                             "finished")
        time.sleep(max(0, 3.2 - (time.monotonic() - paused_at)))
        entry, jobs = settled(daemon, "beat")
        self.assertEqual(set(jobs), queued)
        self.assertEqual((entry["paused"], entry["runs"]), (True, len(queued)))
        # Pausing again changes nothing.
        self.assertEqual(action(daemon, "pauseschedule.json", "shop", "beat")[1]["paused"],
                         True)

        resuming = time.time()
        status, resumed = action(daemon, "resumeschedule.json", "SHOP", "BEAT")
        self.assertEqual((status, resumed["paused"]), (200, False))
        # From the next due time after now: the runs due while paused are
        # not made up for.
        self.assertGreater(epoch(resumed["next_run"]), time.time() - 1)
        self.assertLessEqual(epoch(resumed["next_run"]), time.time() + 1)
        entry, jobs = next_firing(daemon, "beat", queued, timeout=5)
        fresh = set(jobs) - queued
        self.assertEqual(len(fresh), 1, fresh)
        self.assertEqual(fresh, {entry["last_job"]})
        self.assertGreater(due_of("beat", entry["last_job"]), resuming)
        self.assertFalse(entry["paused"])

        # Deleted right after a firing; its jobs stay and run on.
        entry, jobs = next_firing(daemon, "beat", jobs, timeout=5)
        status, deleted = action(daemon, "delschedule.json", "shop", "beat")
        self.assertEqual((status, deleted["status"], deleted["name"]), (200, "ok", "beat"))
        remaining = set(jobs)
        self.assertTrue(active(jobs))
        self.assertNotIn("beat", listed(daemon))
        self.assertEqual(action(daemon, "delschedule.json", "shop", "beat")[0], 404)
        self.assertEqual(action(daemon, "resumeschedule.json", "shop", "beat")[0], 404)
        deleted_at = time.monotonic()
        for jobid in remaining:
            self.assertEqual(daemon.wait_state(jobid, "finished", timeout=20)["outcome"],
                             "finished")
        time.sleep(max(0, 3.2 - (time.monotonic() - deleted_at)))
        self.assertEqual(set(jobs_of(daemon, "beat")), remaining)
        self.assertEqual(listed(daemon), {})


class RestartTests(ScheduleTestCase):
    def assertSameSchedules(self, before, after, moved=()):
        """``after`` lists the schedules ``before`` did, the same but for the
        fields a firing moves on in those named in ``moved``."""
        self.assertEqual(set(before), set(after))
        for name in before:
            if name in moved:
                self.assertEqual({k: v for k, v in before[name].items() if k not in MOVING},
                                 {k: v for k, v in after[name].items() if k not in MOVING})
                for count in ("runs", "skipped"):
                    self.assertGreaterEqual(after[name][count], before[name][count])
            else:
                self.assertEqual(before[name], after[name])

    def test_schedules_and_counts_survive_a_stop_and_a_kill_nine(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = self.daemon(directory=directory)
        must_add(daemon, ["concurrency=4"], project="shop", spider="echo",
                 every="2s", name="steady", priority="3", category="maps")
        must_add(daemon, project="news", spider="books", cron="*/5 * * * *",
                 tz="America/New_York", name="Idle", overlap="queue", misfire="skip")
        self.assertTrue(action(daemon, "pauseschedule.json", "news", "idle")[1]["paused"])
        entry, jobs = next_firing(daemon, "steady", [])
        entry, jobs = next_firing(daemon, "steady", jobs)
        self.assertEqual(entry["runs"], 2)

        # SIGTERM right after a firing: nothing comes due while it is down.
        before = listed(daemon)
        self.assertEqual(daemon.stop(), 0)
        again = self.daemon(directory=directory)
        after = listed(again)
        self.assertSameSchedules(before, after, moved=("steady",))
        entry, jobs = settled(again, "steady")
        self.assertEqual(entry["runs"], len(jobs))
        self.assertGreaterEqual(entry["runs"], 2)
        entry, jobs = next_firing(again, "steady", jobs)
        self.assertGreaterEqual(entry["runs"], 3)
        self.assertEqual(entry["runs"], len(jobs))

        # kill -9 right after a firing.
        before = listed(again)
        self.kill_nine(again)
        third = self.daemon(directory=directory)
        after = listed(third)
        self.assertSameSchedules(before, after, moved=("steady",))
        self.assertTrue(after["Idle"]["paused"])
        self.assertEqual((after["Idle"]["cron"], after["Idle"]["tz"], after["Idle"]["overlap"],
                          after["Idle"]["misfire"]),
                         ("*/5 * * * *", "America/New_York", "queue", "skip"))
        self.assertEqual((after["steady"]["priority"], after["steady"]["arguments"],
                          after["steady"]["settings"]),
                         (3.0, {"category": "maps"}, {"concurrency": "4"}))
        entry, jobs = settled(third, "steady")
        self.assertGreaterEqual(entry["runs"], before["steady"]["runs"])
        self.assertEqual(entry["runs"], len(jobs))
        entry, jobs = next_firing(third, "steady", jobs)
        self.assertEqual(entry["runs"], len(jobs))
        # Each ended: ran, was cancelled by the SIGTERM, or lost to the kill.
        for jobid in jobs:
            self.assertIn(third.wait_state(jobid, "finished")["outcome"],
                          ("finished", "cancelled", "lost"))

    def test_missed_runs_misfire_once_runs_one_job_and_skip_none(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        daemon = self.daemon(directory=directory)
        # Both schedules on one grid: added in the same second.
        wait_until(lambda: time.time() % 1 < 0.5, 2, "the start of a second")
        once = must_add(daemon, project="shop", spider="echo", every="2s", name="once")
        skip = must_add(daemon, project="shop", spider="echo", every="2s", name="skip",
                        misfire="skip")
        self.assertEqual((once["misfire"], skip["misfire"]), ("once", "skip"))
        self.assertEqual(once["next_run"], skip["next_run"])
        grid = epoch(once["next_run"])

        def grid_at_or_before(t):
            return grid + ((t - grid) // 2) * 2

        jobs = {}
        for name in ("once", "skip"):
            entry, jobs[name] = next_firing(daemon, name, [])
        stopping = time.time()
        # Right after a firing: the next due time is ~2 s off.
        self.assertLess(stopping - grid_at_or_before(stopping), 1.5)
        before = listed(daemon)
        self.assertEqual(daemon.stop(), 0)
        stopped = time.time()
        self.assertLess(grid_at_or_before(stopped), stopping)
        # Down past two due times; back up 0.7 s into an interval, so that
        # the start is done long before the next one.
        restart = grid_at_or_before(stopped + 4.5) + 0.7
        time.sleep(max(0, restart - time.time()))
        spawned = time.time()
        again = self.daemon(directory=directory)
        missed = [t for t in (grid_at_or_before(stopped) + 2 * k for k in range(1, 5))
                  if stopped < t <= spawned]
        self.assertGreaterEqual(len(missed), 2, (stopped, spawned, missed))

        # misfire=once: one job at start, for the latest missed due time.
        def caught_up():
            fresh = set(jobs_of(again, "once")) - set(jobs["once"])
            return fresh or None
        fresh = wait_until(caught_up, 5, "the missed run's job")
        seen = time.time()
        # misfire=skip: none at start (looked at before its next due time).
        skip_jobs = jobs_of(again, "skip")
        self.assertLess(time.time(), grid_at_or_before(spawned) + 2, "too slow a start")
        self.assertEqual(set(skip_jobs), set(jobs["skip"]))

        entry, now_jobs = settled(again, "once")
        [job] = fresh
        due = due_of("once", job)
        self.assertGreater(due, stopped)
        # The latest due time before the start (the start is 0.7 s into an
        # interval; a slow one may reach the next due time, still missed).
        self.assertIn(due, {missed[-1], grid_at_or_before(seen)})
        self.assertEqual([j for j in now_jobs if stopped < due_of("once", j) <= due], [job])
        self.assertEqual(entry["runs"], before["once"]["runs"] + 1)
        self.assertEqual(entry["last_job"], job)
        self.assertEqual(epoch(entry["last_run"]), due)
        self.assertEqual(again.wait_state(job, "finished")["outcome"], "finished")

        # misfire=skip: the regular firings go on after the start.
        entry = wait_until(lambda: (lambda e: e if epoch(e["next_run"]) > spawned else None)(
            listed(again)["skip"]), 5, "schedule skip to settle its missed runs")
        self.assertLessEqual(entry["runs"], before["skip"]["runs"] + 1)
        entry, now_jobs = next_firing(again, "skip", jobs["skip"], timeout=6)
        [job] = set(now_jobs) - set(jobs["skip"])
        self.assertGreater(due_of("skip", job), spawned)
        self.assertEqual(entry["runs"], before["skip"]["runs"] + 1)


class RefusalTests(ScheduleTestCase):
    def test_refusals_name_what_was_wrong_and_add_nothing(self):
        daemon = self.daemon()
        taken = must_add(daemon, project="shop", spider="echo", cron="0  3 * * *", name="Daily",
                         tz="Europe/Berlin")
        self.assertEqual((taken["cron"], taken["tz"]), ("0 3 * * *", "Europe/Berlin"))
        due = datetime.fromisoformat(taken["next_run"])
        self.assertEqual((due.hour, due.minute, due.second), (3, 0, 0))
        self.assertEqual(due.utcoffset(), ZoneInfo("Europe/Berlin").utcoffset(due))
        self.assertTrue(time.time() < due.timestamp() <= time.time() + 25 * 3600)
        # The local zone when tz is absent, and the answer names it.
        plain = must_add(daemon, project="shop", spider="echo", every="90", name="plain")
        self.assertEqual(plain["every"], "90s")
        self.assertTrue(plain["tz"])
        ZoneInfo(plain["tz"])
        self.assertEqual(action(daemon, "delschedule.json", "shop", "plain")[0], 200)
        listing = listed(daemon)
        self.assertEqual(set(listing), {"Daily"})
        good = {"project": "shop", "spider": "echo", "every": "1m"}
        cases = [
            (400, {"cron": "61 * * * *", "every": None}, ["cron", "61 * * * *", "minute"]),
            (400, {"cron": "* * *", "every": None}, ["cron", "* * *", "3 fields"]),
            (400, {"cron": "* * * * *"}, ["cron", "every", "not both"]),
            (400, {"every": None}, ["cron=", "every="]),
            (400, {"tz": "Mars/Base"}, ["tz", "Mars/Base"]),
            (400, {"every": "0"}, ["every", "'0'"]),
            (400, {"every": "5x"}, ["every", "5x"]),
            (400, {"overlap": "sometimes"}, ["overlap", "sometimes"]),
            (400, {"misfire": "later"}, ["misfire", "later"]),
            (400, {"setting": "no_such_setting=1"}, ["no_such_setting"]),
            (400, {"spider": "nosuch"}, ["nosuch"]),
            (400, {"setting": "checkpoint=../x"}, ["checkpoint"]),
            (400, {"parse": "x"}, ["parse"]),
            (400, {"name": "bad name"}, ["name", "bad name"]),
            (400, {"name": "x" * 190}, ["name", "longer"]),
            (400, {"jobid": "x"}, ["jobid"]),
            (409, {"name": "DAILY"}, ["DAILY"]),
            (404, {"project": "nosuch"}, ["nosuch"]),
        ]
        for code, changes, words in cases:
            form = {**good, **changes}
            form = {k: v for k, v in form.items() if v is not None}
            status, answer = add(daemon, **form)
            self.assertEqual((status, answer["status"]), (code, "error"), (form, answer))
            for word in words:
                self.assertIn(word, answer["message"], form)
        self.assertEqual(listed(daemon), listing)
        self.assertEqual(jobs_of(daemon, "Daily"), {})
        # Two adds of one name at once: one wins, the other is told.
        answers = []
        threads = [threading.Thread(target=lambda n=n: answers.append(add(
            daemon, project="shop", spider="echo", every="1h", name=n))) for n in ("Twin", "TWIN")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(sorted(status for status, _ in answers), [200, 409], answers)
        self.assertEqual(len(listed(daemon)), 2)
        winner = next(a["name"] for status, a in answers if status == 200)
        self.assertEqual(action(daemon, "delschedule.json", "shop", winner.lower())[0], 200)
        for endpoint in ("delschedule.json", "pauseschedule.json", "resumeschedule.json"):
            for project, name in (("shop", "nosuch"), ("news", "Daily"), ("nosuch", "Daily")):
                status, answer = action(daemon, endpoint, project, name)
                self.assertEqual((status, answer["status"]), (404, "error"),
                                 (endpoint, project, name, answer))
        self.assertEqual(listed(daemon), listing)
        self.assertEqual(listed(daemon, "news"), {})
        self.assertEqual(set(listed(daemon, "SHOP")), {"Daily"})


class RunPolicyTests(ScheduleTestCase):
    def test_jobs_sharing_a_checkpoint_never_run_at_once_and_hold_no_slot(self):
        daemon = self.daemon("--max-jobs", "2")
        shared = ["checkpoint=shared"]
        first = daemon.must_schedule("shop", "slow", shared, jobid="cp1", pages="12",
                                     delay="0.2")
        daemon.wait_state(first, "running")
        # The same directory, spelt otherwise.
        second = daemon.must_schedule("shop", "slow", ["checkpoint=./shared/"], jobid="cp2",
                                      pages="12", delay="0.2")
        state, entry = daemon.find(second)
        self.assertEqual(state, "pending")
        self.assertEqual(entry["waiting_for"], "the data directory shared (of a checkpoint,"
                         " deltafetch or cache setting) is in use by job cp1")
        # /jobs says the same, in the pending job's Outcome cell.
        jobs_page = daemon.call("GET", "/jobs")[2].decode()
        self.assertIn(f"<td>waiting for {entry['waiting_for']}</td>", jobs_page)
        # A job without the checkpoint takes the free slot meanwhile.
        third = daemon.must_schedule("shop", "echo", jobid="free")
        ids = {first, second, third}

        def third_done(jobs):
            return jobs.get(third, ("",))[0] == "finished"

        most, jobs = watch_overlap(daemon, ids, third_done, 20, "the free job to end",
                                   among={first, second})
        self.assertEqual(most, 1)
        self.assertEqual(jobs[first][0], "running")
        self.assertEqual(jobs[second][0], "pending")
        self.assertIn("checkpoint", jobs[second][1]["waiting_for"])
        self.assertEqual(jobs[third][1]["outcome"], "finished")

        def all_done(jobs):
            return all(state == "finished" for state, _ in jobs.values())

        most, jobs = watch_overlap(daemon, ids, all_done, 30, "both to end",
                                   among={first, second})
        self.assertEqual(most, 1)
        one, two, free = (jobs[j][1] for j in (first, second, third))
        self.assertEqual((one["outcome"], two["outcome"]), ("finished", "finished"))
        self.assertNotIn("waiting_for", two)
        self.assertGreaterEqual(local_epoch(two["start_time"]), local_epoch(one["end_time"]))
        self.assertLess(local_epoch(free["start_time"]), local_epoch(one["end_time"]))
        self.assertLess(local_epoch(free["end_time"]), local_epoch(two["start_time"]))

    def test_max_jobs_per_spider(self):
        daemon = self.daemon("--max-jobs", "3", "--max-jobs-per-spider", "1")
        first = daemon.must_schedule("shop", "slow", jobid="s1", pages="10", delay="0.2")
        daemon.wait_state(first, "running")
        second = daemon.must_schedule("shop", "slow", jobid="s2", pages="4", delay="0.1")
        state, entry = daemon.find(second)
        self.assertEqual(state, "pending")
        self.assertIn("max-jobs-per-spider", entry["waiting_for"])
        self.assertIn("shop/slow", entry["waiting_for"])
        # Another spider, and the same spider of another project, run meanwhile.
        other = daemon.must_schedule("shop", "echo", jobid="other")
        elsewhere = daemon.must_schedule("news", "slow", jobid="elsewhere", pages="3",
                                         delay="0.1")

        def others_done(jobs):
            return all(jobs.get(j, ("",))[0] == "finished" for j in (other, elsewhere))

        most, jobs = watch_overlap(daemon, {first, second, other, elsewhere}, others_done, 20,
                                   "the other jobs to end", among={first, second})
        self.assertEqual(most, 1)
        self.assertEqual(jobs[first][0], "running")
        self.assertEqual(jobs[second][0], "pending")

        def both_done(jobs):
            return all(state == "finished" for state, _ in jobs.values())

        most, jobs = watch_overlap(daemon, {first, second}, both_done, 30, "both to end")
        self.assertEqual(most, 1)
        one, two = jobs[first][1], jobs[second][1]
        self.assertEqual((one["outcome"], two["outcome"]), ("finished", "finished"))
        self.assertGreaterEqual(local_epoch(two["start_time"]), local_epoch(one["end_time"]))
        for jobid in (other, elsewhere):
            entry = daemon.find(jobid)[1]
            self.assertEqual(entry["outcome"], "finished")
            self.assertLess(local_epoch(entry["start_time"]), local_epoch(one["end_time"]))
