"""Watching a cluster from any node (issue 17): real nodes sharing one
PostgreSQL table (tests/pg.py, tests/test_cluster.py's nodes), their
/events streams read over real HTTP and their /metrics scraped, while a
job runs on another node than the one watched."""

import base64

from . import pg
from .processes import wait_until
from .test_cluster import AUTH, ClusterTestCase
from .test_events import StreamReader
from .test_metrics import samples, value

AUTHORIZATION = {"Authorization": "Basic " + base64.b64encode(":".join(AUTH).encode()).decode()}


class WatchingTests(ClusterTestCase):
    def stream(self, daemon):
        reader = StreamReader(daemon.port, headers=AUTHORIZATION)
        self.addCleanup(reader.close)
        self.assertEqual(reader.answer.status, 200)
        return reader

    def scrape(self, daemon):
        status, _, body = daemon.call("GET", "/metrics")
        self.assertEqual(status, 200, body)
        return samples(body.decode())

    def test_a_job_running_on_another_node_shows_on_this_ones_events_and_metrics(self):
        a = self.node("a", 1)
        # a's one slot is taken: what is scheduled through it runs on b.
        blocker = a.must_schedule("shop", "slow", delay="0.2")
        self.assertEqual(self.running_on(a, blocker), "a")
        b = self.node("b", 1)
        on_a, on_b = self.stream(a), self.stream(b)

        jobid = a.must_schedule("shop", "slow", delay="0.2")
        self.assertEqual(self.running_on(a, jobid), "b")
        # Started on b, and b's saved stats (every 5 s), on a's stream.
        running = on_a.wait(lambda _: [e for e in on_a.of(jobid) if e["state"] == "running"
                                       and e.get("stats") and e.get("pid")],
                            "the job running on b, with stats, on a's stream", 30)[0]
        self.assertEqual(running["node"], "b")
        self.assertIsInstance(running["stats"]["fetched"], int)
        self.assertFalse(running["cancel_requested"])
        self.assertEqual(running["log_url"], f"/logs/shop/slow/{jobid}.log")
        self.assertEqual(on_a.of(jobid)[0]["state"], "pending")

        # a's /metrics: b's running job under node="b", a's own under "a",
        # and both nodes live.
        found = self.scrape(a)
        self.assertEqual(value(found, "netweir_serve_jobs", state="running", project="shop",
                               node="b"), 1)
        self.assertEqual(value(found, "netweir_serve_jobs", state="running", project="shop",
                               node="a"), 1)
        self.assertEqual(self.nodes_up(a), {"a": 1, "b": 1})
        # b's too: the table's, the same on every node.
        self.assertEqual(value(self.scrape(b), "netweir_serve_jobs", state="running",
                               project="shop", node="b"), 1)

        # Cancelled through a, ended on b: both seen on a's stream.
        a.post("cancel.json", {"project": "shop", "job": jobid})
        ended = on_a.wait(lambda _: [e for e in on_a.of(jobid) if e["state"] == "finished"],
                          "the job's end on a's stream", 30)[0]
        self.assertTrue(any(e.get("cancel_requested") for e in on_a.of(jobid)
                            if e["state"] == "running"))
        self.assertEqual((ended["node"], ended["outcome"], ended["stats"]["finish_reason"]),
                         ("b", "cancelled", "interrupted"))
        # The entry b's own stream gave for its end, but for its time.
        own = on_b.wait(lambda _: [e for e in on_b.of(jobid) if e["state"] == "finished"],
                        "the job's end on b's stream", 30)[0]
        self.assertEqual({k: v for k, v in ended.items() if k != "time"},
                         {k: v for k, v in own.items() if k != "time"})
        # Each end counted by the node that ran the job only.
        self.assertEqual(value(self.scrape(b), "netweir_serve_jobs_ended_total", project="shop",
                               spider="slow", outcome="cancelled", reason="cancel.json"), 1)
        self.assertEqual(value(self.scrape(a), "netweir_serve_jobs_ended_total", project="shop",
                               spider="slow", outcome="cancelled", reason="cancel.json"), 0)
        a.post("cancel.json", {"project": "shop", "job": blocker})
        a.wait_state(blocker, "finished")
        self.assertNotIn("Traceback", self.outputs())

    def test_a_schedule_changed_elsewhere_and_the_listener_coming_back_reach_the_stream(self):
        a, b = self.node("a", 1), self.node("b", 1)
        on_a = self.stream(a)
        def shown(paused, deleted):
            return lambda events: [e for k, e in events if k == "schedule"
                                   and (e["paused"], e["deleted"]) == (paused, deleted)]

        # Each change made on b, seen on a's stream before the next.
        status, answer = b.post("addschedule.json", {"project": "shop", "spider": "echo",
                                                     "every": "1h", "name": "hourly"})
        self.assertEqual(answer["status"], "ok", answer)
        added = on_a.wait(shown(False, False), "the schedule added, on a's stream")[0]
        self.assertEqual((added["name"], added["every"], added["next_run"]),
                         ("hourly", "1h", answer["next_run"]))
        b.post("pauseschedule.json", {"project": "shop", "name": "hourly"})
        on_a.wait(shown(True, False), "the schedule paused, on a's stream")
        b.post("delschedule.json", {"project": "shop", "name": "hourly"})
        on_a.wait(shown(True, True), "the schedule deleted, on a's stream")

        # The LISTEN connections end (as a restart of PostgreSQL ends
        # them): back, a node tells its streams to read the listings again.
        with pg.admin_connection() as conn:
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'netweir-serve'"
                " AND query = 'SELECT version FROM store_meta'").fetchone()[0]
        self.assertEqual(ended, 2)
        on_a.wait(lambda events: [k for k, _ in events if k == "resync"],
                  "a resync on a's stream", 30)
        # And it hears b again.
        jobid = b.must_schedule("shop", "echo")
        on_a.wait(lambda _: [e for e in on_a.of(jobid) if e["state"] == "finished"],
                  "the job's end on a's stream", 30)
        wait_until(lambda: "listening again" in a.output(), 10, "a to say it listens again")
