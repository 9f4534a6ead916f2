"""The job table's backends, chosen by the --jobs-db URL."""

import os

from .sqlite import SQLiteJobStore


def open_store(directory, clock):
    """The job store of the service whose DIR is ``directory``:
    ``DIR/jobs.db``, created and brought up to date if need be."""
    return SQLiteJobStore(os.path.join(directory, "jobs.db"), clock)
