"""The audit's parts on their own: what a row keeps of a write's
parameters (never a secret), a row that cannot be written, and the
pruning of rows past --keep-audit."""

import os

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase
from twisted.web.test.requesthelper import DummyRequest

from netweir_serve.jobs.pruning import AUDIT_PRUNED_EVERY, Pruner
from netweir_serve.store.audit_records import AuditEntry
from netweir_serve.store.records import StoreError
from netweir_serve.store.sqlite import SQLiteJobStore
from netweir_serve.web import audit
from netweir_serve.web.audit import MAX_VALUE, AuditLog, change_of
from netweir_serve.web.params import Params

DAY = 86400.0


class ChangeTests(TestCase):
    def test_settings_and_arguments_are_masked_as_listings_mask_them(self):
        change = change_of(Params([
            ("project", "shop"), ("spider", "books"),
            ("setting", "http_auth=me:hunter2"), ("setting", "proxy=me:hunter2@proxy:8080"),
            ("setting", "max_items=5"), ("start", "http://KEY:@api.example/"),
            ("_timeout", "1h")]))
        self.assertEqual(change, {
            "spider": "books", "start": "http://***@api.example/", "_timeout": "1h",
            "settings": {"http_auth": "me:***", "proxy": "***@proxy:8080", "max_items": "5"}})
        self.assertNotIn("hunter2", repr(change))
        self.assertNotIn("KEY", repr(change))

    def test_a_long_value_is_cut(self):
        change = change_of(Params([("category", "x" * 5000)]))
        self.assertEqual(len(change["category"]), MAX_VALUE + 1)


class Failing:
    def add_audit(self, entry):
        return defer.fail(StoreError("the job table could not be written"))


class AuditLogTests(TestCase):
    def test_a_row_that_cannot_be_written_is_logged_and_the_answer_goes_on(self):
        logged = []
        self.patch(audit.log, "failure", lambda *a, **kw: logged.append(kw["entry"]))
        d = AuditLog(Failing(), Clock()).record(DummyRequest([b""]), "cancel.json", 200,
                                                 "shop", "j1", {"prevstate": "pending"})
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual([(e.endpoint, e.target, e.status) for e in logged],
                         [("cancel.json", "j1", 200)])

    def test_the_request_going_away_does_not_cancel_the_write(self):
        written = defer.Deferred()

        class Slow:
            def add_audit(self, entry):
                return written

        d = AuditLog(Slow(), Clock()).record(DummyRequest([b""]), "cancel.json", 200)
        d.addErrback(lambda f: f.trap(defer.CancelledError))
        d.cancel()
        self.assertFalse(written.called)


class PruneTests(TestCase):
    def setUp(self):
        self.clock = Clock()
        self.clock.advance(100 * DAY)
        self.store = SQLiteJobStore(os.path.abspath(self.mktemp()), self.clock)
        self.addCleanup(self.store.close)

    def add(self, age_days, target):
        self.successResultOf(self.store.add_audit(AuditEntry(
            time=self.clock.seconds() - age_days * DAY, endpoint="schedule.json",
            project="shop", target=target)))

    def kept(self):
        return [e.target for e in self.successResultOf(self.store.audit())]

    def test_rows_past_keep_audit_are_pruned_at_once_and_every_hour(self):
        self.add(91, "old")
        self.add(89.99, "young")
        pruner = Pruner(self.store, self.mktemp(), 100, self.clock, keep_audit=90 * DAY)
        self.successResultOf(pruner.prune_now())
        self.assertEqual(self.kept(), ["young"])
        # A service no job ends on forgets too: an hour later, on its own.
        self.clock.advance(AUDIT_PRUNED_EVERY)
        self.assertEqual(self.kept(), [])
        pruner.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
