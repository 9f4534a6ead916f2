"""The nodes page (/nodes, console/nodes.js) and listnodes.json: a
service of its own lists itself; a viewer sees its projects' names alone;
two nodes sharing a PostgreSQL job table (tests/pg.py), one killed with
``kill -9``, whose row turns dead in a real browser (Debian's chromium)
without a reload once the other declares it so (--node-timeout 6)."""

import tempfile
from types import SimpleNamespace

from twisted.trial import unittest

from netweir_serve.access.roles import Identity
from netweir_serve.web.nodes import ListNodes

from .browser import BrowserMixin
from .processes import wait_until
from .test_cluster import AUTH, ClusterTestCase
from .test_console_schedules import ready, token, url_of
from .test_jobs import CrawlTestCase


def table_node(name, dead=False, projects=("news", "shop")):
    """A row of IClusterStore.nodes(): the projects folded, as stored."""
    return {"name": name, "url": f"http://{name}:6800", "heartbeat": 1000.0, "started": 900.0,
            "dead": dead, "age": 2.5, "projects": list(projects)}


class ListNodesAnswerTests(unittest.TestCase):
    """The answer from a shared table's rows, without a service."""

    def answer(self, identity):
        api = SimpleNamespace(
            node="alpha", store=SimpleNamespace(shared=True),
            projects=SimpleNamespace(names=lambda: ["News", "shop"]),
            launcher=SimpleNamespace(slots_free=lambda: 4))
        nodes = [table_node("alpha"), table_node("beta", dead=True, projects=("news",))]
        running = [SimpleNamespace(project=project, node=node) for project, node in
                   (("shop", "alpha"), ("News", "alpha"), ("news", "beta"))]
        return ListNodes(api)._answer(nodes, running, identity)

    def test_each_node_with_its_running_jobs_and_the_answering_nodes_free_slots(self):
        answer = self.answer(Identity.of(None, "admin"))
        self.assertEqual(answer, {"shared": True, "nodes": [
            {"name": "alpha", "url": "http://alpha:6800", "up": True, "heartbeat": 1000.0,
             "started": 900.0, "age": 2.5, "running": 2, "slots_free": 4,
             "projects": ["News", "shop"], "this": True},
            {"name": "beta", "url": "http://beta:6800", "up": False, "heartbeat": 1000.0,
             "started": 900.0, "age": 2.5, "running": 1, "slots_free": None,
             "projects": ["News"], "this": False}]})

    def test_a_viewer_sees_neither_the_names_nor_the_jobs_of_other_projects(self):
        answer = self.answer(Identity.of("viewer1", "viewer", ["shop"]))
        self.assertEqual([(n["name"], n["projects"], n["running"]) for n in answer["nodes"]],
                         [("alpha", ["shop"], 1), ("beta", [], 0)])


class ListNodesTests(CrawlTestCase):
    def test_a_service_of_its_own_lists_itself_and_a_viewer_its_projects_alone(self):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        viewer = token(directory, "viewer1", "viewer", "shop")
        root = token(directory, "root", "admin")
        daemon = self.daemon("--max-jobs", "3", "--node-name", "alone", directory=directory,
                             auth=("root", root))
        status, answer = daemon.get("listnodes.json")
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["shared"], False)
        self.assertEqual(answer["nodes"], [{
            "name": "alone", "url": None, "up": True, "heartbeat": None, "started": None,
            "age": None, "running": 0, "slots_free": 3, "projects": ["news", "shop"],
            "this": True}])
        daemon.auth = ("viewer1", viewer)
        [node] = daemon.get("listnodes.json")[1]["nodes"]
        self.assertEqual(node["projects"], ["shop"])
        # A write is refused there as anywhere: the endpoint takes GET alone.
        self.assertEqual(daemon.post("listnodes.json")[0], 405)


class NodesPageTests(BrowserMixin, ClusterTestCase):
    def rows(self, page):
        return page.locator("#nodes tbody tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.node, r.dataset.up])")

    def test_two_nodes_then_one_dead_after_kill_9(self):
        alpha = self.node("alpha", max_jobs=2)
        beta = self.node("beta", max_jobs=3)
        jobid = alpha.must_schedule("shop", "slow", delay="0.5")
        node_of_job = self.running_on(alpha, jobid)
        page = self.open(url_of(alpha) + "/nodes",
                         http_credentials={"username": AUTH[0], "password": AUTH[1]})
        ready(page)
        wait_until(lambda: self.rows(page) == [["alpha", "1"], ["beta", "1"]], 20,
                   "both nodes up on the page")
        answer = alpha.get("listnodes.json")[1]
        self.assertTrue(answer["shared"])
        by_name = {node["name"]: node for node in answer["nodes"]}
        self.assertEqual({name: node["running"] for name, node in by_name.items()},
                         {"alpha": int(node_of_job == "alpha"), "beta": int(node_of_job == "beta")})
        self.assertEqual(by_name["alpha"]["slots_free"], 2 - int(node_of_job == "alpha"))
        self.assertIsNone(by_name["beta"]["slots_free"])
        self.assertEqual((by_name["alpha"]["this"], by_name["beta"]["this"]), (True, False))
        self.assertEqual(by_name["beta"]["projects"], ["shop"])
        self.assertTrue(by_name["beta"]["url"].endswith(f":{beta.port}"), by_name["beta"]["url"])

        self.kill9(beta)
        # Declared dead by alpha after --node-timeout without a beat; the
        # page reads listnodes.json every few seconds.
        wait_until(lambda: self.rows(page) == [["alpha", "1"], ["beta", "0"]], 30,
                   "beta shown dead")
        self.assertEqual(page.locator("tr[data-node=beta] .node-state").inner_text(), "dead")
        self.assertIn("1 of 2 node(s) up", page.locator("#nodes-summary").inner_text())
        self.assertFalse(alpha.get("listnodes.json")[1]["nodes"][1]["up"])

        def drawn(shot):
            ready(shot)
            shot.wait_for_selector("tr[data-node=beta][data-up='0']")
        self.screenshots(page, "nodes", drawn)
        self.assertEqual(self.errors, [])
