"""Schedule times: parsing rules, cron across DST as Debian's cron runs it,
every on its grid, missed runs, a clock stepped backwards, ids and shown
times. Pure functions: every time is given, nothing sleeps."""

import os
import time
from datetime import datetime, timedelta, timezone

from twisted.trial import unittest

from netweir_serve.schedules.times import (
    MISFIRE,
    OVERLAP,
    RuleError,
    catch_up,
    dues_between,
    due_now,
    format_every,
    iso_time,
    jitter_offset,
    job_id_for,
    local_zone_name,
    parse_instant,
    parse_jitter,
    parse_cron,
    parse_every,
    parse_policy,
    parse_zone,
    rule_of,
)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def at(rule, *fields, fold=0):
    """Epoch seconds of a local time in the rule's zone."""
    return datetime(*fields, tzinfo=rule.zone, fold=fold).timestamp()


def local(rule, t):
    return datetime.fromtimestamp(t, rule.zone)


def firings(rule, start, end, anchor=None):
    """Every due time after start up to end, by next_after."""
    anchor = start if anchor is None else anchor
    out = []
    t = rule.next_after(start, anchor)
    while t < end:
        out.append(t)
        t = rule.next_after(t, anchor)
    return out


class EveryParsingTests(unittest.TestCase):
    def test_forms(self):
        for text, seconds in [
            ("90", 90),
            ("1", 1),
            ("90s", 90),
            ("15m", 900),
            ("6h", 21600),
            ("1d", 86400),
            ("1.5h", 5400),
            ("0.5m", 30),
            (" 15m ", 900),
            ("366d", 366 * 86400),
        ]:
            self.assertEqual(parse_every(text), seconds, text)

    def test_refusals(self):
        for text in [
            "0", "0s", "0.5", "0.4s", "1.5s", "-5", "+5", "5x", "", " ", "1e3",
            "15 m", "15M", "1w", "1.", ".5h", "1,5h", "367d", "99999999999999",
            "inf", "nan", "٣s", "5s\n5",
        ]:
            with self.assertRaises(RuleError, msg=text) as caught:
                parse_every(text)
            self.assertIn(f"every {text!r}", str(caught.exception))
        with self.assertRaises(RuleError):
            parse_every(None)

    def test_messages(self):
        self.assertRaisesRegex(RuleError, "too short", parse_every, "0s")
        self.assertRaisesRegex(RuleError, "too long", parse_every, "367d")
        self.assertRaisesRegex(RuleError, "whole number", parse_every, "1.5s")
        self.assertRaisesRegex(RuleError, "not a duration", parse_every, "soon")

    def test_shown(self):
        for seconds, text in [(1, "1s"), (90, "90s"), (900, "15m"), (5400, "90m"),
                              (3600, "1h"), (86400, "1d"), (90000, "25h")]:
            self.assertEqual(format_every(seconds), text)
        self.assertEqual(rule_of(every="1.5h", tz="UTC").text, "90m")


