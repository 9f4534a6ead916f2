"""The job table's backends."""
