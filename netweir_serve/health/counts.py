"""What a run is judged by: its items, pages and errors, read from the
stats its crawl wrote (Netweir's names: ``items``, ``fetched`` for pages,
``failed`` requests and ``callback_errors``)."""

# Each count's Netweir stats; errors are their sum.
ITEMS = ("items",)
PAGES = ("fetched",)
ERRORS = ("failed", "callback_errors")


# A count is a whole number from 0 below this: what a 64-bit integer
# column (SQLite's INTEGER, PostgreSQL's bigint) holds. A stat outside
# that (negative, or a crawl's own counter gone wild) is no count.
LIMIT = 2 ** 63


def _whole(value):
    whole = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < LIMIT
    return value if whole else None


def _sum(stats, names):
    found = [_whole(stats.get(name)) for name in names]
    found = [value for value in found if value is not None]
    # Two counts in range may add up past it: the sum stops just below.
    return min(sum(found), LIMIT - 1) if found else None


def counts_of(stats):
    """(items, pages, errors) of a run whose last stats are ``stats`` (a
    dict, or None when it wrote none): each a whole number, or None where
    the stats have none or one out of range (0 to LIMIT - 1). A run with
    stats and no errors has 0 errors; errors, a sum, is at most LIMIT - 1."""
    if not isinstance(stats, dict):
        return None, None, None
    errors = _sum(stats, ERRORS)
    return _sum(stats, ITEMS), _sum(stats, PAGES), 0 if errors is None else errors
