"""Options: every refusal is one line, exit status 2, and writes nothing."""

import os
import subprocess
import sys

from twisted.python import usage
from twisted.trial import unittest

from netweir_serve.options import ServeOptions, is_loopback, unenforceable_rule
from netweir_serve.reliability.cgroups import JobGroups

from .processes import ROOT


def parse(*argv, environ=None):
    options = ServeOptions(environ or {})
    options.parseOptions(list(argv))
    return options


class ParsingTests(unittest.TestCase):
    def setUp(self):
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(self.base, "spiders"))
        self.file = os.path.join(self.base, "feeds.py")
        open(self.file, "w").close()

    def test_defaults(self):
        config = parse().config()
        self.assertEqual((config.bind, config.port, config.keep), ("127.0.0.1", 6800, 100))
        self.assertEqual(config.max_jobs, os.cpu_count())
        self.assertEqual(config.directory, os.path.abspath("netweir-serve"))
        self.assertIsNone(config.credentials)
        self.assertEqual(len(config.projects), 0)
        self.assertIn("no --project", config.warnings()[0])

    def test_trusted_proxies_are_repeated_and_each_an_address(self):
        self.assertEqual(parse().config().trusted_proxies, ())
        config = parse("--trusted-proxy", "127.0.0.1", "--trusted-proxy", "::FFFF:10.0.0.1",
                       "--trusted-proxy", "2001:DB8::1", "--trusted-proxy", "unix").config()
        self.assertEqual(config.trusted_proxies, ("127.0.0.1", "10.0.0.1", "2001:db8::1", "unix"))
        for bad in ("nginx.local", "10.0.0.0/8", ""):
            with self.assertRaises(usage.UsageError) as refused:
                parse("--trusted-proxy", bad)
            self.assertIn("--trusted-proxy", str(refused.exception))

    def test_bare_paths_are_named_after_directory_and_file_stem(self):
        config = parse("--project", os.path.join(self.base, "spiders") + "/",
                       "--project", self.file).config()
        self.assertEqual(config.projects.names(), ["feeds", "spiders"])
        self.assertEqual(config.projects.get("SPIDERS").path, os.path.join(self.base, "spiders"))

    def test_credentials_from_the_environment(self):
        config = parse(environ={"NETWEIR_SERVE_USERNAME": "me",
                                "NETWEIR_SERVE_PASSWORD": "a:b"}).config()
        self.assertEqual(config.credentials, ("me", "a:b"))

    def test_notify_urls_off_the_command_line_from_a_file_or_the_environment(self):
        # Issue 26: a token in a --notify URL was on the command line.
        path = os.path.join(self.base, "hooks")
        with open(path, "w") as f:
            f.write("# our receivers\nhttps://hooks.example.com/T0/B1/secret-path\n\n"
                    "http://127.0.0.1:9000/hook\n")
        config = parse("--notify", f"@{path}", "--notify", "http://127.0.0.1:9001/x",
                       environ={"NETWEIR_SERVE_NOTIFY": "https://a.example/1 https://b.example/2"}
                       ).config()
        self.assertEqual(config.notify, (
            "https://hooks.example.com/T0/B1/secret-path", "http://127.0.0.1:9000/hook",
            "http://127.0.0.1:9001/x", "https://a.example/1", "https://b.example/2"))
        # Each is one of the service's secrets, kept from the jobs.
        self.assertIn("https://hooks.example.com/T0/B1/secret-path", config.secrets())

    def test_a_notify_file_that_is_missing_or_empty_or_holds_a_bad_url_is_refused(self):
        empty = os.path.join(self.base, "empty")
        with open(empty, "w") as f:
            f.write("# nothing\n")
        bad = os.path.join(self.base, "bad")
        with open(bad, "w") as f:
            f.write("ftp://example.com/\n")
        for value, said in ((f"@{self.base}/missing", "cannot read it"),
                            (f"@{empty}", "names no URL"), (f"@{bad}", "ftp://example.com/")):
            with self.assertRaises(usage.UsageError) as raised:
                parse("--notify", value)
            self.assertIn(said, str(raised.exception))

    def test_listen_names_every_endpoint(self):
        config = parse("--listen", "tcp:6800:interface=127.0.0.1", "--listen",
                       "unix:/tmp/netweir-serve-test.sock:mode=660").config()
        self.assertEqual([e.description for e in config.endpoints],
                         ["tcp:6800:interface=127.0.0.1",
                          "unix:/tmp/netweir-serve-test.sock:mode=660"])
        self.assertEqual([e.reach for e in config.endpoints], ["loopback", "unix socket"])
        # Without --listen, --bind and --port are one tcp: endpoint.
        [endpoint] = parse("--bind", "::1", "--port", "7000").config().endpoints
        self.assertEqual((endpoint.kind, endpoint.interface, endpoint.port, endpoint.reach),
                         ("tcp", "::1", 7000, "loopback"))

    def test_public_listen_allowed_with_credentials_a_checker_or_insecure_flag(self):
        public = ("--listen", "tcp:6800")
        parse(*public, "--username", "u", "--password", "p")
        config = parse(*public, "--insecure-no-auth").config()
        self.assertIn("listening on tcp:6800 without a username", config.warnings()[1])
        options = ServeOptions({}, checkers=[object()])
        options.parseOptions(list(public))
        self.assertTrue(options.config().authenticated)
        self.assertEqual(options.config().warnings()[1:], [])

    def test_exposed_bind_allowed_with_credentials_or_insecure_flag(self):
        self.assertEqual(parse("--bind", "0.0.0.0", "--username", "u", "--password", "p")
                         .config().warnings(), ["no --project given: there are no spiders to run"])
        config = parse("--bind", "0.0.0.0", "--insecure-no-auth").config()
        self.assertIn("DNS rebinding", config.warnings()[1])

    def test_exposed_bind_or_listen_allowed_once_the_job_table_has_a_token(self):
        from twisted.internet.task import Clock

        from netweir_serve.store.sqlite import SQLiteJobStore
        from netweir_serve.store.token_records import TokenRecord

        directory = os.path.abspath(self.mktemp())
        exposed = (("--bind", "0.0.0.0"), ("--listen", "tcp:0"))
        for args in exposed:
            with self.assertRaises(usage.UsageError) as refused:
                parse(*args, "--dir", directory)
            self.assertIn("nor any token", str(refused.exception))
        os.makedirs(directory)
        store = SQLiteJobStore(os.path.join(directory, "jobs.db"), Clock())
        store.add_token(TokenRecord(name="ci", role="admin", hash="h"))
        store.close()
        for args in exposed:
            config = parse(*args, "--dir", directory).config()
            self.assertTrue(config.authenticated)
            self.assertEqual(config.warnings(), ["no --project given: there are no spiders to run"])

    def test_refusals(self):
        cases = [
            (["--project", "bad name=" + self.file], "not a name"),
            (["--project", "_x=" + self.file], "not a name"),
            (["--project", "x=" + self.base + "/missing"], "does not exist"),
            (["--project", "Shop=" + self.file, "--project", "shop=" + self.base], "twice"),
            (["--max-jobs", "0"], "--max-jobs must be at least 1"),
            (["--max-jobs", "many"], "whole number"),
            (["--keep", "-1"], "--keep must be at least 0"),
            (["--username", "u"], "without a password"),
            (["--password", "p"], "without a username"),
            (["--bind", "0.0.0.0"], "--insecure-no-auth"),
            (["--bind", "192.0.2.1"], "--insecure-no-auth"),
            (["--listen", "tcp:6800"], "--insecure-no-auth"),
            (["--listen", "tcp:6800:interface=127.0.0.1", "--port", "1"], "--port beside"),
            (["--listen", "nosuch:1"], "tcp:, tcp6:, ssl:, unix: and systemd:"),
            (["--port", "70000"], "at most 65535"),
        ]
        for argv, words in cases:
            with self.assertRaises(usage.UsageError, msg=argv) as caught:
                parse(*argv)
            self.assertIn(words, str(caught.exception), argv)

    def test_loopback_addresses(self):
        for address in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
            self.assertTrue(is_loopback(address), address)
        for address in ("0.0.0.0", "::", "10.0.0.1", "example.org"):
            self.assertFalse(is_loopback(address), address)


