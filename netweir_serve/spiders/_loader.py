"""What runs in the processes that read a project's spider files.

This is the only module of netweir-serve that imports ``netweir``: the
daemon never loads a spider file into its own process, since a file may do
anything when it is imported (crash, hang, print, call ``os._exit``).
Checked against netweir 0.4.0. What it relies on: the fields of
``netweir.Settings`` with their types as annotation strings, the rules by
which ``netweir crawl -s`` reads values, ``Settings.__post_init__`` raising
ValueError, ``netweir.Client(profile=...)`` raising ValueError for an
unknown profile, and the name the crawl gives a spider file's module.

It answers one request (``answer``; the shapes of requests and answers are
in ``protocol``) in the process it runs in; the process plumbing around it
(one process per request, or a warm helper that forks a reader per request)
is in ``_forkserver``.
"""

import dataclasses
import importlib.util
import os
import sys

import netweir  # checked against netweir 0.4.0

from ..projects import Project
from . import protocol

# A sentence about an exception is for a person to read: a huge str() (a
# whole response body, say) would only bury the point.
MAX_EXCEPTION_TEXT = 500



class Refusal(Exception):
    """A reason, worded for the person who asked, why a listing or check
    cannot be answered with a result."""


# --- reading spider files ---------------------------------------------------


def _module_name(path):
    # The prefix the crawl itself gives a spider file's module, so a file
    # sees the same __name__ here as when it runs; never a name a sibling
    # file could be imported under.
    stem = os.path.splitext(os.path.basename(path))[0]
    return "netweir_spider_" + "".join(c if c.isalnum() else "_" for c in stem)


def _run_file(path):
    """Executes the spider file at ``path`` as a fresh module and returns it.

    The source is compiled from the file itself, never from a cached .pyc,
    so an edit made within the same second as the last read is seen."""
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with open(path, "rb") as source_file:
        source = source_file.read()
    code = compile(source, path, "exec", dont_inherit=True)
    # Registered before it runs: dataclasses and pickle look a class's
    # module up by name while the file is still executing.
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def _exception_text(exc):
    """The message of ``exc``, cut to a readable length; may be empty."""
    try:
        text = str(exc)
    except BaseException:
        text = "(its message could not be read)"
    if len(text) > MAX_EXCEPTION_TEXT:
        text = text[:MAX_EXCEPTION_TEXT] + "..."
    return text


def _describe_exception(exc):
    """``Type: message``, or ``Type`` for an exception without a message."""
    text = _exception_text(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _where_raised(exc, workdir):
    """`` (in FILE line N)`` for the innermost frame of ``exc`` outside this
    module, FILE relative to ``workdir`` when inside it; or ``""``."""
    frame_file, line = None, None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename != __file__:
            frame_file, line = filename, tb.tb_lineno
        tb = tb.tb_next
    if frame_file is None:
        return ""
    inside = frame_file.startswith(os.path.join(workdir, ""))
    shown = os.path.relpath(frame_file, workdir) if inside else frame_file
    return f" (in {shown} line {line})"


def _import_failure(path, exc, workdir):
    return (
        f"{os.path.basename(path)} failed to import: {_describe_exception(exc)}"
        f"{_where_raised(exc, workdir)}"
    )


def _spider_classes(module):
    """The netweir.Spider subclasses ``module`` defines itself: a class it
    merely imports (netweir's own bases among them) has another
    ``__module__``."""
    return [
        value
        for value in list(vars(module).values())
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and issubclass(value, netweir.Spider)
    ]


def _spider_name(cls):
    """The name ``netweir crawl --spider`` knows a spider by."""
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) and name else cls.__name__


@dataclasses.dataclass(frozen=True)
class _Found:
    name: str
    cls: type
    path: str

    def where(self):
        return f"{self.cls.__name__} in {os.path.basename(self.path)}"


def _enter(project):
    """Makes this process look like a crawl of ``project``: its folder is
    the working directory and first on sys.path, so files can import the
    files and helpers beside them. Raises Refusal if the project is gone."""
    if not os.path.exists(project.path):
        raise Refusal(f"project {project.name!r}: {project.path} no longer exists")
    os.chdir(project.workdir)
    sys.path.insert(0, project.workdir)
    # A listing must leave the user's folders as it found them.
    sys.dont_write_bytecode = True


