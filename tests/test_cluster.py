"""Several nodes sharing one PostgreSQL job table (issue 17), for real:
daemons on one machine, each with a port and a --dir of its own, one fresh
schema of the test database (tests/pg.py) per test, real crawls of the
test site. Every node has a password and --notify's hook, so that the
Authorization header is seen passed on and every end is seen announced.

The network cut runs one node's connections to PostgreSQL through a relay
of the test's own (Relay), which it cuts: PostgreSQL itself is shared with
the other tests and stays up.
"""

import collections
import itertools
import json
import os
import re
import signal
import socket
import tempfile
import threading
import time
from urllib.parse import quote

from twisted.trial import unittest

from . import pg
from .processes import Daemon, alive, kill_groups, shared_site, wait_until
from .spiders import write_project
from .test_metrics import samples, value
from .test_notify import Receiver

AUTH = ("ops", "cluster-secret")
AUTH_ENV = {"NETWEIR_SERVE_USERNAME": AUTH[0], "NETWEIR_SERVE_PASSWORD": AUTH[1]}
TIMEOUT = 6  # --node-timeout of every node
FENCE_AT = 0.8 * TIMEOUT  # when a node cut off kills what a retry would repeat
DECLARED = re.compile(r"node (\S+) is silent past")


def url_through(url, host, port):
    """The job table ``url`` (as tests/pg.py gives it) reached at
    ``host``:``port`` instead."""
    from psycopg.conninfo import conninfo_to_dict
    params = conninfo_to_dict(url)
    params.update(host=host, port=str(port))
    return "postgresql:///?" + "&".join(f"{k}={quote(str(v), safe='')}"
                                        for k, v in params.items())


def server_address(url):
    from psycopg.conninfo import conninfo_to_dict
    params = conninfo_to_dict(url)
    return params.get("host") or "127.0.0.1", int(params.get("port") or 5432)


