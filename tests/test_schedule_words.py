"""A schedule's rule in words and its next runs (listschedules.json's
``in_words``, ``upcoming=N``): pure functions on fixed times, across the
days DST starts and ends."""

from datetime import datetime

from twisted.trial import unittest

from netweir_serve.schedules.times import iso_time, jitter_offset, rule_of, upcoming
from netweir_serve.schedules.words import cron_in_words, in_words
from netweir_serve.store.schedule_records import ScheduleRecord
from netweir_serve.web.params import ApiError
from netweir_serve.web.schedules import MAX_UPCOMING, _add_upcoming, _upcoming_count

BERLIN = "Europe/Berlin"


class InWordsTests(unittest.TestCase):
    def test_cron_rules_read_as_people_say_them(self):
        for expression, words in [
            ("0 3 * * *", "every day at 03:00"),
            ("@daily", "every day at 00:00"),
            ("@hourly", "every hour at :00"),
            ("@weekly", "on Sunday at 00:00"),
            ("@monthly", "on day 1 of the month at 00:00"),
            ("@yearly", "on 1 January at 00:00"),
            ("*/15 * * * *", "every 15 min"),
            ("5-59/15 * * * *", "every 15 min from :05"),
            ("* * * * *", "every minute"),
            ("7 * * * *", "every hour at :07"),
            ("30 9 * * 1-5", "on Monday to Friday at 09:30"),
            ("0 9 * * SAT,SUN", "on Saturday and Sunday at 09:00"),
            ("0 0 * * 0-7", "every day at 00:00"),
            ("0 0 1,15 * *", "on days 1 and 15 of the month at 00:00"),
            ("0 0 1 JAN-MAR *", "on day 1 of the month in January to March at 00:00"),
            ("0 3,15 * * *", "every day at 03:00 and 15:00"),
            ("0 */4 * * *", "every 4 hours at :00"),
            ("0 1-23/2 * * *", "every 2 hours at :00 from 01:00"),
            ("*/10 9-17 * * MON-FRI", "every 10 min from 09:00 to 17:50 on Monday to Friday"),
            ("*/5 9,12 * * *", "every 5 min in hours 9 and 12"),
        ]:
            self.assertEqual(cron_in_words(expression), words, expression)

    def test_a_day_of_the_month_and_a_weekday_are_either_as_debians_cron_runs_them(self):
        # Both restricted: either day; a field starting with * (*/2): both.
        self.assertEqual(cron_in_words("15 2 1-7 * 1"),
                         "on days 1-7 of the month or on Monday at 02:15")
        self.assertEqual(cron_in_words("0 0 */2 * 1"),
                         "on every 2nd day of the month from day 1 if a Monday at 00:00")

    def test_every_chain_and_zone(self):
        self.assertEqual(in_words("cron", "0 3 * * *", BERLIN), "every day at 03:00 Europe/Berlin")
        self.assertEqual(in_words("every", "15m", BERLIN), "every 15 min")
        self.assertEqual(in_words("every", "1h", BERLIN), "every hour")
        self.assertEqual(in_words("every", "90m", BERLIN), "every 90 min")
        self.assertEqual(in_words("every", "2d", BERLIN), "every 2 days")
        self.assertEqual(in_words("every", "45s", BERLIN), "every 45 s")
        self.assertEqual(in_words("after", "books", BERLIN, ("healthy",)),
                         "after books when healthy")
        self.assertEqual(in_words("after", "schedule:nightly", BERLIN, ("finished", "failed")),
                         "after schedule nightly when finished or failed")


def berlin(*fields, fold=0):
    return datetime(*fields, tzinfo=rule_of(cron="@daily", tz=BERLIN).zone,
                    fold=fold).timestamp()


class UpcomingTests(unittest.TestCase):
    def shown(self, rule, first, count=5, anchor=0.0):
        return [iso_time(t, rule.zone) for t in upcoming(rule, anchor, first, count)]

    def test_a_fixed_time_across_the_spring_forward_runs_once_right_after_the_jump(self):
        rule = rule_of(cron="30 2 * * *", tz=BERLIN)
        first = berlin(2026, 3, 28, 2, 30)
        self.assertEqual(self.shown(rule, first, 3), [
            "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00"])

    def test_a_fixed_time_in_the_repeated_hour_of_the_fall_back_runs_once(self):
        rule = rule_of(cron="30 2 * * *", tz=BERLIN)
        first = berlin(2026, 10, 24, 2, 30)
        self.assertEqual(self.shown(rule, first, 3), [
            "2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+01:00"])

    def test_hourly_goes_by_the_wall_clock_through_the_fall_back(self):
        rule = rule_of(cron="@hourly", tz=BERLIN)
        first = berlin(2026, 10, 25, 1, 0)
        self.assertEqual(self.shown(rule, first, 4), [
            "2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"])

    def test_an_interval_is_elapsed_time_blind_to_dst(self):
        rule = rule_of(every="12h", tz=BERLIN)
        anchor = berlin(2026, 3, 28, 8, 0)
        first = anchor + 12 * 3600
        self.assertEqual(self.shown(rule, first, 3, anchor=anchor), [
            "2026-03-28T20:00:00+01:00", "2026-03-29T09:00:00+02:00",
            "2026-03-29T21:00:00+02:00"])


def record(**fields):
    defaults = dict(name="nightly", project="shop", spider="books", kind="cron",
                    rule="0 3 * * *", tz=BERLIN, anchor=berlin(2026, 12, 1, 12, 0),
                    next_due=berlin(2026, 12, 2, 3, 0))
    return ScheduleRecord(**{**defaults, **fields})


class ListingTests(unittest.TestCase):
    def entry(self, record, count=5):
        entry = {}
        _add_upcoming(entry, record, rule_of(cron="@daily", tz=BERLIN).zone, count)
        return entry

    def test_the_next_runs_from_the_stored_next_due_time(self):
        self.assertEqual(self.entry(record(), 2), {"upcoming": [
            "2026-12-02T03:00:00+01:00", "2026-12-03T03:00:00+01:00"]})

    def test_with_jitter_when_each_job_starts(self):
        entry = self.entry(record(jitter=600.0), 2)
        offset = jitter_offset("nightly", 600.0)
        self.assertEqual(entry["upcoming_starts"], [
            iso_time(berlin(2026, 12, day, 3, 0) + offset, rule_of(cron="@daily", tz=BERLIN).zone)
            for day in (2, 3)])

    def test_paused_and_chains_have_none(self):
        self.assertEqual(self.entry(record(paused=True)), {"upcoming": []})
        self.assertEqual(self.entry(record(kind="after", rule="books", next_due=None)),
                         {"upcoming": []})

    def test_the_count_is_checked(self):
        self.assertIsNone(_upcoming_count(None))
        self.assertEqual(_upcoming_count("5"), 5)
        self.assertEqual(_upcoming_count(str(MAX_UPCOMING)), MAX_UPCOMING)
        for bad in ("0", "21", "-1", "five", "2.5"):
            with self.assertRaises(ApiError) as caught:
                _upcoming_count(bad)
            self.assertEqual(caught.exception.code, 400)
            self.assertIn(f"parameter 'upcoming': {bad!r} is not a number of runs from 1 to 20",
                          caught.exception.message)
