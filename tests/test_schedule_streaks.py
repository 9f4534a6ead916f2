"""Which ends count in a schedule's streak of bad runs (pause_after)."""

from twisted.trial import unittest

from netweir_serve.store.records import JobRecord
from netweir_serve.store.schedule_streaks import pause_note, verdict


def ended(outcome, health=None, reason=None):
    return JobRecord(id="n-1", project="shop", spider="books", spider_file="/p",
                     outcome=outcome, health=health, reason=reason, schedule="n")


class VerdictTests(unittest.TestCase):
    def test_failed_and_degraded_are_bad_healthy_good_cancelled_and_lost_not_counted(self):
        self.assertEqual(
            [verdict(ended(*e)) for e in (("failed",), ("finished", "degraded"),
                                          ("finished", "healthy"), ("cancelled",), ("lost",))],
            ["bad", "bad", "good", None, None])

    def test_the_note_names_the_last_run_and_how_it_ended(self):
        self.assertEqual(pause_note(3, ended("finished", "degraded")),
                         "paused after 3 runs in a row failed or degraded; the last: n-1"
                         " (degraded)")
        self.assertEqual(pause_note(1, ended("failed", reason="memory")),
                         "paused after 1 run in a row failed or degraded; the last: n-1"
                         " (failed, memory)")