class Relay:
    """A TCP relay on a free local port to ``target``: what a node sees of
    its network. ``cut()`` closes every connection through it and refuses
    new ones (each is accepted and closed at once) until ``mend()``."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.up = True
        self.refused = 0
        self._pairs = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                self.refused += 1
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            pair = (client, server)
            with self._lock:
                self._pairs.add(pair)
            for a, b in (pair, pair[::-1]):
                threading.Thread(target=self._pump, args=(a, b, pair), daemon=True).start()

    def _pump(self, source, sink, pair):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        self._drop(pair)

    def _drop(self, pair):
        with self._lock:
            self._pairs.discard(pair)
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self):
        self.up = False
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)

    def mend(self):
        self.up = True

    def stop(self):
        self._closed = True
        self.cut()
        self.listener.close()


def kill_beneath(marker):
    """Kills every process whose command line has ``marker`` (this test's
    folder): crawls whose node was killed outlive it."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Sampler:
    """Reads listjobs.json of ``node`` over and over in a thread, keeping
    the most jobs seen running at once per node, and every node each job
    was seen running on."""

    def __init__(self, node):
        self.node = node
        self.most = collections.Counter()
        self.seen_on = collections.defaultdict(set)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                running = self.node.get("listjobs.json", timeout=10)[1]["running"]
            except (OSError, ValueError, KeyError):
                continue
            self.samples += 1
            now = collections.Counter(e["node"] for e in running)
            for name, count in now.items():
                self.most[name] = max(self.most[name], count)
            for entry in running:
                self.seen_on[entry["id"]].add(entry["node"])
            time.sleep(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join(15)


class ClusterTestCase(unittest.TestCase):
    def setUp(self):
        self.jobs_db = pg.fresh_url(self)
        self.site = shared_site()
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)
        self.shop = write_project(os.path.join(self.base, "shop"), self.site.base)
        self.hook = Receiver()
        self.addCleanup(self.hook.stop)
        # Last of all (cleanups run last first): whatever is left of the crawls.
        self.addCleanup(kill_beneath, self.base)
        self.nodes = {}

    def node(self, name, max_jobs=2, jobs_db=None, args=(), start=True, projects=None,
             env=None):
        daemon = Daemon(os.path.join(self.base, name), projects or [f"shop={self.shop}"],
                        ["--jobs-db", jobs_db or self.jobs_db, "--node-name", name,
                         "--node-timeout", str(TIMEOUT), "--max-jobs", str(max_jobs),
                         "--notify", self.hook.url, *args],
                        env={**AUTH_ENV, **(env or {})}, auth=AUTH)
        self.addCleanup(daemon.kill)
        self.nodes[name] = daemon
        return daemon.start() if start else daemon

    def entry(self, via, jobid):
        return via.find(jobid)[1]

    def running_on(self, via, jobid, timeout=30):
        """The node a job runs on, once it runs (as ``via`` says)."""
        return via.wait_state(jobid, "running", timeout)["node"]

    def ended(self):
        """{job id: [outcome of each job.ended notice]}, every node's."""
        found = collections.defaultdict(list)
        for _, body in list(self.hook.received):
            sent = json.loads(body)
            if sent["event"] == "job.ended":
                found[sent["job"]["id"]].append(sent["job"]["outcome"])
        return found

    def outputs(self):
        return "".join(d.output() for d in self.nodes.values())

    def kill9(self, daemon):
        """kill -9 of the node's own process: its crawls run on."""
        os.kill(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait()
        daemon._output.close()

    def nodes_up(self, via):
        """{node: its netweir_serve_node_up} in ``via``'s /metrics."""
        found = samples(via.call("GET", "/metrics")[2].decode())
        return {dict(labels)["node"]: n for (name, labels), n in found.items()
                if name == "netweir_serve_node_up"}

    def log_count(self, daemon, entry):
        return daemon.call("GET", entry["log_url"])[2].count(b"slow page")


class SharedQueueTests(ClusterTestCase):
    def test_sixty_jobs_run_once_across_three_nodes_within_their_max_jobs(self):
        limits = {"n0": 1, "n1": 2, "n2": 3}
        nodes = [self.node(name, limit) for name, limit in limits.items()]
        sampler = Sampler(nodes[2])
        try:
            jobs = [nodes[0].must_schedule("shop", "echo") for _ in range(60)]
            wait_until(lambda: len(nodes[1].get("listjobs.json")[1]["finished"]) >= 60, 120,
                       "the 60 jobs to end", interval=0.2)
        finally:
            sampler.stop()
        finished = nodes[1].get("listjobs.json")[1]["finished"]
        self.assertEqual(sorted(e["id"] for e in finished), sorted(jobs))
        self.assertEqual({e["outcome"] for e in finished}, {"finished"})
        ran_on = {e["id"]: e["node"] for e in finished}
        # Every node took some, none ever ran more than its --max-jobs.
        self.assertEqual(set(ran_on.values()), set(limits))
        self.assertGreater(sampler.samples, 10)
        for name, most in sampler.most.items():
            self.assertLessEqual(most, limits[name], name)
        # Each job was seen running on its own node only, its files are
        # in that node's --dir only, and its end was announced once.
        for jobid, seen in sampler.seen_on.items():
            self.assertEqual(seen, {ran_on[jobid]}, jobid)
        for jobid, name in ran_on.items():
            holders = [n for n in limits if os.path.exists(os.path.join(
                self.base, n, "items", "shop", "echo", jobid + ".jsonl"))]
            self.assertEqual(holders, [name], jobid)
        wait_until(lambda: len(self.ended()) >= 60, 30, "every end announced")
        self.assertEqual(self.ended(), {jobid: ["finished"] for jobid in jobs})
        # Every node answers for the whole cluster.
        for node in nodes:
            self.assertEqual(node.get("daemonstatus.json")[1]["finished"], 60)

    def test_each_node_keeps_its_own_finished_jobs_and_deletes_their_files(self):
        # n0 serves shop only, n1 news only: each job runs on a known node.
        nodes = [self.node(name, 1, args=["--keep", "1"], projects=[f"{project}={self.shop}"])
                 for name, project in (("n0", "shop"), ("n1", "news"))]
        jobs = [nodes[i % 2].must_schedule(("shop", "news")[i % 2], "echo") for i in range(6)]
        wait_until(lambda: len(self.ended()) >= 6, 60, "the six ends announced")
        ran_on = {}
        for _, body in list(self.hook.received):
            sent = json.loads(body)
            if sent["event"] == "job.ended":
                ran_on[sent["job"]["id"]] = sent["job"]["node"]
        self.assertEqual(ran_on, {jobid: ("n0", "n1")[i % 2] for i, jobid in enumerate(jobs)})

        def kept():
            return {e["id"]: e["node"] for e in nodes[0].get("listjobs.json")[1]["finished"]}

        # Each node that ran jobs keeps its newest one: --keep is per node.
        wait_until(lambda: len(kept()) == 2, 30, "each node to forget its older jobs")
        self.assertEqual(kept(), {jobs[4]: "n0", jobs[5]: "n1"})

        def files(name):
            found = set()
            for kind, project in itertools.product(("items", "logs"), ("shop", "news")):
                folder = os.path.join(self.base, name, kind, project, "echo")
                if os.path.isdir(folder):
                    found.update(f.split(".")[0] for f in os.listdir(folder))
            return found

        # A forgotten job's files are gone from the node that ran it; the
        # kept ones' are where they ran.
        wait_until(lambda: all(files(n) <= set(kept()) for n in ("n0", "n1")), 10,
                   "the forgotten jobs' files to be deleted")
        for jobid, name in kept().items():
            self.assertEqual(files(name) & {jobid}, {jobid})

    def test_a_busy_node_hands_over_and_any_node_cancels_and_serves_files(self):
        n0 = self.node("n0", 1)
        busy = n0.must_schedule("shop", "slow", delay="0.2")
        self.assertEqual(self.running_on(n0, busy), "n0")
        n1, n2 = self.node("n1", 1), self.node("n2", 1)
        # Scheduled on the busy node, it starts at once on an idle one.
        asked = time.monotonic()
        handed = n0.must_schedule("shop", "echo")
        node = self.running_on(n0, handed)
        waited = time.monotonic() - asked
        self.assertIn(node, ("n1", "n2"))
        self.assertLess(waited, 3)
        entry = n0.wait_state(handed, "finished")
        owner = self.nodes[entry["node"]]
        other = n2 if owner is n1 else n1

        # Its items, log and history through the two nodes that did not run it.
        _, _, items = owner.call("GET", entry["items_url"])
        self.assertEqual(json.loads(items)["category"], None)
        for via in (n0, other):
            status, headers, body = via.call("GET", entry["items_url"])
            self.assertEqual((status, body), (200, items))
            self.assertEqual(headers["Content-Type"], "text/plain")
            status, _, tail = via.call("GET", entry["items_url"], headers={"Range": "bytes=-5"})
            self.assertEqual((status, tail), (206, items[-5:]))
            status, headers, body = via.call("HEAD", entry["items_url"])
            self.assertEqual((status, body, headers["Content-Length"]),
                             (200, b"", str(len(items))))
            status, _, log = via.call("GET", entry["log_url"].replace(handed, handed.upper()))
            self.assertEqual((status, log), (200, owner.call("GET", entry["log_url"])[2]))
            status, answer = via.get("jobstats.json", {"job": handed, "history": "1"})
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["history"], owner.get(
                "jobstats.json", {"job": handed, "history": "1"})[1]["history"])
        # The Authorization header is the client's: none, and none is passed on.
        self.assertEqual(n0.call("GET", entry["items_url"], headers={
            "Authorization": "Basic eDp5"})[0], 401)
        # Not a job's: this node's own 404.
        status, _, body = n0.call("GET", "/items/shop/echo/nosuchjob.jl")
        self.assertEqual(status, 404)
        self.assertNotIn("on node", json.loads(body)["message"])

        # A cancel through another node: the owner stops the crawl.
        wait_until(lambda: self.log_count(n2, self.entry(n0, busy)) >= 2, 30, "a few pages")
        status, answer = n2.post("cancel.json", {"project": "shop", "job": busy})
        self.assertEqual((status, answer["prevstate"]), (200, "running"))
        entry = n1.wait_state(busy, "finished", timeout=20)
        self.assertEqual((entry["outcome"], entry["node"]), ("cancelled", "n0"))

        # signal=KILL through another node kills a crawl that ignores SIGTERM at once.
        pidfile = os.path.join(tempfile.mkdtemp(dir=self.base), "pids.json")
        stubborn = n1.must_schedule("shop", "stubborn", pidfile=pidfile)
        pids = wait_until(lambda: read_json(pidfile), 30, "the stubborn job's pids")
        self.addCleanup(kill_groups, [pids["pid"]])
        node = self.running_on(n0, stubborn)
        via = n0 if node != "n0" else n1
        asked = time.monotonic()
        status, answer = via.post("cancel.json", {"project": "shop", "job": stubborn,
                                                  "signal": "KILL"})
        self.assertEqual(answer["prevstate"], "running")
        entry = via.wait_state(stubborn, "finished", timeout=20)
        self.assertLess(time.monotonic() - asked, 10)
        self.assertEqual(entry["outcome"], "cancelled")
        wait_until(lambda: not alive(pids["pid"]) and not alive(pids["child"]), 10,
                   "the stubborn crawl and its child to be gone")


