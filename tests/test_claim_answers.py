"""Claims and their answers (issue 23), tried as the breaks were found,
through a relay between a node and PostgreSQL.

- A claim whose COMMIT reached PostgreSQL but whose answer was lost (the
  relay forwards the COMMIT, drops the answer and closes the connection):
  the node must find the job it claimed and start it, rather than leave it
  running with no process, deaf to cancel and kill.
- A stop (SIGTERM, or SIGUSR1 for a handover) while a claim waits on
  PostgreSQL (the relay holds the claim's statement): the job goes back to
  the queue, never claimed by a node that is gone, then lost.
"""

import os
import signal
import socket
import threading
import time

from .processes import wait_until
from .test_cluster import ClusterTestCase, Relay, server_address, url_through

# What marks a claim's statement, and the simple query psycopg commits with.
CLAIM_STATEMENT = b"UPDATE jobs SET state = 'running'"
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
# The server's CommandComplete of a claim that took a job.
TOOK_ONE = b"UPDATE 1\x00"


class InspectingRelay(Relay):
    """A Relay that shows each block it relays to ``passes(data,
    towards_server, pair)`` first: False ends that connection, unrelayed."""

    def passes(self, data, towards_server, pair):
        return True

    def _pump(self, source, sink, pair):
        towards_server = source is pair[0]
        try:
            while True:
                data = source.recv(65536)
                if not data or not self.passes(data, towards_server, pair):
                    break
                sink.sendall(data)
        except OSError:
            pass
        self._drop(pair)


class AnswerDroppingRelay(InspectingRelay):
    """A Relay that, once ``drop_next_claim()`` is asked, forwards the
    COMMIT of the next claim that took a job to the server, swallows the
    server's answer and closes that connection: the claim is made, and the
    node never hears of it."""

    def __init__(self, target):
        super().__init__(target)
        self._armed = threading.Event()
        # {pair: "claiming" (statement sent), "took" (a row), "dropping"}
        self._stage = {}
        self.dropped = threading.Event()

    def drop_next_claim(self):
        self._armed.set()

    def passes(self, data, towards_server, pair):
        stage = self._stage.get(pair)
        if towards_server:
            if self._armed.is_set() and CLAIM_STATEMENT in data:
                self._stage[pair] = "claiming"
            elif stage == "took" and COMMIT in data:
                self._armed.clear()
                self._stage[pair] = "dropping"
            elif stage == "claiming":
                self._stage.pop(pair, None)  # it took nothing
        elif stage == "claiming" and TOOK_ONE in data:
            self._stage[pair] = "took"
        elif stage == "dropping":
            # The server's answer to the COMMIT: it committed.
            self.dropped.set()
            return False
        return True


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


class ClaimHoldingRelay(InspectingRelay):
    """A Relay that, once ``hold_next_claim()`` is asked, holds the next
    claim's statement (``holding`` is set) until ``let_go()``."""

    def __init__(self, target):
        super().__init__(target)
        self._armed = threading.Event()
        self.holding = threading.Event()
        self._go = threading.Event()

    def hold_next_claim(self):
        self._armed.set()

    def let_go(self):
        self._go.set()

    def passes(self, data, towards_server, pair):
        if towards_server and self._armed.is_set() and CLAIM_STATEMENT in data:
            self._armed.clear()
            self.holding.set()
            self._go.wait(30)
        return True


class StopDuringClaimTests(ClusterTestCase):
    def stop_during_a_claim(self, signum):
        relay = ClaimHoldingRelay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        self.addCleanup(relay.let_go)
        through = url_through(self.jobs_db, "127.0.0.1", relay.port)
        node = self.node("n0", 1, jobs_db=through)
        relay.hold_next_claim()
        jobid = node.must_schedule("shop", "echo")
        wait_until(relay.holding.is_set, 30, "the claim to be held")
        os.kill(node.process.pid, signum)
        # The stop is under way before the claim reaches the table: the
        # poller is stopped in the callback of the listening's end, with a
        # wide margin past it.
        wait_until(lambda: not listening(node.port), 30, "the node to stop listening")
        time.sleep(0.5)
        relay.let_go()
        self.assertEqual(node.process.wait(60), 0, node.output())
        # Another node takes it from the queue (n0's name is held until its
        # heartbeat is old, so n0 cannot start again at once).
        other = self.node("n1", 1)
        entry = other.wait_state(jobid, "finished", timeout=30)
        self.assertEqual((entry["outcome"], entry["node"]), ("finished", "n1"), node.output())

    def test_sigterm_while_a_claim_waits_leaves_the_job_pending(self):
        self.stop_during_a_claim(signal.SIGTERM)

    def test_sigusr1_while_a_claim_waits_leaves_the_job_pending(self):
        self.stop_during_a_claim(signal.SIGUSR1)


class LostClaimAnswerTests(ClusterTestCase):
    def test_a_job_whose_claim_answer_was_lost_is_started_and_hears_a_cancel(self):
        relay = AnswerDroppingRelay(server_address(self.jobs_db))
        self.addCleanup(relay.stop)
        node = self.node("n0", 1, jobs_db=url_through(self.jobs_db, "127.0.0.1", relay.port))
        relay.drop_next_claim()
        jobid = node.must_schedule("shop", "slow", delay="0.2", pages="1000")
        wait_until(relay.dropped.is_set, 30, "the claim's answer to be dropped")
        entry = wait_until(lambda: (lambda s, e: e if s == "running" and e.get("pid")
                                    else None)(*node.find(jobid)), 30,
                           f"{jobid} to run with a process")
        self.assertEqual(entry["node"], "n0")
        self.assertIn("the claim's answer was lost: starting it now", node.output())
        self.assertEqual(node.post("cancel.json", {"project": "shop", "job": jobid,
                                                   "signal": "KILL"})[1]["prevstate"],
                         "running")
        entry = node.wait_state(jobid, "finished", timeout=30)
        self.assertEqual(entry["outcome"], "cancelled")
