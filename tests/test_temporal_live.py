"""Schedules as Temporal keeps them (issue 25), for real: a real daemon,
real crawls of the test site, on SQLite and on PostgreSQL alike (each case
runs on both).

An edit keeps the counts and moves next_run; a backfill repeated adds
each due time once and its jobs run one after another; cancel_other and
terminate_other with a crawl that ignores SIGTERM; pause_after=2 pauses
after two failures, says why, and --notify says so; bad inputs are 4xx
answers naming the parameter, storing nothing."""

import json
import os
import time
from datetime import datetime, timedelta, timezone

from .bothtables import LiveCases, on_both_tables
from .processes import wait_until
from .test_cluster import ClusterTestCase
from .test_notify import Receiver
from .test_schedules_live import epoch, listed, local_epoch

HOUR = 3600


def iso(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class TemporalLive(LiveCases):
    """The cases; on_both_tables makes them a test class per job table."""

    def add(self, daemon, **params):
        status, answer = daemon.post("addschedule.json", {"project": "shop", **params})
        self.assertEqual((status, answer["status"]), (200, "ok"), answer)
        return answer

    def jobs(self, daemon):
        """{id: (state, entry)} of every job."""
        _, answer = daemon.get("listjobs.json")
        return {e["id"]: (state, e) for state in ("pending", "running", "finished")
                for e in answer[state]}

    def test_an_edit_keeps_the_counts_and_moves_next_run(self):
        daemon = self.daemon()
        self.add(daemon, spider="echo", every="1s", name="tick", overlap="allow")
        wait_until(lambda: listed(daemon)["tick"]["runs"] >= 2, 20, "two runs of tick")
        status, edited = daemon.post("editschedule.json", {
            "project": "shop", "name": "TICK", "every": "1h", "setting": "max_items=5",
            "category": "fiction", "pause_after": "3"})
        self.assertEqual((status, edited["status"]), (200, "ok"), edited)
        self.assertGreaterEqual(edited["runs"], 2)
        self.assertEqual((edited["every"], edited["overlap"], edited["settings"],
                          edited["arguments"], edited["pause_after"], edited["failed_in_row"]),
                         ("1h", "allow", {"max_items": "5"}, {"category": "fiction"}, 3, 0))
        self.assertLess(abs(epoch(edited["next_run"]) - (time.time() + HOUR)), 5)
        # An hour away now: it fires no more, and its counts stay.
        time.sleep(2.5)
        entry = listed(daemon)["tick"]
        self.assertLessEqual(entry["runs"] - edited["runs"], 1)  # one under way at the edit
        self.assertEqual(entry["next_run"], edited["next_run"])

        # Refusals name the parameter and change nothing.
        before = listed(daemon)["tick"]
        for params, code, word in (({"cron": "61 * * * *"}, 400, "cron"),
                                   ({"every": "1h", "cron": "@daily"}, 400, "not both"),
                                   ({"overlap": "sometimes"}, 400, "overlap"),
                                   ({"jitter": "5d"}, 400, "jitter"),
                                   ({"pause_after": "many"}, 400, "pause_after"),
                                   ({"spider": "books"}, 400, "spider"),
                                   ({}, 400, "at least one"),
                                   ({"_timeout": "soon"}, 400, "timeout")):
            status, answer = daemon.post("editschedule.json",
                                         {"project": "shop", "name": "tick", **params})
            self.assertEqual((status, answer["status"]), (code, "error"), (params, answer))
            self.assertIn(word, answer["message"], params)
        status, answer = daemon.post("editschedule.json",
                                     {"project": "shop", "name": "nosuch", "every": "1h"})
        self.assertEqual(status, 404)
        self.assertIn("nosuch", answer["message"])
        self.assertEqual(listed(daemon)["tick"], before)

    def test_a_backfill_twice_adds_each_due_time_once_and_they_run_one_by_one(self):
        daemon = self.daemon("--max-jobs", "4")
        self.add(daemon, spider="echo", cron="0 3 * * *", tz="UTC", name="nightly")
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        status, first = daemon.post("backfillschedule.json", {
            "project": "shop", "name": "nightly", "from": iso(today - timedelta(days=3)),
            "to": iso(today)})
        self.assertEqual((status, first["already"]), (200, []), first)
        days = [today - timedelta(days=n) + timedelta(hours=3) for n in (3, 2, 1)]
        ids = [f"nightly-{d:%Y%m%dT%H%M%SZ}" for d in days]
        self.assertEqual(first["queued"], ids)
        self.assertEqual(first["schedule"]["runs"], 3)
        status, again = daemon.post("backfillschedule.json", {
            "project": "shop", "name": "nightly", "from": iso(today - timedelta(days=4)),
            "to": iso(today)})
        older = f"nightly-{today - timedelta(days=4) + timedelta(hours=3):%Y%m%dT%H%M%SZ}"
        self.assertEqual((status, again["queued"]), (200, [older]), again)
        self.assertEqual([epoch(t) for t in again["already"]], [d.timestamp() for d in days])
        self.assertEqual(again["schedule"]["runs"], 4)
        # One after another (the schedule's lock), in the order queued.
        ended = wait_until(lambda: (lambda jobs: jobs if all(
            jobs.get(i, ("",))[0] == "finished" for i in ids + [older]) else None)(
            self.jobs(daemon)), 60, "the backfilled jobs to end")
        spans = sorted((local_epoch(e["start_time"]), local_epoch(e["end_time"]), i)
                       for i, (_, e) in ended.items() if i in ids + [older])
        self.assertEqual([i for _, _, i in spans], ids + [older])
        for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
            self.assertGreaterEqual(start, end - 0.01)
        self.assertTrue(all(ended[i][1]["outcome"] == "finished" for i in ids + [older]))

        # A range reversed or too long: 400, naming it; nothing queued.
        for start, end, word in ((today, today - timedelta(days=1), "'to'"),
                                 (today - timedelta(days=200), today, "100"),
                                 ("yesterday", today, "'from'")):
            status, answer = daemon.post("backfillschedule.json", {
                "project": "shop", "name": "nightly",
                "from": start if isinstance(start, str) else iso(start), "to": iso(end)})
            self.assertEqual((status, answer["status"]), (400, "error"), answer)
            self.assertIn(word, answer["message"])
        status, answer = daemon.post("backfillschedule.json", {"project": "shop",
                                                               "name": "nightly"})
        self.assertEqual(status, 400)
        self.assertIn("'from'", answer["message"])
        self.assertEqual(len(self.jobs(daemon)), 4)
        self.assertEqual(listed(daemon)["nightly"]["runs"], 4)

    def test_cancel_other_and_terminate_other_with_a_crawl_that_ignores_sigterm(self):
        grace = 4
        daemon = self.daemon("--max-jobs", "4", env={"NETWEIR_SERVE_CANCEL_GRACE": str(grace)})
        self.add(daemon, spider="stubborn", every="1h", name="hold", overlap="cancel_other",
                 pidfile=os.path.join(self.base, "stubborn.pid"))

        def run_now():
            status, answer = daemon.post("runschedule.json", {"project": "shop",
                                                              "name": "hold"})
            self.assertEqual((status, answer["queued"]), (200, True), answer)
            return answer["jobid"]

        first = run_now()
        daemon.wait_state(first, "running", timeout=20)
        time.sleep(1.1)  # ids are to the second
        asked = time.time()
        second = run_now()
        # cancel_other: SIGTERM, ignored; killed at the end of the grace
        # period; the new job waits for that end.
        self.assertEqual(self.jobs(daemon)[second][0], "pending")
        ended = daemon.wait_state(first, "finished", timeout=30)
        self.assertEqual(ended["outcome"], "cancelled")
        self.assertGreaterEqual(local_epoch(ended["end_time"]) - asked, grace - 0.5)
        started = daemon.wait_state(second, "running", timeout=20)
        self.assertGreaterEqual(local_epoch(started["start_time"]),
                                local_epoch(ended["end_time"]))

        # terminate_other (an edit): killed at once, no grace.
        status, edited = daemon.post("editschedule.json", {"project": "shop", "name": "hold",
                                                           "overlap": "terminate_other"})
        self.assertEqual((status, edited["overlap"], edited["runs"]),
                         (200, "terminate_other", 2))
        time.sleep(1.1)
        asked = time.time()
        third = run_now()
        killed = daemon.wait_state(second, "finished", timeout=30)
        self.assertEqual(killed["outcome"], "cancelled")
        self.assertLess(local_epoch(killed["end_time"]) - asked, grace - 1)
        started = daemon.wait_state(third, "running", timeout=20)
        self.assertGreaterEqual(local_epoch(started["start_time"]),
                                local_epoch(killed["end_time"]))
        self.assertEqual(listed(daemon)["hold"]["runs"], 3)
        daemon.post("delschedule.json", {"project": "shop", "name": "hold"})
        daemon.post("cancel.json", {"project": "shop", "job": third, "signal": "KILL"})

    def test_pause_after_two_failures_pauses_says_why_and_notifies(self):
        hook = Receiver()
        self.addCleanup(hook.stop)
        daemon = self.daemon("--notify", hook.url, "--notify-on", "finished")
        self.add(daemon, spider="failing", every="1s", name="flaky", pause_after="2")
        entry = wait_until(lambda: (lambda e: e if e["paused"] else None)(
            listed(daemon)["flaky"]), 60, "flaky to pause itself")
        failed = sorted(i for i, (state, e) in self.jobs(daemon).items()
                        if state == "finished" and e["outcome"] == "failed")
        self.assertEqual(len(failed), 2, failed)
        self.assertEqual((entry["failed_in_row"], entry["pause_after"], entry["next_run"]),
                         (2, 2, None))
        self.assertEqual(entry["note"], "paused after 2 runs in a row failed or degraded;"
                                        f" the last: {failed[-1]} (failed, exit 1)")
        # It stays paused: no more runs.
        time.sleep(2.5)
        self.assertEqual(listed(daemon)["flaky"]["runs"], entry["runs"])
        # --notify: the pause, whatever --notify-on says of job ends.
        wait_until(lambda: hook.received, 20, "the notice")
        [body] = [json.loads(b) for _, b in hook.received]
        self.assertEqual((body["event"], body["job"], body["schedule"]["name"],
                          body["schedule"]["note"]),
                         ("schedule_paused", failed[-1], "flaky", entry["note"]))
        _, _, text = daemon.call("GET", "/metrics")
        self.assertIn('netweir_serve_schedule_pauses_total{project="shop"} 1.0', text.decode())
        # A user's pause takes a note; a resume clears it and the streak.
        status, noted = daemon.post("pauseschedule.json", {"project": "shop", "name": "flaky",
                                                           "note": "fixing the check"})
        self.assertEqual((status, noted["note"]), (200, "fixing the check"))
        status, resumed = daemon.post("resumeschedule.json", {"project": "shop",
                                                              "name": "flaky"})
        self.assertEqual((resumed["paused"], resumed["failed_in_row"]), (False, 0))
        self.assertNotIn("note", resumed)
        daemon.post("pauseschedule.json", {"project": "shop", "name": "flaky"})


SQLiteTemporalTests, PostgresTemporalTests = on_both_tables(TemporalLive, "Temporal")


class ClusterTemporalTests(ClusterTestCase):
    def test_terminate_other_kills_a_job_running_on_another_node_through_the_table(self):
        nodes = {name: self.node(name, 1) for name in ("n0", "n1")}
        status, answer = nodes["n0"].post("addschedule.json", {
            "project": "shop", "spider": "slow", "every": "1h", "name": "hold",
            "overlap": "terminate_other", "delay": "0.2"})
        self.assertEqual(answer["status"], "ok", answer)
        status, first = nodes["n0"].post("runschedule.json", {"project": "shop",
                                                              "name": "hold"})
        self.assertTrue(first["queued"], first)
        where = self.running_on(nodes["n0"], first["jobid"])
        elsewhere = nodes["n1" if where == "n0" else "n0"]
        time.sleep(1.1)  # ids are to the second
        # Asked of the node the job does not run on: the kill goes through
        # the table, as a cancel.json there would.
        status, second = elsewhere.post("runschedule.json", {"project": "shop",
                                                             "name": "hold"})
        self.assertTrue(second["queued"], second)
        ended = elsewhere.wait_state(first["jobid"], "finished", timeout=30)
        self.assertEqual((ended["outcome"], ended["node"]), ("cancelled", where))
        started = elsewhere.wait_state(second["jobid"], "running", timeout=30)
        self.assertGreaterEqual(local_epoch(started["start_time"]),
                                local_epoch(ended["end_time"]))
        elsewhere.post("cancel.json", {"project": "shop", "job": second["jobid"]})
