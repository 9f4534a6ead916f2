"""What every path the site serves needs: one table, checked by
tests/test_access_endpoints.py against the paths the root serves.

The door (web/gate.py) applies a path's rule before any resource sees the
request; the endpoints then hide the projects an identity cannot see
(roles.Identity.sees), answering for one of them exactly as for a project
that does not exist:

- READ: a viewer's: listings, stats, logs, items, /events, the pages. Each
  lists, streams and counts only the projects its identity sees.
- WRITE: schedule.json, cancel.json and the schedules' writes: an
  operator's (or admin's), on the project it names. A viewer naming a
  project it sees is refused 403 naming the role needed; one naming a
  project it cannot see gets the answer of a project that does not exist.
- EVERYTHING: an admin's alone (the deploying endpoints, refused anyway).
- SCRAPE: /metrics: the metrics role's and an admin's.
"""

from .roles import EVERYTHING, READ, SCRAPE, WRITE

# {first path segment: what it needs}. Paths the root does not serve
# (its JSON 404) need nothing more than the door's login.
ENDPOINT_RULES = {
    # The pages.
    b"": READ,                      # the home page: its projects
    b"jobs": READ,                  # /jobs: its projects' jobs and schedules
    b"console": READ,               # the console's static files; data from the API
    b"job": READ,                   # /job/P/J: a page; its data from the API
    b"spider": READ,                # /spider/P/S
    b"schedules": READ,             # /schedules
    b"nodes": READ,                 # /nodes
    b"favicon.ico": READ,
    b"events": READ,                # /events: its projects' jobs and schedules
    b"metrics": SCRAPE,
    b"logs": READ,                  # /logs/P/S/JOB.log, listings, /logs/stats.json
    b"items": READ,                 # /items/P/S/JOB.jl, listings
    # scrapyd's JSON API.
    b"daemonstatus.json": READ,     # counts of its projects' jobs
    b"listprojects.json": READ,     # its projects
    b"listversions.json": READ,
    b"listspiders.json": READ,
    b"listpolicies.json": READ,
    b"listjobs.json": READ,
    b"jobstats.json": READ,
    b"job.json": READ,              # one job, for its console page
    b"runs.json": READ,
    b"listnodes.json": READ,        # the nodes, each with the projects it sees
    b"status.json": READ,
    b"whoami.json": READ,           # its own name, role and projects
    # The audit: an operator's (its projects) or an admin's; a viewer
    # naming a project it sees is refused 403 naming the operator role.
    b"audit.json": WRITE,
    b"schedule.json": WRITE,
    b"cancel.json": WRITE,
    b"delproject.json": EVERYTHING,
    b"addversion.json": EVERYTHING,
    b"delversion.json": EVERYTHING,
    # Recurring schedules.
    b"listschedules.json": READ,
    b"addschedule.json": WRITE,
    b"editschedule.json": WRITE,
    b"delschedule.json": WRITE,
    b"pauseschedule.json": WRITE,
    b"resumeschedule.json": WRITE,
    b"runschedule.json": WRITE,
    b"backfillschedule.json": WRITE,
}
