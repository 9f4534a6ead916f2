import os

from twisted.trial import unittest

from netweir_serve.jobs.files import delete_files, job_files
from netweir_serve.jobs.store.sqlite import DuplicateJob, JobRecord, JobStore


def record(jobid, project="shop", priority=0.0, created=0.0):
    return JobRecord(id=jobid, project=project, spider="books", spider_file="/p/books.py",
                     settings=(("max_items", "5"),), arguments=(("category", "x"),),
                     priority=priority, created=created)


class JobStoreTests(unittest.TestCase):
    def setUp(self):
        self.path = self.mktemp()
        self.store = JobStore(self.path)

    def test_add_and_get_ignore_case(self):
        self.store.add(record("Job1"))
        found = self.store.get("JOB1")
        self.assertEqual(found.id, "Job1")
        self.assertEqual(found.state, "pending")
        self.assertEqual(found.settings, (("max_items", "5"),))
        self.assertEqual(found.arguments, (("category", "x"),))

    def test_duplicate_id_in_other_case_is_refused(self):
        self.store.add(record("job1"))
        with self.assertRaises(DuplicateJob):
            self.store.add(record("JOB1", project="other"))

    def test_next_pending_by_priority_then_age(self):
        self.store.add(record("a", priority=0))
        self.store.add(record("b", priority=5, project="news"))
        self.store.add(record("c", priority=5))
        self.store.add(record("d", priority=-1))
        order = []
        while (r := self.store.next_pending()) is not None:
            order.append(r.id)
            self.store.mark_running(r.id, 1, 1.0)
        self.assertEqual(order, ["b", "c", "a", "d"])

    def test_lifecycle_and_counts(self):
        self.store.add(record("a"))
        generation = self.store.generation
        self.store.mark_running("a", 42, 10.0)
        self.assertNotEqual(self.store.generation, generation)
        self.assertEqual(self.store.counts(), {"pending": 0, "running": 1, "finished": 0})
        done = self.store.mark_finished("a", "failed", 12.0, exit_status=1,
                                        stats={"items": 3})
        self.assertEqual((done.state, done.outcome, done.exit_status, done.stats),
                         ("finished", "failed", 1, {"items": 3}))
        self.assertEqual(self.store.counts(), {"pending": 0, "running": 0, "finished": 1})

    def test_unknown_outcome_refused(self):
        self.store.add(record("a"))
        self.assertRaises(ValueError, self.store.mark_finished, "a", "exploded", 1.0)

    def test_jobs_filtered_by_project_any_case(self):
        self.store.add(record("a", project="Shop"))
        self.store.add(record("b", project="news"))
        pending, running, finished = self.store.jobs("SHOP")
        self.assertEqual([r.id for r in pending], ["a"])
        self.assertEqual((running, finished), ([], []))

    def test_restart_forgets_nothing_and_marks_running_lost(self):
        self.store.add(record("run"))
        self.store.add(record("wait"))
        self.store.mark_running("run", 7, 1.0)
        self.store.close()
        again = JobStore(self.path)
        lost = again.mark_running_lost(5.0, lambda r: {"items": 2})
        self.assertEqual([r.id for r in lost], ["run"])
        self.assertEqual(again.get("run").outcome, "lost")
        self.assertEqual(again.get("run").stats, {"items": 2})
        self.assertEqual(again.get("wait").state, "pending")

    def test_prune_keeps_the_newest_finished(self):
        for i in range(5):
            self.store.add(record(f"j{i}"))
            self.store.mark_running(f"j{i}", i, float(i))
            self.store.mark_finished(f"j{i}", "finished", float(10 + i))
        self.store.add(record("waiting"))
        gone = self.store.prune(2)
        self.assertEqual(sorted(r.id for r in gone), ["j0", "j1", "j2"])
        self.assertEqual([r.id for r in self.store.jobs()[2]], ["j3", "j4"])
        self.assertEqual(self.store.get("waiting").state, "pending")
        self.assertEqual(self.store.prune(2), [])

    def test_keep_zero_forgets_every_finished_job(self):
        self.store.add(record("a"))
        self.store.mark_finished("a", "cancelled", 1.0)
        self.assertEqual([r.id for r in self.store.prune(0)], ["a"])
        self.assertIsNone(self.store.get("a"))


class DeletingFilesTests(unittest.TestCase):
    def test_forgotten_files_go_and_their_folders_stay(self):
        root = os.path.abspath(self.mktemp())
        files = job_files(root, "shop", "books", "old")
        for path in files.all():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
        self.assertEqual(delete_files(files), [])
        for path in files.all():
            self.assertFalse(os.path.exists(path))
            # A job of the same spider that just started writes here next.
            self.assertTrue(os.path.isdir(os.path.dirname(path)))
