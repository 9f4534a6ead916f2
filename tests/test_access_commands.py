"""``netweir-serve token``, run as a user runs it, on an SQLite job table."""

import os
import subprocess
import sys

from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.access.tokens import secret_matches
from netweir_serve.store.sqlite import SQLiteJobStore


def token(*args):
    """(exit status, stdout, stderr) of ``netweir-serve token ARGS``."""
    done = subprocess.run([sys.executable, "-m", "netweir_serve", "token", *args],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


class TokenCommandTests(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.abspath(self.mktemp())

    def tokens(self):
        store = SQLiteJobStore(os.path.join(self.dir, "jobs.db"), Clock())
        try:
            return self.successResultOf(store.tokens())
        finally:
            store.close()

    def test_add_prints_the_secret_alone_and_keeps_only_its_hash(self):
        code, out, err = token("add", "ci", "--role", "operator", "--project", "shop",
                               "--expires", "90d", "--dir", self.dir)
        self.assertEqual(code, 0, err)
        secret = out.strip()
        self.assertEqual(out, secret + "\n")
        self.assertTrue(secret.startswith("ci."))
        [kept] = self.tokens()
        self.assertEqual((kept.name, kept.role, kept.projects), ("ci", "operator", ("shop",)))
        self.assertAlmostEqual(kept.expires - kept.created, 90 * 86400)
        self.assertTrue(secret_matches(secret, kept.hash))
        with open(os.path.join(self.dir, "jobs.db"), "rb") as f:
            self.assertNotIn(secret.encode(), f.read())

    def test_list_shows_every_token_and_never_a_secret(self):
        _, secret, _ = token("add", "root", "--role", "admin", "--dir", self.dir)
        token("add", "scraper", "--role", "metrics", "--dir", self.dir)
        code, out, _ = token("list", "--dir", self.dir)
        self.assertEqual(code, 0)
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "ROLE", "PROJECTS", "CREATED", "LAST_USED",
                                            "EXPIRES"])
        self.assertEqual([line.split()[:3] for line in lines[1:]],
                         [["root", "admin", "*"], ["scraper", "metrics", "*"]])
        self.assertNotIn(secret.strip().rpartition(".")[2], out)

    def test_revoke_and_rotate(self):
        _, old, _ = token("add", "ci", "--role", "viewer", "--project", "shop", "--dir", self.dir)
        code, new, err = token("rotate", "CI", "--grace", "1h", "--dir", self.dir)
        self.assertEqual(code, 0, err)
        [kept] = self.tokens()
        self.assertTrue(secret_matches(new.strip(), kept.hash))
        self.assertTrue(secret_matches(old.strip(), kept.previous_hash))
        self.assertTrue(3600 <= kept.previous_until - kept.created < 3630)
        self.assertEqual(token("revoke", "ci", "--dir", self.dir)[0], 0)
        self.assertEqual(self.tokens(), [])

    def test_bad_input_is_refused_with_status_2_and_writes_nothing(self):
        for args, said in [
                (("add", "ci", "--role", "boss"), "not a role"),
                (("add", "ci", "--role", "viewer"), "needs at least one --project"),
                (("add", "ci", "--role", "admin", "--project", "shop"), "every project"),
                (("add", "ci", "--role", "admin", "--expires", "59s"), "the least is 60s"),
                (("add", "ci", "--role", "admin", "--expires", "soon"), "not a duration"),
                (("add", "../x", "--role", "admin"), "not a name"),
                (("rotate", "ci", "--grace", "x"), "not a duration"),
                (("revoke", "nobody"), "no token named 'nobody'"),
                (("rotate", "nobody"), "no token named 'nobody'")]:
            code, out, err = token(*args, "--dir", self.dir)
            self.assertEqual((code, out), (2, ""), args)
            self.assertIn(said, err, args)
        token("add", "ci", "--role", "admin", "--dir", self.dir)
        code, out, err = token("add", "CI", "--role", "admin", "--dir", self.dir)
        self.assertEqual((code, out), (2, ""))
        self.assertIn("already exists", err)
        self.assertEqual(len(self.tokens()), 1)

    def audit(self):
        store = SQLiteJobStore(os.path.join(self.dir, "jobs.db"), Clock())
        try:
            return self.successResultOf(store.audit(every=True))
        finally:
            store.close()

    def test_every_change_and_refusal_is_audited_as_the_os_user_and_never_a_secret(self):
        import getpass

        _, secret, _ = token("add", "ci", "--role", "operator", "--project", "shop",
                             "--dir", self.dir)
        _, new, _ = token("rotate", "ci", "--grace", "1h", "--dir", self.dir)
        token("add", "CI", "--role", "admin", "--dir", self.dir)
        token("revoke", "ci", "--dir", self.dir)
        token("revoke", "ci", "--dir", self.dir)
        rows = list(reversed(self.audit()))
        self.assertEqual([(r.endpoint, r.target, r.status) for r in rows],
                         [("token add", "ci", 200), ("token rotate", "ci", 200),
                          ("token add", "CI", 409), ("token revoke", "ci", 200),
                          ("token revoke", "ci", 404)])
        self.assertEqual({(r.who, r.address, r.project) for r in rows},
                         {(getpass.getuser(), None, None)})
        self.assertEqual(rows[0].change, {"role": "operator", "projects": ["shop"],
                                          "expires": None})
        for row in rows:
            for secret_part in (secret.strip().rpartition(".")[2],
                                new.strip().rpartition(".")[2]):
                self.assertNotIn(secret_part, repr(row))