class CronParsingTests(unittest.TestCase):
    def sequence(self, cron, start, count, tz="UTC"):
        rule = rule_of(cron=cron, tz=tz)
        t = at(rule, *start)
        out = []
        for _ in range(count):
            t = rule.next_after(t, 0)
            out.append(local(rule, t).strftime("%a %Y-%m-%d %H:%M"))
        return out

    def test_forms(self):
        start = (2026, 1, 1)  # a Thursday
        self.assertEqual(
            self.sequence("*/15 * * * *", start, 3),
            ["Thu 2026-01-01 00:15", "Thu 2026-01-01 00:30", "Thu 2026-01-01 00:45"],
        )
        self.assertEqual(
            self.sequence("0 9-17/4 * * *", start, 4),
            ["Thu 2026-01-01 09:00", "Thu 2026-01-01 13:00", "Thu 2026-01-01 17:00",
             "Fri 2026-01-02 09:00"],
        )
        self.assertEqual(
            self.sequence("0,30 8,20 * * *", start, 5),
            ["Thu 2026-01-01 08:00", "Thu 2026-01-01 08:30", "Thu 2026-01-01 20:00",
             "Thu 2026-01-01 20:30", "Fri 2026-01-02 08:00"],
        )
        self.assertEqual(
            self.sequence("0 9 * * MON-FRI", start, 3),
            ["Thu 2026-01-01 09:00", "Fri 2026-01-02 09:00", "Mon 2026-01-05 09:00"],
        )
        self.assertEqual(
            self.sequence("0 0 1 jan,Jul *", start, 2),
            ["Wed 2026-07-01 00:00", "Fri 2027-01-01 00:00"],
        )
        self.assertEqual(  # 7 is Sunday, as 0 is
            self.sequence("0 12 * * 7", start, 1), ["Sun 2026-01-04 12:00"]
        )
        # Debian's cron: with neither day field a star, a day matches either.
        self.assertEqual(
            self.sequence("0 0 13 * FRI", start, 3),
            ["Fri 2026-01-02 00:00", "Fri 2026-01-09 00:00", "Tue 2026-01-13 00:00"],
        )

    def test_macros(self):
        start = (2026, 1, 7, 12, 0)  # a Wednesday
        self.assertEqual(
            self.sequence("@hourly", start, 2),
            ["Wed 2026-01-07 13:00", "Wed 2026-01-07 14:00"],
        )
        for daily in ("@daily", "@midnight"):
            self.assertEqual(
                self.sequence(daily, start, 2),
                ["Thu 2026-01-08 00:00", "Fri 2026-01-09 00:00"],
            )
        self.assertEqual(
            self.sequence("@weekly", start, 2),
            ["Sun 2026-01-11 00:00", "Sun 2026-01-18 00:00"],
        )
        self.assertEqual(
            self.sequence("@monthly", start, 2),
            ["Sun 2026-02-01 00:00", "Sun 2026-03-01 00:00"],
        )
        for yearly in ("@yearly", "@annually", "@YEARLY"):
            self.assertEqual(
                self.sequence(yearly, start, 2),
                ["Fri 2027-01-01 00:00", "Sat 2028-01-01 00:00"],
            )

    def test_shown(self):
        self.assertEqual(parse_cron("  0   3 * *\t* "), ("0 3 * * *", "0 3 * * *"))
        self.assertEqual(parse_cron("@Daily"), ("@daily", "0 0 * * *"))
        rule = rule_of(cron="@weekly", tz="UTC")
        self.assertEqual((rule.kind, rule.text, rule.expression, rule.interval),
                         ("cron", "@weekly", "0 0 * * 0", None))

    def test_refusals(self):
        for text, says in [
            ("* * * *", "4 fields, not 5"),
            ("* * * * * *", "6 fields, not 5"),  # cronsim's seconds field
            ("61 * * * *", "minute '61'"),
            ("* 24 * * *", "hour '24'"),
            ("* * 0 * *", "day-of-month '0'"),
            ("* * 32 * *", "day-of-month '32'"),
            ("* * * 13 *", "month '13'"),
            ("* * * * 8", "day-of-week '8'"),
            ("*/0 * * * *", "minute '*/0'"),
            ("5-1 * * * *", "minute '5-1'"),
            ("1,,2 * * * *", "minute '1,,2'"),
            ("MON * * * *", "minute 'MON'"),
            ("0 0 * JAN-FOO *", "month 'JAN-FOO'"),
            ("0 0 * * MON-JAN", "day-of-week 'MON-JAN'"),
            ("? * * * *", "minute '?'"),
            ("abc", "1 fields, not 5"),
            # cronsim's extensions beyond Debian's cron are refused
            ("0 0 L * *", "day-of-month 'L'"),
            ("0 0 LW * *", "day-of-month 'LW'"),
            ("0 0 * * 5L", "day-of-week '5L'"),
            ("0 0 * * MON#1", "day-of-week 'MON#1'"),
            ("0 0 30 2 *", "never runs"),
            ("0 0 31 4,6 *", "never runs"),
            ("@sometimes", "the @ forms are"),
            ("@reboot", "cannot be a schedule"),
        ]:
            with self.assertRaises(RuleError, msg=text) as caught:
                parse_cron(text)
            message = str(caught.exception)
            self.assertIn(f"cron {text!r}", message)
            self.assertIn(says, message)
        for text in ("", "   "):
            self.assertRaisesRegex(RuleError, "cron is empty", parse_cron, text)
        self.assertRaisesRegex(RuleError, "longer than", parse_cron, "1," * 200 + "2 * * * *")

    def test_exactly_one(self):
        self.assertRaisesRegex(RuleError, "needs cron=EXPR or every=DURATION", rule_of)
        self.assertRaisesRegex(RuleError, "not both", rule_of, cron="@daily", every="1d")
        self.assertRaisesRegex(RuleError, "tz 'Mars/Olympus'", rule_of,
                               cron="@daily", tz="Mars/Olympus")


