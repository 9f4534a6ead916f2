"""Real processes for integration tests: the test web site and the daemon.

Tests that use these are synchronous: the daemon and the site run in
processes of their own, so a test may block while it waits for them.
"""

import atexit
import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout, what, interval=0.05):
    """Calls ``check`` until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def kill_groups(pids):
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def alive(pid):
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class TestSite:
    """tests/site.py in a process of its own."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.site"], cwd=ROOT, stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL)
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"the test site did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def request(port, method, path, params=None, headers=None, host="127.0.0.1", timeout=30,
            body=None):
    """One HTTP request on a fresh connection: (status, headers, body)."""
    query = urllib.parse.urlencode(params or [], doseq=True)
    headers = dict(headers or {})
    if method == "POST" and body is None:
        body = query.encode()
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
    elif query:
        path += ("&" if "?" in path else "?") + query
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        connection.close()


class Daemon:
    """netweir-serve as a real process on a free port, with its own --dir."""

    def __init__(self, directory, projects=(), args=(), env=None, command=None, auth=None):
        self.directory = directory
        self.auth = auth
        self.projects = list(projects)
        self.args = list(args)
        self.env = env
        self.command = command or [sys.executable, "-m", "netweir_serve"]
        self.process = None
        self.port = None
        self.output_path = directory + ".out"

    def argv(self):
        argv = list(self.command)
        for project in self.projects:
            argv += ["--project", project]
        # With --listen the test names every endpoint itself.
        port = [] if "--listen" in self.args else ["--port", str(self.port)]
        return argv + port + ["--dir", self.directory] + self.args

    def spawn(self):
        if self.port is None:
            self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
        env.update(self.env or {})
        self._output = open(self.output_path, "ab")
        self.process = subprocess.Popen(
            self.argv(), cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._output,
            stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def start(self, timeout=30):
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout=30):
        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"the daemon exited with {self.process.returncode}:\n"
                                     f"{self.output()}")
            try:
                return self.get("daemonstatus.json")[0] is not None
            except OSError:
                return False
        wait_until(ready, timeout, "the daemon to answer")

    def output(self):
        with open(self.output_path, errors="replace") as f:
            return f.read()

    def call(self, method, path, params=None, headers=None, **kw):
        headers = dict(headers or {})
        if self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            headers.setdefault("Authorization", "Basic " + token)
        return request(self.port, method, "/" + path.lstrip("/"), params, headers=headers, **kw)

    def get(self, endpoint, params=None, **kw):
        """(HTTP status, JSON answer) of a GET."""
        status, _, body = self.call("GET", endpoint, params, **kw)
        return status, json.loads(body)

    def post(self, endpoint, params=None, **kw):
        status, _, body = self.call("POST", endpoint, params, **kw)
        return status, json.loads(body)

    def schedule(self, project, spider, settings=(), **params):
        form = [("project", project), ("spider", spider)]
        form += [("setting", s) for s in settings] + list(params.items())
        return self.post("schedule.json", form)

    def must_schedule(self, project, spider, settings=(), **params):
        status, answer = self.schedule(project, spider, settings, **params)
        assert answer.get("status") == "ok", answer
        return answer["jobid"]

    def find(self, jobid):
        _, answer = self.get("listjobs.json")
        for state in ("pending", "running", "finished"):
            for entry in answer[state]:
                if entry["id"].lower() == jobid.lower():
                    return state, entry
        return None, None

    def wait_state(self, jobid, state, timeout=60):
        """The job's listing entry once it is ``state``; a running one once
        its pid is recorded too (by a write of its own, a moment after the
        claim that made it running)."""
        def reached(found, entry):
            if found != state or (state == "running" and entry.get("pid") is None):
                return None
            return entry

        return wait_until(lambda: reached(*self.find(jobid)), timeout,
                          f"job {jobid} to be {state}")

    def stats(self, jobid):
        return self.get("jobstats.json", {"job": jobid})[1]

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the daemon and waits for it to exit; returns its status."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        try:
            return self.process.wait(timeout)
        finally:
            self._output.close()

    def job_pids(self):
        """Pids of the jobs the daemon says are running."""
        try:
            # A job claimed a moment ago has no pid yet.
            return [e["pid"] for e in self.get("listjobs.json")[1]["running"] if e.get("pid")]
        except (OSError, ValueError, KeyError):
            return []

    def kill(self):
        """Kills the daemon and its running jobs' process groups (cleanup),
        and removes the control groups its DIR's jobs had: their parents,
        killed with them, could not."""
        if self.process is None:
            return
        if self.process.poll() is None:
            kill_groups(self.job_pids())
            self.process.kill()
        self.process.wait()
        if not self._output.closed:
            self._output.close()
        remove_control_groups(os.path.join(ROOT, self.directory))


def remove_control_groups(directory, timeout=10):
    """Removes every control group of the jobs of the service of
    ``directory``, and its DIR's own, killing what is in them: a test
    leaves none on the machine."""
    from netweir_serve.reliability.cgroups import JobGroups
    groups = JobGroups.detect(directory)

    def removed():
        groups.sweep([])
        return not groups.leftovers() and not groups.remove_dir_groups()

    wait_until(removed, timeout, f"the control groups of {directory} to be removed")


_SHARED = {}


def shared(key, make, stop):
    """One ``make()`` per test process for ``key``, stopped with ``stop`` at
    exit: trial has no setUpClass, and starting a process per test would
    cost more than the tests themselves."""
    if key not in _SHARED:
        thing = _SHARED[key] = make()
        atexit.register(stop, thing)
    return _SHARED[key]


def shared_site():
    return shared("site", TestSite, TestSite.stop)
