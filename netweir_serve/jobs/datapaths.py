"""Where a job's path settings may point: inside its project's data directory.

``checkpoint``, ``cache``, ``deltafetch``, ``warc`` and ``har`` name a file
or directory the crawl writes to. Anyone who can schedule a job chooses
them, so each is taken as a path relative to ``DIR/data/PROJECT`` and
refused if it could land anywhere else. The rules are checked when a job is
scheduled and again when it starts (a symlink may have changed in between).

``resolve`` only looks (a few ``stat`` calls); ``prepare`` and
``prepare_all`` also make the folders a path goes in, and ``prepare_all``
can take back exactly what it made. Every refusal, the file system's
included, is a ValueError whose message names the setting.

Limits, from Linux's: the absolute path a setting names is at most
``MAX_PATH_BYTES`` (4095: PATH_MAX is 4096 with the closing NUL), each name
in it at most ``MAX_NAME_BYTES`` (255, NAME_MAX), and a setting holds at most
``MAX_DEPTH`` (64) names. No crawl needs more, and a path past them would
only fail later, in the crawl, with a less helpful error.
"""

import errno
import os
import re
import stat

from .. import folders

PATH_SETTINGS = ("checkpoint", "cache", "deltafetch", "warc", "har")

MAX_PATH_BYTES = 4095
MAX_NAME_BYTES = 255
MAX_DEPTH = 64

# "s3://b", "file:///etc", "http:x": a scheme, then a colon. A plain
# relative name never needs a colon before its first slash.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")

_WHERE = "a relative path inside the project's data directory"

# Longer values are cut short in messages.
_SHOWN_CHARS = 80


def _components(value):
    separators = "/" + (os.sep if os.sep != "/" else "") + (os.altsep or "")
    return re.split("[" + re.escape(separators) + "]", value)


def _names(value):
    """The names ``value`` goes through, without empty ones and ``.``."""
    return [part for part in _components(value) if part not in ("", ".")]


def _shown(key, value):
    if len(value) > _SHOWN_CHARS:
        return f"setting {key}={value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    return f"setting {key}={value!r}"


def _reason(error):
    """``error`` (an OSError, RecursionError or ValueError) in plain words."""
    if isinstance(error, RecursionError):
        return "it is nested too deeply"
    if isinstance(error, OSError):
        if error.errno in (errno.EEXIST, errno.ENOTDIR):
            return "a file is in the way of a folder"
        if error.errno == errno.ENAMETOOLONG:
            return "the name is too long for the file system"
        return (error.strerror or str(error)).lower()
    if isinstance(error, UnicodeError):
        return "it holds characters a file name cannot have"
    return str(error)


def _problem(data_dir, key, value):
    """Why ``key=value`` may not be used, as a sentence, or None."""
    if not isinstance(value, str) or not value:
        return f"setting {key} is empty: give {_WHERE}"
    shown = _shown(key, value)
    if len(value) > MAX_PATH_BYTES:
        return f"{shown} is too long: a path can have at most {MAX_PATH_BYTES} bytes"
    if "\0" in value:
        return f"{shown} holds a NUL character: give {_WHERE}"
    if "://" in value or _URL.match(value):
        return f"{shown} is a URL: {key} must be {_WHERE}, not a URL"
    if os.path.isabs(value) or value.startswith(("/", "\\")):
        return f"{shown} is an absolute path: {key} must be {_WHERE}"
    if ".." in _components(value):
        return f"{shown} contains '..': {key} must be {_WHERE}, and can't climb out of it"
    try:
        return _file_system_problem(data_dir, key, value, shown)
    except (OSError, RecursionError, ValueError) as e:
        return f"{shown} cannot be used: {_reason(e)}"


def _file_system_problem(data_dir, key, value, shown):
    names = _names(value)
    if len(names) > MAX_DEPTH:
        return f"{shown} is too deep: a path can go at most {MAX_DEPTH} folders down"
    for name in names:
        if len(os.fsencode(name)) > MAX_NAME_BYTES:
            return (f"{shown} has a name longer than {MAX_NAME_BYTES} bytes,"
                    " the most a file name can have")
    root = os.path.realpath(data_dir)
    path = os.path.join(os.path.abspath(data_dir), *names) if names else os.path.abspath(data_dir)
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        return (f"{shown} is too long: inside the project's data directory it makes a path"
                f" longer than {MAX_PATH_BYTES} bytes")
    real = os.path.realpath(os.path.join(data_dir, value))
    if real == root:
        return f"{shown} is the data directory itself: name a file or directory inside it"
    if os.path.commonpath([root, real]) != root:
        return (
            f"{shown} leads outside the project's data directory through a symlink:"
            f" {key} must stay inside it"
        )
    return _in_the_way(data_dir, names, shown)


