"""A wall clock stepped back (issue 23): intervals do not stretch with it,
on one node (the request deadline, the cancel grace) or in a cluster (a node
stepped back beats on, and is not declared dead).

The daemon runs with its ``time.time`` offset by the seconds written in a
file the test owns (set before Twisted is imported, as a step of the
machine's clock would be seen by the daemon alone): this machine's clock
is never touched, and the jobs the daemon starts see the real one. Stepped
back by far more than the waits below, a timer still on the wall clock
would not fire within them.
"""

import http.client
import os
import socket
import sys
import tempfile
import time

from . import test_cluster
from .processes import Daemon, alive, wait_until
from .test_cancel import SHORT_GRACE, StubbornTestCase

# The step: far past the deadline, the grace, and every wait of these tests.
STEP_BACK = -600

# Runs netweir_serve with time.time offset by the number in sys.argv[1].
_STEPPED = r"""
import os, sys, time
real, path, known = time.time, sys.argv[1], [None, 0.0]
def stepped():
    try:
        changed = os.stat(path).st_mtime_ns
    except OSError:
        return real()
    if changed != known[0]:
        with open(path) as f:
            known[:] = [changed, float(f.read().strip() or 0)]
    return real() + known[1]
time.time = stepped
sys.argv = ["netweir_serve"] + sys.argv[2:]
import runpy
runpy.run_module("netweir_serve", run_name="__main__", alter_sys=True)
"""


class SteppedClock:
    """The offset file of one daemon: ``step(seconds)`` moves its wall clock."""

    def __init__(self, folder):
        self.path = os.path.join(folder, "offset")
        self.offset = 0.0
        self._write()

    def _write(self):
        temporary = self.path + ".tmp"
        with open(temporary, "w") as f:
            f.write(repr(self.offset))
        os.replace(temporary, self.path)

    def step(self, seconds):
        self.offset += seconds
        self._write()

    def command(self):
        return [sys.executable, "-c", _STEPPED, self.path]


class ClockStepTests(StubbornTestCase):
    def stepped_daemon(self, env=None):
        directory = tempfile.mkdtemp(prefix="dir-", dir=self.base)
        clock = SteppedClock(tempfile.mkdtemp(dir=self.base))
        daemon = Daemon(directory, [f"shop={self.shop}", f"news={self.news}"], [],
                        env=env, command=clock.command())
        self.addCleanup(daemon.kill)
        return daemon.start(), clock

    def test_the_cancel_grace_ends_on_time_after_a_step_back(self):
        daemon, clock = self.stepped_daemon(env=SHORT_GRACE)
        jobid, pids = self.stubborn(daemon)
        daemon.post("cancel.json", {"project": "shop", "job": jobid})
        clock.step(STEP_BACK)
        entry = daemon.wait_state(jobid, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("cancelled", -9))
        wait_until(lambda: not alive(pids["pid"]) and not alive(pids["child"]), 10,
                   "the job and its child to be gone")

    def test_a_silent_client_is_cut_at_the_deadline_after_a_step_back(self):
        daemon, clock = self.stepped_daemon()
        connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
        self.addCleanup(connection.close)
        # A first request answered: the deadline of the next one is set by
        # now, before the step.
        connection.request("GET", "/daemonstatus.json")
        answer = connection.getresponse()
        answer.read()
        self.assertEqual(answer.status, 200)
        clock.step(STEP_BACK)
        connection.sock.settimeout(60)
        started = time.monotonic()
        try:
            while connection.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except socket.timeout:
            self.fail(f"the connection is still open {time.monotonic() - started:.0f} s"
                      " after a step back (the 15 s deadline stretched with the clock)")


class ClusterClockStepTests(test_cluster.ClusterTestCase):
    def stepped_node(self, name):
        clock = SteppedClock(tempfile.mkdtemp(dir=self.base))
        daemon = Daemon(os.path.join(self.base, name), [f"shop={self.shop}"],
                        ["--jobs-db", self.jobs_db, "--node-name", name,
                         "--node-timeout", str(test_cluster.TIMEOUT), "--max-jobs", "1"],
                        env=test_cluster.AUTH_ENV, auth=test_cluster.AUTH,
                        command=clock.command())
        self.addCleanup(daemon.kill)
        self.nodes[name] = daemon
        return daemon.start(), clock

    def test_a_node_stepped_back_beats_on_and_keeps_its_job(self):
        n0, clock = self.stepped_node("n0")
        jobid = n0.must_schedule("shop", "slow", delay="0.2")
        self.assertEqual(self.running_on(n0, jobid), "n0")
        n1 = self.node("n1", 1)
        # n1 judges the others once it has beaten for a whole timeout.
        wait_until(lambda: self.nodes_up(n1) == {"n0": 1, "n1": 1}, 30, "both nodes up")
        clock.step(-60)
        # Past the timeout several times over: a node whose heartbeat
        # stalled with its clock would be declared dead by now.
        time.sleep(3 * test_cluster.TIMEOUT)
        self.assertEqual(test_cluster.DECLARED.findall(self.outputs()), [])
        self.assertEqual(n1.find(jobid)[0], "running")
        self.assertEqual(self.nodes_up(n1), {"n0": 1, "n1": 1})
        self.assertEqual(n0.post("cancel.json", {"project": "shop", "job": jobid})[1]
                         ["prevstate"], "running")
        self.assertEqual(n1.wait_state(jobid, "finished", timeout=30)["outcome"], "cancelled")
