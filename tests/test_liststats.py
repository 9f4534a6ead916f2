"""/logs/stats.json in LogParser's shape, from the service's own stats: the
entries as ScrapydWeb reads them, on a Clock and a store that answers at once."""

import io
import json
import os
from datetime import datetime

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.test.requesthelper import DummyRequest

from netweir_serve.jobs.files import job_files
from netweir_serve.store.records import FINISHED, RUNNING, JobRecord
from netweir_serve.web.liststats import LOGPARSER_VERSION, LogParserStats, job_stats

START = datetime(2026, 1, 2, 3, 4, 0).timestamp()


def record(jobid, state, **fields):
    return JobRecord(id=jobid, project="shop", spider="books", spider_file="books.py",
                     state=state, start_time=START, **fields)


class Store:
    def __init__(self, running=(), finished=()):
        self.running, self.finished = list(running), list(finished)

    def jobs(self, project=None):
        return defer.succeed(([], self.running, self.finished))


class Launcher:
    def __init__(self, stats):
        self.stats = stats

    def running_stats(self, jobid):
        return self.stats.get(jobid)


class EntryTests(unittest.TestCase):
    def test_a_finished_job(self):
        entry = job_stats(record("j", FINISHED, outcome="finished", end_time=START + 68),
                          {"fetched": 30, "items": 29, "finish_reason": "max_items"},
                          START + 68, START + 100)
        self.assertEqual(entry, {
            "pages": 30, "items": 29,
            "first_log_time": "2026-01-02 03:04:00", "first_log_timestamp": int(START),
            "latest_log_time": "2026-01-02 03:05:08", "latest_log_timestamp": int(START) + 68,
            "runtime": "0:01:08", "shutdown_reason": "N/A", "finish_reason": "max_items",
            "last_update_time": "2026-01-02 03:05:40",
            "last_update_timestamp": int(START) + 100})

    def test_a_job_that_wrote_no_stats(self):
        entry = job_stats(record("j", FINISHED, outcome="lost", end_time=START + 5), None,
                          START + 5, START + 9)
        self.assertEqual((entry["pages"], entry["items"], entry["finish_reason"]),
                         (None, None, "lost"))

    def test_a_running_job_has_no_finish_reason_yet(self):
        entry = job_stats(record("j", RUNNING), {"fetched": 3, "items": True}, None, START + 1)
        self.assertEqual((entry["pages"], entry["items"], entry["finish_reason"]),
                         (3, None, "N/A"))
        self.assertEqual((entry["latest_log_time"], entry["runtime"]), ("N/A", "N/A"))


class EndpointTests(unittest.TestCase):
    def setUp(self):
        self.directory = os.path.abspath(self.mktemp())
        self.clock = Clock()
        self.clock.advance(START + 200)

    def write_stats(self, jobid, stats):
        path = job_files(self.directory, "shop", "books", jobid).stats
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(stats, f)

    def get(self, resource):
        request = DummyRequest([])
        request.uri = request.path = b"/logs/stats.json"
        request.content = io.BytesIO()
        body = resource.render(request)
        self.assertEqual(request.responseHeaders.getRawHeaders(b"content-type"),
                         [b"application/json"])
        return json.loads(body)

    def test_running_and_finished_jobs_by_project_spider_and_job(self):
        self.write_stats("done", {"fetched": 30, "items": 30, "finish_reason": "finished"})
        done = record("done", FINISHED, outcome="finished", end_time=START + 10)
        store = Store(running=[record("now", RUNNING)], finished=[done])
        resource = LogParserStats(store, Launcher({"now": {"fetched": 4, "items": 2}}),
                                  self.directory, self.clock)
        answer = self.get(resource)
        self.assertEqual((answer["status"], answer["logparser_version"]),
                         ("ok", LOGPARSER_VERSION))
        self.assertEqual(answer["last_update_timestamp"], int(START) + 200)
        jobs = answer["datas"]["shop"]["books"]
        self.assertEqual((jobs["done"]["pages"], jobs["done"]["items"],
                          jobs["done"]["finish_reason"]), (30, 30, "finished"))
        self.assertEqual((jobs["now"]["pages"], jobs["now"]["items"]), (4, 2))

    def test_finished_entries_are_made_once_and_forgotten_with_their_jobs(self):
        self.write_stats("done", {"fetched": 1, "items": 1})
        store = Store(finished=[record("done", FINISHED, outcome="finished",
                                       end_time=START + 1)])
        resource = LogParserStats(store, Launcher({}), self.directory, self.clock)
        self.assertEqual(self.get(resource)["datas"]["shop"]["books"]["done"]["items"], 1)
        self.write_stats("done", {"fetched": 1, "items": 99})
        self.assertEqual(self.get(resource)["datas"]["shop"]["books"]["done"]["items"], 1)
        store.finished = []
        self.assertEqual(self.get(resource)["datas"], {})
        self.assertEqual(resource._finished, {})
