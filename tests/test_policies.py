"""Run policies: jobs sharing a data directory never run at once, and
--max-jobs-per-spider, as listjobs says them. (How every backend's claim
applies them is in the store contract, tests/test_store_contract.py.)"""

import os

from twisted.trial import unittest

from netweir_serve.jobs import policies
from netweir_serve.store import runpolicy
from netweir_serve.store.records import JobRecord


def job(jobid, spider="books", locks=(), priority=0.0, project="shop"):
    return JobRecord(id=jobid, project=project, spider=spider, spider_file="/p.py",
                     priority=priority, locks=tuple(locks))


class LockTests(unittest.TestCase):
    def test_exclusive_path_settings_lock_their_resolved_directory(self):
        data = os.path.abspath(self.mktemp())
        a = policies.path_locks("Shop", data, [("checkpoint", "books"), ("max_items", "5")])
        b = policies.path_locks("shop", data, [("checkpoint", "./books/")])
        self.assertEqual(a, b)
        self.assertEqual(len(a), 1)
        self.assertEqual(policies.path_locks("shop", data, [("checkpoint", "None"),
                                                            ("warc", "a.warc")]), ())
        self.assertNotEqual(policies.path_locks("other", data, [("checkpoint", "books")]), a)
        # One directory, whichever setting names it.
        self.assertEqual(policies.path_locks("shop", data, [("cache", "books")]), a)

    def test_two_names_of_one_directory_through_a_symlink_are_one_lock(self):
        data = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(data, "books"))
        os.symlink("books", os.path.join(data, "alias"))
        self.assertEqual(policies.path_locks("shop", data, [("checkpoint", "alias")]),
                         policies.path_locks("shop", data, [("checkpoint", "books")]))
        self.assertNotEqual(policies.path_locks("shop", data, [("checkpoint", "other")]),
                            policies.path_locks("shop", data, [("checkpoint", "books")]))

    def test_why_a_job_waits(self):
        data = os.path.abspath(self.mktemp())
        lock = policies.path_locks("shop", data, [("cache", "c")])
        held = runpolicy.RunningSet([job("first", locks=lock)])
        self.assertIn("cache", held.waits_for(job("second", locks=lock)))
        self.assertIn("job first", held.waits_for(job("second", locks=lock)))
        self.assertIsNone(held.waits_for(job("free")))
        self.assertIn("--max-jobs-per-spider", held.waits_for(job("third"), max_per_spider=1))
        self.assertIsNone(held.waits_for(job("other", spider="news"), max_per_spider=1))
        queued = runpolicy.RunningSet([job("s-1", locks=(policies.schedule_lock("Nightly"),))])
        self.assertIn("schedule nightly",
                      queued.waits_for(job("s-2", locks=(policies.schedule_lock("nightly"),))))

    def test_a_data_directory_is_shown_relative_to_the_projects(self):
        # The server's absolute paths are its own business: a client sees
        # the directory as its setting names it, inside the project's.
        root = os.path.abspath(self.mktemp())
        data = os.path.join(root, "data", "shop")
        os.makedirs(os.path.join(data, "books"))
        os.symlink("books", os.path.join(data, "alias"))
        lock = policies.path_locks("shop", data, [("checkpoint", "./alias/")])
        held = runpolicy.RunningSet([job("first", locks=lock)],
                                   data_dir_of=lambda project: os.path.join(root, "data", project))
        why = held.waits_for(job("second", locks=lock))
        self.assertEqual(why, "the data directory books (of a checkpoint, deltafetch or cache"
                              " setting) is in use by job first")
        self.assertNotIn(root, why)
        nested = policies.path_locks("shop", data, [("cache", "a/b")])
        self.assertIn("the data directory a/b (",
                      runpolicy.RunningSet([job("first", locks=nested)], data_dir_of=lambda p: data)
                      .waits_for(job("second", locks=nested)))


class ServedTests(unittest.TestCase):
    def test_a_job_of_a_project_no_live_node_serves_says_it_waits_for_one(self):
        nodes = [{"name": "a", "dead": False, "projects": ["shop"]},
                 {"name": "b", "dead": True, "projects": ["news"]}]
        served = runpolicy.ServedProjects.of_nodes(nodes)
        self.assertIsNone(served.waits_for(job("1", project="Shop")))
        self.assertEqual(served.waits_for(job("2", project="news")),
                         "a node that serves project news: no live node has --project news")
        alone = runpolicy.ServedProjects(["Shop"], shared=False)
        self.assertIsNone(alone.waits_for(job("3", project="shop")))
        self.assertEqual(alone.waits_for(job("4", project="news")),
                         "a service that serves project news: this one was started without"
                         " --project news")


class EnforceableLimitsTests(unittest.TestCase):
    def test_a_job_asking_for_a_limit_this_node_cannot_enforce_says_it_waits(self):
        limited = JobRecord(id="m", project="shop", spider="s", spider_file="/f",
                            policy={"memory": 200 << 20, "timeout": 60})
        plain = JobRecord(id="p", project="shop", spider="s", spider_file="/f",
                          policy={"timeout": 60})
        cannot = runpolicy.EnforceableLimits({"memory": False, "cpu": True}, shared=True)
        self.assertEqual(cannot.waits_for(limited),
                         "a node that can limit memory: this one cannot, and only a node"
                         " that can will take it")
        self.assertIsNone(cannot.waits_for(plain))
        alone = runpolicy.EnforceableLimits({"memory": False, "cpu": False}, shared=False)
        self.assertEqual(alone.waits_for(limited),
                         "a node that can limit memory: this service cannot")
        can = runpolicy.EnforceableLimits({"memory": True, "cpu": True}, shared=False)
        self.assertIsNone(can.waits_for(limited))

    def test_the_claim_skips_what_the_node_cannot_run(self):
        jobs = [JobRecord(id=i, project="shop", spider="s" + i, spider_file="/f")
                for i in ("a", "b")]
        self.assertEqual(runpolicy.first_that_may_run([], jobs, can_run=lambda r: r.id != "a"),
                         jobs[1])
        self.assertIsNone(runpolicy.first_that_may_run([], jobs, can_run=lambda r: False))
