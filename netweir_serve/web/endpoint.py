"""The frame every JSON endpoint shares: methods, parameters, answer shape."""

from twisted.logger import Logger
from twisted.web.resource import Resource

from .answer import ok_body, write_error, write_json
from .deferred import render_result
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
        try:
            result = self.answer(Params.of(request), request)
        except ApiError as e:
            return write_error(request, e.code, e.message)
        except Exception:
            log.failure("unexpected error answering {path}", path=request.path)
            return write_error(request, 500, "internal error; see the service's log")
        return render_result(request, result, lambda r: write_json(request, self._body(r)),
                             lambda f: self._failed(f, request))

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
    """A JSON endpoint of the service's API: ``api`` holds the parts it calls."""

    def __init__(self, api):
        super().__init__()
        self.api = api