class ZoneTests(unittest.TestCase):
    def test_names(self):
        name, zone = parse_zone(BERLIN)
        self.assertEqual(name, BERLIN)
        self.assertEqual(datetime(2026, 7, 1, tzinfo=zone).utcoffset(), timedelta(hours=2))
        self.assertEqual(parse_zone("UTC")[0], "UTC")
        self.assertEqual(parse_zone("Etc/GMT+5")[0], "Etc/GMT+5")

    def test_refusals(self):
        for name in ["Mars/Olympus", "europe/berlin", "Europe", "Europe/", "",
                     "../etc/passwd", "/etc/localtime", "localtime", "right/UTC",
                     "posix/Europe/Berlin", "Europe/Berlin\x00", " UTC"]:
            with self.assertRaises(RuleError, msg=name) as caught:
                parse_zone(name)
            self.assertIn(f"tz {name!r} is not a time zone", str(caught.exception))

    def root(self, localtime=None, timezone_file=None):
        root = self.mktemp()
        os.makedirs(os.path.join(root, "etc"))
        if localtime is not None:
            os.symlink(localtime, os.path.join(root, "etc", "localtime"))
        if timezone_file is not None:
            with open(os.path.join(root, "etc", "timezone"), "w") as f:
                f.write(timezone_file)
        return root

    def test_local_from_environment(self):
        empty = self.root()
        for tz, name in [
            (BERLIN, BERLIN),
            (":" + NEW_YORK, NEW_YORK),
            ("/usr/share/zoneinfo/Europe/Berlin", BERLIN),
            ("", "UTC"),  # glibc: an empty TZ is UTC
            ("Mars/Olympus", "UTC"),  # and so is one it cannot find
            ("CET-1CEST,M3.5.0,M10.5.0/3", "UTC"),
        ]:
            self.assertEqual(local_zone_name({"TZ": tz}, empty), name, tz)
        linked = self.root(localtime="/usr/share/zoneinfo/America/New_York")
        self.assertEqual(local_zone_name({"TZ": BERLIN}, linked), BERLIN)
        self.assertEqual(local_zone_name({"TZ": ":/etc/localtime"}, linked), NEW_YORK)

    def test_local_from_system(self):
        linked = self.root(localtime="/usr/share/zoneinfo/America/New_York",
                           timezone_file="Europe/Berlin\n")
        self.assertEqual(local_zone_name({}, linked), NEW_YORK)
        relative = self.root(localtime="../usr/share/zoneinfo/Europe/Berlin")
        self.assertEqual(local_zone_name({}, relative), BERLIN)
        named = self.root(timezone_file="Europe/Berlin\n")
        self.assertEqual(local_zone_name({}, named), BERLIN)
        odd = self.root(localtime="/nowhere", timezone_file="Mars/Olympus\n")
        self.assertEqual(local_zone_name({}, odd), "UTC")
        self.assertEqual(local_zone_name({}, self.root()), "UTC")

    def test_default_zone_is_named(self):
        named = self.root(timezone_file="Europe/Berlin\n")
        name, zone = parse_zone(None, {}, named)
        self.assertEqual(name, BERLIN)
        rule = rule_of(cron="@daily", environ={}, root=named)
        self.assertEqual((rule.zone_name, rule.zone), (BERLIN, zone))


