"""The roles a token gives, and the identity a request carries.

Per project (docs/security.md):

- ``viewer``: reads its projects (listings, stats, logs, items, /events,
  pages); every other project is absent, as one that does not exist.
- ``operator``: a viewer who may also schedule and cancel jobs and manage
  the schedules of its projects.
- ``admin``: everything, every project, /metrics.
- ``metrics``: /metrics only (a Prometheus scraper's).
"""

from dataclasses import dataclass

from ..names import fold

VIEWER, OPERATOR, ADMIN, METRICS = "viewer", "operator", "admin", "metrics"
ROLES = (VIEWER, OPERATOR, ADMIN, METRICS)

# What each role may do, beyond seeing its projects.
READ, WRITE, EVERYTHING, SCRAPE = "read", "write", "everything", "scrape"
_MAY = {
    VIEWER: {READ},
    OPERATOR: {READ, WRITE},
    ADMIN: {READ, WRITE, EVERYTHING, SCRAPE},
    METRICS: {SCRAPE},
}
# The least role that may do each: what a 403 names.
NEEDED = {READ: VIEWER, WRITE: OPERATOR, EVERYTHING: ADMIN, SCRAPE: METRICS}

# Roles that see every project whatever their list says.
ALL_PROJECTS = (ADMIN, METRICS)


class RoleError(ValueError):
    """A role, or a role's projects, that cannot be given (a sentence)."""


def role_problem(role, projects):
    """Why ``role`` with ``projects`` cannot make a token, or None."""
    if role not in ROLES:
        return f"--role {role!r} is not a role: give one of {', '.join(ROLES)}"
    if role in (VIEWER, OPERATOR) and not projects:
        return f"a {role} token needs at least one --project (the projects it may see)"
    if role in ALL_PROJECTS and projects:
        return f"a {role} token sees every project: give it no --project"
    return None


@dataclass(frozen=True)
class Identity:
    """Who a request comes from: ``who`` (a token's name or the user's, for
    the log and an audit; None on an open service), ``role`` and, for a
    viewer or operator, the folded names of its ``projects``; ``token``
    says it is a token's (which may be revoked while a stream is open)."""

    who: str
    role: str
    projects: frozenset = frozenset()
    token: bool = False

    @classmethod
    def of(cls, who, role, projects=(), token=False):
        return cls(who, role, frozenset(fold(p) for p in projects), token)

    @property
    def every_project(self):
        """Whether it sees every project (nothing to hide from it)."""
        return self.role in ALL_PROJECTS

    def sees(self, project):
        """Whether the project named ``project`` exists for it at all."""
        if self.role == METRICS:
            return False
        return self.every_project or fold(project) in self.projects

    def may(self, action):
        """Whether its role allows ``action`` (READ, WRITE, EVERYTHING, SCRAPE)."""
        return action in _MAY[self.role]


# An open service (loopback, no password, no token): everyone is an admin,
# as before tokens existed.
NOBODY = Identity(None, ADMIN)


def identity_of(request):
    """The Identity a request was let in with (web/guard.py sets it);
    NOBODY's when the service asks for no credentials."""
    return getattr(request, "netweir_identity", None) or NOBODY
