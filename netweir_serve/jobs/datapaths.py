"""Where a job's path settings may point: inside its project's data directory.

``checkpoint``, ``cache``, ``deltafetch``, ``warc`` and ``har`` name a file
or directory the crawl writes to. Anyone who can schedule a job chooses
them, so each is taken as a path relative to ``DIR/data/PROJECT`` and
refused if it could land anywhere else. The rules are checked when a job is
scheduled and again when it starts (a symlink may have changed in between).

Pure and synchronous: a few ``lstat`` calls, nothing is created.
"""

import os
import re

PATH_SETTINGS = ("checkpoint", "cache", "deltafetch", "warc", "har")

# "s3://b", "file:///etc", "http:x": a scheme, then a colon. A plain
# relative name never needs a colon before its first slash.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")

_WHERE = "a relative path inside the project's data directory"


def _components(value):
    separators = "/" + (os.sep if os.sep != "/" else "") + (os.altsep or "")
    return re.split("[" + re.escape(separators) + "]", value)


def _problem(data_dir, key, value):
    """Why ``key=value`` may not be used, as a sentence, or None."""
    if not isinstance(value, str) or not value:
        return f"setting {key} is empty: give {_WHERE}"
    shown = f"setting {key}={value!r}"
    if "\0" in value:
        return f"{shown} holds a NUL character: give {_WHERE}"
    if "://" in value or _URL.match(value):
        return f"{shown} is a URL: {key} must be {_WHERE}, not a URL"
    if os.path.isabs(value) or value.startswith(("/", "\\")):
        return f"{shown} is an absolute path: {key} must be {_WHERE}"
    if ".." in _components(value):
        return f"{shown} contains '..': {key} must be {_WHERE}, and can't climb out of it"
    root = os.path.realpath(data_dir)
    real = os.path.realpath(os.path.join(data_dir, value))
    if real == root:
        return f"{shown} is the data directory itself: name a file or directory inside it"
    if os.path.commonpath([root, real]) != root:
        return (
            f"{shown} leads outside the project's data directory through a symlink:"
            f" {key} must stay inside it"
        )
    return None


def means_none(value):
    """Whether ``value`` is ``none`` (any case), which ``netweir crawl -s``
    reads as None for these settings: no file at all, not one called none."""
    return isinstance(value, str) and value.lower() == "none"


def resolve(data_dir, key, value):
    """The absolute path that setting ``key`` = ``value`` names inside
    ``data_dir`` (the project's ``DIR/data/PROJECT``), normalized but with
    symlinks left as they are; or ``value`` itself when it is ``none`` (any
    case), which turns the setting off (see ``means_none``).

    Raises ValueError, with a message naming the setting and the rule it
    breaks, for an empty value, a URL, an absolute path, a ``..`` component,
    the data directory itself, or a path that symlinks inside ``data_dir``
    lead out of it. ``data_dir`` need not exist yet."""
    if means_none(value):
        return value
    problem = _problem(data_dir, key, value)
    if problem:
        raise ValueError(problem)
    return os.path.normpath(os.path.join(os.path.abspath(data_dir), value))


def resolve_settings(data_dir, settings):
    """``settings`` (``(key, value)`` pairs) with each path setting's value
    passed through ``resolve``; other pairs, and pairs without a value
    (None), are kept as they are. Raises ValueError as ``resolve`` does."""
    resolved = []
    for key, value in settings:
        if key in PATH_SETTINGS and value is not None:
            value = resolve(data_dir, key, value)
        resolved.append((key, value))
    return resolved


def prepare(data_dir, key, value):
    """``resolve``, then make the folders the path goes in (all inside
    ``data_dir``), since the crawl refuses a warc or har file whose folder
    does not exist. Returns what ``resolve`` returns."""
    path = resolve(data_dir, key, value)
    if not means_none(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return path