class CommandLineTests(unittest.TestCase):
    """The real command: refusals exit 2 with one line and create no --dir."""

    def run_serve(self, *argv, env=None):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
        environment.update(env or {})
        return subprocess.run([sys.executable, "-m", "netweir_serve", *argv], cwd=ROOT,
                              env=environment, capture_output=True, text=True, timeout=60)

    def test_every_refusal_exits_2_and_writes_nothing(self):
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        spider = os.path.join(base, "s.py")
        open(spider, "w").close()
        cases = [
            ["--project", "a b=" + spider],
            ["--project", base + "/missing.py"],
            ["--project", "x=" + spider, "--project", "X=" + spider],
            ["--max-jobs", "0"],
            ["--keep", "-3"],
            ["--username", "u"],
            ["--bind", "0.0.0.0"],
        ]
        for argv in cases + [[], []]:
            env = None
            if not argv:
                argv, env = [], {"NETWEIR_SERVE_PASSWORD": "p"} if env is None else env
            directory = os.path.join(base, "dir")
            done = self.run_serve(*argv, "--dir", directory, env=env)
            self.assertEqual(done.returncode, 2, (argv, done.stderr))
            lines = done.stderr.strip().splitlines()
            self.assertTrue(lines[0].startswith("netweir-serve: error: "), done.stderr)
            self.assertFalse(os.path.exists(directory), argv)

    def test_print_tac_writes_the_tac_file_that_the_checkout_holds_too(self):
        """The .tac is package data, written out by --print-tac; the
        checkout's top-level netweir-serve.tac is a copy of it, for
        running from a checkout, and must not drift from it."""
        done = self.run_serve("--print-tac")
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        with open(os.path.join(ROOT, "netweir-serve.tac"), encoding="utf-8") as f:
            self.assertEqual(done.stdout, f.read())
        with open(os.path.join(ROOT, "netweir_serve", "netweir-serve.tac"),
                  encoding="utf-8") as f:
            self.assertEqual(done.stdout, f.read())
        self.assertIn("application = tac_application()", done.stdout)
        self.assertIn("--print-tac", self.run_serve("--help").stdout)

    def run_twistd(self, *argv, env=None):
        """This venv's twistd, from a folder of its own (it writes no pid
        file there with --pidfile=, but a .tac run may)."""
        cwd = os.path.abspath(self.mktemp())
        os.makedirs(cwd)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
        environment.update(env or {})
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        return subprocess.run([twistd, *argv], cwd=cwd, env=environment,
                              capture_output=True, text=True, timeout=60)

    def test_under_twistd_a_refusal_says_why_first_and_names_twistd(self):
        """twistd itself would print its 50 lines of usage to stdout, then
        the reason, and exit 1: the reason is all, on stderr, with the
        command that shows the help, and status 2 as netweir-serve's."""
        done = self.run_twistd("-n", "--pidfile=", "netweir-serve", "--port", "x")
        self.assertEqual((done.returncode, done.stdout), (2, ""), done.stderr)
        self.assertEqual(done.stderr.splitlines(), [
            "twistd netweir-serve: error: --port takes a whole number, not 'x'",
            "twistd netweir-serve: try 'twistd netweir-serve --help'"])
        # The same for a refusal of postOptions (a check across options).
        done = self.run_twistd("-n", "--pidfile=", "netweir-serve", "--bind", "0.0.0.0")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertTrue(done.stderr.startswith(
            "twistd netweir-serve: error: --bind 0.0.0.0 lets other machines reach"), done.stderr)
        self.assertEqual(len(done.stderr.splitlines()), 2, done.stderr)

    def test_under_twistd_and_the_tac_an_unusable_dir_names_what_was_run(self):
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        taken = os.path.join(base, "a-file")
        open(taken, "w").close()
        done = self.run_twistd("-n", "--pidfile=", "netweir-serve", "--dir", taken)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(done.stderr, f"twistd netweir-serve: error: cannot use --dir {taken}:"
                                      f" {taken} is a file, not a folder\n")
        done = self.run_twistd("-n", "--pidfile=", "-y", os.path.join(ROOT, "netweir-serve.tac"),
                               env={"NETWEIR_SERVE_OPTIONS": f"--dir {taken}"})
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertTrue(done.stderr.startswith(
            f"netweir-serve (.tac): error: cannot use --dir {taken}:"), done.stderr)

    def test_under_the_tac_a_refusal_names_the_variable_it_read(self):
        tac = os.path.join(ROOT, "netweir-serve.tac")
        done = self.run_twistd("-n", "--pidfile=", "-y", tac,
                               env={"NETWEIR_SERVE_OPTIONS": "--port x"})
        self.assertEqual((done.returncode, done.stdout), (2, ""), done.stderr)
        first, hint = done.stderr.splitlines()
        self.assertEqual(first, "netweir-serve (.tac): error: --port takes a whole number, not 'x'")
        self.assertIn("$NETWEIR_SERVE_OPTIONS", hint)
        self.assertIn("'netweir-serve --help'", hint)

    def test_help_mentions_environment_for_secrets(self):
        done = self.run_serve("--help")
        self.assertEqual(done.returncode, 0)
        self.assertIn("NETWEIR_SERVE_PASSWORD", done.stdout)
        for flag in ("--project", "--bind", "--port", "--dir", "--max-jobs", "--keep",
                     "--username", "--password", "--insecure-no-auth"):
            self.assertIn(flag, done.stdout)


