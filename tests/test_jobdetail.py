"""job.json (web/jobdetail.py): one job with what its console page needs
that the listings leave out: settings and arguments in every state
(masked, and which are), the upstream job, and its retry chain."""

from types import SimpleNamespace

from twisted.internet.task import Clock
from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.web.api import Api
from netweir_serve.web.jobdetail import JobDetail
from netweir_serve.web.params import ApiError, Params


class JobDetailTests(unittest.TestCase):
    def setUp(self):
        self.store = SQLiteJobStore(":memory:", Clock())
        self.addCleanup(self.store.close)
        self.now = 1_700_000_000.0
        self.endpoint = JobDetail(Api(SimpleNamespace(names=lambda: ["shop"]), self.store,
                                      None, None, None, None, None))

    def add(self, jobid, **fields):
        fields.setdefault("spider", "books")
        self.successResultOf(self.store.add(JobRecord(
            id=jobid, project="shop", spider_file="/p/books.py", created=self.now, **fields)))

    def run_to_end(self, jobid, outcome="finished", exit_status=0, reason="exit 0"):
        claimed = self.successResultOf(self.store.claim_next("n1", ["shop"], self.now))
        self.assertEqual(claimed.id, jobid)
        self.now += 10
        self.successResultOf(self.store.mark_finished(jobid, outcome, self.now,
                                                      exit_status=exit_status,
                                                      reason=reason))

    def ask(self, **params):
        answer = self.endpoint.answer(Params(sorted(params.items())), None)
        return self.successResultOf(answer)["job"]

    def refused(self, **params):
        answer = self.endpoint.answer(Params(sorted(params.items())), None)
        return self.failureResultOf(answer, ApiError).value

    def test_a_finished_job_keeps_its_settings_and_arguments_masked_and_says_which(self):
        self.add("j1", settings=(("http_auth", "me:secret"), ("max_items", "5"),
                                 ("proxy", "http://key:pw@proxy.example:8080")),
                 arguments=(("category", "poetry"), ("start", "https://u:p@shop.example/")))
        self.run_to_end("j1")
        job = self.ask(job="J1")
        self.assertEqual(job["id"], "j1")
        self.assertEqual(job["outcome"], "finished")
        self.assertEqual(job["settings"], {"http_auth": "me:***", "max_items": "5",
                                           "proxy": "http://***@proxy.example:8080"})
        self.assertEqual(job["arguments"], {"category": "poetry",
                                            "start": "https://***@shop.example/"})
        self.assertEqual(job["masked"], ["argument start", "setting http_auth",
                                         "setting proxy"])
        self.assertEqual(job["priority"], 0.0)
        self.assertEqual((job["cancel_requested"], job["kill_requested"]), (False, False))
        self.assertEqual(job["at"], {"queued": 1_700_000_000.0, "started": 1_700_000_000.0,
                                     "ended": 1_700_000_010.0})
        self.assertEqual(job["attempts"], [{"id": "j1", "attempt": 1, "state": "finished",
                                            "outcome": "finished", "reason": "exit 0",
                                            "at": job["at"]}])

    def test_nothing_masked_is_an_empty_list(self):
        self.add("plain", settings=(("max_items", "5"),), arguments=(("a", "b"),))
        job = self.ask(job="plain")
        self.assertEqual((job["state"], job["masked"]), ("pending", []))

    def test_every_attempt_of_a_retry_chain_from_any_of_them(self):
        self.add("night")
        self.run_to_end("night", "failed", 1, "exit 1")
        self.add("night.r1", attempt=2, retry_of="night")
        self.run_to_end("night.r1", "failed", 1, "exit 1")
        self.add("night.r2", attempt=3, retry_of="night")
        self.add("night-other")  # shares the prefix: not an attempt
        for asked in ("night", "night.r1", "NIGHT.R2"):
            job = self.ask(job=asked)
            self.assertEqual([(a["id"], a["attempt"], a["state"]) for a in job["attempts"]],
                             [("night", 1, "finished"), ("night.r1", 2, "finished"),
                              ("night.r2", 3, "pending")], asked)
        self.assertEqual(self.ask(job="night.r2")["retry_of"], "night")

    def test_a_chain_job_names_its_upstream(self):
        self.add("after-x", upstream="x-1", schedule="after", queued_by="schedule:after")
        job = self.ask(job="after-x")
        self.assertEqual((job["upstream"], job["schedule"], job["by"]),
                         ("x-1", "after", "schedule:after"))
        self.add("plain")
        self.assertNotIn("upstream", self.ask(job="plain"))

    def test_unknown_jobs_and_other_projects_jobs_are_404_and_bad_ids_400(self):
        self.add("j1")
        error = self.refused(job="nosuch")
        self.assertEqual((error.code, error.message), (404, "no job 'nosuch'"))
        self.assertEqual(self.refused(job="j1", project="news").code, 404)
        self.assertEqual(self.ask(job="j1", project="SHOP")["id"], "j1")
        with self.assertRaises(ApiError) as raised:
            self.endpoint.answer(Params([("job", "a/b")]), None)
        self.assertEqual(raised.exception.code, 400)
        self.assertIn("'job'", raised.exception.message)
        with self.assertRaises(ApiError) as raised:
            self.endpoint.answer(Params([]), None)
        self.assertEqual(raised.exception.message, "missing parameter 'job'")