class CacheTests(ClusterTestCase):
    def test_listings_stay_cached_while_ten_jobs_only_make_progress(self):
        nodes = [self.node("n0", 4), self.node("n1", 3), self.node("n2", 3)]
        jobs = [nodes[0].must_schedule("shop", "slow", delay="0.2") for _ in range(10)]
        on = {jobid: self.running_on(nodes[0], jobid) for jobid in jobs}
        self.assertEqual(collections.Counter(on.values()), {"n0": 4, "n1": 3, "n2": 3})
        elsewhere = next(j for j in jobs if on[j] == "n1")

        def saved():
            # The stats n1 saved of its job, as n0 reads them from the table.
            return nodes[0].get("jobstats.json", {"job": elsewhere})[1]["stats"] or {}

        def builds(via):
            found = samples(via.call("GET", "/metrics")[2].decode())
            return {dict(labels)["endpoint"]: n for (name, labels), n in found.items()
                    if name == "netweir_serve_listing_builds_total"
                    and dict(labels)["endpoint"] != "/metrics"}

        wait_until(lambda: saved().get("fetched"), 20, "n1 to save its job's stats")
        for via in nodes:
            for path in ("listjobs.json", "daemonstatus.json", "jobs"):
                via.call("GET", path)
        first, before = saved()["fetched"], [builds(via) for via in nodes]
        # Two more saves of every running job's stats, 5 s apart, while the
        # listings are asked for as a dashboard would.
        deadline = time.monotonic() + 11
        while time.monotonic() < deadline:
            for via in nodes:
                for path in ("listjobs.json", "daemonstatus.json", "jobs"):
                    self.assertEqual(via.call("GET", path)[0], 200)
            time.sleep(0.5)
        self.assertGreater(saved()["fetched"], first)
        self.assertEqual([builds(via) for via in nodes], before)
        self.assertEqual([len(b) for b in before], [3, 3, 3])