class DaylightSavingTests(unittest.TestCase):
    """A year of firings, 2026, as Debian's cron runs them. The 2026 changes:
    Berlin 29 March 02:00 -> 03:00 and 25 October 03:00 -> 02:00 (02:xx
    twice); New York 8 March 02:00 -> 03:00 and 1 November 02:00 -> 01:00
    (01:xx twice)."""

    def year(self, cron, tz):
        rule = rule_of(cron=cron, tz=tz)
        times = firings(rule, at(rule, 2026, 1, 1), at(rule, 2027, 1, 1))
        return rule, [local(rule, t) for t in times]

    def assertDaily(self, cron, tz, exceptions):
        """One firing on each of the 365 days, at the expression's time but
        on the days in exceptions (date -> ISO time)."""
        rule, times = self.year(cron, tz)
        self.assertEqual(len(times), 365)
        self.assertEqual(len({t.date() for t in times}), 365)
        minute, hour = (int(f) for f in cron.split()[:2])
        for t in times:
            if t.date() in exceptions:
                self.assertEqual(t.isoformat(), exceptions[t.date()])
            else:
                self.assertEqual((t.hour, t.minute, t.second), (hour, minute, 0), t)
        return times

    def test_fixed_time_outside_changes(self):
        self.assertDaily("0 3 * * *", BERLIN, {})
        self.assertDaily("0 3 * * *", NEW_YORK, {})
        self.assertDaily("30 2 * * *", NEW_YORK, {
            # skipped by the spring-forward: once, right after the jump
            datetime(2026, 3, 8).date(): "2026-03-08T03:00:00-04:00",
        })

    def test_skipped_time_runs_once_after_the_jump(self):
        times = self.assertDaily("30 2 * * *", BERLIN, {
            datetime(2026, 3, 29).date(): "2026-03-29T03:00:00+02:00",
            # repeated by the fall-back: once, the first time
            datetime(2026, 10, 25).date(): "2026-10-25T02:30:00+02:00",
        })
        # the day before the jump and the day after still 02:30, 24h apart
        by_day = {t.date(): t for t in times}
        self.assertEqual(by_day[datetime(2026, 3, 28).date()].isoformat(),
                         "2026-03-28T02:30:00+01:00")
        self.assertEqual(by_day[datetime(2026, 3, 30).date()].isoformat(),
                         "2026-03-30T02:30:00+02:00")

    def test_repeated_time_runs_once(self):
        self.assertDaily("30 1 * * *", NEW_YORK, {
            datetime(2026, 11, 1).date(): "2026-11-01T01:30:00-04:00",
        })
        self.assertDaily("30 1 * * *", BERLIN, {})

    def test_from_inside_the_repeated_hour(self):
        # cronsim walks fixed times in wall-clock time; from the second pass
        # of the repeated hour its answer (the first pass) is already past,
        # and the rule still answers strictly after.
        rule = rule_of(cron="30 1 * * *", tz=NEW_YORK)
        second_pass = at(rule, 2026, 11, 1, 1, 10, fold=1)
        self.assertEqual(iso_time(rule.next_after(second_pass, 0), rule.zone),
                         "2026-11-02T01:30:00-05:00")
        self.assertEqual(iso_time(rule.latest_at_or_before(second_pass, 0), rule.zone),
                         "2026-11-01T01:30:00-04:00")
        every_minute = rule_of(cron="0-59 1 * * *", tz=NEW_YORK)
        self.assertEqual(iso_time(every_minute.next_after(second_pass, 0), rule.zone),
                         "2026-11-02T01:00:00-05:00")

    def test_hourly_follows_the_wall_clock(self):
        # Debian's cron special-cases only jobs at a fixed hour: @hourly
        # ("0 * * * *", its hour a star) is scheduled normally, every hour
        # the wall clock shows, so a fall-back day has 25 runs (01:00 twice
        # in New York) and a spring-forward day 23 (no 02:00). cronsim's
        # README and DST tests say the same.
        for tz, spring, fall, repeated in [
            (NEW_YORK, (2026, 3, 8), (2026, 11, 1), 1),
            (BERLIN, (2026, 3, 29), (2026, 10, 25), 2),
        ]:
            rule = rule_of(cron="@hourly", tz=tz)
            day = firings(rule, at(rule, *spring) - 1, at(rule, *spring) + 86400 - 3600)
            self.assertEqual(len(day), 23, tz)
            self.assertNotIn(2, [local(rule, t).hour for t in day])
            start = at(rule, *fall) - 1
            day = firings(rule, start, at(rule, *fall[:2], fall[2] + 1) - 1)
            self.assertEqual(len(day), 25, tz)
            hours = [local(rule, t).hour for t in day]
            self.assertEqual(hours.count(repeated), 2)
            self.assertEqual([b - a for a, b in zip(day, day[1:])], [3600] * 24)

    def test_every_is_elapsed_time(self):
        # every ignores DST: 1d is 86400 s, so 03:00 becomes 04:00 in summer
        rule = rule_of(every="1d", tz=BERLIN)
        anchor = at(rule, 2026, 3, 27, 3)
        shown = [iso_time(t, rule.zone) for t in
                 firings(rule, anchor, anchor + 3 * 86400 + 1)]
        self.assertEqual(shown, ["2026-03-28T03:00:00+01:00",
                                 "2026-03-29T04:00:00+02:00",
                                 "2026-03-30T04:00:00+02:00"])


