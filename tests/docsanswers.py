"""Answers the docs show against the real ones.

A shown answer may elide (``...``) members, elements, values or lines;
what differs from run to run (ids the service made up, times, pids, paths,
node names, a crawl's counts) is compared only as present, and as null or
not. tests/docsrun.py runs the commands; this module judges their answers.
"""

import json
import re

ELLIPSIS = "\u2026"            # an elided member or element of a shown answer
ANY = ELLIPSIS + "any"         # an elided value

# Fields whose values differ from run to run: compared only as present,
# and as null or not (a running job's end_time is null, a finished one's not).
MASKED = {"node_name", "node", "pid", "start_time", "end_time", "time", "next_run",
          "starts_at", "last_run", "first_log_time", "first_log_timestamp", "latest_log_time",
          "latest_log_timestamp", "last_update_time", "last_update_timestamp", "runtime",
          "stats", "history", "version", "upcoming", "upcoming_starts",
          # A crawl's counts, where its pace sets them (/logs/stats.json).
          "pages", "items"}
RANDOM_ID = re.compile(r"^[0-9a-f]{32}$")
# A schedule's job is named after its due time: NAME-20261201T135145Z.
DUE_TIME = re.compile(r"\d{8}T\d{6}Z")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d{4} \[")


def is_log(text):
    """Whether ``text`` is lines of a service's log."""
    lines = text.splitlines()
    return bool(lines) and all(LOG_LINE.match(line) for line in lines)


def masked_log(line):
    """A log line with what differs from run to run made a word: the
    time, ports, paths, the number of job slots (one per CPU)."""
    line = LOG_LINE.sub("TIME [", line)
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line)
    line = re.sub(r"starting on \d+", "starting on PORT", line)
    line = re.sub(r"/[^\s;]+", "PATH", line)
    return re.sub(r"\d+ job\(s\) at once", "N job(s) at once", line)


def parse_shown(text):
    """A shown JSON answer, its elisions (``...``) made markers:
    ``{"a":1,...}`` has the member ELLIPSIS, ``[x, ...]`` the element
    ELLIPSIS, ``"a":...`` the value ANY."""
    out, stack, i, in_string = [], [], 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("...", i):
            before = "".join(out).rstrip()[-1:]
            if before == ":":
                out.append(json.dumps(ANY))
            elif stack and stack[-1] == "{":
                out.append(json.dumps(ELLIPSIS) + ":1")
            else:
                out.append(json.dumps(ELLIPSIS))
            i += 3
            continue
        else:
            if c in "{[":
                stack.append(c)
            elif c in "}]":
                stack.pop()
            out.append(c)
        i += 1
    return json.loads("".join(out))


def _is_json(line):
    try:
        parse_shown(line)
        return True
    except ValueError:
        return False


def differences(shown, real, path="", ids=None):
    """Where ``real`` differs from ``shown`` on what is not random, as a
    list of strings (empty: they agree). ``ids`` maps ids the page shows
    to the real ones the service made up."""
    ids = ids or {}
    if shown == ANY:
        return []
    if isinstance(shown, dict):
        if not isinstance(real, dict):
            return [f"{path}: shown an object, real {real!r}"]
        partial = ELLIPSIS in shown
        shown = {ids.get(k, k): v for k, v in shown.items()}   # a job id as a key
        keys = [k for k in shown if k != ELLIPSIS]
        problems = []
        missing = [k for k in keys if k not in real]
        if missing:
            problems.append(f"{path}: real has no {missing}")
        extra = [k for k in real if k not in shown]
        if extra and not partial:
            problems.append(f"{path}: the page does not show {extra}")
        for key in keys:
            if key not in real:
                continue
            if key in MASKED:
                if (shown[key] is None) != (real[key] is None) and shown[key] != ANY:
                    problems.append(f"{path}.{key}: shown {shown[key]!r}, real {real[key]!r}")
                continue
            problems += differences(shown[key], real[key], f"{path}.{key}", ids)
        return problems
    if isinstance(shown, list):
        if not isinstance(real, list):
            return [f"{path}: shown a list, real {real!r}"]
        partial = ELLIPSIS in shown
        items = [x for x in shown if x != ELLIPSIS]
        if (len(real) < len(items)) if partial else (len(real) != len(items)):
            return [f"{path}: shown {len(items)} element(s){' and more' if partial else ''},"
                    f" real {len(real)}"]
        problems = []
        for n, (s, r) in enumerate(zip(items, real)):
            problems += differences(s, r, f"{path}[{n}]", ids)
        return problems
    if isinstance(shown, str) and isinstance(real, str):
        for doc_id, real_id in ids.items():
            shown = shown.replace(doc_id, real_id)
        if RANDOM_ID.match(shown) and RANDOM_ID.match(real):
            return []
        shown, real = DUE_TIME.sub("YYYYMMDDTHHMMSSZ", shown), DUE_TIME.sub("YYYYMMDDTHHMMSSZ", real)
    if shown != real or type(shown) is not type(real):
        return [f"{path}: shown {shown!r}, real {real!r}"]
    return []


