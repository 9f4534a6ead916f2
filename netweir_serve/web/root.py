"""The resource tree of the site."""

import os

from twisted.web.resource import Resource

from .answer import write_error
from .api import endpoints
from .files import ITEMS_TYPE, LOG_TYPE, JobFileTree


class Root(Resource):
    """/ and its children; anything unknown is a JSON 404. ``pages`` adds
    children ({segment: resource}); ``listers`` ({b"logs" or b"items":
    lister}) lists the folders of those trees; ``log_files`` adds files at
    the top of /logs ({b"stats.json": resource}), before project folders."""

    def __init__(self, api, directory, pages=None, listers=None, log_files=None):
        super().__init__()
        listers = listers or {}
        for path, resource in endpoints(api).items():
            self.putChild(path, resource)
        owners = getattr(api, "owners", None)
        logs = JobFileTree(os.path.join(directory, "logs"), (".log",), LOG_TYPE,
                           listers.get(b"logs"), owners)
        for path, resource in (log_files or {}).items():
            logs.putChild(path, resource)
        self.putChild(b"logs", logs)
        self.putChild(b"items", JobFileTree(os.path.join(directory, "items"),
                                            (".jl", ".jsonl"), ITEMS_TYPE, listers.get(b"items"),
                                            owners))
        for path, resource in (pages or {}).items():
            self.putChild(path, resource)

    def getChild(self, path, request):
        return _Unknown()

    def render(self, request):
        return write_error(request, 404, "no such endpoint")


class _Unknown(Resource):
    isLeaf = True

    def render(self, request):
        return write_error(request, 404, f"no such endpoint: {request.path.decode('latin-1')}")
