"""listnodes.json: the nodes sharing the job table, for the console's
/nodes page and for anyone asking which node is up.

With a shared job table (--jobs-db postgresql://...) the table's nodes
(IClusterStore.nodes: name, URL, last heartbeat, declared dead or not, the
projects each serves) and how many jobs run on each; on a service of its
own, this node alone. The free slots are the answering node's own: the
table does not keep the others' --max-jobs, so theirs are null (their own
listnodes.json says).
"""

from twisted.internet import defer

from ..access.roles import identity_of
from ..names import fold
from .answer import node_name
from .endpoint import ApiEndpoint
from .refusals import refused


class ListNodes(ApiEndpoint):
    """No parameters. ``nodes`` by name, each: ``name``, ``url``, ``up``
    (not declared dead), ``heartbeat`` and ``started`` (epoch seconds, null
    on a service of its own), ``age`` (seconds since its last beat, by the
    table's clock), ``running`` (its running jobs), ``slots_free`` (the
    answering node's; null for the others), ``projects`` (those it serves
    that the request's identity sees) and ``this`` (the answering node)."""

    def answer(self, params, request):
        identity = identity_of(request)
        store = self.api.store
        nodes = store.nodes() if store.shared else defer.succeed(None)
        running = defer.maybeDeferred(store.running)
        both = defer.gatherResults([nodes, running], consumeErrors=True)
        both.addCallback(lambda found: self._answer(*found, identity))
        return both.addErrback(_first_error).addErrback(refused)

    def _answer(self, nodes, running, identity):
        here = self.api.node or node_name()
        if nodes is None:
            nodes = [{"name": here, "url": None, "heartbeat": None, "started": None,
                      "dead": False, "age": None,
                      "projects": [fold(name) for name in self.api.projects.names()]}]
        counts = {}
        for record in running:
            if identity.sees(record.project):
                node = here if record.node is None else record.node
                counts[node] = counts.get(node, 0) + 1
        served = {fold(name): name for name in self.api.projects.names()}
        return {"shared": bool(self.api.store.shared), "nodes": [
            {"name": node["name"],
             "url": node.get("url"),
             "up": not node["dead"],
             "heartbeat": _seconds(node.get("heartbeat")),
             "started": _seconds(node.get("started")),
             "age": _seconds(node.get("age")),
             "running": counts.get(node["name"], 0),
             "slots_free": self.api.launcher.slots_free() if node["name"] == here else None,
             # The table keeps folded names: shown as this node serves them
             # where it does; a project the identity cannot see is left out.
             "projects": [served.get(project, project) for project in node["projects"]
                          if identity.sees(project)],
             "this": node["name"] == here}
            for node in nodes]}


def _seconds(value):
    return None if value is None else round(value, 3)


def _first_error(failure):
    """gatherResults' FirstError as the failure it wraps (a StoreError is a 503)."""
    failure.trap(defer.FirstError)
    return failure.value.subFailure
