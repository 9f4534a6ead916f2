"""Reading an endpoint's parameters from the query string and a form body."""

import math
from urllib.parse import parse_qsl

from ..names import name_problem
from ..reliability.policy import KEYS, JobPolicy, PolicyError

FORM_TYPE = "application/x-www-form-urlencoded"


class ApiError(Exception):
    """A refused request: ``code`` is the HTTP status, ``message`` says why."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _decode(raw, where):
    try:
        return parse_qsl(raw.decode("utf-8"), keep_blank_values=True,
                         encoding="utf-8", errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, f"the {where} is not valid UTF-8 form data") from None


class Params:
    """The parameters of one request, in the order given; a name may repeat."""

    def __init__(self, pairs):
        self.pairs = list(pairs)

    @classmethod
    def of(cls, request):
        """Parameters from the query string and, for a form-encoded body,
        the body too. Raises ApiError for a body that is too big or not
        form data."""
        if getattr(request, "body_too_large", False):
            raise ApiError(413, "the request body is larger than 1 MiB")
        pairs = []
        _, _, query = request.uri.partition(b"?")
        if query:
            pairs += _decode(query, "query string")
        body = request.content.read() if request.content is not None else b""
        if body:
            header = request.getHeader(b"content-type")
            kind = header.decode("latin-1").split(";")[0].strip() if header else FORM_TYPE
            if kind.lower() != FORM_TYPE:
                raise ApiError(415, f"the body must be form data ({FORM_TYPE}), not {kind!r}")
            pairs += _decode(body, "request body")
        for key, value in pairs:
            # Nothing here can carry one: not a name, a setting, an argument
            # (it would end a C string on the crawl's command line).
            if "\0" in key or "\0" in value:
                raise ApiError(400, f"parameter {key.replace(chr(0), '')!r} contains a NUL"
                                    " character")
        return cls(pairs)

    def all(self, key):
        return [v for k, v in self.pairs if k == key]

    def get(self, key, default=None):
        values = self.all(key)
        return values[-1] if values else default

    def name(self, key, what=None, required=True, rule=name_problem):
        """A name-rule value of ``key`` (``rule``: names.name_problem, or
        another that says what is wrong with one); raises ApiError naming
        the parameter."""
        value = self.get(key)
        if value is None or value == "":
            if not required:
                return None
            raise ApiError(400, f"missing parameter {key!r}")
        problem = rule(what or key, value)
        if problem:
            raise ApiError(400, f"parameter {key!r}: {problem}")
        return value

    def settings(self):
        """The ``setting=KEY=VALUE`` parameters as ``(key, value)`` pairs."""
        pairs = []
        for text in self.all("setting"):
            key, sep, value = text.partition("=")
            if not sep or not key:
                raise ApiError(400, f"setting {text!r} is not KEY=VALUE")
            pairs.append((key, value))
        return pairs

    def priority(self):
        """The ``priority`` parameter as a finite float (0 when absent)."""
        text = self.get("priority")
        if text is None or text == "":
            return 0.0
        try:
            value = float(text)
        except ValueError:
            raise ApiError(400, f"priority {text!r} is not a number") from None
        if not math.isfinite(value):
            raise ApiError(400, f"priority {text!r} is not a finite number")
        return value

    def policy(self, prefix="", every=False, skip=()):
        """The JobPolicy of the parameters named ``prefix`` + a policy key;
        with ``every``, each parameter that starts with ``prefix`` (but
        those in ``skip``) must be one. Raises ApiError naming the first
        bad key or value."""
        texts = {key: value for key, value in self.pairs
                 if key not in skip and key.startswith(prefix)
                 and (every or key[len(prefix):] in KEYS)}
        try:
            return JobPolicy.parse(texts, prefix=prefix)
        except PolicyError as e:
            raise ApiError(400, e.message) from None
