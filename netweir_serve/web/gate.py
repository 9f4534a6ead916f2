"""Past the door: the identity a request was let in with, and the rule of
the path it asks for (access.endpoints).

The realm of web/guard.py gives each identity an ``Admitted`` tree: the
site's resource tree, entered with ``request.netweir_identity`` set (what
access.roles.identity_of reads: the endpoints hide what it cannot see, an
audit can record ``who``), and refused where its role may not go: a 403
JSON error naming the role needed, with nothing done.
"""

from twisted.web.resource import IResource, Resource
from zope.interface import implementer

from .deferred import render_result

from ..access.endpoints import ENDPOINT_RULES
from ..access.roles import NEEDED, READ, SCRAPE, WRITE
from .guard import Refusal
from .params import ApiError, Params


def _needs(action):
    if action == SCRAPE:
        return Refusal(403, "this needs the metrics or admin role")
    return Refusal(403, f"this needs the {NEEDED[action]} role")


def door_refusal(segment, request, identity):
    """The Refusal for ``identity`` asking for the path that starts with
    ``segment``, or None when it may go on."""
    action = ENDPOINT_RULES.get(segment)
    if action is None or identity.may(action):
        return None
    if action != WRITE or not identity.may(READ):
        return _needs(action)
    # A viewer's write: refused if it names a project the viewer sees; for
    # one it cannot see, the endpoint answers as for no such project.
    try:
        project = _project_named(request)
    except ApiError:
        return None  # the endpoint says what is wrong with the request
    if project is not None and identity.sees(project):
        return _needs(WRITE)
    return None


def _project_named(request):
    content = getattr(request, "content", None)
    try:
        return Params.of(request).get("project")
    finally:
        # The endpoint reads the body again.
        if content is not None:
            content.seek(0)


@implementer(IResource)
class Admitted:
    """The site's ``tree`` as ``identity`` enters it."""

    def __init__(self, tree, identity):
        self._tree = tree
        self.identity = identity

    @property
    def isLeaf(self):
        return self._tree.isLeaf

    def getChildWithDefault(self, name, request):
        request.netweir_identity = self.identity
        refusal = door_refusal(name, request, self.identity)
        if refusal is not None:
            return self._audited(refusal, name)
        return self._tree.getChildWithDefault(name, request)

    def _audited(self, refusal, name):
        """``refusal`` of the path ``name``, recorded in the audit first
        when that path is an audited write's (web/audit.py)."""
        children = getattr(self._tree, "children", {})
        endpoint = children.get(name)
        if endpoint is None or getattr(endpoint, "_audit_log", lambda: None)() is None:
            return refusal
        return AuditedRefusal(refusal, endpoint)

    def putChild(self, path, child):
        self._tree.putChild(path, child)

    def render(self, request):
        request.netweir_identity = self.identity
        return self._tree.render(request)


class AuditedRefusal(Resource):
    """A refusal at the door of a write: its answer, sent once the audit
    row of the refused write is written (by the write's ``endpoint``)."""

    isLeaf = True

    def __init__(self, refusal, endpoint):
        super().__init__()
        self._refusal = refusal
        self._endpoint = endpoint

    def render(self, request):
        body = self._refusal.render(request)
        try:
            params = Params.of(request)
        except ApiError:
            params = None
        d = self._endpoint.audited_answer(request, body, params)
        return render_result(request, d, lambda answered: answered,
                             lambda failure: body)
