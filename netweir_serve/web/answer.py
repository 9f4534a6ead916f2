"""The shape of every JSON answer: node_name, status, and a message on error.

HTTP status codes: an error answer carries an honest 4xx (400 for a bad
parameter, 404 for an unknown job or endpoint, 405 for a wrong method,
409 for a duplicate job id, 413 for a body too big) with the JSON body in
scrapyd's shape. scrapyd-client reads ``status``/``message`` whatever the
HTTP status; python-scrapyd-api raises on any non-2xx answer with the
message it finds, which is what a caller of it wants for a refused request.
"""

import json
import socket

from twisted.web.resource import Resource

JSON_TYPE = b"application/json"

# The node_name of every answer: the host name, or --node-name once
# makeService has named the node (one service a process).
_NODE = {"name": socket.gethostname()}


def name_node(name):
    """Sets the node_name answers carry (makeService, from --node-name)."""
    _NODE["name"] = name


def node_name():
    return _NODE["name"]


def encode(body):
    """``body`` as compact UTF-8 JSON bytes."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def ok_body(**fields):
    """The bytes of an ``"ok"`` answer carrying ``fields``."""
    return encode({"node_name": node_name(), "status": "ok", **fields})


def error_body(message, **fields):
    """The bytes of an ``"error"`` answer saying ``message``."""
    return encode({"node_name": node_name(), "status": "error", "message": message,
                   **fields})


def write_json(request, payload, code=200):
    """Sets the code and headers for ``payload`` (bytes of JSON) and returns
    it, for ``render`` to return; a HEAD request gets the headers only."""
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON_TYPE)
    request.setHeader(b"cache-control", b"no-store")
    request.setHeader(b"content-length", str(len(payload)).encode("ascii"))
    # HEAD: the headers of GET, and no body (twisted.web warns about one).
    return b"" if request.method == b"HEAD" else payload


def write_error(request, code, message, **fields):
    """An error answer with HTTP status ``code``; returns the body bytes."""
    return write_json(request, error_body(message, **fields), code)


class NotFound(Resource):
    """A 404 with a JSON error naming what was not found (job files and
    the listings beside them)."""

    isLeaf = True

    def __init__(self, message):
        super().__init__()
        self.message = message

    def render(self, request):
        return write_error(request, 404, self.message)
