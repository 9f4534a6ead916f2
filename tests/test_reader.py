"""SpiderReader against real spider files, read in real processes."""

import os
import sys
import textwrap

from twisted.internet import defer, reactor, task, utils
from twisted.trial import unittest

from netweir_serve.jobs.checked import CheckedJob, InspectError, check_job, split_setting
from netweir_serve.spiders.reader import SpiderReader
from netweir_serve.projects import Project


def spider(cls, name=None, settings=None, body=""):
    """The source of a file defining one spider class."""
    lines = ["import netweir", "", f"class {cls}(netweir.Spider):"]
    if name is not None:
        lines.append(f"    name = {name!r}")
    if settings is not None:
        lines.append(f"    settings = netweir.Settings({settings})")
    lines.append("    pass")
    return "\n".join(lines) + "\n" + textwrap.dedent(body)


def is_running(pid):
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


# A file that starts a grandchild, says both pids, and never finishes.
HANGING = """
import os, subprocess, sys, time
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
with open({pid_file!r} + ".tmp", "w") as out:
    out.write(f"{{os.getpid()}} {{sleeper.pid}}")
os.rename({pid_file!r} + ".tmp", {pid_file!r})
time.sleep(60)
"""


class InspectorCase(unittest.TestCase):
    """A fresh inspector per test, stopped after it; helpers to write
    projects into temp dirs."""

    warm = True
    timeout = 5.0

    def setUp(self):
        self.inspector = SpiderReader(reactor, timeout=self.timeout, warm=self.warm)
        self.addCleanup(self.inspector.stop)

    def directory_project(self, files, name="shop"):
        """A directory project holding ``files`` (relative name -> source)."""
        root = os.path.abspath(self.mktemp())
        for relative, source in files.items():
            path = os.path.join(root, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as out:
                out.write(source)
        os.makedirs(root, exist_ok=True)
        return Project(name=name, path=root)

    def pid_file(self):
        return os.path.abspath(self.mktemp())

    @defer.inlineCallbacks
    def pids_from(self, pid_file):
        """The pids a HANGING file wrote, once it has."""
        for _ in range(300):
            if os.path.exists(pid_file):
                with open(pid_file) as pids:
                    return [int(p) for p in pids.read().split()]
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.fail("the hanging file never started")

    @defer.inlineCallbacks
    def assert_gone(self, pids):
        """Waits a little for ``pids`` to go; fails if any is still running."""
        for _ in range(100):
            if not any(is_running(pid) for pid in pids):
                return
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.fail(f"still running: {[p for p in pids if is_running(p)]}")

    @defer.inlineCallbacks
    def refusal(self, deferred):
        """The message of the InspectError ``deferred`` fails with."""
        error = yield self.assertFailure(deferred, InspectError)
        return error.message


class ReadingBehaviour:
    """What both modes, warm and one process per request, must do."""

    @defer.inlineCallbacks
    def test_directory_project_lists_spiders_of_every_file(self):
        project = self.directory_project(
            {
                "books.py": spider("BooksSpider", name="books"),
                "news.py": spider("NewsSpider", name="news") + spider("Unnamed"),
                # Imports a sibling's spider: it is listed once, as the sibling's.
                "reuse.py": "from books import BooksSpider\nimport netweir\n",
                "helpers/extra.py": spider("Hidden", name="hidden"),
                "helpers/broken.py": "raise RuntimeError('never read')\n",
            }
        )
        names = yield self.inspector.listSpiders(project)
        self.assertEqual(names, ["Unnamed", "books", "news"])

    @defer.inlineCallbacks
    def test_file_that_raises_is_named(self):
        project = self.directory_project(
            {
                "good.py": spider("Good", name="good"),
                "crash.py": "import netweir\nraise RuntimeError('boom')\n",
            }
        )
        message = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("crash.py failed to import: RuntimeError: boom", message)
        self.assertIn("line 2", message)
        self.assertNotIn("good.py", message)

    @defer.inlineCallbacks
    def test_file_that_prints_still_lists(self):
        source = spider("Loud", name="loud", body="""
            import sys
            print("x" * 200_000)
            print("to stderr", file=sys.stderr)
        """)
        project = self.directory_project({"loud.py": source})
        names = yield self.inspector.listSpiders(project)
        self.assertEqual(names, ["loud"])

    @defer.inlineCallbacks
    def test_file_that_exits_the_process_is_an_error_with_its_stderr(self):
        source = spider("Quitter", body="""
            import os, sys
            for n in range(3000):
                print("noise", n, file=sys.stderr)
            print("last words before leaving", file=sys.stderr)
            sys.stderr.flush()
            os._exit(3)
        """)
        project = self.directory_project({"quitter.py": source})
        message = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("'shop'", message)
        self.assertIn("without answering", message)
        self.assertIn("exited with status 3", message)
        self.assertIn("last words before leaving", message)
        self.assertNotIn("noise 100\n", message)
        self.assertLess(len(message), 3000)

    @defer.inlineCallbacks
    def test_hanging_file_times_out_without_blocking_others(self):
        inspector = SpiderReader(reactor, timeout=self.hang_timeout, warm=self.warm)
        self.addCleanup(inspector.stop)
        pid_file = self.pid_file()
        hanging = self.directory_project({"slow.py": HANGING.format(pid_file=pid_file)}, "slow")
        quick = self.directory_project({"quick.py": spider("Quick")}, "quick")
        order = []
        slow_listing = inspector.listSpiders(hanging)
        slow_listing.addBoth(lambda result: order.append("slow") or result)
        quick_names = yield inspector.listSpiders(quick)
        order.append("quick")
        self.assertEqual(quick_names, ["Quick"])
        pids = yield self.pids_from(pid_file)
        message = yield self.refusal(slow_listing)
        self.assertEqual(order, ["quick", "slow"])
        self.assertIn("took too long", message)
        self.assertIn("'slow'", message)
        self.assertIn(f"{self.hang_timeout:g} seconds", message)
        # The reader and what it started are killed with it.
        yield self.assert_gone(pids)


class WarmReadingTests(ReadingBehaviour, InspectorCase):
    warm = True
    hang_timeout = 1.0


class OneProcessPerRequestTests(ReadingBehaviour, InspectorCase):
    warm = False
    # Includes starting Python and importing netweir.
    hang_timeout = 2.0


class ListingTests(InspectorCase):
    @defer.inlineCallbacks
    def test_empty_name_means_class_name(self):
        project = self.directory_project({"a.py": spider("Plain", name="")})
        names = yield self.inspector.listSpiders(project)
        self.assertEqual(names, ["Plain"])

    @defer.inlineCallbacks
    def test_single_file_project_reads_only_that_file(self):
        project = self.directory_project(
            {"feeds.py": spider("Feeds", name="feeds"), "other.py": spider("Other")}
        )
        single = Project(name="news", path=os.path.join(project.path, "feeds.py"))
        names = yield self.inspector.listSpiders(single)
        self.assertEqual(names, ["feeds"])

    @defer.inlineCallbacks
    def test_files_run_in_the_project_folder_and_import_each_other(self):
        project = self.directory_project(
            {
                "helpers/__init__.py": "",
                "helpers/naming.py": "NAME = open('name.txt').read().strip()\n",
                "name.txt": "from-helper\n",
                "a.py": "import netweir\nfrom helpers.naming import NAME\n"
                "class A(netweir.Spider):\n    name = NAME\n",
            }
        )
        names = yield self.inspector.listSpiders(project)
        self.assertEqual(names, ["from-helper"])

    @defer.inlineCallbacks
    def test_system_exit_at_import_is_a_failure_of_that_file(self):
        project = self.directory_project({"bye.py": "import sys\nsys.exit(4)\n"})
        message = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("bye.py failed to import: SystemExit: 4", message)

    @defer.inlineCallbacks
    def test_every_broken_file_is_named(self):
        project = self.directory_project(
            {"one.py": "raise KeyError('k')\n", "two.py": "def broken(:\n"}
        )
        message = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("one.py failed to import: KeyError", message)
        self.assertIn("two.py failed to import: SyntaxError", message)

    @defer.inlineCallbacks
    def test_edited_file_is_read_afresh(self):
        project = self.directory_project({"books.py": spider("Books", name="books")})
        before = yield self.inspector.listSpiders(project)
        # Same size, same second: a cached .pyc would not notice.
        with open(os.path.join(project.path, "books.py"), "w") as out:
            out.write(spider("Books", name="bookz"))
        after = yield self.inspector.listSpiders(project)
        self.assertEqual((before, after), (["books"], ["bookz"]))

    @defer.inlineCallbacks
    def test_same_name_in_two_files_is_refused_naming_both(self):
        project = self.directory_project(
            {"a.py": spider("First", name="books"), "b.py": spider("Second", name="books")}
        )
        message = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("'books'", message)
        self.assertIn("First in a.py", message)
        self.assertIn("Second in b.py", message)

    @defer.inlineCallbacks
    def test_missing_project_path_is_an_error(self):
        project = Project(name="gone", path=os.path.abspath(self.mktemp()))
        message = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("no longer exists", message)

    @defer.inlineCallbacks
    def test_many_requests_at_once(self):
        project = self.directory_project({f"s{n}.py": spider(f"S{n}") for n in range(3)})
        listings = yield defer.gatherResults(
            [self.inspector.listSpiders(project) for _ in range(12)]
        )
        self.assertEqual(listings, [["S0", "S1", "S2"]] * 12)


class WarmHelperTests(InspectorCase):
    @defer.inlineCallbacks
    def test_helper_killed_once_is_replaced_and_the_request_retried(self):
        marker = self.pid_file()
        source = spider("Survivor", body=f"""
            import os, signal
            if not os.path.exists({marker!r}):
                open({marker!r}, "w").close()
                os.kill(os.getppid(), signal.SIGKILL)
                import time; time.sleep(5)
        """)
        project = self.directory_project({"survivor.py": source})
        names = yield self.inspector.listSpiders(project)
        self.assertEqual(names, ["Survivor"])
        self.assertTrue(os.path.exists(marker))

    @defer.inlineCallbacks
    def test_request_that_keeps_killing_the_helper_fails_then_service_recovers(self):
        killer = spider("Killer", body="""
            import os, signal
            os.kill(os.getppid(), signal.SIGKILL)
        """)
        deadly = self.directory_project({"killer.py": killer}, "deadly")
        message = yield self.refusal(self.inspector.listSpiders(deadly))
        self.assertIn("helper process", message)
        self.assertIn("SIGKILL", message)
        fine = self.directory_project({"fine.py": spider("Fine")}, "fine")
        names = yield self.inspector.listSpiders(fine)
        self.assertEqual(names, ["Fine"])

    @defer.inlineCallbacks
    def test_stop_fails_requests_in_flight_and_kills_readers(self):
        pid_file = self.pid_file()
        project = self.directory_project({"slow.py": HANGING.format(pid_file=pid_file)})
        listing = self.inspector.listSpiders(project)
        pids = yield self.pids_from(pid_file)
        yield self.inspector.stop()
        message = yield self.refusal(listing)
        self.assertIn("stopping", message)
        yield self.assert_gone(pids)
        later = yield self.refusal(self.inspector.listSpiders(project))
        self.assertIn("stopping", later)

    @defer.inlineCallbacks
    def test_cancelling_a_request_kills_its_reader(self):
        pid_file = self.pid_file()
        project = self.directory_project({"slow.py": HANGING.format(pid_file=pid_file)})
        listing = self.inspector.listSpiders(project)
        pids = yield self.pids_from(pid_file)
        listing.cancel()
        yield self.assertFailure(listing, defer.CancelledError)
        yield self.assert_gone(pids)


class CheckJobTests(InspectorCase):
    def setUp(self):
        super().setUp()
        self.project = self.directory_project(
            {
                "books.py": spider("BooksSpider", name="books"),
                "proxied.py": spider(
                    "Proxied", name="proxied", settings="proxies=('http://127.0.0.1:1',)"
                ),
            }
        )
        self.data_dir = os.path.abspath(self.mktemp())
        os.makedirs(self.data_dir)

    def check(self, spider_name="books", settings=(), arguments=()):
        # As the job core asks: settings resolved there, checked here.
        return check_job(self.inspector, self.project, spider_name, list(settings),
                         list(arguments), self.data_dir)

    @defer.inlineCallbacks
    def test_accepted_job_keeps_what_the_user_gave(self):
        settings = [("concurrency", "8"), ("checkpoint", "books"), ("max_delay", "2")]
        job = yield self.check(settings=settings, arguments=[("category", "fiction")])
        self.assertEqual(
            job,
            CheckedJob(
                project="shop",
                spider="books",
                spider_file=os.path.join(self.project.path, "books.py"),
                settings=tuple(settings),
                arguments=(("category", "fiction"),),
            ),
        )

    @defer.inlineCallbacks
    def test_unknown_spider_lists_the_known_ones(self):
        message = yield self.refusal(self.check("poems"))
        self.assertIn("no spider 'poems'", message)
        self.assertIn("books, proxied", message)

    @defer.inlineCallbacks
    def test_good_spider_in_project_with_crashing_file_is_refused(self):
        with open(os.path.join(self.project.path, "crash.py"), "w") as out:
            out.write("raise RuntimeError('boom')\n")
        message = yield self.refusal(self.check("books"))
        self.assertIn("crash.py failed to import: RuntimeError: boom", message)

    @defer.inlineCallbacks
    def test_duplicate_name_is_refused_for_a_job_too(self):
        with open(os.path.join(self.project.path, "again.py"), "w") as out:
            out.write(spider("Again", name="books"))
        message = yield self.refusal(self.check("books"))
        self.assertIn("books.py", message)
        self.assertIn("again.py", message)

    @defer.inlineCallbacks
    def test_refused_settings_name_the_setting(self):
        cases = {
            # settings given -> what the message must say
            (("concurrency", "0"),): ["concurrency", "at least 1"],
            (("min_delay", "5"), ("max_delay", "1")): ["min_delay", "max_delay"],
            (("profile", "no-such-browser"),): ["profile", "no-such-browser"],
            (("proxy_rotation", "per_request"),): ["proxy_rotation", "proxies"],
            (("DOWNLOAD_DELAY", "2"),): ["unknown setting 'DOWNLOAD_DELAY'", "Scrapy"],
            (("no_such_setting", "1"),): ["unknown setting 'no_such_setting'", "concurrency"],
            (split_setting("concurrency"),): ["'concurrency' has no value"],
            (split_setting("=5"),): ["has no name"],
            (("concurrency", "many"),): ["concurrency", "whole number", "'many'"],
            (("max_delay", "soon"),): ["max_delay", "a number", "'soon'"],
            (("obey_robots", "maybe"),): ["obey_robots", "true or false", "'maybe'"],
            (("retry_http_codes", "500,oops"),): ["retry_http_codes", "'oops'"],
            (("http_auth", "just-a-user"),): ["http_auth takes user:password"],
        }
        messages = yield defer.gatherResults(
            [self.refusal(self.check(settings=given)) for given in cases]
        )
        for (given, expected), message in zip(cases.items(), messages):
            for words in expected:
                self.assertIn(words, message, f"for {given}")

    @defer.inlineCallbacks
    def test_accepted_settings(self):
        cases = [
            ("books", (("concurrency", "8"),)),
            ("books", (("max_delay", "2"),)),
            ("books", (("profile", "firefox"),)),
            ("books", (("max_items", "none"), ("obey_robots", "no"), ("verify", "false"))),
            ("books", (("retry_http_codes", "500, 503,"), ("throttle", "YES"))),
            ("books", (("verify", "ca.pem"), ("browser_block", "image,font"))),
            ("books", (("http_auth", "me:s3:cret"), ("http_auth_domain", "example.com"))),
            ("books", (("checkpoint", "none"), ("warc", "None"))),
            ("proxied", (("proxy_rotation", "per_request"),)),
        ]
        jobs = yield defer.gatherResults(
            [self.check(name, settings=given) for name, given in cases]
        )
        self.assertEqual([(job.spider, job.settings) for job in jobs], cases)

    @defer.inlineCallbacks
    def test_a_setting_in_capitals_is_netweirs_in_lower_case(self):
        # ScrapydWeb's run form passes only names of capitals and underscores.
        job = yield self.check(settings=["MAX_ITEMS=5", ("CONCURRENCY", "2"),
                                         ("CHECKPOINT", "cp")])
        self.assertEqual(job.settings,
                         (("max_items", "5"), ("concurrency", "2"), ("checkpoint", "cp")))
        message = yield self.refusal(self.check(settings=[("CONCURRENCY", "0")]))
        self.assertIn("concurrency", message)
        # Mixed case is not a capitalised name: refused as typed.
        message = yield self.refusal(self.check(settings=[("Max_Items", "5")]))
        self.assertIn("unknown setting 'Max_Items'", message)

    @defer.inlineCallbacks
    def test_a_capitalised_path_setting_is_checked_as_one(self):
        message = yield self.refusal(self.check(settings=[("CHECKPOINT", "/etc")]))
        self.assertIn("checkpoint", message)
        self.assertIn("relative path", message)

    @defer.inlineCallbacks
    def test_settings_may_be_given_as_text(self):
        job = yield self.check(settings=["max_items=5", "checkpoint=cp"])
        self.assertEqual(job.settings, (("max_items", "5"), ("checkpoint", "cp")))

    @defer.inlineCallbacks
    def test_refused_arguments_say_which_rule(self):
        cases = {
            "1st": "not a Python identifier",
            "a-b": "not a Python identifier",
            "": "not a Python identifier",
            "_private": "starts with _",
            "settings": "already an attribute of netweir.Spider",
            "parse": "already an attribute of netweir.Spider",
            "start_urls": "already an attribute of netweir.Spider",
        }
        messages = yield defer.gatherResults(
            [self.refusal(self.check(arguments=[(name, "x")])) for name in cases]
        )
        for (name, rule), message in zip(cases.items(), messages):
            self.assertIn(rule, message, f"for {name!r}")
            self.assertIn(repr(name), message)

    @defer.inlineCallbacks
    def test_argument_given_twice_is_refused(self):
        message = yield self.refusal(
            self.check(arguments=[("category", "a"), ("category", "b")])
        )
        self.assertIn("'category' is given twice", message)

    @defer.inlineCallbacks
    def test_path_settings_are_refused_before_any_file_is_read(self):
        # A crashing file would be reported if the files were read first.
        with open(os.path.join(self.project.path, "crash.py"), "w") as out:
            out.write("raise RuntimeError('boom')\n")
        message = yield self.refusal(self.check(settings=[("checkpoint", "/etc")]))
        self.assertIn("checkpoint", message)
        self.assertIn("absolute path", message)
        self.assertNotIn("crash.py", message)

    @defer.inlineCallbacks
    def test_path_settings_are_checked_as_absolute_paths_inside_the_data_dir(self):
        # warc's directory must exist: it is checked where it will really be.
        accepted = yield self.check(settings=[("warc", "run.warc.gz")])
        self.assertEqual(accepted.settings, (("warc", "run.warc.gz"),))
        message = yield self.refusal(self.check(settings=[("warc", "missing/run.warc")]))
        self.assertIn(os.path.join(self.data_dir, "missing", "run.warc"), message)
        self.assertIn("doesn't exist", message)

    @defer.inlineCallbacks
    def test_symlink_out_of_the_data_dir_is_refused(self):
        os.symlink(os.path.abspath(self.mktemp()), os.path.join(self.data_dir, "out"))
        message = yield self.refusal(self.check(settings=[("cache", "out/pages")]))
        self.assertIn("cache", message)
        self.assertIn("symlink", message)

    @defer.inlineCallbacks
    def test_ambiguous_class_and_spider_names_in_one_file_are_refused(self):
        with open(os.path.join(self.project.path, "mixed.py"), "w") as out:
            out.write(spider("Mixed", name="other") + spider("Second", name="Mixed"))
        message = yield self.refusal(self.check("Mixed"))
        self.assertIn("ambiguous", message)
        self.assertIn("mixed.py", message)


class SplitSettingTests(unittest.TestCase):
    def test_split_at_the_first_equals_sign(self):
        self.assertEqual(split_setting("a=b=c"), ("a", "b=c"))
        self.assertEqual(split_setting("a="), ("a", ""))
        self.assertEqual(split_setting("a"), ("a", None))


class ImportsTests(unittest.TestCase):
    @defer.inlineCallbacks
    def test_daemon_side_imports_neither_netweir_nor_the_global_reactor(self):
        source = (
            "import sys, netweir_serve.spiders.reader, netweir_serve.jobs.datapaths;"
            "print(sorted(m for m in ('netweir', 'twisted.internet.reactor') if m in sys.modules))"
        )
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        out, err, status = yield utils.getProcessOutputAndValue(
            sys.executable, ["-c", source], env=dict(os.environ, PYTHONPATH=path)
        )
        self.assertEqual((out.strip(), status), (b"[]", 0), err)