class PolicyLimitsTests(unittest.TestCase):
    """A --policy asking for a limit the machine cannot enforce is refused
    at start, naming the rule and why."""

    def groups(self, controllers):
        root = os.path.abspath(self.mktemp())
        os.makedirs(root)
        for name, text in (("cgroup.controllers", controllers), ("cgroup.subtree_control", "")):
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        return JobGroups.detect(self.mktemp(), f"cgroup2 {root} cgroup2 rw 0 0\n", "0::/\n")

    def test_a_limit_without_its_controller_is_named(self):
        groups = self.groups("cpu pids")
        rules = ["shop:timeout=6h", "shop/books:cpu=1,memory=1G"]
        refusal = unenforceable_rule(rules, groups)
        self.assertTrue(refusal.startswith("--policy 'shop/books:cpu=1,memory=1G': memory"
                                           " cannot be limited here:"), refusal)
        self.assertIsNone(unenforceable_rule(["shop:timeout=6h,cpu=0.5"], groups))

    def test_on_this_machine_the_rule_is_taken_or_refused_as_its_groups_say(self):
        here = JobGroups.detect(self.mktemp())
        argv = ["--project", f"shop={ROOT}", "--policy", "shop:memory=1G"]
        if here.available()["memory"]:
            self.assertEqual(parse(*argv)["policies"].for_project("shop").memory, 1 << 30)
        else:
            self.assertRaises(usage.UsageError, parse, *argv)
