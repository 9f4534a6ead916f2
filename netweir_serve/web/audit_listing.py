"""audit.json: the audit of the writes (web/audit.py writes it)."""

import math
from datetime import datetime, timezone

from ..access.roles import NEEDED, WRITE, identity_of
from ..jobs.submit import unknown_project
from ..schedules.times import RuleError, parse_instant
from ..store.audit_table import MAX_LISTED
from .endpoint import ApiEndpoint
from .params import ApiError
from .refusals import refused

# audit.json's rows by default.
DEFAULT_LISTED = 100


def audit_time(seconds):
    """A row's time as audit.json shows it (and ``since`` takes it): ISO
    8601 in UTC to the millisecond."""
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def audit_row(entry):
    return {"time": audit_time(entry.time), "who": entry.who, "address": entry.address,
            "endpoint": entry.endpoint, "project": entry.project, "target": entry.target,
            "change": entry.change, "status": entry.status}


class AuditList(ApiEndpoint):
    """audit.json: ``project`` (an admin may leave it out: every row, the
    tokens' changes too), ``since`` (ISO 8601, or epoch seconds) and
    ``limit`` (default 100, at most 1000): the rows newest first. An
    operator's projects alone; a viewer is refused 403 naming the
    operator role (access/endpoints.py)."""

    def answer(self, params, request):
        identity = identity_of(request)
        if not identity.may(WRITE):
            raise ApiError(403, f"this needs the {NEEDED[WRITE]} role")
        project = params.name("project", required=not identity.every_project)
        since = _since(params.get("since"))
        limit = _limit(params.get("limit"))
        if project is not None and not identity.sees(project):
            raise ApiError(404, unknown_project(project, self.api.project_names(identity)))
        listed = self.api.store.audit(projects=None if project is None else [project],
                                      since=since, limit=limit, every=project is None)
        return listed.addCallbacks(lambda rows: {"audit": [audit_row(r) for r in rows]},
                                   refused)


def _since(text):
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            return parse_instant("since", text, timezone.utc)
        except RuleError as e:
            raise ApiError(400, str(e)) from None
    if not math.isfinite(seconds):
        raise ApiError(400, f"parameter 'since': {text!r} is not a time")
    return seconds


def _limit(text):
    if text is None:
        return DEFAULT_LISTED
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LISTED:
        raise ApiError(400, f"parameter 'limit' must be a whole number from 1 to {MAX_LISTED}")
    return int(text)