class NodeDeathTests(ClusterTestCase):
    def test_kill_9_of_a_node_its_jobs_lost_once_its_pending_run_elsewhere(self):
        n0 = self.node("n0", 2)
        mine = [n0.must_schedule("shop", "slow", delay="0.2") for _ in range(2)]
        for jobid in mine:
            self.assertEqual(self.running_on(n0, jobid), "n0")
        n1, n2 = self.node("n1", 1), self.node("n2", 1)
        theirs = [n1.must_schedule("shop", "slow", delay="0.2") for _ in range(2)]
        theirs_on = [self.running_on(n1, j) for j in theirs]
        self.assertEqual(set(theirs_on), {"n1", "n2"})
        # Every slot is taken: these wait, scheduled through the node about to die.
        waiting = [n0.must_schedule("shop", "echo") for _ in range(2)]
        self.assertEqual([n0.find(j)[0] for j in waiting], ["pending", "pending"])
        entries = {j: self.entry(n0, j) for j in mine}
        pids = [e["pid"] for e in entries.values()]
        wait_until(lambda: all(self.log_count(n1, e) >= 2 for e in entries.values()), 30,
                   "a few pages through n1")

        killed = time.monotonic()
        self.kill9(n0)
        # Its files: the node is down, and the answer says so.
        status, _, body = n1.call("GET", entries[mine[0]]["log_url"])
        self.assertEqual(status, 404)
        self.assertIn(f"job {mine[0]} is on node n0, which is down", json.loads(body)["message"])
        # Within the timeout (and a heartbeat), its running jobs are lost.
        wait_until(lambda: all(n1.find(j)[0] == "finished" for j in mine), TIMEOUT + 8,
                   "n0's jobs to be lost", interval=0.1)
        self.assertLess(time.monotonic() - killed, TIMEOUT + 4)
        lost = {j: self.entry(n2, j) for j in mine}
        for entry in lost.values():
            self.assertEqual((entry["outcome"], entry["node"]), ("lost", "n0"))
        self.assertEqual(DECLARED.findall(self.outputs()), ["n0"])
        # The log line that declares it names the jobs it lost.
        self.assertIn(f"node n0 is silent past {TIMEOUT:g} s: declared dead; its running"
                      f" job(s) {', '.join(sorted(mine))} marked lost", self.outputs())
        # Every node's /metrics says so, from the table.
        for via in (n1, n2):
            wait_until(lambda: self.nodes_up(via) == {"n0": 0, "n1": 1, "n2": 1}, 10,
                       "n0 shown dead, the others live, in /metrics")
        # Its crawls ran on meanwhile (the conservative choice: not run again).
        self.assertTrue(all(alive(pid) for pid in pids))
        # The jobs it queued are nobody's: they run elsewhere once a slot frees.
        n2.post("cancel.json", {"project": "shop", "job": theirs[0]})
        for jobid in waiting:
            entry = n2.wait_state(jobid, "finished", timeout=30)
            self.assertEqual(entry["outcome"], "finished")
            self.assertIn(entry["node"], ("n1", "n2"))

        # Restarted, it ends its lost jobs' processes and serves again,
        # saying that it comes back from the dead and which table it shares.
        n0.start()
        from netweir_serve.store.postgres import shown
        self.assertEqual(n0.output().count("node n0 rejoins the cluster at http://"), 1)
        self.assertIn(f"job table {shown(self.jobs_db)}, shared,"
                      f" as node n0 at http://127.0.0.1:{n0.port};", n0.output())
        wait_until(lambda: not any(alive(pid) for pid in pids), 15,
                   "the lost jobs' processes to be gone")
        for jobid, entry in lost.items():
            self.assertEqual(self.entry(n0, jobid), entry)  # ended once, as it was
        self.assertEqual(n1.call("GET", entries[mine[0]]["log_url"])[0], 200)
        more = [n2.must_schedule("shop", "slow", delay="0.2") for _ in range(3)]
        on = collections.Counter(self.running_on(n2, j) for j in more)
        self.assertEqual(on, {"n0": 2, theirs_on[0]: 1})
        # Every end announced once, the lost ones by the node that declared them.
        wait_until(lambda: all(self.ended().get(j) for j in mine + waiting), 20,
                   "the ends announced")
        ended = self.ended()
        self.assertEqual([ended[j] for j in mine], [["lost"], ["lost"]])
        self.assertEqual([ended[j] for j in waiting], [["finished"], ["finished"]])

    def test_a_job_no_live_node_serves_waits_and_says_so_until_one_does(self):
        n0 = self.node("n0", 1, projects=[f"shop={self.shop}", f"news={self.shop}"])
        n1 = self.node("n1", 1)
        first = n0.must_schedule("news", "slow", delay="0.2")
        self.assertEqual(self.running_on(n1, first), "n0")
        waiting = n0.must_schedule("news", "echo")
        # Only n0 serves news, and its one slot is taken: a slot is awaited.
        # (n1 lists it once the queueing's notice reached it: its listing is
        # cached on a version that may trail another node's change.)
        wait_until(lambda: n1.find(waiting)[0] is not None, 10, "n1 to hear of the job")
        state, entry = n1.find(waiting)
        self.assertEqual(state, "pending")
        self.assertNotIn("waiting_for", entry)
        pid = self.entry(n1, first)["pid"]
        # The /jobs page of another node: a last column names the node.
        _, _, page = n1.call("GET", "/jobs")
        self.assertIn(b"<th>Outcome</th><th>Node</th></tr>", page)
        row = page[page.index(first.encode()):]
        row = row[:row.index(b"</tr>")]
        self.assertTrue(row.endswith(b"<td>n0</td>\n"), row)

        self.kill9(n0)
        wait_until(lambda: n1.find(first)[0] == "finished", TIMEOUT + 8, "n0's job lost",
                   interval=0.1)
        for via in (n1, n1):  # the second answer comes from the listing's cache
            state, entry = via.find(waiting)
            self.assertEqual(state, "pending")
            self.assertEqual(entry["waiting_for"],
                             "a node that serves project news: no live node has --project news")
        # A job of a project the live node serves is not held back.
        self.assertEqual(n1.wait_state(n1.must_schedule("shop", "echo"), "finished")["node"],
                         "n1")
        self.assertEqual(n1.find(waiting)[0], "pending")

        # n0 back: it serves news again, and takes the job.
        n0.start()
        wait_until(lambda: not alive(pid), 15, "the lost job's crawl to be gone")
        entry = n1.wait_state(waiting, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["node"]), ("finished", "n0"))

    def test_a_name_held_by_a_live_node_refuses_a_second_start(self):
        self.node("n0")
        second = Daemon(os.path.join(self.base, "n0-again"), [f"shop={self.shop}"],
                        ["--jobs-db", self.jobs_db, "--node-name", "n0",
                         "--node-timeout", str(TIMEOUT)], env=AUTH_ENV, auth=AUTH)
        self.addCleanup(second.kill)
        second.spawn()
        self.assertEqual(second.process.wait(30), 1)
        self.assertIn("node name 'n0' is held by a live node at http://127.0.0.1:",
                      second.output())
        self.assertEqual(self.nodes["n0"].get("daemonstatus.json")[0], 200)


