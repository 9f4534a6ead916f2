"""Recurring schedules: spiders run as jobs at cron times or at intervals."""
