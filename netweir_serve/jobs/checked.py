"""A job checked before it is queued, as the job core sees it: what the
ISpiderReader answers (a CheckedJob, or an InspectError saying why not) and
how a setting given as text is split. The spider reader (spiders/) is an
adapter that provides ISpiderReader with these; the core never imports it.
"""

from dataclasses import dataclass


class InspectError(Exception):
    """Listing or checking failed. ``message`` is a sentence for the person
    who made the request: which file, setting or argument, and why."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class CheckedJob:
    """A job that passed every check that can be made before it starts.

    ``settings`` are the ``(key, value)`` pairs as the user gave them, in
    their order, each key the setting it names (``MAX_ITEMS`` given is
    ``max_items`` here): path settings are still relative, for the launcher to
    resolve again (``datapaths.resolve_settings``) when the job starts."""

    project: str
    spider: str
    spider_file: str
    settings: tuple
    arguments: tuple


def split_setting(text):
    """``"KEY=VALUE"`` as the ``(key, value)`` pair checkJob takes: split at
    the first ``=``; value None when there is no ``=`` (checkJob refuses it)."""
    key, equals, value = text.partition("=")
    return (key, value if equals else None)