class GridTests(unittest.TestCase):
    def test_every_on_its_grid(self):
        rule = rule_of(every="15m", tz="UTC")
        anchor = 1767225600.25  # 2026-01-01T00:00:00.25Z, added then
        self.assertEqual(rule.first_due(anchor), anchor + 900)
        self.assertEqual(rule.next_after(anchor - 5000, anchor), anchor + 900)
        self.assertEqual(rule.next_after(anchor + 900, anchor), anchor + 1800)
        self.assertEqual(rule.next_after(anchor + 900 * 5 + 123, anchor), anchor + 900 * 6)
        # a timer that wakes late, and jobs that take long, never move it
        due, fired = rule.first_due(anchor), []
        for lateness in [0, 0.5, 12, 3, 899, 0.001, 40]:
            now = due + lateness
            fire, due = due_now(rule, anchor, due, fired[-1] if fired else None,
                                now, "once")
            fired.append(fire)
        self.assertEqual(fired, [anchor + 900 * k for k in range(1, 8)])

    def test_cron_strictly_after(self):
        rule = rule_of(cron="0 3 * * *", tz=BERLIN)
        three = at(rule, 2026, 6, 1, 3)
        self.assertEqual(rule.next_after(three - 0.5, 0), three)
        self.assertEqual(rule.next_after(three, 0), three + 86400)
        self.assertEqual(rule.first_due(three), three + 86400)
        self.assertEqual(rule.first_due(three - 60), three)
        self.assertEqual(rule.latest_at_or_before(three, 0), three)
        self.assertEqual(rule.latest_at_or_before(three - 0.5, 0), three - 86400)


