"""The stats footer a job's log ends with, read the way ScrapydWeb reads it.

ScrapydWeb's stats page runs LogParser's parser over the log: it finds the
first line that starts with a date and time and reaches "Dumping Scrapy
stats:", takes everything from the first "{" to the last "}", and makes it
JSON with regular expressions. Restated here in a few lines.
"""

import json
import os
import re

from twisted.trial import unittest

from netweir_serve.jobs.logstats import append_stats, stats_footer

ENDING = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) [^\n]+?Dumping Scrapy stats:.*?(\{.+\})",
                    re.S)

STATS = {"fetched": 30, "items": 29, "bytes": 3171, "finish_reason": "finished",
         "rate": 1.5, "flag": True, "quoted": "it's", "nothing": None}


def read_like_logparser(text):
    """(time of the line, the stats dict) as LogParser gets them."""
    found = ENDING.search(text)
    assert found, text
    body = found.group(2)
    body = re.sub(r"'(.+?)'", r'"\1"', body)
    body = re.sub(r": None([,}])", r": null\1", body)
    return found.group(1), json.loads(body)


class FooterTests(unittest.TestCase):
    def test_footer_reads_as_scrapy_stats_with_netweir_stats_alongside(self):
        log = "INFO crawl finished in 1.0s: fetched 30\n" + stats_footer(STATS, "finished", 1e9)
        stamp, stats = read_like_logparser(log)
        self.assertEqual(len(stamp), len("2001-09-09 01:46:40"))
        self.assertEqual(stats["item_scraped_count"], 29)
        self.assertEqual(stats["response_received_count"], 30)
        self.assertEqual(stats["finish_reason"], "finished")
        self.assertEqual(stats["netweir_serve/outcome"], "finished")
        self.assertEqual((stats["netweir/bytes"], stats["netweir/rate"]), (3171, 1.5))
        # What the parser's regular expressions would mangle is left out.
        for name in ("netweir/flag", "netweir/quoted", "netweir/nothing"):
            self.assertNotIn(name, stats)
        self.assertTrue(log.endswith("INFO: Spider closed (finished)\n"))

    def test_a_job_without_stats_still_says_how_it_ended(self):
        _, stats = read_like_logparser(stats_footer(None, "cancelled", 1e9))
        self.assertEqual(stats, {"finish_reason": "cancelled",
                                 "netweir_serve/outcome": "cancelled"})


class AppendTests(unittest.TestCase):
    def setUp(self):
        self.path = os.path.abspath(self.mktemp())

    def test_appends_on_a_line_of_its_own(self):
        with open(self.path, "w") as f:
            f.write("INFO cut off mid-li")
        self.assertTrue(append_stats(self.path, STATS, "failed", 1e9))
        with open(self.path) as f:
            text = f.read()
        self.assertTrue(text.startswith("INFO cut off mid-li\n"))
        self.assertEqual(read_like_logparser(text)[1]["netweir_serve/outcome"], "failed")

    def test_makes_no_log_where_there_was_none(self):
        self.assertFalse(append_stats(self.path, STATS, "failed", 1e9))
        self.assertFalse(os.path.exists(self.path))
