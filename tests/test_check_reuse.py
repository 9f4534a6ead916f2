"""A job's check reused while the project's files stay as they were
(spiders/reuse.py), on a Clock: a burst asks the reader once, any change of
a file of the project asks again."""

import os
import time

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.jobs.checked import FoundSpider, InspectError
from netweir_serve.projects import Project
from netweir_serve.spiders import protocol, reuse
from netweir_serve.spiders.reader import SpiderReader

# Files of the project are dated this long before the clock's now: older
# than RACY_SECONDS, so their state may be relied on.
OLD = 60.0


class Reader:
    """The reader's own check: each call recorded, answered when told."""

    def __init__(self):
        self.asked = []
        self.cancelled = 0

    def ask(self, project, spider, settings, arguments, spelled):
        answer = defer.Deferred(lambda _: setattr(self, "cancelled", self.cancelled + 1))
        self.asked.append(((project.name, spider, settings, arguments), answer))
        return answer

    def answer_all(self, spider_file="books.py"):
        for (_, spider, _, _), answer in self.asked:
            if not answer.called:
                answer.callback(FoundSpider(spider, spider_file))


class ReuseCase(unittest.TestCase):
    def setUp(self):
        self.folder = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(self.folder, "helpers"))
        self.clock = Clock()
        self.clock.rightNow = time.time()
        self.write("books.py", "class Books: pass\n")
        self.write("helpers/shelf.py", "SHELF = 1\n")
        self.project = Project("shop", self.folder)
        self.reader = Reader()
        self.reuse = reuse.CheckReuse(self.clock, self.reader.ask, wall=self.clock)

    def write(self, name, text, age=OLD):
        path = os.path.join(self.folder, name)
        with open(path, "w") as f:
            f.write(text)
        stamp = self.clock.seconds() - age
        os.utime(path, (stamp, stamp))

    def check(self, spider="books", settings=(), arguments=()):
        return self.reuse.check(self.project, spider, settings, arguments, {})

    def next_turn(self):
        """The reactor's next turn: the files' state is taken again."""
        self.clock.advance(0)


class BurstTests(ReuseCase):
    def test_a_burst_of_checks_of_one_spider_asks_the_reader_once(self):
        burst = [self.check() for _ in range(500)]
        self.assertEqual(len(self.reader.asked), 1)
        self.assertFalse(any(d.called for d in burst))
        self.reader.answer_all()
        for d in burst:
            self.assertEqual(self.successResultOf(d), FoundSpider("books", "books.py"))
        self.assertEqual((self.reuse.asked, self.reuse.reused), (1, 499))

    def test_a_passed_check_is_reused_in_later_turns_while_nothing_changed(self):
        self.check()
        self.reader.answer_all()
        self.clock.advance(3600)
        self.assertEqual(self.successResultOf(self.check()), FoundSpider("books", "books.py"))
        self.assertEqual(len(self.reader.asked), 1)

    def test_another_spider_settings_or_arguments_are_another_check(self):
        self.check()
        self.check(spider="shelf")
        self.check(settings=(("max_items", "5"),))
        self.check(arguments=(("category", "poetry"),))
        self.check(arguments=(("category", "poetry"),))
        self.assertEqual([asked[1:] for asked, _ in self.reader.asked], [
            ("books", (), ()), ("shelf", (), ()), ("books", (("max_items", "5"),), ()),
            ("books", (), (("category", "poetry"),))])


class ChangeTests(ReuseCase):
    def checked_once(self):
        self.check()
        self.reader.answer_all()
        self.next_turn()
        self.check()
        self.assertEqual(len(self.reader.asked), 1)

    def assert_asked_again(self):
        self.next_turn()
        again = self.check()
        self.assertEqual(len(self.reader.asked), 2)
        self.assertNoResult(again)
        self.reader.answer_all()
        self.successResultOf(again)

    def test_a_spider_file_edited_is_read_again(self):
        self.checked_once()
        self.write("books.py", "class Books: name = 'x'\n", age=OLD - 1)
        self.assert_asked_again()

    def test_a_file_of_the_same_size_with_a_new_mtime_is_read_again(self):
        self.checked_once()
        self.write("books.py", "class Boots: pass\n", age=OLD - 1)
        self.assert_asked_again()

    def test_a_file_of_a_new_size_with_the_same_mtime_is_read_again(self):
        self.checked_once()
        self.write("books.py", "class Books: pass  # longer\n", age=OLD)
        self.assert_asked_again()

    def test_a_helper_in_a_subfolder_edited_is_read_again(self):
        self.checked_once()
        self.write("helpers/shelf.py", "SHELF = 2\n", age=OLD - 1)
        self.assert_asked_again()

    def test_a_file_added_is_read_again(self):
        self.checked_once()
        self.write("music.py", "class Music: pass\n")
        self.assert_asked_again()

    def test_a_file_removed_is_read_again(self):
        self.checked_once()
        os.remove(os.path.join(self.folder, "helpers", "shelf.py"))
        self.assert_asked_again()

    def test_bytecode_and_hidden_folders_change_nothing(self):
        self.checked_once()
        os.makedirs(os.path.join(self.folder, "__pycache__"))
        self.write("__pycache__/books.cpython-311.pyc", "x")
        os.makedirs(os.path.join(self.folder, ".git"))
        self.write(".git/index", "x")
        self.next_turn()
        self.successResultOf(self.check())
        self.assertEqual(len(self.reader.asked), 1)

    def test_within_one_turn_the_state_is_taken_once(self):
        # A burst's firings in one turn share one walk of the folder.
        walks = []
        self.reuse = reuse.CheckReuse(
            self.clock, self.reader.ask, wall=self.clock,
            state=lambda folder: walks.append(folder) or reuse.files_state(folder))
        for _ in range(10):
            self.check()
        self.next_turn()
        self.check()
        self.assertEqual(walks, [self.folder, self.folder])


