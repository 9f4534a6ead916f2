"""The wire protocol between the daemon and the processes that read spider files.

Standard library only, and no Twisted: both ends import it, the daemon
(``reader``, ``runners``) and the reader processes (``_forkserver``,
``_loader``), where every import is paid for in start-up time.

Every message is a JSON object, sent as one line of UTF-8 (``encode``,
``decode``). A ``once`` reader gets one request on its stdin and writes one
answer; a ``warm`` helper reads a request a line, each with an ``"id"``, and
writes each answer as a line with the ``"id"`` of its request.

Requests (``list_request``, ``check_request``, ``cancel_request``)::

    {"op": "list", "project": {"name": N, "path": P}, "timeout": SECONDS}
    {"op": "check", "project": {"name": N, "path": P}, "timeout": SECONDS,
     "spider": S, "settings": [[KEY, VALUE], ...], "spelled": {KEY: AS_TYPED},
     "arguments": [[NAME, VALUE], ...]}
    {"op": "cancel", "id": ID}

``timeout`` is how long the project's files may take to load.
``settings`` hold setting names (``MAX_ITEMS`` given is ``max_items``), path
settings already absolute; ``spelled`` is ``{setting name: as given}`` for
the names that differ from what the user typed, for a refusal to name what
was typed. ``cancel`` (warm helper only) kills the reader of request ID and
is not answered.

Answers::

    {"ok": true, "result": RESULT}           ok(): for list the sorted spider
                                             names, for check
                                             {"spider": NAME, "file": PATH}
    {"ok": false, "error": MESSAGE}          error(): a sentence for the user
                                             (too_large() is one of these)
    {"ok": false, "timeout": true}           timed_out(): the files took too long
    {"ok": false, "died": HOW, "stderr": T}  died(): the reader ended without
                                             answering; HOW from how_it_ended()
    {"ok": false, "helper_died": HOW, "stderr": T}
                                             helper_died(): the warm helper ended
                                             under the request each time it was
                                             sent

A reader answers with ok() or error(). The rest the helper or the daemon
make up about a reader: timed_out() past the timeout, too_large() for an
answer past the size they take, died() for no whole answer; the daemon
alone makes up helper_died(), timed_out() for a helper silent too long and
error() for a reader process that could not be started. ``read_answer``
tells the answers apart for the daemon.
"""

import json
import signal

LIST = "list"
CHECK = "check"
CANCEL = "cancel"

# The kinds of answer, as read_answer says them.
OK = "ok"
ERROR = "error"
TIMEOUT = "timeout"
DIED = "died"
HELPER_DIED = "helper_died"

_TOO_LARGE = "the answer about the project's spiders is too large"


# --- requests -----------------------------------------------------------------


def list_request(project_name, project_path, timeout):
    """The request for the sorted names of a project's spiders."""
    return {"op": LIST, "project": {"name": project_name, "path": project_path},
            "timeout": timeout}


def check_request(project_name, project_path, timeout, spider, settings, spelled, arguments):
    """The request to check a job: ``settings`` and ``arguments`` are
    ``(key, value)`` pairs, ``spelled`` {setting name: as the user typed it}."""
    return {
        "op": CHECK,
        "project": {"name": project_name, "path": project_path},
        "timeout": timeout,
        "spider": spider,
        "settings": settings,
        "spelled": spelled,
        "arguments": arguments,
    }


def cancel_request(request_id):
    """The message that makes a warm helper kill the reader of ``request_id``."""
    return {"op": CANCEL, "id": request_id}


def is_cancel(request):
    return request.get("op") == CANCEL


def timeout_of(request):
    """The seconds a list or check request gives the project's files to load."""
    return request["timeout"]


# --- answers ------------------------------------------------------------------


def ok(result):
    return {"ok": True, "result": result}


def error(message):
    """An answer that refuses, with ``message``, a sentence for the user."""
    return {"ok": False, "error": message}


def timed_out():
    return {"ok": False, "timeout": True}


def too_large():
    """The answer in place of one past the size a reader may answer."""
    return error(_TOO_LARGE)


def died(how, stderr):
    """A reader that ended without answering: ``how`` (see how_it_ended) and
    the last of its error output."""
    return {"ok": False, "died": how, "stderr": stderr}


def helper_died(how, stderr):
    """The warm helper ended under a request (each time it was sent)."""
    return {"ok": False, "helper_died": how, "stderr": stderr}


def how_it_ended(signal_number=None, exit_status=None):
    """``it was killed by SIGNAME`` when there is a ``signal_number``, else
    ``it exited with status N``: the HOW of died and helper_died."""
    if signal_number:
        try:
            return f"it was killed by {signal.Signals(signal_number).name}"
        except ValueError:
            return f"it was killed by signal {signal_number}"
    return f"it exited with status {exit_status}"


class Answer:
    """An answer as the daemon reads it: ``kind`` one of OK, ERROR, TIMEOUT,
    DIED and HELPER_DIED; ``result`` for OK, ``error`` for ERROR, ``how``
    and ``stderr`` (text, maybe empty) for DIED and HELPER_DIED. A plain
    class: making a dataclass would cost every reader a millisecond at start."""

    __slots__ = ("kind", "result", "error", "how", "stderr")

    def __init__(self, kind, result=None, error=None, how=None, stderr=""):
        self.kind = kind
        self.result = result
        self.error = error
        self.how = how
        self.stderr = stderr


def read_answer(answer):
    """The Answer that the answer dict ``answer`` says. What is none of the
    others is taken for DIED."""
    if answer.get("ok"):
        return Answer(OK, result=answer["result"])
    if "error" in answer:
        return Answer(ERROR, error=answer["error"])
    if answer.get("timeout"):
        return Answer(TIMEOUT)
    if "helper_died" in answer:
        return Answer(HELPER_DIED, how=answer["helper_died"], stderr=answer.get("stderr") or "")
    return Answer(DIED, how=answer.get("died"), stderr=answer.get("stderr") or "")


# --- lines --------------------------------------------------------------------


def with_id(message, request_id):
    """``message`` numbered for a warm helper: a copy with ``"id"``."""
    return dict(message, id=request_id)


def id_of(message):
    """The ``"id"`` of a numbered message."""
    return message["id"]


def take_id(message):
    """Removes the ``"id"`` from ``message`` and returns it (None if none)."""
    return message.pop("id", None)


def encode(message):
    """``message`` (a dict) as one line: JSON in UTF-8, ending in a newline.
    Raises what json.dumps raises for a value it cannot encode."""
    return json.dumps(message).encode("utf-8") + b"\n"


def decode(line):
    """The message (a dict) in ``line`` (bytes or text, with or without its
    newline); raises ValueError if it holds no JSON object."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a message is a JSON object")
    return message
