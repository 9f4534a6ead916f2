"""reliability/policy.py and rules.py: the values a policy takes, how
they are refused, and how the places a policy is given combine."""

from twisted.trial import unittest

from netweir_serve.reliability.policy import (
    DEFAULT_BACKOFF, KEYS, MAX_RETRIES, JobPolicy, PolicyError)
from netweir_serve.reliability.rules import PolicyRules


class ParseTests(unittest.TestCase):
    def test_every_key_read_and_shown_back(self):
        texts = {"timeout": "6h", "stall": "15m", "expire": "1d", "retries": "2",
                 "retry_on": "failed,timeout", "backoff": "90s", "memory": "512M",
                 "cpu": "0.5", "min_items": "50", "min_pages": "10", "items_drop": "50",
                 "pages_drop": "12.5", "max_errors": "5", "slower": "1.5", "history": "7"}
        policy = JobPolicy.parse(texts)
        self.assertEqual(policy, JobPolicy(timeout=21600, stall=900, expire=86400, retries=2,
                                           retry_on=("failed", "timeout"), backoff=90,
                                           memory=512 << 20, cpu=0.5, min_items=50,
                                           min_pages=10, items_drop=50, pages_drop=12.5,
                                           max_errors=5, slower=1.5, history=7))
        self.assertEqual(policy.shown(), dict(texts, retries=2, min_items=50, min_pages=10,
                                              history=7))
        self.assertEqual(JobPolicy.from_json(policy.to_json()), policy)
        self.assertEqual(set(KEYS), set(texts))

    def test_a_prefix_for_one_jobs_parameters(self):
        self.assertEqual(JobPolicy.parse({"_timeout": "90", "_memory": "2G"}, prefix="_"),
                         JobPolicy(timeout=90, memory=2 << 30))
        with self.assertRaises(PolicyError) as raised:
            JobPolicy.parse({"timeout": "90"}, prefix="_")
        self.assertIn("'timeout' is not a policy key: give _timeout, _stall", raised.exception.message)

    def test_each_bad_value_is_named(self):
        bad = {
            "timout": "'timout' is not a policy key",
            "timeout": ("0", "'0' is too short"),
            "stall": ("-5m", "is not a duration"),
            "expire": ("400d", "too long: the most is 366d"),
            "retries": (str(MAX_RETRIES + 1), "too many: the most is 10"),
            "retry_on": ("failed,cancelled", "'cancelled' is not an outcome or reason"),
            "backoff": ("1.5s", "not a whole number of seconds"),
            "memory": ("63M", "too small: the least is 64M"),
            "cpu": ("0", "not a number of cores"),
            "min_items": ("-1", "not a whole number of 0 or more"),
            "min_pages": ("ten", "not a whole number of 0 or more"),
            "items_drop": ("101", "not a percentage: give a number from 0 to 100"),
            "pages_drop": ("-5", "not a percentage"),
            "max_errors": ("nan", "not a percentage"),
            "slower": ("1", "not a factor: give a number above 1"),
            "history": ("2", "not a number of runs from 3 to 100"),
        }
        for key, case in bad.items():
            value, words = case if isinstance(case, tuple) else ("1", case)
            with self.assertRaises(PolicyError, msg=key) as raised:
                JobPolicy.parse({key: value})
            self.assertIn(words, raised.exception.message)
            self.assertIn(key, raised.exception.message)
        for value in ("2X", "", "M", "nan"):
            self.assertRaises(PolicyError, JobPolicy.parse, {"memory": value})
        for value in ("inf", "nan", "-1", "zero"):
            self.assertRaises(PolicyError, JobPolicy.parse, {"cpu": value})
        for value in ("0.5", "-2", "inf", "x"):
            self.assertRaises(PolicyError, JobPolicy.parse, {"slower": value})
        for value in ("101", "-1", "1.5", ""):
            self.assertRaises(PolicyError, JobPolicy.parse, {"history": value})
        # Digits str.isdigit takes and int() refuses, or Unicode's other
        # digits: not a whole number any key takes.
        for key in ("retries", "min_items", "min_pages", "history"):
            for value in ("\u00b2", "\u0663", "5\u00b2", "+5", "1" * 17):
                with self.assertRaises(PolicyError, msg=(key, value)) as raised:
                    JobPolicy.parse({key: value})
                self.assertIn(f"{key} {value!r}", raised.exception.message)
        self.assertEqual(JobPolicy.parse({"min_items": " 7 ", "retries": "3"}),
                         JobPolicy(min_items=7, retries=3))

    def test_health_check_defaults(self):
        self.assertEqual(JobPolicy().history_size, 5)
        self.assertEqual(JobPolicy(history=9).history_size, 9)
        self.assertFalse(JobPolicy(min_items=1, max_errors=5).compares)
        for key in ("items_drop", "pages_drop", "slower"):
            self.assertTrue(JobPolicy(**{key: 2}).compares)

    def test_a_stall_under_two_rewrites_of_the_stats_is_refused(self):
        # Progress is seen when the crawl rewrites its stats, every 5 s: a
        # shorter stall would cancel a crawl that is progressing.
        for value in ("3s", "9", "0"):
            with self.assertRaises(PolicyError) as raised:
                JobPolicy.parse({"_stall": value}, prefix="_")
            self.assertEqual(raised.exception.message,
                             f"_stall '{value}' is too short: the least is 10s (progress is"
                             " seen every 5 s)")
        self.assertEqual(JobPolicy.parse({"stall": "10"}).stall, 10)
        # The other durations keep their least, a second.
        self.assertEqual(JobPolicy.parse({"timeout": "3s", "expire": "1"}),
                         JobPolicy(timeout=3, expire=1))

    def test_sizes_are_powers_of_1024(self):
        self.assertEqual(JobPolicy.parse({"memory": "1.5G"}).memory, 1536 << 20)
        self.assertEqual(JobPolicy.parse({"memory": "64MiB"}).memory, 64 << 20)
        self.assertEqual(JobPolicy(memory=1536 << 20).shown(), {"memory": "1536M"})


