"""A job's final stats, appended to its log in the form Scrapy logs them.

ScrapydWeb (through LogParser's parser) shows a job's pages, items and
finish reason by reading its log for Scrapy's closing lines:

    2026-01-02 03:04:05 [netweir-serve] INFO: Dumping Scrapy stats:
    {'finish_reason': 'finished',
     'item_scraped_count': 30,
     ...}
    2026-01-02 03:04:05 [netweir-serve] INFO: Spider closed (finished)

A Netweir log has no such lines, so when a job ends the service appends
them: Scrapy's names for the numbers it has (items scraped, responses
received, the finish reason) and every Netweir stat under ``netweir/``.
That parser turns the dict into JSON with a few regular expressions, not a
Python parser, so only numbers and plain-word strings go in: a quote in a
value would break it.
"""

import os
import re
from datetime import datetime

# Netweir's stat -> Scrapy's name for the same number.
SCRAPY_NAMES = {"items": "item_scraped_count", "fetched": "response_received_count"}

_PLAIN = re.compile(r"[\w.:/-]*\Z")


def _value(value):
    """``value`` as it can go in the dict, or None when it can't."""
    if isinstance(value, bool):
        return None  # True/False are not JSON, and the parser leaves them
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and _PLAIN.match(value):
        return repr(value)
    return None


def stats_footer(stats, outcome, end_time):
    """The lines to append for a job that ended with ``outcome`` at
    ``end_time`` (epoch seconds), its last stats ``stats`` (a dict, or
    None when it wrote none)."""
    stats = stats or {}
    reason = stats.get("finish_reason") or outcome
    fields = {"finish_reason": reason, "netweir_serve/outcome": outcome}
    for name, scrapy_name in SCRAPY_NAMES.items():
        if name in stats:
            fields[scrapy_name] = stats[name]
    for name, value in stats.items():
        if name != "finish_reason" and _PLAIN.match(str(name)):
            fields[f"netweir/{name}"] = value
    pairs = [f"{key!r}: {text}" for key, value in fields.items()
             if (text := _value(value)) is not None]
    stamp = datetime.fromtimestamp(end_time).strftime("%Y-%m-%d %H:%M:%S")
    reason_text = reason if _value(reason) is not None else outcome
    return (f"{stamp} [netweir-serve] INFO: Dumping Scrapy stats:\n"
            "{" + ",\n ".join(pairs) + "}\n"
            f"{stamp} [netweir-serve] INFO: Spider closed ({reason_text})\n")


def append_stats(log_path, stats, outcome, end_time):
    """Appends the footer to the log at ``log_path``, if there is one.
    Returns whether it did; never raises for a file that can't be written
    (a job's end must be recorded whatever happens to its log)."""
    data = stats_footer(stats, outcome, end_time).encode("utf-8")
    try:
        # No O_CREAT: a job that never wrote a log doesn't get one here.
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    try:
        # A crawl killed mid-line leaves no newline: start on a line of its own.
        if os.fstat(fd).st_size and not _ends_with_newline(log_path):
            data = b"\n" + data
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _ends_with_newline(path):
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return True