def learn_ids(shown, real, ids):
    """Records the ids the service made up where the page shows its own."""
    if isinstance(shown, dict) and isinstance(real, dict):
        for key in shown:
            if key in real:
                learn_ids(shown[key], real[key], ids)
    elif isinstance(shown, list) and isinstance(real, list):
        for s, r in zip([x for x in shown if x != ELLIPSIS], real):
            learn_ids(s, r, ids)
    elif isinstance(shown, str) and isinstance(real, str):
        if RANDOM_ID.match(shown) and RANDOM_ID.match(real) and shown != real:
            ids[shown] = real


# Headers whose values change from run to run (or with the version).
VARYING_HEADERS = {"date", "last-modified", "server"}


def compare_http(shown, real):
    """Differences of ``curl -i`` output: the status line, each header
    shown (its value unless it varies; a Content-Range's numbers only as
    consistent with Content-Length), every header when none is elided
    (``...``), and the body."""
    def split(text):
        head, _, body = text.replace("\r\n", "\n").partition("\n\n")
        lines = head.splitlines()
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return lines[0], headers, body
    shown_status, shown_headers, shown_body = split(shown)
    real_status, real_headers, real_body = split(real)
    partial = "..." in shown_headers or shown_status == "..." or shown.rstrip().endswith("...")
    shown_headers.pop("...", None)
    problems = []
    if shown_status != real_status:
        problems.append(f"status line: shown {shown_status!r}, real {real_status!r}")
    for name, value in shown_headers.items():
        if name not in real_headers:
            problems.append(f"real has no header {name}")
        elif name == "content-range":
            first, last, size = map(int, re.findall(r"\d+", real_headers[name]))
            if last - first + 1 != int(real_headers["content-length"]) or last != size - 1:
                problems.append(f"content-range {real_headers[name]}")
        elif name not in VARYING_HEADERS and value != real_headers[name]:
            problems.append(f"header {name}: shown {value!r}, real {real_headers[name]!r}")
    if not partial:
        extra = sorted(set(real_headers) - set(shown_headers))
        if extra:
            problems.append(f"the page does not show the headers {extra}")
        if shown_body.rstrip("\n") != real_body.rstrip("\n"):
            problems.append(f"body: shown {shown_body!r}, real {real_body!r}")
    return problems


def compare_text(shown, real, ids):
    """Differences of a shown answer that is several lines: each a JSON
    document (a line ``...`` stands for any more lines), or plain text
    compared line by line."""
    if shown.startswith("HTTP/"):
        return compare_http(shown, real)
    try:
        whole = parse_shown(shown)   # one document, broken up to read
    except ValueError:
        whole = None
    if whole is not None and "\n" in shown.strip():
        try:
            real_doc = json.loads(real)
        except ValueError:
            return [f"shown one JSON document, real {real!r}"]
        learn_ids(whole, real_doc, ids)
        return differences(whole, real_doc, "", ids)
    problems = []
    lines = shown.splitlines()
    real_lines = real.splitlines()
    partial = lines and lines[-1].strip() == "..."
    lines = [line for line in lines if line.strip() != "..."]
    if not partial and len(real_lines) != len(lines):
        problems.append(f"shown {len(lines)} line(s), real {len(real_lines)}")
    elif len(real_lines) < len(lines):
        problems.append(f"shown {len(lines)} line(s) and more, real {len(real_lines)}")
    if partial and all(_is_json(s) for s in lines) and all(_is_json(r) for r in real_lines):
        # Lines of records (items) in the crawl's order, which varies:
        # each line shown is one of the real ones.
        real_docs = [json.loads(r) for r in real_lines]
        for n, s in enumerate(lines):
            if not any(not differences(parse_shown(s), r, "", ids) for r in real_docs):
                problems.append(f"line {n + 1}: no real line is {s!r}")
        return problems
    for n, (s, r) in enumerate(zip(lines, real_lines)):
        try:
            shown_doc = parse_shown(s)
        except ValueError:
            if s != r:
                problems.append(f"line {n + 1}: shown {s!r}, real {r!r}")
            continue
        try:
            real_doc = json.loads(r)
        except ValueError:
            problems.append(f"line {n + 1}: shown JSON, real {r!r}")
            continue
        learn_ids(shown_doc, real_doc, ids)
        problems += differences(shown_doc, real_doc, f"line {n + 1}", ids)
    return problems