class CombineTests(unittest.TestCase):
    def test_the_more_particular_wins_key_by_key(self):
        rules = PolicyRules.parse(["shop:timeout=6h,retries=2", "shop/books:memory=1G",
                                   "shop/books:retries=0", "Other:stall=1h"])
        books = rules.for_spider("SHOP", "books")
        self.assertEqual(books, JobPolicy(timeout=21600, retries=0, memory=1 << 30))
        self.assertEqual(rules.for_spider("shop", "news"), JobPolicy(timeout=21600, retries=2))
        self.assertEqual(rules.for_spider("other", "x"), JobPolicy(stall=3600))
        self.assertEqual(rules.for_spider("none", "x"), JobPolicy())
        job = JobPolicy(timeout=60)
        self.assertEqual(job.over(books), JobPolicy(timeout=60, retries=0, memory=1 << 30))
        self.assertEqual(rules.projects_named(), {"shop", "other"})

    def test_retry_on_lists_inside_a_rule(self):
        rules = PolicyRules.parse(["shop:retry_on=failed,lost,retries=3"])
        self.assertEqual(rules.for_spider("shop", "x"),
                         JobPolicy(retry_on=("failed", "lost"), retries=3))

    def test_bad_rules_are_named(self):
        for text, words in (("shop", "is not a rule"), ("shop:", "is not a rule"),
                            (":timeout=1h", "is not a rule"),
                            ("shop/a/b:timeout=1h", "is not PROJECT or PROJECT/SPIDER"),
                            ("shop:timeout", "'timeout' is not KEY=VALUE"),
                            ("shop:memory=1M", "memory '1M' is too small")):
            with self.assertRaises(PolicyError, msg=text) as raised:
                PolicyRules.parse([text])
            self.assertIn(f"--policy {text!r}", raised.exception.message)
            self.assertIn(words, raised.exception.message)


class RetryTests(unittest.TestCase):
    def test_backoff_doubles_up_to_an_hour_with_at_most_ten_percent_jitter(self):
        policy = JobPolicy(retries=10)
        waits = [policy.backoff_wait(n, 0) for n in range(1, 9)]
        self.assertEqual(waits[:3], [DEFAULT_BACKOFF, 2 * DEFAULT_BACKOFF, 4 * DEFAULT_BACKOFF])
        self.assertEqual(max(waits), 3600)
        self.assertEqual(policy.backoff_wait(1, 1), DEFAULT_BACKOFF * 1.1)
        self.assertEqual(JobPolicy(backoff=7200).backoff_wait(3, 0), 7200)

    def test_what_retries(self):
        policy = JobPolicy(retries=2)
        self.assertTrue(policy.retries_after("failed", "exit 1"))
        self.assertTrue(policy.retries_after("cancelled", "timeout"))
        self.assertTrue(policy.retries_after("lost", "node lost"))
        self.assertFalse(policy.retries_after("cancelled", "cancel.json"))
        self.assertFalse(policy.retries_after("finished", "exit 0"))
        self.assertFalse(JobPolicy().retries_after("failed", "exit 1"))
        only = JobPolicy(retries=1, retry_on=("timeout",))
        self.assertFalse(only.retries_after("failed", "exit 1"))
        self.assertTrue(only.retries_after("cancelled", "timeout"))
