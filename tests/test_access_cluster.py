"""Tokens on a cluster: two nodes sharing a PostgreSQL job table hear a
token added or revoked on either at once (a TOKEN notice), whoever ran
``netweir-serve token``."""

import os
import subprocess
import sys
import time

from twisted.trial import unittest

from . import pg
from .processes import Daemon, request, shared_site
from .spiders import write_project


def token_command(jobs_db, *args):
    done = subprocess.run([sys.executable, "-m", "netweir_serve", "token", *args,
                           "--jobs-db", jobs_db], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class TokensOnAClusterTests(unittest.TestCase):
    def setUp(self):
        self.jobs_db = pg.fresh_url(self)
        base = os.path.abspath(self.mktemp())
        shop = write_project(os.path.join(base, "shop"), shared_site().base)
        self.nodes = []
        for name in ("n1", "n2"):
            daemon = Daemon(os.path.join(base, name), [f"shop={shop}"],
                            ["--jobs-db", self.jobs_db, "--node-name", name])
            self.addCleanup(daemon.kill)
            self.nodes.append(daemon.start())

    def status(self, node, secret=None):
        headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        return request(node.port, "GET", "/listprojects.json", headers=headers)[0]

    def within(self, seconds, condition):
        """The seconds ``condition()`` took to hold, or None past ``seconds``."""
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if condition():
                return time.monotonic() - start
            time.sleep(0.02)
        return None

    def test_a_token_added_works_on_every_node_at_once_and_a_revocation_within_a_second(self):
        # No token, no password: open on loopback, as before.
        self.assertEqual([self.status(n) for n in self.nodes], [200, 200])
        secret = token_command(self.jobs_db, "add", "ci", "--role", "viewer",
                               "--project", "shop")
        for node in self.nodes:
            took = self.within(1.0, lambda: self.status(node, secret) == 200
                               and self.status(node) == 401)
            self.assertIsNotNone(took, f"node {node.port} did not take the new token")
        # Another token stays: with none left, a loopback service is open again.
        token_command(self.jobs_db, "add", "root", "--role", "admin")
        token_command(self.jobs_db, "revoke", "ci")
        started = time.monotonic()
        for node in self.nodes:
            took = self.within(1.0, lambda: self.status(node, secret) == 401)
            self.assertIsNotNone(took, "the revoked token still let its holder in")
        self.assertLess(time.monotonic() - started, 1.0)

    def test_a_rotated_secret_works_on_the_other_node_and_the_old_one_stops(self):
        old = token_command(self.jobs_db, "add", "root", "--role", "admin")
        first, second = self.nodes
        self.assertIsNotNone(self.within(1.0, lambda: self.status(second, old) == 200))
        new = token_command(self.jobs_db, "rotate", "root")
        for node in self.nodes:
            self.assertIsNotNone(self.within(1.0, lambda: self.status(node, new) == 200
                                             and self.status(node, old) == 401))
