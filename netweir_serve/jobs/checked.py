"""A job checked before it is queued, as the job core sees it: what the
ISpiderReader answers (a CheckedJob, or an InspectError saying why not) and
how a setting given as text is split. The spider reader (spiders/) is an
adapter that provides ISpiderReader with these; the core never imports it.
"""

from dataclasses import dataclass

from twisted.internet import defer

from ..names import spelled_settings
from . import datapaths


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


@dataclass(frozen=True)
class FoundSpider:
    """What ISpiderReader.checkJob answers: the spider's name as its class
    gives it, and the file that defines it."""

    spider: str
    spider_file: str


def check_job(reader, project, spider, settings, arguments, data_dir):
    """Deferred CheckedJob if ``spider`` of ``project`` can run with
    ``settings`` and ``arguments``; fails with InspectError saying why not.

    ``settings``: ``(key, value)`` pairs as the user gave them (or
    ``"KEY=VALUE"`` texts, split by ``split_setting``); a key in capitals
    names the setting in lower case (``names.setting_name``), and the
    CheckedJob has it so. Path settings must lie inside ``data_dir``
    (``DIR/data/PROJECT``; see datapaths): they are resolved here, and the
    ``reader`` (ISpiderReader) checks the job with the absolute paths, as
    the crawl will get them, while the CheckedJob keeps them as given.
    ``arguments``: ``(name, value)`` pairs, each to become an attribute of
    the spider."""
    def checked():
        given, spelled = spelled_settings(
            split_setting(item) if isinstance(item, str) else tuple(item) for item in settings)
        pairs = tuple(tuple(item) for item in arguments)
        try:
            resolved = datapaths.resolve_settings(data_dir, given)
        except ValueError as exc:
            raise InspectError(str(exc)) from None
        found = reader.checkJob(project, spider, resolved, pairs, spelled)
        return found.addCallback(lambda found: CheckedJob(
            project=project.name, spider=found.spider, spider_file=found.spider_file,
            settings=given, arguments=pairs))

    return defer.maybeDeferred(checked)
