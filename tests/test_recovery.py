"""What a start settles of the jobs the last run left running."""

from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore


class UnsharedTableTests(unittest.TestCase):
    def test_a_table_of_one_service_settles_jobs_of_any_host_name(self):
        # The machine was renamed between a kill -9 and the next start.
        store = SQLiteJobStore(":memory:", Clock())
        self.assertFalse(store.shared)
        for jobid in ("a", "b"):
            self.successResultOf(store.add(JobRecord(id=jobid, project="p", spider="s",
                                                     spider_file="/p.py")))
        self.successResultOf(store.claim_next("old-name", ["p"], 1.0))
        self.successResultOf(store.claim_next("older-name", ["p"], 2.0))
        lost = self.successResultOf(store.recover(None, 3.0, lambda record: {"items": 1}))
        self.assertEqual(sorted((r.id, r.outcome, r.stats["items"]) for r in lost),
                         [("a", "lost", 1), ("b", "lost", 1)])
        self.assertEqual(self.successResultOf(store.counts())["running"], 0)
