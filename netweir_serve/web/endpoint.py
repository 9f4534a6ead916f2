"""The frame every JSON endpoint shares: methods, parameters, answer shape."""

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.resource import Resource

from .answer import ok_body, write_error, write_json
from .audit import change_of
from .deferred import render_result, shielded
from .params import ApiError, Params

log = Logger()


class JsonEndpoint(Resource):
    """A JSON endpoint. Subclasses set ``methods`` and define
    ``answer(params, request)``, returning a dict of the fields of an "ok"
    answer, bytes of a whole answer, or a Deferred of either; raising
    ApiError gives an error answer. Anything else raised is logged and
    answered 500 with a JSON error, never a traceback."""

    isLeaf = True
    methods = (b"GET",)

    def render(self, request):
        if request.postpath:
            return write_error(request, 404, "no such endpoint:"
                               f" {request.path.decode('latin-1')}")
        method = b"GET" if request.method == b"HEAD" else request.method
        if method not in self.methods:
            allowed = b", ".join(self.methods + ((b"HEAD",) if b"GET" in self.methods else ()))
            request.setHeader(b"allow", allowed)
            return write_error(request, 405, f"{request.path.decode('latin-1')} takes "
                               f"{' or '.join(m.decode() for m in self.methods)}, not "
                               f"{request.method.decode('latin-1')}")
        if self._audit_log() is not None:
            return self._render_audited(request)
        try:
            result = self.answer(Params.of(request), request)
        except ApiError as e:
            return write_error(request, e.code, e.message)
        except Exception:
            log.failure("unexpected error answering {path}", path=request.path)
            return write_error(request, 500, "internal error; see the service's log")
        return render_result(request, result, lambda r: write_json(request, self._body(r)),
                             lambda f: self._failed(f, request))

    # -- the audit of a write (web/audit.py) --------------------------------

    def _audit_log(self):
        """The AuditLog this endpoint's answers are recorded in, or None."""
        return None

    def audit_of(self, params, result):
        """(project, target, change) of the audit row of an answer: ``result``
        the answer's fields (a dict), or None when it was refused."""
        return params.get("project"), None, None

    def _render_audited(self, request):
        """As render, with the answer's audit row committed before the
        answer is sent, whatever the answer is.

        A write is never cancelled by its client going away: it goes on to
        its end, and its row is written with the status its answer would
        have had (the change is made or refused whether anyone hears of
        it). Cancelling it would not undo it: a store's transaction under
        way may commit while its Deferred says CancelledError (PostgreSQL),
        and the row would be lost."""
        kept = {"params": None, "result": None}

        def answer():
            kept["params"] = Params.of(request)
            return self.answer(kept["params"], request)

        def answered(result):
            kept["result"] = result if isinstance(result, dict) else None
            return write_json(request, self._body(result))

        d = defer.maybeDeferred(answer)
        d.addCallbacks(answered, lambda failure: self._failed(failure, request))
        d.addCallback(lambda body: self.audited_answer(request, body, kept["params"],
                                                       kept["result"]))
        return render_result(request, shielded(d), lambda body: body,
                             lambda f: self._failed(f, request))

    def audited_answer(self, request, body, params, result=None):
        """A Deferred of ``body`` (an answer whose code is set on
        ``request``) once its audit row is written. ``params`` None: the
        request's could not be read."""
        params = params if params is not None else Params([])
        try:
            project, target, change = self.audit_of(params, result)
        except Exception:
            log.failure("the audit row of {path} could not be made", path=request.path)
            project, target, change = params.get("project"), None, None
        endpoint = request.path.decode("latin-1").rsplit("/", 1)[-1] if request.path else ""
        return self._audit_log().record(request, endpoint, request.code or 200, project,
                                        target, change, wait_at_most=self.audit_wait
                                        ).addCallback(lambda _: body)

    @staticmethod
    def _body(result):
        return result if isinstance(result, bytes) else ok_body(**result)

    @staticmethod
    def _failed(failure, request):
        if failure.check(ApiError):
            return write_error(request, failure.value.code, failure.value.message)
        log.failure("unexpected error answering {path}", failure, path=request.path)
        return write_error(request, 500, "internal error; see the service's log")


class ApiEndpoint(JsonEndpoint):
    """A JSON endpoint of the service's API: ``api`` holds the parts it calls.

    One that writes sets ``audited``: its answers are recorded in the
    audit (``api.audit``, when the service keeps one) before they are
    sent; ``audit_target`` names the parameter, and the answer's field,
    that say what it changed (a job id, a schedule's name), and
    ``audit_answer`` the answer's fields the row keeps beside the
    parameters (web/audit.change_of)."""

    audited = False
    audit_target = (None, None)
    audit_answer = ()
    # Seconds the answer waits for its audit row at most (None: until it
    # is written); the row is written all the same.
    audit_wait = None

    def __init__(self, api):
        super().__init__()
        self.api = api

    def _audit_log(self):
        return getattr(self.api, "audit", None) if self.audited else None

    def audit_of(self, params, result):
        parameter, field = self.audit_target
        target = (result or {}).get(field) if field else None
        if target is None and parameter:
            target = params.get(parameter)
        change = change_of(params, skip=("project",) + ((parameter,) if parameter else ()))
        for name in self.audit_answer:
            if result is not None and name in result:
                change[name] = result[name]
        return params.get("project"), target, change or None