def _load_project(project):
    """Every spider of ``project``, by name. Raises Refusal naming every
    file that fails to import, or a name that two spiders share."""
    found, failures = [], []
    for path in project.spider_files():
        try:
            module = _run_file(path)
            found.extend(_Found(_spider_name(c), c, path) for c in _spider_classes(module))
        except BaseException as exc:  # a file may even raise SystemExit
            failures.append(_import_failure(path, exc, project.workdir))
    if failures:
        raise Refusal("; ".join(failures))
    by_name = {}
    for spider in found:
        other = by_name.get(spider.name)
        if other is not None:
            raise Refusal(
                f"spider name {spider.name!r} is used by both {other.where()} and"
                f" {spider.where()}: each spider of a project needs a name of its own"
            )
        by_name[spider.name] = spider
    return by_name


def list_spiders(project):
    """The sorted names of ``project``'s spiders; raises Refusal."""
    return sorted(_load_project(project))


# --- checking a job -----------------------------------------------------------


def _find_spider(project, spiders, name):
    spider = spiders.get(name)
    if spider is None:
        known = ", ".join(sorted(spiders))
        listing = f"its spiders are: {known}" if known else "it has no spiders"
        raise Refusal(f"project {project.name!r} has no spider {name!r}; {listing}")
    # The crawl picks a class in the file by class name or by name, so a
    # second class answering to this name would make it refuse to start.
    rivals = [
        s for s in spiders.values()
        if s.path == spider.path and s is not spider
        and (s.cls.__name__ == name or getattr(s.cls, "name", None) == name)
    ]
    if rivals:
        classes = ", ".join(s.cls.__name__ for s in [spider, *rivals])
        raise Refusal(
            f"spider {name!r} is ambiguous: in {os.path.basename(spider.path)},"
            f" netweir crawl --spider {name} would match each of {classes}"
        )
    return spider


def settings_fields():
    """netweir.Settings' fields by name."""
    return {field.name: field for field in dataclasses.fields(netweir.Settings)}


def _unknown_setting(key, fields):
    hint = ""
    if key.isupper():
        hint = " (Scrapy's setting names aren't translated)"
    known = ", ".join(sorted(fields))
    return Refusal(f"unknown setting {key!r}{hint}; Netweir's settings are: {known}")


_TRUE_WORDS = ("true", "1", "yes")
_BOOL_WORDS = ("true", "false", "1", "0", "yes", "no")


def parse_setting_value(key, raw, annotation):
    """``raw`` as a value of a setting annotated ``annotation`` (a string
    such as ``"int | None"``), by the rules of ``netweir crawl -s``; raises
    Refusal naming the setting and the value."""
    kind = annotation
    if kind.endswith(" | None"):
        if raw.lower() == "none":
            return None
        kind = kind[: -len(" | None")]
    if key == "http_auth":
        # Split at the first colon, as curl -u does: a password may hold
        # colons. Never echoed: it is a password.
        user, colon, password = raw.partition(":")
        if not colon:
            raise Refusal("setting http_auth takes user:password")
        return (user, password)
    if kind.startswith("bool |"):
        # verify: true or false, or else a CA file's path.
        return raw.lower() == "true" if raw.lower() in ("true", "false") else raw
    if kind == "bool":
        if raw.lower() not in _BOOL_WORDS:
            raise Refusal(f"setting {key} takes true or false, not {raw!r}")
        return raw.lower() in _TRUE_WORDS
    if kind == "int":
        return _number(key, raw, int, "a whole number")
    if kind == "float":
        return _number(key, raw, float, "a number")
    if kind.startswith("tuple"):
        parts = tuple(part.strip() for part in raw.split(",") if part.strip())
        if kind.startswith("tuple[int"):
            what = "whole numbers, such as 500,503"
            return tuple(_number(key, part, int, what) for part in parts)
        return parts
    return raw


def _number(key, raw, kind, what):
    try:
        return kind(raw)
    except ValueError:
        raise Refusal(f"setting {key} takes {what}, not {raw!r}") from None


