"""The audit's parts on their own: what a row keeps of a write's
parameters (never a secret), a row that cannot be written, and the
pruning of rows past --keep-audit."""

import io
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

    def test_http_auth_is_masked_however_its_key_is_spelled(self):
        # HTTP_AUTH is http_auth (names.setting_name); http_Auth is refused
        # by the checks, but its refusal is recorded too.
        change = change_of(Params([
            ("setting", "HTTP_AUTH=alice:s3cret"), ("setting", "http_Auth=bob:s3cret"),
            ("setting", " http_auth =carol:s3cret")]))
        self.assertEqual(change["settings"], {
            "HTTP_AUTH": "alice:***", "http_Auth": "bob:***", " http_auth ": "carol:***"})
        self.assertNotIn("s3cret", repr(change))

    def test_a_listing_masks_http_auth_however_its_key_is_spelled(self):
        from netweir_serve.web.views import shown_settings
        self.assertEqual(shown_settings([("HTTP_AUTH", "alice:s3cret")]),
                         {"HTTP_AUTH": "alice:***"})

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


    def test_cancel_json_waits_for_its_row_a_fifth_of_a_second_at_most(self):
        # A table locked by another program held cancel.json's answer back
        # for as long as the lock (tests.test_faults.LockedTableTests): the
        # row, like the cancel's own record, is written when it can be.
        from netweir_serve.jobs.launcher import CANCEL_ANSWER_WAIT
        from netweir_serve.web.api import Cancel
        written, rows = defer.Deferred(), []

        class Locked:
            def add_audit(self, entry):
                rows.append(entry)
                return written

        clock = Clock()
        d = AuditLog(Locked(), clock, clock).record(DummyRequest([b""]), "cancel.json", 200,
                                                    wait_at_most=Cancel.audit_wait)
        self.assertNoResult(d)
        clock.advance(CANCEL_ANSWER_WAIT)
        self.assertIsNone(self.successResultOf(d))
        written.callback(None)  # the row, once the lock is gone
        self.assertEqual([e.endpoint for e in rows], ["cancel.json"])
        self.assertEqual(clock.getDelayedCalls(), [])


class TokenCommandTests(TestCase):
    """``netweir-serve token``'s changes and their audit rows: one
    transaction, so neither is ever kept without the other."""

    def setUp(self):
        self.path = os.path.abspath(self.mktemp())
        self.clock = Clock()
        self.store = SQLiteJobStore(self.path, self.clock)
        self.addCleanup(self.store.close)

    def token(self, *argv):
        from netweir_serve.access import commands
        out, err = io.StringIO(), io.StringIO()
        code = self.successResultOf(commands.run(commands.parse(list(argv)), self.store,
                                                 self.clock, out, err))
        return code, out.getvalue(), err.getvalue()

    def break_the_audit(self):
        import sqlite3
        connection = sqlite3.connect(self.path)
        connection.execute("ALTER TABLE audit RENAME TO audit_gone")
        connection.commit()
        connection.close()

    def names(self):
        return [t.name for t in self.successResultOf(self.store.tokens())]

    def test_each_change_has_its_row_by_the_user_the_command_runs_as(self):
        import pwd
        self.assertEqual(self.token("add", "ci", "--role", "admin")[0], 0)
        self.assertEqual(self.token("rotate", "ci")[0], 0)
        self.assertEqual(self.token("revoke", "ci")[0], 0)
        self.assertEqual(self.token("revoke", "ci")[0], 2)
        rows = self.successResultOf(self.store.audit(every=True))
        self.assertEqual([(r.endpoint, r.target, r.status) for r in rows], [
            ("token revoke", "ci", 404), ("token revoke", "ci", 200),
            ("token rotate", "ci", 200), ("token add", "ci", 200)])
        self.assertEqual({r.who for r in rows}, {pwd.getpwuid(os.geteuid()).pw_name})

    def test_a_row_that_cannot_be_written_keeps_the_change_from_being_made(self):
        self.assertEqual(self.token("add", "kept", "--role", "admin")[0], 0)
        self.break_the_audit()
        code, out, _ = self.token("add", "ci", "--role", "admin")
        self.assertEqual((code, out), (1, ""))
        self.assertEqual(self.token("rotate", "kept")[:2], (1, ""))
        self.assertEqual(self.token("revoke", "kept")[0], 1)
        self.assertEqual(self.names(), ["kept"])
        [token] = self.successResultOf(self.store.tokens())
        self.assertIsNone(token.previous_hash)

    def test_who_is_the_effective_user_not_logname(self):
        import pwd

        from netweir_serve.access import commands
        self.patch(os, "environ", {**os.environ, "LOGNAME": "mallory", "USER": "mallory"})
        self.assertEqual(commands._who(), pwd.getpwuid(os.geteuid()).pw_name)


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


