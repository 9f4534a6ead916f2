"""A token as the job table holds it (access.tokens makes and checks them)."""

from dataclasses import dataclass


class DuplicateToken(ValueError):
    """A token with this name (compared ignoring case) exists."""

    def __init__(self, name):
        super().__init__(f"a token named {name!r} already exists (names ignore case)")
        self.name = name


@dataclass(frozen=True)
class TokenRecord:
    """One token. Immutable: a change makes a new one.

    ``role`` is one of access.roles.ROLES; ``projects`` the names of the
    projects it may see (empty: every project, which only the admin and
    metrics roles have); ``created``, ``last_used`` and ``expires`` epoch
    seconds (``expires`` None: never). ``hash`` is the salted hash of its
    secret as access.tokens writes it, never the secret; after a rotation,
    ``previous_hash`` is the old secret's, valid until ``previous_until``."""

    name: str
    role: str
    projects: tuple = ()
    created: float = 0.0
    last_used: float = None
    expires: float = None
    hash: str = ""
    previous_hash: str = None
    previous_until: float = None