def _in_the_way(data_dir, names, shown):
    """Why the folders ``names`` goes through cannot be folders, or None.
    Stops at the first one missing: prepare will make it and the rest."""
    here = os.path.abspath(data_dir)
    try:
        if not stat.S_ISDIR(os.stat(here).st_mode):
            return f"{shown} cannot be used: the project's data directory is not a folder"
    except FileNotFoundError:
        return None
    for depth, name in enumerate(names[:-1], 1):
        here = os.path.join(here, name)
        try:
            mode = os.stat(here).st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(mode):
            through = "/".join(names[:depth])
            return f"{shown} goes through {through!r}, which is a file, not a folder"
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
    the data directory itself, a path that symlinks inside ``data_dir`` lead
    out of, one past the limits (see the module's docstring), one that goes
    through an existing file as if it were a folder, and any error of the
    file system while looking. ``data_dir`` need not exist yet; nothing is
    created."""
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


class PreparedPaths:
    """What ``prepare_all`` did: ``settings``, the pairs as
    ``resolve_settings`` gives them, and ``created``, the folders it made,
    outermost first. ``undo()`` takes those folders back."""

    def __init__(self, settings, created):
        self.settings = settings
        self._created = created

    @property
    def created(self):
        return tuple(path for path, _ in self._created)

    def undo(self):
        """Removes the folders this preparation made, deepest first, each
        only if it is still empty and still the very folder made (same
        device and inode), so nothing anyone else put there, and nothing
        that was there before, goes. Never raises; a second call does
        nothing."""
        created, self._created = self._created, []
        _remove(created)


def _remove(created):
    for path, identity in reversed(created):
        try:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == identity:
                os.rmdir(path)
        except OSError:
            pass


def _make_folders(folder, created):
    """Makes ``folder`` and the missing folders above it, outermost first,
    appending ``(path, (st_dev, st_ino))`` to ``created`` for each one made.
    Raises OSError; what it made by then is in ``created``."""

    def made(path):
        st = os.lstat(path)
        created.append((path, (st.st_dev, st.st_ino)))

    folders.make_folders(folders.missing_folders(folder), made)


def _cannot_make(key, value, error):
    return ValueError(f"{_shown(key, value)} cannot be used: could not make the folders"
                      f" it goes in inside the project's data directory: {_reason(error)}")


def prepare_all(data_dir, settings):
    """Checks every path setting in ``settings`` (``(key, value)`` pairs;
    a value may be None, and other settings are passed over) as ``resolve``
    does, then makes the folders each path goes in, since the crawl refuses
    a warc or har file whose folder does not exist. Returns a
    PreparedPaths, whose ``undo()`` takes back the folders made, for when
    the job is refused after all.

    Raises ValueError naming the setting if any is refused, before anything
    is made; or if a folder cannot be made (a file in the way, a read-only
    or full disk, a name too long), after taking back what it had made."""
    resolved = resolve_settings(data_dir, settings)
    created = []
    try:
        for (key, value), (_, path) in zip(settings, resolved):
            if key in PATH_SETTINGS and path is not None and not means_none(path):
                try:
                    _make_folders(os.path.dirname(path), created)
                except (OSError, RecursionError, ValueError) as e:
                    raise _cannot_make(key, value, e) from None
    except BaseException:
        _remove(created)
        raise
    return PreparedPaths(resolved, created)


def prepare(data_dir, key, value):
    """``resolve``, then make the folders the path goes in (all inside
    ``data_dir``), since the crawl refuses a warc or har file whose folder
    does not exist. Returns what ``resolve`` returns. Raises ValueError
    naming the setting, as ``prepare_all`` does; the folders it makes are
    kept."""
    path = resolve(data_dir, key, value)
    prepare_all(data_dir, [(key, value)])
    return path
