"""The one rule for project, spider and job names, and fresh job ids."""

import re
import secrets

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")

# Long enough for any real name, short enough that a name is never a way to
# make a path or a log line unreasonably long.
MAX_NAME_LENGTH = 200
# A retry of job JOBID is JOBID.r1, JOBID.r2... up to reliability.policy's
# MAX_RETRIES (10): a job id leaves room for the longest suffix, so that
# every retry's id passes the name rule too.
_LONGEST_RETRY_SUFFIX = ".r10"
MAX_JOB_ID_LENGTH = MAX_NAME_LENGTH - len(_LONGEST_RETRY_SUFFIX)
# What ends a retry's id (retry_id), in any case, as job ids ignore case: a
# user's job may not end so, or it could take the id of a retry to come
# (whose end would then queue none).
_RETRY_SUFFIX = re.compile(r"\.r[0-9]+\Z", re.IGNORECASE)


def is_name(text):
    """Whether ``text`` is letters, digits, ``.``, ``_`` and ``-``, starting
    with a letter or digit."""
    return (
        isinstance(text, str)
        and len(text) <= MAX_NAME_LENGTH
        and _NAME.match(text) is not None
    )


def name_problem(what, text):
    """A sentence saying why ``text`` is not a valid ``what`` name, or None."""
    if is_name(text):
        return None
    if not text:
        return f"{what} is empty"
    if len(text) > MAX_NAME_LENGTH:
        return f"{what} is longer than {MAX_NAME_LENGTH} characters"
    return (
        f"{what} {text!r} is not a name: use letters, digits, '.', '_' and '-',"
        " starting with a letter or digit"
    )


def job_id_problem(what, text):
    """``name_problem`` for a job id a user gives, which must leave room
    for its retries' suffix (``retry_id``) and not end as a retry's id."""
    problem = name_problem(what, text)
    if problem is None and len(text) > MAX_JOB_ID_LENGTH:
        problem = (f"{what} is longer than {MAX_JOB_ID_LENGTH} characters (a retry adds"
                   f" .r1 to .r10 to it)")
    if problem is None and _RETRY_SUFFIX.search(text):
        problem = (f"{what} {text!r} ends in {_RETRY_SUFFIX.search(text).group()}: job ids"
                   " ending in .rN are kept for retries")
    return problem


def retry_id(first, attempt):
    """The id of attempt ``attempt`` (2 or more) of the job ``first`` (the
    first attempt's id): ``first.r1`` for attempt 2, and so on."""
    return f"{first}.r{attempt - 1}"


def fold(name):
    """The form of a project name or job id used to compare it: names ignore
    case, as the same file would on macOS or Windows."""
    return name.lower()


def setting_name(key):
    """The Netweir setting a ``setting=KEY=VALUE`` names: a key in capitals
    (``MAX_ITEMS``, all a Scrapy-style form like ScrapydWeb's lets through)
    is the setting of that name in lower case, since every Netweir setting
    name is lower case; any other key is itself."""
    return key.lower() if isinstance(key, str) and key.isupper() else key


def spelled_settings(pairs):
    """``(pairs, spelled)``: ``pairs`` with each key a setting name
    (``setting_name``), and ``{setting name: key as given}`` for each key
    that changed, so that a refusal can name what the user typed."""
    named, spelled = [], {}
    for key, value in pairs:
        name = setting_name(key)
        if name != key:
            spelled[name] = key
        named.append((name, value))
    return tuple(named), spelled


def new_job_id():
    """A random 32-hex-digit job id, as scrapyd makes them."""
    return secrets.token_hex(16)