class ScheduleTests(ClusterTestCase):
    def test_a_schedule_fires_once_per_due_time_with_three_nodes_up(self):
        # Every reader process that reads the project's spider files (a
        # check) says so in a file the three nodes share.
        loads = os.path.join(self.shop, "loads.txt")
        with open(os.path.join(self.shop, "tally.py"), "w") as f:
            f.write("import os, sys\n"
                    f"with open({loads!r}, 'a') as out:\n"
                    "    out.write(repr(sys.argv) + '\\n')\n")
        nodes = [self.node(f"n{n}", 2) for n in range(3)]
        status, answer = nodes[0].post("addschedule.json", {
            "project": "shop", "spider": "echo", "every": "2s", "name": "tick",
            "overlap": "allow"})
        self.assertEqual(answer["status"], "ok", answer)

        def ticks():
            listing = nodes[1].get("listjobs.json")[1]
            return [e for state in ("pending", "running", "finished") for e in listing[state]
                    if e.get("schedule") == "tick"]

        wait_until(lambda: len(ticks()) >= 4, 30, "four runs of the schedule", interval=0.1)
        nodes[2].post("pauseschedule.json", {"project": "shop", "name": "tick"})
        wait_until(lambda: all(nodes[0].find(e["id"])[0] == "finished" for e in ticks()), 30,
                   "the schedule's jobs to end")
        # One job per due time, every due time: ids (their due times) two
        # seconds apart, and each run counted once.
        ids = sorted(e["id"] for e in ticks())
        self.assertEqual(len(ids), len(set(ids)))
        stamps = [time.mktime(time.strptime(i.rsplit("-", 1)[1], "%Y%m%dT%H%M%SZ"))
                  for i in ids]
        self.assertEqual({round(b - a) for a, b in zip(stamps, stamps[1:])}, {2})
        self.assertEqual({e["outcome"] for e in ticks()}, {"finished"})
        for node in nodes:
            shown = node.get("listschedules.json", {"project": "shop"})[1]["schedules"]
            self.assertEqual((shown[0]["runs"], shown[0]["skipped"]), (len(ids), 0))
            self.assertNotIn("error", shown[0])
        out = self.outputs()
        self.assertNotIn("Traceback", out)
        self.assertNotIn("queued no job", out)
        # Only the node that took a due time checked the spider: one check
        # for the schedule's adding, then one a run.
        with open(loads) as f:
            read = f.readlines()
        self.assertEqual(len(read), 1 + len(ids), read)