class MissedRunTests(unittest.TestCase):
    def test_nothing_missed(self):
        rule = rule_of(cron="0 3 * * *", tz=BERLIN)
        due = at(rule, 2026, 6, 2, 3)
        for misfire in MISFIRE:
            self.assertEqual(catch_up(rule, 0, due, None, due - 1, misfire), (None, due))

    def test_long_stop(self):
        rule = rule_of(cron="0 3 * * *", tz=BERLIN)
        due = at(rule, 2026, 1, 2, 3)
        now = at(rule, 2026, 7, 10, 12)
        fire, upcoming = catch_up(rule, 0, due, at(rule, 2026, 1, 1, 3), now, "once")
        self.assertEqual(iso_time(fire, rule.zone), "2026-07-10T03:00:00+02:00")
        self.assertEqual(iso_time(upcoming, rule.zone), "2026-07-11T03:00:00+02:00")
        self.assertEqual(catch_up(rule, 0, due, None, now, "skip"), (None, upcoming))

    def test_due_exactly_now(self):
        rule = rule_of(cron="0 3 * * *", tz=BERLIN)
        due = at(rule, 2026, 6, 2, 3)
        for misfire in MISFIRE:
            self.assertEqual(catch_up(rule, 0, due, None, due, misfire),
                             (due, due + 86400))

    def test_grace(self):
        rule = rule_of(cron="0 3 * * *", tz=BERLIN)
        due = at(rule, 2026, 6, 2, 3)
        # the timer woke a little late: on time, whatever the policy
        self.assertEqual(due_now(rule, 0, due, None, due + 5, "skip"), (due, due + 86400))
        # but not at start-up: that run was missed while the service was down
        self.assertEqual(catch_up(rule, 0, due, None, due + 5, "skip"), (None, due + 86400))
        # far too late: missed
        self.assertEqual(due_now(rule, 0, due, None, due + 120, "skip"), (None, due + 86400))
        self.assertEqual(due_now(rule, 0, due, None, due + 120, "once"), (due, due + 86400))

    def test_several_due_come_to_one(self):
        rule = rule_of(every="1s", tz="UTC")
        anchor = 1767225600.0
        # a reactor busy for 30 s: one job, the latest due time, on time
        self.assertEqual(due_now(rule, anchor, anchor + 1, None, anchor + 30.5, "skip"),
                         (anchor + 30, anchor + 31))

    def test_every_second_missed_for_a_year(self):
        rule = rule_of(every="1s", tz="UTC")
        anchor = 1767225600.5
        now = anchor + 365 * 86400 + 0.25
        started = time.perf_counter()
        once = catch_up(rule, anchor, anchor + 1, anchor, now, "once")
        skip = catch_up(rule, anchor, anchor + 1, anchor, now, "skip")
        self.assertLess(time.perf_counter() - started, 0.5)
        self.assertEqual(once, (anchor + 365 * 86400, anchor + 365 * 86400 + 1))
        self.assertEqual(skip, (None, anchor + 365 * 86400 + 1))

    def test_every_minute_missed_for_a_year(self):
        for tz in ("UTC", BERLIN, NEW_YORK):
            rule = rule_of(cron="* * * * *", tz=tz)
            stopped = at(rule, 2026, 1, 1)
            now = at(rule, 2027, 1, 1, 12, 34, 56)
            started = time.perf_counter()
            once = catch_up(rule, 0, stopped + 60, stopped, now, "once")
            skip = catch_up(rule, 0, stopped + 60, stopped, now, "skip")
            self.assertLess(time.perf_counter() - started, 0.5)
            self.assertEqual(once, (now - 56, now + 4))
            self.assertEqual(skip, (None, now + 4))

    def test_missed_across_the_repeated_hour(self):
        # back up in the second pass of New York's repeated hour: the first
        # pass's 01:30 was the latest run missed
        rule = rule_of(cron="30 1 * * *", tz=NEW_YORK)
        due = at(rule, 2026, 10, 30, 1, 30)
        now = at(rule, 2026, 11, 1, 1, 10, fold=1)
        fire, upcoming = catch_up(rule, 0, due, None, now, "once")
        self.assertEqual(iso_time(fire, rule.zone), "2026-11-01T01:30:00-04:00")
        self.assertEqual(iso_time(upcoming, rule.zone), "2026-11-02T01:30:00-05:00")

    def test_not_computed_yet(self):
        rule = rule_of(every="10m", tz="UTC")
        anchor = 1767225600.0
        self.assertEqual(due_now(rule, anchor, None, None, anchor + 1, "once"),
                         (None, anchor + 600))

    def test_unknown_policy(self):
        rule = rule_of(every="10m", tz="UTC")
        self.assertRaises(ValueError, due_now, rule, 0, 600, None, 700, "sometimes")


