"""Starting, talking to and stopping the two services (and anything they run).

Every process the benchmark starts gets a session of its own, and is
stopped by process group; the crawls the services start have sessions of
their own too, so once a service is gone, any process left whose command
line names the benchmark's scratch directory is killed by its group.
"""

import ctypes
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
VENV_BIN = os.path.dirname(sys.executable)

NETWEIR_SERVE = "netweir serve"
OURS = "netweir-serve"
# Names safe in a path, for each service's --dir and log.
SLUGS = {NETWEIR_SERVE: "theirs", OURS: "ours"}


TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid):
    """(command name, the fields after it) of /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()


def cpu_seconds(pid, user_only=False):
    """CPU seconds the process ``pid`` has used so far: utime + stime, or
    utime alone."""
    fields = proc_stat(pid)[1]
    return (int(fields[11]) + (0 if user_only else int(fields[12]))) / TICKS


def run_seconds(pid):
    """CPU seconds the threads of the process ``pid`` have run so far, to
    the nanosecond (/proc/PID/task/*/schedstat; threads that have ended
    are not counted): for spells too short for cpu_seconds' clock ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            continue  # ended meanwhile
    return total / 1e9


def rss_mb(pid):
    """The resident set (VmRSS) of the process ``pid``, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def log(message):
    """Progress, on standard error (the table goes to standard output)."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(python=sys.executable):
    """{service name: argv prefix}: the two implementations of the spec."""
    netweir = os.path.join(os.path.dirname(python), "netweir")
    their = [netweir, "serve"] if os.path.exists(netweir) else [python, "-m", "netweir", "serve"]
    return {NETWEIR_SERVE: their, OURS: [python, "-m", "netweir_serve"]}


def clean_environment():
    """The benchmark's environment without the services' credentials."""
    return {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}


_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child, before exec: SIGTERM when the benchmark dies, even by
    SIGKILL, so that a service never outlives it (a service stopped that
    way cancels its jobs). Linux only; elsewhere, nothing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def wait_until(check, timeout, what, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Service:
    """One of the two services, on a free loopback port with its own --dir."""

    def __init__(self, name, command, directory, projects, max_jobs=2, keep=100,
                 port=None, environment=None):
        self.name = name
        self.command = list(command)
        self.directory = directory
        self.projects = dict(projects)
        self.max_jobs = max_jobs
        self.keep = keep
        self.port = port or free_port()
        # Variables added to the clean environment (bench/stall.py's probe).
        self.environment = dict(environment or {})
        self.process = None
        self._log = None
        self.log_path = directory + ".log"

    def argv(self):
        argv = list(self.command)
        for name, path in self.projects.items():
            argv += ["--project", f"{name}={path}"]
        return argv + ["--port", str(self.port), "--dir", self.directory,
                       "--max-jobs", str(self.max_jobs), "--keep", str(self.keep),
                       "--bind", "127.0.0.1"]

    def start(self, timeout=30):
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.argv(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, env=dict(clean_environment(), **self.environment),
            start_new_session=True,
            preexec_fn=_die_with_parent)

        def ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with status {self.process.returncode}:"
                                   f"\n{self.log_tail()}")
            try:
                return self.get("daemonstatus.json", timeout=2)["status"] == "ok"
            except (OSError, ValueError, KeyError):
                return False

        wait_until(ready, timeout, f"{self.name} to answer", interval=0.05)
        return self

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self):
        return self.process.pid

    def rss_mb(self):
        """The daemon process's resident set (VmRSS), in MB."""
        return rss_mb(self.pid)

    # -- HTTP, one connection per call --------------------------------------

    def call(self, method, path, params=(), timeout=30, source=None):
        """One request on a connection of its own (from the loopback
        address ``source``, if given); (status, the decoded JSON)."""
        query = urllib.parse.urlencode(list(params))
        headers = {"Connection": "close"}
        body = None
        if method == "POST":
            body = query.encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif query:
            path += "?" + query
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                          source_address=(source, 0) if source else None)
        try:
            conn.request(method, "/" + path, body=body, headers=headers)
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read())
        finally:
            conn.close()

    def get(self, path, params=(), timeout=30):
        return self.call("GET", path, params, timeout)[1]

    def post(self, path, params=(), timeout=30, source=None):
        return self.call("POST", path, params, timeout, source)[1]

    def schedule(self, project, spider, source=None, **arguments):
        form = [("project", project), ("spider", spider)] + list(arguments.items())
        answer = self.post("schedule.json", form, source=source)
        if answer.get("status") != "ok":
            raise RuntimeError(f"{self.name}: schedule.json refused: {answer}")
        return answer["jobid"]

    def cancel(self, project, jobid):
        return self.post("cancel.json", [("project", project), ("job", jobid)])

    def counts(self):
        answer = self.get("daemonstatus.json")
        return {k: answer[k] for k in ("pending", "running", "finished")}

    def wait_counts(self, timeout, what, **expected):
        """Waits until daemonstatus.json shows ``expected`` (e.g. running=2)."""
        return wait_until(lambda: all(self.counts()[k] == v for k, v in expected.items()),
                          timeout, f"{self.name}: {what}", interval=0.02)

    # -- stopping ------------------------------------------------------------

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL to the daemon's group; then whatever is left
        of the jobs it started. Safe to call twice."""
        if self.process is not None:
            if self.process.poll() is None:
                _signal_group(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            _signal_group(self.process.pid, signal.SIGKILL)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass
        kill_leftovers(self.directory)
        if self._log is not None and not self._log.closed:
            self._log.close()


def _signal_group(pgid, signum):
    if pgid == os.getpgid(0):
        return  # never our own group
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_leftovers(marker):
    """Kills (by process group) every process whose command line contains
    ``marker``, a path unique to this benchmark run. Returns how many."""
    if not marker or len(marker) < 8:
        return 0
    mine = os.getpid()
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == mine:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                _signal_group(os.getpgid(int(entry)), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def stop_piped(process):
    """Ends a helper process that stops when its standard input closes
    (the site, the bare loop): closes it, waits 3 s, then SIGKILLs its
    process group (whatever it started) and reaps it."""
    if process.poll() is None:
        process.stdin.close()
        try:
            process.wait(3)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()
    process.stdout.close()


class Site:
    """bench/site.py in a process of its own."""

    def __init__(self, python=sys.executable):
        self.process = subprocess.Popen(
            [python, "-m", "bench.site"], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, start_new_session=True)
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the test site did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        stop_piped(self.process)