class GuardTests(ReuseCase):
    def test_a_file_changed_just_now_is_never_relied_on(self):
        self.write("books.py", "class Books: pass\n", age=0.5)
        self.check()
        self.check()
        self.assertEqual(len(self.reader.asked), 2)
        self.reader.answer_all()
        # Once it has settled, the next check is kept and reused.
        self.clock.advance(reuse.RACY_SECONDS)
        self.check()
        self.reader.answer_all()
        self.next_turn()
        self.successResultOf(self.check())
        self.assertEqual(len(self.reader.asked), 3)

    def test_file_times_are_judged_by_the_wall_clock_not_the_reactors(self):
        # The service's reactor counts monotonic seconds (clocks.py): since
        # boot, far below any file's mtime, which would look forever new.
        monotonic = Clock()
        monotonic.rightNow = 2000.0
        self.reuse = reuse.CheckReuse(monotonic, self.reader.ask, wall=self.clock)
        self.check()
        self.reader.answer_all()
        monotonic.advance(0)
        self.successResultOf(self.check())
        self.assertEqual(len(self.reader.asked), 1)

    def test_a_folder_of_too_many_files_is_read_every_time(self):
        self.patch(reuse, "MAX_FILES", 3)
        self.write("a.py", "")
        self.write("b.py", "")
        self.assertIsNone(reuse.files_state(self.folder, limit=3))
        self.reuse = reuse.CheckReuse(self.clock, self.reader.ask, wall=self.clock,
                                      state=lambda f: reuse.files_state(f, limit=3))
        self.check()
        self.check()
        self.assertEqual(len(self.reader.asked), 2)

    def test_a_refusal_is_shared_by_its_burst_but_not_kept(self):
        first, second = self.check(), self.check()
        self.reader.asked[0][1].errback(InspectError("no spider 'books'"))
        for d in (first, second):
            self.assertEqual(self.failureResultOf(d, InspectError).value.message,
                             "no spider 'books'")
        self.next_turn()
        self.check()
        self.assertEqual(len(self.reader.asked), 2)

    def test_one_waiter_cancelled_leaves_the_check_to_the_others(self):
        first, second = self.check(), self.check()
        first.cancel()
        self.failureResultOf(first, defer.CancelledError)
        self.assertEqual(self.reader.cancelled, 0)
        self.reader.answer_all()
        self.successResultOf(second)

    def test_every_waiter_cancelled_stops_the_reader(self):
        first, second = self.check(), self.check()
        first.cancel()
        second.cancel()
        self.assertEqual(self.reader.cancelled, 1)
        for d in (first, second):
            self.failureResultOf(d, defer.CancelledError)
        # Asked afresh next time.
        self.check()
        self.assertEqual(len(self.reader.asked), 2)

    def test_checks_kept_are_bounded(self):
        self.patch(reuse, "MAX_KEPT", 3)
        for n in range(5):
            self.check(arguments=(("n", str(n)),))
        self.reader.answer_all()
        self.check(arguments=(("n", "0"),))
        self.check(arguments=(("n", "4"),))
        self.assertEqual(len(self.reader.asked), 6)


class ReaderTests(ReuseCase):
    """Through SpiderReader.checkJob, the reader processes stood in for."""

    def test_the_reader_forks_one_process_for_a_burst(self):
        requests = []

        class Runner:
            def ask(self, request):
                requests.append(request)
                return defer.succeed(protocol.ok({"spider": "books", "file": "books.py"}))

        reader = SpiderReader(self.clock, timeout=5.0, wall=self.clock)
        reader._runner = Runner()
        found = [reader.checkJob(self.project, "books", [], (), {}) for _ in range(100)]
        self.assertEqual(len(requests), 1)
        self.assertEqual({self.successResultOf(d) for d in found},
                         {FoundSpider("books", "books.py")})
        self.assertEqual((reader.checks.asked, reader.checks.reused), (1, 99))