class BackwardsClockTests(unittest.TestCase):
    def test_nothing_fires_twice(self):
        rule = rule_of(cron="*/10 * * * *", tz=BERLIN)
        anchor = at(rule, 2026, 6, 1, 12)
        next_due, last_due, fired = rule.first_due(anchor), None, []
        # the clock runs, is stepped back an hour, runs, is stepped forward
        nows = [anchor + 60 * m for m in range(0, 61, 5)]
        nows += [anchor + 60 * m for m in range(0, 121, 5)]
        nows += [anchor + 86400 + 60 * m for m in range(0, 21, 5)]
        for now in nows:
            fire, next_due = due_now(rule, anchor, next_due, last_due, now, "once")
            self.assertGreater(next_due, now if last_due is None else min(now, last_due))
            if fire is not None:
                fired.append(fire)
                last_due = fire
        self.assertEqual(fired, sorted(set(fired)))
        self.assertEqual(len({job_id_for("n", t) for t in fired}), len(fired))
        shown = [local(rule, t).strftime("%d %H:%M") for t in fired]
        self.assertEqual(shown, ["01 12:10", "01 12:20", "01 12:30", "01 12:40",
                                 "01 12:50", "01 13:00", "01 13:10", "01 13:20",
                                 "01 13:30", "01 13:40", "01 13:50", "01 14:00",
                                 "02 12:00", "02 12:10", "02 12:20"])

    def test_stored_next_due_behind_the_last_fired(self):
        rule = rule_of(every="1m", tz="UTC")
        anchor = 1767225600.0
        # the clock was stepped back after anchor + 600 fired
        self.assertEqual(due_now(rule, anchor, anchor + 300, anchor + 600, anchor + 320,
                                 "once"), (None, anchor + 660))
        self.assertEqual(catch_up(rule, anchor, anchor + 300, anchor + 600, anchor + 700,
                                  "once"), (anchor + 660, anchor + 720))


class ShownTests(unittest.TestCase):
    def test_job_ids(self):
        berlin = rule_of(cron="0 3 * * *", tz=BERLIN)
        self.assertEqual(job_id_for("nightly", at(berlin, 2026, 12, 2, 3)),
                         "nightly-20261202T020000Z")
        self.assertEqual(job_id_for("nightly", at(berlin, 2026, 7, 2, 3)),
                         "nightly-20260702T010000Z")
        self.assertEqual(job_id_for("n.1", 1767225600.999), "n.1-20260101T000000Z")
        new_york = rule_of(cron="30 1 * * *", tz=NEW_YORK)
        first = at(new_york, 2026, 11, 1, 1, 30)
        second = at(new_york, 2026, 11, 1, 1, 30, fold=1)
        self.assertEqual([job_id_for("n", first), job_id_for("n", second)],
                         ["n-20261101T053000Z", "n-20261101T063000Z"])

    def test_iso_times(self):
        berlin = parse_zone(BERLIN)[1]
        new_york = parse_zone(NEW_YORK)[1]
        winter = datetime(2026, 12, 2, 2, tzinfo=timezone.utc).timestamp()
        summer = datetime(2026, 7, 2, 2, tzinfo=timezone.utc).timestamp()
        self.assertEqual(iso_time(winter, berlin), "2026-12-02T03:00:00+01:00")
        self.assertEqual(iso_time(summer, berlin), "2026-07-02T04:00:00+02:00")
        self.assertEqual(iso_time(winter, new_york), "2026-12-01T21:00:00-05:00")
        self.assertEqual(iso_time(summer + 0.75, new_york), "2026-07-01T22:00:00-04:00")
        self.assertEqual(iso_time(winter, parse_zone("UTC")[1]),
                         "2026-12-02T02:00:00+00:00")
        self.assertIsNone(iso_time(None, berlin))


class PolicyTests(unittest.TestCase):
    def test_policies(self):
        for kind, choices in (("overlap", OVERLAP), ("misfire", MISFIRE)):
            for choice in choices:
                self.assertEqual(parse_policy(kind, choice), choice)
        # Temporal's, with queue, the first name of buffer_one, kept.
        self.assertEqual(OVERLAP, ("skip", "buffer_one", "buffer_all", "cancel_other",
                                   "terminate_other", "allow", "queue"))
        self.assertEqual(MISFIRE, ("once", "skip"))

    def test_refusals(self):
        self.assertRaisesRegex(
            RuleError, r"^overlap 'sometimes' is not a policy: give skip, buffer_one,"
                       r" buffer_all, cancel_other, terminate_other, allow or queue$",
            parse_policy, "overlap", "sometimes")
        self.assertRaisesRegex(
            RuleError, r"^misfire 'ONCE' is not a policy: give once or skip$",
            parse_policy, "misfire", "ONCE")
        self.assertRaisesRegex(RuleError, "misfire None", parse_policy, "misfire", None)


