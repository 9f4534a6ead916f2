"""Chain schedules with real daemons and real crawls: a spider's end
queues the chain's job once, with upstream_job, across a kill -9 of the
service and on two nodes sharing a PostgreSQL table; bad chains refused."""

import json
import os
import time

from .processes import wait_until
from .spiders import HEADER
from .test_cluster import ClusterTestCase
from .test_jobs import CrawlTestCase

# A spider that says which upstream job it follows.
CHAINED = '''
class Chained(netweir.Spider):
    """One item: the upstream_job it was given."""
    name = "chained"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        yield {"upstream_job": getattr(self, "upstream_job", None)}
'''


# Read while the file ``gate`` is in the project (at most 20 s): the
# check of a chain's job before it is queued waits, so that a test can
# kill the service between an upstream's end and its chain's queueing.
GATE = '''
import time as _time
_deadline = _time.time() + 20
while os.path.exists({gate!r}) and _time.time() < _deadline:
    _time.sleep(0.05)
'''


def write_chained(project, site):
    with open(os.path.join(project, "chained.py"), "w") as f:
        f.write(HEADER.format(site=site) + GATE.format(gate=os.path.join(project, "gate"))
                + CHAINED)


def add_chain(daemon, **params):
    form = {"project": "shop", "spider": "chained", **params}
    return daemon.post("addschedule.json", form)


def chain_jobs(daemon, name):
    """{job id: (state, entry)} of the jobs schedule ``name`` queued."""
    answer = daemon.get("listjobs.json")[1]
    return {e["id"]: (state, e) for state in ("pending", "running", "finished")
            for e in answer[state] if e.get("schedule") == name}


def items(daemon, entry):
    return [json.loads(line) for line in daemon.call("GET", entry["items_url"])[2].splitlines()]


def schedule_entry(daemon, name):
    shown = daemon.get("listschedules.json", {"project": "shop"})[1]["schedules"]
    return {s["name"]: s for s in shown}[name]


class ChainTests(CrawlTestCase):
    def setUp(self):
        super().setUp()
        write_chained(self.shop, self.site.base)

    def finished_chain_job(self, daemon, jobid, timeout=60):
        entry = daemon.wait_state(jobid, "finished", timeout)
        self.assertEqual((entry["outcome"], entry["schedule"]), ("finished", "detail"))
        self.assertEqual(items(daemon, entry), [{"upstream_job": entry["id"].split(
            "detail-after-", 1)[1]}])
        return entry

    def test_an_upstream_crawl_ending_queues_the_chain_job_once_with_upstream_job(self):
        daemon = self.daemon()
        status, answer = add_chain(daemon, name="detail", after="books", on="finished",
                                   category="x")
        self.assertEqual((status, answer["after"], answer["on"], answer["next_run"]),
                         (200, "books", ["finished"], None), answer)
        daemon.wait_state(daemon.must_schedule("shop", "books", jobid="up1"), "finished")
        entry = self.finished_chain_job(daemon, "detail-after-up1")
        self.assertEqual(entry["spider"], "chained")
        # A failing crawl of another spider, and the chain job's own end,
        # fire nothing.
        daemon.wait_state(daemon.must_schedule("shop", "failing", jobid="other"), "finished")
        shown = schedule_entry(daemon, "detail")
        self.assertEqual((shown["runs"], shown["skipped"], shown["last_job"], shown["after"],
                          shown["on"], shown["arguments"]),
                         (1, 0, "detail-after-up1", "books", ["finished"], {"category": "x"}))
        self.assertEqual(list(chain_jobs(daemon, "detail")), ["detail-after-up1"])
        self.assertNotIn("Traceback", daemon.output())

    def test_on_failed_fires_after_a_failed_crawl_and_not_after_a_finished_one(self):
        daemon = self.daemon()
        self.assertEqual(add_chain(daemon, name="detail", after="failing",
                                   on="failed")[0], 200)
        daemon.wait_state(daemon.must_schedule("shop", "failing", jobid="bad"), "finished")
        self.finished_chain_job(daemon, "detail-after-bad")
        self.assertEqual(list(chain_jobs(daemon, "detail")), ["detail-after-bad"])

    def test_bad_chains_are_refused_naming_the_parameter_storing_nothing(self):
        daemon = self.daemon()
        status, answer = add_chain(daemon, name="detail", after="nosuch")
        self.assertEqual((status, answer["status"]), (400, "error"), answer)
        self.assertIn("parameter 'after'", answer["message"])
        self.assertIn("nosuch", answer["message"])
        status, answer = add_chain(daemon, name="detail", after="schedule:nosuch")
        self.assertEqual(status, 400, answer)
        self.assertIn("parameter 'after': no schedule 'nosuch'", answer["message"])
        status, answer = add_chain(daemon, name="detail", after="books", on="sometimes")
        self.assertEqual(status, 400, answer)
        self.assertIn("parameter 'on'", answer["message"])
        self.assertEqual(daemon.get("listschedules.json")[1]["schedules"], [])
        # A loop: chained after books, then books after chained.
        self.assertEqual(add_chain(daemon, name="detail", after="books")[0], 200)
        status, answer = daemon.post("addschedule.json", {
            "project": "shop", "spider": "books", "name": "back", "after": "chained"})
        self.assertEqual(status, 400, answer)
        self.assertIn("would make a loop: back (spider books) after detail (spider chained)"
                      " after back", answer["message"])
        self.assertEqual([s["name"] for s in daemon.get("listschedules.json")[1]["schedules"]],
                         ["detail"])

    def kill_9(self, daemon):
        daemon.process.kill()
        daemon.process.wait()
        daemon._output.close()

    def test_a_chain_fires_once_per_upstream_job_across_kill_9_of_the_service(self):
        directory = os.path.join(self.base, "dir")
        daemon = self.daemon(directory=directory)
        self.assertEqual(add_chain(daemon, name="detail", after="slow", on="finished")[0], 200)
        # Killed while the upstream crawl runs: the next start adopts it,
        # and its end fires the chain.
        daemon.must_schedule("shop", "slow", jobid="up1", pages="12", delay="0.1")
        daemon.wait_state("up1", "running")
        self.kill_9(daemon)
        daemon = self.daemon(directory=directory)
        self.finished_chain_job(daemon, "detail-after-up1")
        # Killed after the upstream's end was recorded and before its
        # chain's job was queued (its check waits at the gate): the next
        # start makes the firing its end left in the table.
        daemon.must_schedule("shop", "slow", jobid="up2", pages="3", delay="0.05")
        gate = os.path.join(self.shop, "gate")
        open(gate, "w").close()
        daemon.wait_state("up2", "finished")
        time.sleep(0.5)
        self.kill_9(daemon)
        self.assertNotIn("queued job detail-after-up2", daemon.output())
        os.remove(gate)
        daemon = self.daemon(directory=directory)
        self.finished_chain_job(daemon, "detail-after-up2")
        # Killed again once that job is done: nothing more is queued.
        self.kill_9(daemon)
        daemon = self.daemon(directory=directory)
        wait_until(lambda: schedule_entry(daemon, "detail")["runs"] == 2, 10,
                   "both runs counted")
        self.assertEqual(sorted(chain_jobs(daemon, "detail")),
                         ["detail-after-up1", "detail-after-up2"])
        shown = schedule_entry(daemon, "detail")
        self.assertEqual((shown["runs"], shown["skipped"]), (2, 0))


