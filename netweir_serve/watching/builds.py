"""Listings built from the job table, counted by endpoint: a cache that
hits shows as a count that stays still while requests go on."""

from collections import Counter


class ListingBuilds:
    """A count per endpoint name (``listjobs.json``, ``/jobs``...)."""

    def __init__(self):
        self.counts = Counter()

    def count(self, endpoint):
        """Counts one build of ``endpoint``."""
        self.counts[endpoint] += 1

    def counter(self, endpoint):
        """A function of no argument that counts one build of ``endpoint``."""
        return lambda: self.count(endpoint)
