"""What a run is judged by: its items, pages and errors, read from the
stats its crawl wrote (Netweir's names: ``items``, ``fetched`` for pages,
``failed`` requests and ``callback_errors``)."""

# Each count's Netweir stats; errors are their sum.
ITEMS = ("items",)
PAGES = ("fetched",)
ERRORS = ("failed", "callback_errors")


def _whole(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sum(stats, names):
    found = [_whole(stats.get(name)) for name in names]
    found = [value for value in found if value is not None]
    return sum(found) if found else None


def counts_of(stats):
    """(items, pages, errors) of a run whose last stats are ``stats`` (a
    dict, or None when it wrote none): each a whole number, or None where
    the stats have none. A run with stats and no errors has 0 errors."""
    if not isinstance(stats, dict):
        return None, None, None
    errors = _sum(stats, ERRORS)
    return _sum(stats, ITEMS), _sum(stats, PAGES), 0 if errors is None else errors