class Waiting(defer.Deferred):
    pass


class Request(DummyRequest):
    """A DummyRequest with what a real Request has beside: its body and
    ``code``."""

    def __init__(self):
        super().__init__([])
        self.content = io.BytesIO(b"")

    @property
    def code(self):
        return self.responseCode


class AuditedEndpointTests(TestCase):
    """An audited endpoint (web/endpoint.ApiEndpoint.audited) as the site
    renders it."""

    def endpoint(self, answer):
        from netweir_serve.web.endpoint import ApiEndpoint

        class Api:
            pass

        api = Api()
        api.audit = AuditLog(self.store, Clock())

        class Write(ApiEndpoint):
            methods = (b"POST",)
            audited = True
            audit_target = ("job", "jobid")

            def answer(self, params, request):
                return answer(params)

        return Write(api)

    def setUp(self):
        self.store = SQLiteJobStore(os.path.abspath(self.mktemp()), Clock())
        self.addCleanup(self.store.close)

    def post(self, endpoint, **params):
        request = Request()
        request.method = b"POST"
        request.path = b"/write.json"
        request.uri = b"/write.json?" + "&".join(f"{k}={v}" for k, v in params.items()).encode()
        return request, endpoint.render(request)

    def test_the_row_is_written_before_the_answer_goes_out(self):
        _, body = self.post(self.endpoint(lambda params: {"jobid": "j1"}), project="shop")
        self.assertIn(b'"jobid":"j1"', body)
        [row] = self.successResultOf(self.store.audit())
        self.assertEqual((row.endpoint, row.project, row.target, row.status),
                         ("write.json", "shop", "j1", 200))

    def test_a_refusal_is_recorded_with_its_status(self):
        from netweir_serve.web.params import ApiError

        def refuse(params):
            raise ApiError(409, "taken")

        request, _ = self.post(self.endpoint(refuse), project="shop", job="j1")
        self.assertEqual(request.responseCode, 409)
        [row] = self.successResultOf(self.store.audit())
        self.assertEqual((row.target, row.status), ("j1", 409))

    def test_a_client_gone_before_the_answer_leaves_the_write_going_and_its_row(self):
        # The write goes on to its end (a store's transaction under way
        # may commit whatever its Deferred says), and its row is written
        # with the status its answer would have had.
        failures = []
        from netweir_serve.web import endpoint as module
        self.patch(module.log, "failure", lambda *a, **kw: failures.append(a))
        waiting = Waiting()
        request, body = self.post(self.endpoint(lambda params: waiting), project="shop")
        request.processingFailed(Exception("the client went away"))
        self.assertFalse(waiting.called)
        written = list(request.written)
        waiting.callback({"jobid": "j1"})
        [row] = self.successResultOf(self.store.audit())
        self.assertEqual((row.project, row.target, row.status), ("shop", "j1", 200))
        self.assertEqual((failures, request.written), ([], written))

    def test_a_refusal_after_the_client_went_away_is_recorded_too(self):
        from netweir_serve.web.params import ApiError
        waiting = Waiting()
        request, _ = self.post(self.endpoint(lambda params: waiting), project="shop", job="j1")
        request.processingFailed(Exception("the client went away"))
        waiting.errback(ApiError(409, "taken"))
        [row] = self.successResultOf(self.store.audit())
        self.assertEqual((row.target, row.status), ("j1", 409))


class SubmitCancelledTests(TestCase):
    """A submit cancelled while its job is being queued keeps the job's
    folders: the store's transaction may have committed (PostgreSQL's
    runInteraction goes on whatever its Deferred says)."""

    def test_the_folders_stay_when_the_queueing_is_cancelled(self):
        from types import SimpleNamespace

        from netweir_serve.jobs.submit import JobRequest, JobSubmitter

        directory = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(directory, "data", "shop"))
        project = SimpleNamespace(name="shop")
        projects = SimpleNamespace(get=lambda name: project, names=lambda: ["shop"])
        queued = Waiting()

        class Reader:
            def checkJob(self, project, spider, settings, arguments, spelled):
                return defer.succeed(SimpleNamespace(spider=spider, spider_file="books.py"))

        class Scheduler:
            def schedule(self, checked, **options):
                return queued

        submitter = JobSubmitter(projects, None, Scheduler(), Reader(), directory)
        d = submitter.submit(JobRequest(project="shop", spider="books",
                                        settings=(("warc", "runs/x.warc"),)))
        self.assertTrue(os.path.isdir(os.path.join(directory, "data", "shop", "runs")))
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        self.assertTrue(queued.called)
        self.assertTrue(os.path.isdir(os.path.join(directory, "data", "shop", "runs")))
