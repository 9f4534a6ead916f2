"""What a shared store tells the other nodes about a change it made.

Every change a PostgreSQL store commits sends one NOTIFY on CHANNEL per
thing changed, in the same transaction (so it is heard only if the change
is made, and in the order of the changes). Its payload is the store-wide
version the change made, then a JSON list: the sending store's origin (a
random token per store, so a store knows its own), the kind, the job id and
the node. The other stores hear it on their LISTEN connection and hand a
StoreNotice to their ``on_notice`` callbacks.
"""

import json
from dataclasses import dataclass

CHANNEL = "netweir_serve_jobs"

# The kinds of notice.
QUEUED = "queued"          # a job was added (pending)
CLAIMED = "claimed"        # a pending job was claimed by ``node``
STARTED = "started"        # a claimed job's process started (its pid recorded)
CANCEL = "cancel"          # a cancel was asked for a running job; ``node`` runs it
ENDED = "ended"            # a job ended (finished, failed, cancelled or lost)
STATS = "stats"            # a running job's stats were saved
SCHEDULE = "schedule"      # a recurring schedule was added, changed or deleted
NODE = "node"              # a node registered, or was declared dead
PRUNED = "pruned"          # finished jobs were forgotten (past --keep)
TOKEN = "token"            # a token was added, revoked or rotated (access.tokens)
CHANGED = "changed"        # anything: re-read (the LISTEN connection came back)
# The last notice of every transaction that moved the version on: its
# notices are all heard (they may come over several reads of the LISTEN
# connection), so a listing kept in memory may catch up with it
# (store/journal.py). Older nodes never send it; nobody acts on it.
DONE = "done"

# Notices of progress alone: they move no store's version (no listing, no
# cached answer and no count shows a running job's stats).
PROGRESS = (STATS,)
KINDS = (QUEUED, CLAIMED, STARTED, CANCEL, ENDED, STATS, SCHEDULE, NODE, PRUNED, TOKEN, CHANGED,
         DONE)


@dataclass(frozen=True)
class StoreNotice:
    """One change another store made. ``version`` is the store-wide version
    it made; ``jobid`` the job it was about (or None); ``node`` the node the
    job belongs to (the one that claimed it: the owner, which must act on a
    CANCEL), or the node registered or declared dead."""

    kind: str
    version: int
    jobid: str = None
    node: str = None


def payload_tail(origin, kind, jobid=None, node=None):
    """The payload after the version, which the database puts in front
    (the version is known only inside the transaction)."""
    return json.dumps([origin, kind, jobid, node], separators=(",", ":"))


def decode(payload):
    """(origin, StoreNotice) from a payload, or None for one this version of
    netweir-serve does not read (from a newer node, say)."""
    version, _, tail = payload.partition(" ")
    try:
        origin, kind, jobid, node = json.loads(tail)
        return origin, StoreNotice(kind, int(version), jobid, node)
    except (ValueError, TypeError):
        return None