# jitter_offset("nightly", 3600), as it must stay.
NIGHTLY_OFFSET = 593


class JitterTests(unittest.TestCase):
    def test_an_offset_stays_within_its_jitter_for_every_name(self):
        for jitter in (1, 2, 7, 60, 3600, 86400):
            offsets = [jitter_offset(f"s{n}", jitter) for n in range(500)]
            self.assertTrue(all(0 <= o < jitter for o in offsets), jitter)
            self.assertTrue(all(isinstance(o, int) for o in offsets))
        self.assertEqual(jitter_offset("any", 0), 0)
        self.assertEqual(jitter_offset("any", None), 0)

    def test_offsets_spread_a_thousand_names_over_the_jitter(self):
        offsets = [jitter_offset(f"daily-{n}", 3600) for n in range(1000)]
        quarters = [sum(1 for o in offsets if q * 900 <= o < (q + 1) * 900) for q in range(4)]
        self.assertTrue(all(200 < n < 300 for n in quarters), quarters)

    def test_an_offset_is_the_same_for_a_name_in_any_case_and_any_process(self):
        self.assertEqual(jitter_offset("Nightly", 3600), jitter_offset("nightly", 3600))
        # Not Python's salted hash(): another interpreter gives the same.
        import subprocess
        import sys
        other = subprocess.run(
            [sys.executable, "-c", "from netweir_serve.schedules.times import jitter_offset;"
             " print(jitter_offset('nightly', 3600))"],
            capture_output=True, text=True, check=True, env={**os.environ,
                                                              "PYTHONHASHSEED": "random"})
        self.assertEqual(int(other.stdout), jitter_offset("nightly", 3600))
        # A fixed value: a change of the hash would move every schedule.
        self.assertEqual(jitter_offset("nightly", 3600), NIGHTLY_OFFSET)

    def test_jitter_durations(self):
        self.assertEqual([parse_jitter(t) for t in ("0", "90", "30s", "15m", "2h", "1d")],
                         [0, 90, 30, 900, 7200, 86400])
        for text, why in (("2d", "too long: the most is 1d"), ("soon", "not a duration"),
                          ("1.5s", "not a whole number"), ("-5m", "not a duration")):
            self.assertRaisesRegex(RuleError, f"^jitter '{text}' is {why}", parse_jitter, text)


class DuesBetweenTests(unittest.TestCase):
    def test_every_includes_from_excludes_to_and_runs_before_its_anchor(self):
        rule = rule_of(every="1h", tz="UTC")
        anchor = 100 * 3600.0
        self.assertEqual(dues_between(rule, anchor, 97 * 3600.0, 100 * 3600.0, 100),
                         [97 * 3600.0, 98 * 3600.0, 99 * 3600.0])
        self.assertEqual(dues_between(rule, anchor, 97 * 3600.0 + 1, 99 * 3600.0 + 1, 100),
                         [98 * 3600.0, 99 * 3600.0])

    def test_cron_in_its_zone_and_one_more_than_asked_says_too_many(self):
        rule = rule_of(cron="0 3 * * *", tz="Europe/Berlin")
        start = datetime(2026, 3, 1, 3, tzinfo=rule.zone).timestamp()
        end = datetime(2026, 3, 4, 3, tzinfo=rule.zone).timestamp()
        dues = dues_between(rule, 0.0, start, end, 100)
        self.assertEqual([datetime.fromtimestamp(d, rule.zone).day for d in dues], [1, 2, 3])
        self.assertEqual(len(dues_between(rule, 0.0, start, start + 400 * 86400, 100)), 101)

    def test_iso_instants_name_their_parameter(self):
        berlin = parse_zone("Europe/Berlin")[1]
        self.assertEqual(parse_instant("from", "2026-12-01T00:00:00Z", berlin),
                         datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp())
        self.assertEqual(parse_instant("from", "2026-12-01T01:00:00", berlin),
                         datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp())
        self.assertRaisesRegex(RuleError, "^parameter 'to': 'tomorrow' is not an ISO 8601",
                               parse_instant, "to", "tomorrow", berlin)