class ClusterChainTests(ClusterTestCase):
    def test_a_chain_fires_once_per_upstream_job_on_two_nodes(self):
        write_chained(self.shop, self.site.base)
        nodes = [self.node(f"n{n}", 3) for n in range(2)]
        status, answer = nodes[0].post("addschedule.json", {
            "project": "shop", "spider": "chained", "name": "detail", "after": "books",
            "on": "finished", "overlap": "allow"})
        self.assertEqual(status, 200, answer)
        # Upstream jobs queued on both nodes, run on either.
        upstream = [f"up{n}" for n in range(6)]
        for n, jobid in enumerate(upstream):
            nodes[n % 2].must_schedule("shop", "books", jobid=jobid)
        wanted = sorted(f"detail-after-{jobid}" for jobid in upstream)

        def all_done():
            jobs = chain_jobs(nodes[1], "detail")
            done = sorted(j for j, (state, _) in jobs.items() if state == "finished")
            return done if done == wanted else None

        wait_until(all_done, 90, "every chain job to finish", interval=0.2)
        for jobid in wanted:
            entry = nodes[0].find(jobid)[1]
            self.assertEqual(items(nodes[0], entry), [{"upstream_job": jobid.split(
                "detail-after-", 1)[1]}])
        # Each ended once (--notify hears every end of every node), each
        # counted once on every node.
        wait_until(lambda: all(len(self.ended()[j]) == 1 for j in wanted), 10,
                   "every chain job's end announced")
        self.assertEqual({j: self.ended()[j] for j in wanted}, {j: ["finished"] for j in wanted})
        for node in nodes:
            wait_until(lambda: schedule_entry(node, "detail")["runs"] == len(wanted), 10,
                       "the runs counted")
            shown = schedule_entry(node, "detail")
            self.assertEqual((shown["runs"], shown["skipped"]), (len(wanted), 0))
        self.assertEqual(sorted(chain_jobs(nodes[0], "detail")), wanted)
        self.assertNotIn("Traceback", self.outputs())

