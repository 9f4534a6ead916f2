"""The stats series of a job (jobs/history.py), on a Clock and a temp dir."""

import json
import os

from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.jobs.events import CHANGED, ENDED, JobEvents
from netweir_serve.jobs.files import delete_files, files_of
from netweir_serve.jobs.history import StatsHistory, read_history
from netweir_serve.store.records import FINISHED, RUNNING, JobRecord


def job(**changes):
    fields = dict(id="j1", project="shop", spider="books", spider_file="/x.py", state=RUNNING)
    fields.update(changes)
    return JobRecord(**fields)


class HistoryTests(unittest.TestCase):
    def setUp(self):
        self.directory = os.path.abspath(self.mktemp())
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.stats = {}
        self.events = JobEvents()
        self.history = StatsHistory(self.directory, self.stats.get, self.clock, max_points=8)
        self.history.subscribe(self.events)
        self.path = files_of(self.directory, job()).history

    def snapshot(self, n, record=None):
        self.stats["j1"] = {"items": n, "fetched": 2 * n}
        self.clock.advance(5)
        self.events.publish(CHANGED, record or job())

    def points(self):
        return read_history(self.path)

    def test_each_new_snapshot_is_a_line_oldest_first(self):
        for n in range(3):
            self.snapshot(n)
        # A cancel request: "changed" with the same stats, no new point.
        self.events.publish(CHANGED, job(cancel_requested=True))
        points = self.points()
        self.assertEqual([p["stats"]["items"] for p in points], [0, 1, 2])
        self.assertEqual([p["time"] for p in points],
                         [1_000_005.0, 1_000_010.0, 1_000_015.0])
        self.assertEqual(self.path, os.path.join(self.directory, "history", "shop", "books",
                                                 "j1.jsonl"))

    def test_the_final_stats_end_the_series(self):
        self.snapshot(1)
        final = {"items": 9, "fetched": 18, "finish_reason": "finished"}
        self.events.publish(ENDED, job(state=FINISHED, stats=final))
        self.assertEqual([p["stats"] for p in self.points()], [{"items": 1, "fetched": 2},
                                                               final])

    def test_a_job_without_stats_has_no_series(self):
        self.events.publish(CHANGED, job())
        self.events.publish(ENDED, job(state=FINISHED, outcome="cancelled"))
        self.assertFalse(os.path.exists(self.path))
        self.assertEqual(self.points(), [])

    def test_bounded_evenly_thinned_and_the_last_point_kept(self):
        for n in range(100):
            self.snapshot(n)
        points = self.points()
        self.assertLessEqual(len(points), 8)
        items = [p["stats"]["items"] for p in points]
        self.assertEqual(items[0], 0)
        steps = {b - a for a, b in zip(items, items[1:])}
        self.assertEqual(len(steps), 1, items)
        self.events.publish(ENDED, job(state=FINISHED, stats={"items": 100, "fetched": 200}))
        points = self.points()
        self.assertLessEqual(len(points), 8)
        self.assertEqual(points[-1]["stats"]["items"], 100)

    def test_deleted_with_the_jobs_other_files(self):
        self.snapshot(1)
        files = files_of(self.directory, job())
        self.assertIn(self.path, files.all())
        self.assertEqual(delete_files(files), [])
        self.assertFalse(os.path.exists(self.path))

    def test_a_torn_line_is_skipped_and_an_existing_series_goes_on(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            f.write(json.dumps({"time": 1, "stats": {"items": 0}}) + "\n{\"time\": 2, \"st")
        self.assertEqual(len(self.points()), 1)
        self.snapshot(5)
        self.assertEqual([p["stats"]["items"] for p in self.points()], [0, 5])

    def test_an_unwritable_series_is_given_up_once(self):
        os.makedirs(os.path.join(self.directory, "history", "shop"))
        with open(os.path.join(self.directory, "history", "shop", "books"), "w"):
            pass  # a file where the folder should be
        self.snapshot(1)
        self.snapshot(2)
        self.assertEqual(len(self.flushLoggedErrors()), 0)
        self.assertEqual(self.points(), [])
