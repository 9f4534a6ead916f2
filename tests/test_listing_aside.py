"""listjobs.json's answer is built where ``Api.build_aside`` says: on a
thread of the reactor's pool in the service (20,000 jobs are 4 MB of JSON,
hundreds of milliseconds the reactor would otherwise stall for), at once
without one."""

import json
import threading
from types import SimpleNamespace

from twisted.internet import reactor, threads
from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.web.api import Api, ListJobs


def record(jobid):
    return JobRecord(id=jobid, project="shop", spider="books", spider_file="/p/books.py")


class ListingAsideTests(unittest.TestCase):
    def setUp(self):
        self.store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(self.store.close)
        for jobid in ("a", "b"):
            self.successResultOf(self.store.add(record(jobid)))

    def api(self, build_aside=None):
        projects = SimpleNamespace(names=lambda: ["shop"])
        return Api(projects, self.store, None, None, None, None, None,
                   build_aside=build_aside)

    def test_without_a_place_aside_the_answer_is_built_at_once(self):
        body = self.successResultOf(ListJobs(self.api())._build(None))
        self.assertEqual([job["id"] for job in json.loads(body)["pending"]], ["a", "b"])

    def test_the_answer_is_built_on_the_thread_build_aside_gives(self):
        ran_on = []

        def in_a_thread(function, *args):
            def build():
                ran_on.append(threading.current_thread())
                return function(*args)
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(), build)

        def built(body):
            self.assertEqual([job["id"] for job in json.loads(body)["pending"]], ["a", "b"])
            self.assertEqual(len(ran_on), 1)
            self.assertIsNot(ran_on[0], threading.current_thread())

        return ListJobs(self.api(in_a_thread))._build(None).addCallback(built)