def _parse_settings(pairs, fields, spelled=None):
    """The overrides ``pairs`` ask for, by name (a later pair wins, as with
    repeated ``-s``); raises Refusal for a malformed or unknown one, naming
    it as ``spelled`` says it was typed ({name: as given})."""
    spelled = spelled or {}
    overrides = {}
    for key, raw in pairs:
        if raw is None:
            raise Refusal(f"setting {key!r} has no value: give it as setting=KEY=VALUE")
        if not key:
            raise Refusal(f"setting {'=' + raw!r} has no name: give it as setting=KEY=VALUE")
        if key not in fields:
            raise _unknown_setting(spelled.get(key, key), fields)
        overrides[key] = parse_setting_value(key, raw, str(fields[key].type))
    return overrides


def _login_from_environment(base, overrides, fields):
    # The crawl fills http_auth in from $NETWEIR_HTTP_AUTH for a spider with
    # an http_auth_domain and no login; without the same here, such a job
    # would be refused for a login it will in fact have.
    login = os.environ.get("NETWEIR_HTTP_AUTH")
    if not login or "http_auth" in overrides or not isinstance(base, netweir.Settings):
        return
    domain = overrides.get("http_auth_domain", base.http_auth_domain)
    if domain and base.http_auth is None:
        overrides["http_auth"] = parse_setting_value(
            "http_auth", login, str(fields["http_auth"].type)
        )


def _check_profile(profile):
    """Raises Refusal if ``profile`` is no browser netweir can look like.
    Through the public Client, which checks the profile when it is made."""
    try:
        netweir.Client(profile=profile)
    except ValueError as exc:
        raise Refusal(f"setting profile: {_exception_text(exc)}") from None


def _apply_settings(spider, overrides):
    """The spider's own settings with ``overrides`` on top, checked as the
    crawl checks them when it starts; raises Refusal."""
    try:
        settings = dataclasses.replace(spider.cls.settings, **overrides)
    except Exception as exc:
        given = f" with {', '.join(overrides)} set" if overrides else ""
        raise Refusal(
            f"spider {spider.name!r} can't run{given}:"
            f" {_exception_text(exc) or _describe_exception(exc)}"
        ) from None
    if "profile" in overrides:
        _check_profile(settings.profile)
    return settings


def argument_problem(name):
    """Why ``name`` can't be a spider argument, or None."""
    if not isinstance(name, str) or not name.isidentifier():
        return (
            f"spider argument {name!r} is not a Python identifier: use letters,"
            " digits and _, not starting with a digit"
        )
    if name.startswith("_"):
        return f"spider argument {name!r} starts with _: such names are the spider's own business"
    if hasattr(netweir.Spider, name):
        hint = "; give settings as setting=KEY=VALUE" if name == "settings" else ""
        return (
            f"spider argument {name!r} is already an attribute of netweir.Spider: an"
            f" argument gives the spider data, not a new way to behave{hint}"
        )
    return None


def _check_arguments(pairs):
    seen = set()
    for name, _value in pairs:
        problem = argument_problem(name)
        if problem:
            raise Refusal(problem)
        if name in seen:
            raise Refusal(f"spider argument {name!r} is given twice")
        seen.add(name)


def check_job(project, spider_name, setting_pairs, argument_pairs, spelled=None):
    """``{"spider": NAME, "file": PATH}`` if the job could start; raises
    Refusal saying what would stop it (a setting named as ``spelled``
    says it was typed: {setting name: as given})."""
    spider = _find_spider(project, _load_project(project), spider_name)
    fields = settings_fields()
    overrides = _parse_settings(setting_pairs, fields, spelled)
    _login_from_environment(spider.cls.settings, overrides, fields)
    _apply_settings(spider, overrides)
    _check_arguments(argument_pairs)
    return {"spider": spider.name, "file": spider.path}


def answer(request):
    """The answer to one request, computed in this process. Never raises:
    anything a spider file does ends up as an error answer."""
    try:
        project = Project(name=request["project"]["name"], path=request["project"]["path"])
        _enter(project)
        if request["op"] == protocol.LIST:
            return protocol.ok(list_spiders(project))
        if request["op"] == protocol.CHECK:
            result = check_job(
                project, request["spider"], request["settings"], request["arguments"],
                request.get("spelled"),
            )
            return protocol.ok(result)
        return protocol.error(f"unknown request {request['op']!r}")
    except Refusal as refusal:
        return protocol.error(str(refusal))
    except BaseException as exc:
        return protocol.error(f"reading the project failed: {_describe_exception(exc)}")