class NetworkCutTests(ClusterTestCase):
    def test_a_node_cut_off_from_the_table_keeps_its_crawls_and_comes_back(self):
        relay = Relay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        cut = self.node("cut", 2, jobs_db=url_through(self.jobs_db, "127.0.0.1", relay.port))
        long = cut.must_schedule("shop", "slow", delay="0.2")
        short = cut.must_schedule("shop", "slow", delay="0.2", pages="20")
        for jobid in (long, short):
            self.assertEqual(self.running_on(cut, jobid), "cut")
        n1 = self.node("n1", 1)
        entries = {j: self.entry(n1, j) for j in (long, short)}
        pids = {j: e["pid"] for j, e in entries.items()}

        relay.cut()
        cut_at = time.monotonic()
        # The node stops claiming: a job scheduled meanwhile runs on n1.
        meanwhile = n1.must_schedule("shop", "echo")
        self.assertEqual(n1.wait_state(meanwhile, "finished")["node"], "n1")
        # n1 declares it dead after the timeout and marks its jobs lost...
        wait_until(lambda: all(n1.find(j)[0] == "finished" for j in pids), TIMEOUT + 6,
                   "the cut node's jobs to be lost", interval=0.1)
        self.assertLess(time.monotonic() - cut_at, TIMEOUT + 4)
        lost = {j: self.entry(n1, j) for j in pids}
        self.assertEqual({e["outcome"] for e in lost.values()}, {"lost"})
        # ... while its crawls run on: it cannot know yet.
        self.assertTrue(alive(pids[long]))
        # The short crawl ends while the node is cut off: its end cannot be written.
        wait_until(lambda: not alive(pids[short]), 30, "the short crawl to end")
        self.assertTrue(alive(pids[long]))
        time.sleep(1)
        self.assertGreater(relay.refused, 0)

        relay.mend()
        # Back, it finds itself declared dead: the processes of its lost
        # jobs go, nothing more is recorded of them, and it takes work again.
        wait_until(lambda: not alive(pids[long]), 30, "the lost job's crawl to be ended")
        wait_until(lambda: any(not n["dead"] and n["name"] == "cut"
                               for n in self.node_rows()), 30, "the node to register again")
        blocker = n1.must_schedule("shop", "slow", delay="0.2")
        after = [n1.must_schedule("shop", "echo") for _ in range(2)]
        for jobid in after:
            self.assertEqual(n1.wait_state(jobid, "finished", timeout=30)["node"], "cut")
        n1.post("cancel.json", {"project": "shop", "job": blocker})
        time.sleep(2)
        for jobid, entry in lost.items():
            self.assertEqual(self.entry(cut, jobid), entry)  # recorded once, lost
        wait_until(lambda: len(self.ended().get(meanwhile, ())) == 1, 20, "the ends announced")
        ended = self.ended()
        for jobid in after + [meanwhile]:
            self.assertEqual(ended[jobid], ["finished"])
        # Both ends are the declaring node's alone: the short crawl's end on
        # the cut node, recorded too late, was dropped, never announced.
        self.assertEqual(ended[long], ["lost"])
        self.assertEqual(ended[short], ["lost"])
        self.assertIn(f"job {short}: its end was recorded elsewhere meanwhile; this node's is"
                      " dropped", cut.output())
        # Nor counted twice: only the declaring node counts the lost ends.
        counted = {(name, outcome): value(samples(via.call("GET", "/metrics")[2].decode()),
                                          "netweir_serve_jobs_ended_total", project="shop",
                                          spider="slow", outcome=outcome,
                                          reason={"lost": "node lost"}.get(outcome, "exit 0"))
                   for name, via in (("cut", cut), ("n1", n1))
                   for outcome in ("lost", "finished")}
        self.assertEqual(counted, {("cut", "lost"): 0, ("cut", "finished"): 0,
                                   ("n1", "lost"): 2, ("n1", "finished"): 0})
        self.assertEqual(DECLARED.findall(self.outputs()), ["cut"])
        # Back, the cut node said which processes it ended.
        self.assertRegex(cut.output(), r"node cut was declared dead while cut off from the job"
                         r" table: ended the processes of job\(s\) [^;]*\b" + long + r"\b")

    def test_a_kill_asked_while_the_owner_hears_nothing_is_a_kill(self):
        """A cancel with signal=KILL asked through another node while the
        owner is cut off from the table (its LISTEN connection with it):
        once back, the owner kills at once, without the grace period."""
        relay = Relay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        owner = self.node("owner", 1, jobs_db=url_through(self.jobs_db, "127.0.0.1", relay.port),
                          env={"NETWEIR_SERVE_CANCEL_GRACE": "120"})
        pidfile = os.path.join(tempfile.mkdtemp(dir=self.base), "pids.json")
        stubborn = owner.must_schedule("shop", "stubborn", pidfile=pidfile)
        self.assertEqual(self.running_on(owner, stubborn), "owner")
        pids = wait_until(lambda: read_json(pidfile), 30, "the stubborn job's pids")
        self.addCleanup(kill_groups, [pids["pid"]])
        others = [self.node("n1", 1), self.node("n2", 1)]

        relay.cut()
        status, answer = others[0].post("cancel.json", {"project": "shop", "job": stubborn,
                                                        "signal": "KILL"})
        self.assertEqual((status, answer["prevstate"]), (200, "running"))
        time.sleep(2)  # well within --node-timeout: the owner is not declared dead
        self.assertTrue(alive(pids["pid"]))
        relay.mend()
        mended = time.monotonic()
        entry = others[1].wait_state(stubborn, "finished", timeout=60)
        # The grace period is 120 s: a cancel would still be waiting.
        self.assertLess(time.monotonic() - mended, 20)
        self.assertEqual((entry["outcome"], entry["node"]), ("cancelled", "owner"))
        wait_until(lambda: not alive(pids["pid"]) and not alive(pids["child"]), 10,
                   "the stubborn crawl and its child to be gone")
        self.assertIn(f"job {stubborn}: kill asked through the job table", owner.output())

    def test_a_cut_off_node_kills_a_crawl_its_retry_would_repeat_before_it_is_declared(self):
        """Issue 24: lost retries. The cut node fences itself before n1 can
        declare it dead, so the retry n1's declaration queues (and runs,
        1 s later) never runs beside the first attempt's crawl."""
        relay = Relay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        cut = self.node("cut", 2, jobs_db=url_through(self.jobs_db, "127.0.0.1", relay.port))
        retried = cut.must_schedule("shop", "slow", delay="0.2", _retries="1", _backoff="1s")
        kept = cut.must_schedule("shop", "slow", delay="0.2")
        for jobid in (retried, kept):
            self.assertEqual(self.running_on(cut, jobid), "cut")
        n1 = self.node("n1", 1)
        pids = {j: wait_until(lambda j=j: self.entry(n1, j).get("pid"), 10, "the pids")
                for j in (retried, kept)}

        relay.cut()
        wait_until(lambda: n1.find(retried)[0] == "finished", TIMEOUT + 8,
                   "the cut node declared dead", interval=0.1)
        # By the time its death is recorded, the crawl a retry repeats is
        # gone already (fenced at 0.8 of the timeout); the other runs on.
        self.assertFalse(alive(pids[retried]))
        self.assertTrue(alive(pids[kept]))
        entry = self.entry(n1, retried)
        self.assertEqual((entry["outcome"], entry["reason"], entry["node"]),
                         ("lost", "node lost", "cut"))
        self.assertRegex(cut.output(), r"node cut: no heartbeat through to the job table for"
                         r" [0-9.]+ s \(--node-timeout 6 s\): it claims nothing until one"
                         rf" gets through; killed the crawls of job\(s\) {retried}, which their"
                         rf" end as lost would retry; job\(s\) {kept} run on \(no retry would"
                         r" repeat them\)")
        # Its retry runs on n1, alone.
        again = n1.wait_state(f"{retried}.r1", "running", timeout=30)
        self.assertEqual((again["node"], again["attempt"]), ("n1", 2))
        self.assertFalse(alive(pids[retried]))

        relay.mend()
        # Back, it finds itself declared dead: the crawl left goes, as
        # before; the end it held for the fenced job is dropped, n1's stands.
        wait_until(lambda: not alive(pids[kept]), 30, "the kept crawl to be ended")
        wait_until(lambda: f"job {retried}: its end was recorded elsewhere meanwhile; this"
                   " node's is dropped" in cut.output(), 30, "the held end dropped")
        self.assertEqual(self.entry(cut, retried), entry)
        n1.post("cancel.json", {"project": "shop", "job": f"{retried}.r1"})
        n1.wait_state(f"{retried}.r1", "finished", timeout=60)
        wait_until(lambda: self.ended().get(f"{retried}.r1"), 20, "the retry's end announced")
        self.assertEqual(self.ended()[retried], ["lost"])
        self.assertEqual(DECLARED.findall(self.outputs()), ["cut"])

    def node_rows(self):
        with pg.admin_connection() as conn:
            schema = pg.schema_of(self.jobs_db)
            rows = conn.execute(f"SELECT name, dead FROM {schema}.nodes").fetchall()
        return [{"name": name, "dead": dead} for name, dead in rows]

    def test_the_table_gone_for_every_node_past_the_timeout_loses_nothing(self):
        # PostgreSQL away for everyone (a restart, its network): when it is
        # back, every node is late with its heartbeat, and none is dead.
        relay = Relay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        through = url_through(self.jobs_db, "127.0.0.1", relay.port)
        nodes = [self.node(f"n{n}", 1, jobs_db=through) for n in range(2)]
        jobs = [nodes[0].must_schedule("shop", "slow", delay="0.2") for _ in range(2)]
        self.assertEqual({self.running_on(nodes[0], j) for j in jobs}, {"n0", "n1"})
        def both_pids():
            # Both jobs' pids, once both are recorded (a job claimed a
            # moment ago has none yet): not as soon as there is one.
            found = [self.entry(nodes[0], j).get("pid") for j in jobs]
            return found if all(found) else None

        pids = wait_until(both_pids, 10, "the pids")
        self.assertEqual(len(pids), 2)
        relay.cut()
        time.sleep(TIMEOUT + 3)
        self.assertTrue(all(alive(pid) for pid in pids))
        relay.mend()
        wait_until(lambda: all(n["name"] and not n["dead"] for n in self.node_rows())
                   and self.heard_since(nodes, 2), 30, "both nodes to beat again")
        time.sleep(TIMEOUT / 2)
        self.assertEqual([nodes[1].find(j)[0] for j in jobs], ["running", "running"])
        self.assertTrue(all(alive(pid) for pid in pids))
        self.assertEqual(DECLARED.findall(self.outputs()), [])
        for jobid in jobs:
            nodes[1].post("cancel.json", {"project": "shop", "job": jobid})
        for jobid in jobs:
            self.assertEqual(nodes[0].wait_state(jobid, "finished", 30)["outcome"], "cancelled")

    def test_the_table_gone_for_every_node_its_own_node_records_a_fenced_crawl_lost(self):
        # No node can tell the table gone for all from its own cut: each
        # fences itself, and, none declared dead, records the ends itself.
        relay = Relay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        through = url_through(self.jobs_db, "127.0.0.1", relay.port)
        n0 = self.node("n0", 2, jobs_db=through)
        retried = n0.must_schedule("shop", "slow", delay="0.2", _retries="1", _backoff="1s")
        kept = n0.must_schedule("shop", "slow", delay="0.2")
        pids = {j: n0.wait_state(j, "running")["pid"] for j in (retried, kept)}
        n1 = self.node("n1", 1, jobs_db=through)

        relay.cut()
        wait_until(lambda: not alive(pids[retried]), TIMEOUT + 3, "the fence's kill",
                   interval=0.1)
        time.sleep(TIMEOUT + 3 - FENCE_AT)
        self.assertTrue(alive(pids[kept]))
        relay.mend()
        entry = n1.wait_state(retried, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["reason"], entry["node"]),
                         ("lost", "node lost", "n0"))
        self.assertIn(f"job {retried}: its end is recorded now", n0.output())
        again = n1.wait_state(f"{retried}.r1", "running", timeout=30)
        self.assertEqual(again["attempt"], 2)
        # Nobody was declared dead; the crawl without retries ran on.
        self.assertEqual(DECLARED.findall(self.outputs()), [])
        time.sleep(TIMEOUT / 2)
        self.assertEqual(n1.find(kept)[0], "running")
        self.assertTrue(alive(pids[kept]))
        for jobid in (kept, f"{retried}.r1"):
            n1.post("cancel.json", {"project": "shop", "job": jobid})
        for jobid in (kept, f"{retried}.r1"):
            n0.wait_state(jobid, "finished", 60)
        # Its end announced once, by its own node.
        wait_until(lambda: self.ended().get(retried), 20, "the fenced end announced")
        self.assertEqual(self.ended()[retried], ["lost"])

    def heard_since(self, nodes, seconds):
        with pg.admin_connection() as conn:
            schema = pg.schema_of(self.jobs_db)
            ages = conn.execute(f"SELECT extract(epoch FROM now() - heartbeat) FROM"
                                f" {schema}.nodes").fetchall()
        return len(ages) == len(nodes) and all(age < seconds for age, in ages)
