"""Warm starts (jobs/warm): safe to fork, and a warm job is a cold one."""

import json
import os
import signal
import subprocess
import sys
import time

from twisted.trial import unittest

from netweir_serve.jobs.warm import _zygote

from .processes import ROOT, Daemon, alive, wait_until

# What importing netweir must leave as it found (run in a fresh
# interpreter, as the warm process imports it): the evidence that a fork
# after it shares no thread, descriptor, handler, stream or random state.
IMPORT_PROBE = r'''
import atexit, gc, io, json, logging, os, random, signal, sys, threading, warnings

def fds():
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[name] = os.readlink("/proc/self/fd/" + name)
        except OSError:
            pass  # the listing's own descriptor
    return found

def state():
    return {
        "tasks": sorted(os.listdir("/proc/self/task")),
        "threads": [t.name for t in threading.enumerate()],
        "fds": fds(),
        "signals": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "handlers": sorted(name for name, logger in
                           [("", logging.getLogger())] + list(logging.root.manager.loggerDict.items())
                           if getattr(logger, "handlers", None)),
    }

registered, at_fork = [], []
register, register_at_fork = atexit.register, os.register_at_fork
def name_of(function):
    return f"{getattr(function, '__module__', None)}.{getattr(function, '__qualname__', function)}"
def recording(function, *args, **kwargs):
    registered.append(name_of(function))
    return register(function, *args, **kwargs)
def recording_at_fork(**kwargs):
    at_fork.extend(f"{when}:{name_of(f)}" for when, f in sorted(kwargs.items()))
    return register_at_fork(**kwargs)
atexit.register, os.register_at_fork = recording, recording_at_fork

out, err = io.StringIO(), io.StringIO()
before = state()
real = sys.stdout, sys.stderr
sys.stdout, sys.stderr = out, err
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import netweir, netweir._cli
sys.stdout, sys.stderr = real
after = state()
generators = [type(o).__name__ for o in gc.get_objects()
              if isinstance(o, random.Random) and o is not random._inst
              and not isinstance(o, random.SystemRandom)]
print(json.dumps({"before": before, "after": after, "atexit": registered, "at_fork": at_fork,
                  "warnings": [str(w.message) for w in caught],
                  "printed": out.getvalue() + err.getvalue(), "generators": generators}))
'''


class ImportSafetyTests(unittest.TestCase):
    """What makes forking after ``import netweir`` safe, established on the
    netweir installed here (the warm process checks threads and
    descriptors again each time it starts)."""

    def probe(self):
        done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True,
                              text=True, timeout=120, cwd="/", close_fds=True,
                              stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)

    def test_importing_netweir_starts_no_thread_and_opens_nothing(self):
        found = self.probe()
        before, after = found["before"], found["after"]
        self.assertEqual(len(after["tasks"]), 1)
        self.assertEqual(after["threads"], ["MainThread"])
        self.assertEqual(after["fds"], before["fds"])

    def test_importing_netweir_sets_no_handler_prints_nothing_and_seeds_nothing(self):
        found = self.probe()
        before, after = found["before"], found["after"]
        self.assertEqual(after["signals"], before["signals"])
        self.assertEqual(after["handlers"], [])
        self.assertEqual(found["warnings"], [])
        self.assertEqual(found["printed"], "")
        self.assertEqual(found["generators"], [])

    def test_what_runs_at_exit_and_at_fork_is_known_and_made_for_forks(self):
        # A cold crawl imports the same modules, so registers the same
        # functions: each looks at the process it runs in, not the one
        # that imported it. netweir's native module registers both: at
        # exit it waits for its Rust threads in Python (a fork has none of
        # its parent's), and in a forked child it forgets its parent's
        # (its "_forked", made for this).
        found = self.probe()
        self.assertTrue(set(found["atexit"]) <= {
            "logging.shutdown", "multiprocessing.util._exit_function",
            "netweir._native._wait_for_rust_threads"}, found["atexit"])
        self.assertTrue(set(found["at_fork"]) <= {
            "after_in_child:netweir._native._forked"}, found["at_fork"])


UNSAFE_PROBE = r'''
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from netweir_serve.jobs.warm._zygote import unsafe_state
print(unsafe_state())
fd = os.open(os.devnull, os.O_RDONLY)
os.dup2(fd, 20)
print(unsafe_state())
os.close(fd)
os.close(20)
threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
print(unsafe_state())
'''


class UnsafeStateTests(unittest.TestCase):
    def test_a_thread_or_an_open_descriptor_is_refused(self):
        done = subprocess.run([sys.executable, "-c", UNSAFE_PROBE, ROOT], capture_output=True,
                              text=True, timeout=60, close_fds=True, stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stderr)
        clean, descriptor, thread = done.stdout.splitlines()
        self.assertEqual(clean, "None")
        self.assertIn("descriptors", descriptor)
        self.assertIn("/dev/null", descriptor)
        self.assertIn("2 threads", thread)


class SwitchTests(unittest.TestCase):
    def parse(self, environ):
        from netweir_serve.options import ServeOptions
        options = ServeOptions(environ)
        options.parseOptions(["--dir", os.path.abspath(self.mktemp())])
        return options.config()

    def test_warm_unless_the_variable_says_0(self):
        self.assertTrue(self.parse({}).warm_starts)
        self.assertTrue(self.parse({"NETWEIR_SERVE_WARM_STARTS": "1"}).warm_starts)
        self.assertFalse(self.parse({"NETWEIR_SERVE_WARM_STARTS": "0"}).warm_starts)
        self.assertFalse(self.parse({"NETWEIR_SERVE_WARM_STARTS": "off"}).warm_starts)

    def test_another_value_is_refused_naming_the_variable(self):
        from twisted.python import usage
        with self.assertRaises(usage.UsageError) as refused:
            self.parse({"NETWEIR_SERVE_WARM_STARTS": "maybe"})
        self.assertEqual(str(refused.exception),
                         "NETWEIR_SERVE_WARM_STARTS must be 1 or 0, not 'maybe'")


class StaleTests(unittest.TestCase):
    def test_only_installation_folders_tell_that_something_was_installed(self):
        # The working directory and an editable install's checkout change
        # at every file written there (a test run's _trial_temp): taken for
        # an installation, they restarted the warm process under a job.
        folder = os.path.abspath(self.mktemp())
        site = os.path.join(folder, "lib", "site-packages")
        os.makedirs(site)
        stamps = _zygote._path_stamps(["", folder, site])
        self.assertEqual(list(stamps), [site])


class EndingTheWarmProcessTests(unittest.TestCase):
    def test_the_warm_process_is_killed_alone_never_with_its_group(self):
        # A spare handed a job a moment ago is in the warm process's group
        # until the job's parent makes its session: a group kill took the
        # job with it (it ended "lost").
        from twisted.internet.task import Clock
        from netweir_serve.jobs.warm import starter as starter_module

        killed = []
        self.patch(starter_module.os, "killpg",
                   lambda pid, sig: killed.append(("group", pid, sig)))
        self.patch(starter_module.os, "kill", lambda pid, sig: killed.append(("alone", pid, sig)))
        starter = starter_module.WarmStarter(Clock(), sys.executable, {}, "/nonexistent")

        class Control:
            sock = None

            def close(self):
                pass

        class Zygote:
            transport = type("Transport", (), {"pid": 4242})()
            ended = type("Ended", (), {"called": False})()

        starter._control, starter._zygote = Control(), Zygote()
        starter._lost("its control socket closed")
        self.assertEqual(killed, [("alone", 4242, signal.SIGKILL)])


class WhichStartTests(unittest.TestCase):
    def test_a_job_with_a_memory_limit_starts_cold_and_one_with_cpu_warm(self):
        # What a warm crawl shares with the warm process is charged to the
        # service's control group, not the job's: its memory limit would
        # hold more than it says. A cpu limit holds the same either way.
        from types import SimpleNamespace
        from twisted.internet.task import Clock
        from netweir_serve.jobs.launcher import Launcher
        from netweir_serve.reliability.policy import JobPolicy

        reactor, starter = Clock(), object()
        launcher = Launcher(reactor, None, None, None, "/nonexistent", 2, starter=starter)

        def record(**policy):
            return SimpleNamespace(policy=JobPolicy(**policy).to_json())

        self.assertIs(launcher._spawner(record()), starter)
        self.assertIs(launcher._spawner(record(cpu=1.0)), starter)
        self.assertIs(launcher._spawner(record(memory=1 << 30)), reactor)
        self.assertIs(launcher._spawner(record(memory=1 << 30, cpu=1.0)), reactor)
        cold = Launcher(reactor, None, None, None, "/nonexistent", 2)
        self.assertIs(cold._spawner(record()), reactor)


class ShadowedTests(unittest.TestCase):
    def folder(self, *names):
        folder = os.path.abspath(self.mktemp())
        os.makedirs(folder)
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith("/"):
                os.makedirs(path)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()
        return folder

    def test_a_module_or_package_of_an_imported_name_shadows(self):
        modules = {"json", "email", "netweir"}
        self.assertTrue(_zygote.shadowed(self.folder("json.py"), modules))
        self.assertTrue(_zygote.shadowed(self.folder("email/__init__.py"), modules))
        self.assertTrue(_zygote.shadowed(self.folder("netweir.cpython-311-x86_64-linux-gnu.so"),
                                         modules))

    def test_data_and_other_names_do_not(self):
        modules = {"json", "email"}
        self.assertFalse(_zygote.shadowed(self.folder("json/", "email.txt", "spiders.py",
                                                      "books.json"), modules))


PROJECT = '''
import json
import os
import sys

import netweir


class Facts(netweir.Spider):
    """Writes what a job's process looks like to the file ``out``."""
    name = "facts"
    settings = netweir.Settings(throttle=False)

    async def start(self):
        import multiprocessing
        import random
        import resource
        import signal
        import threading
        parent = os.getppid()

        def environ_of(pid):
            with open(f"/proc/{pid}/environ", "rb") as f:
                return sorted(e.decode() for e in f.read().split(b"\\0") if e)

        facts = {
            "cwd": os.getcwd(), "env": dict(os.environ),
            "proc_env": environ_of(os.getpid()), "parent_proc_env": environ_of(parent),
            "session_is_parents": os.getsid(0) == parent,
            "parent_leads_its_session": os.getsid(parent) == parent,
            "sys_path": sys.path, "argv": sys.argv,
            "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource)
                        if n.startswith("RLIMIT_")},
            "signals": {int(s): getattr(signal.getsignal(s), "__qualname__",
                                        str(signal.getsignal(s)))
                        for s in signal.valid_signals()
                        if s not in (signal.SIGKILL, signal.SIGSTOP)},
            "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "umask": os.umask(0o022),
            "fds": sorted(os.listdir("/proc/self/fd")),
            "mp_dir": multiprocessing.process.ORIGINAL_DIR,
            "authkey": multiprocessing.current_process().authkey.hex(),
            "random": random.random(), "threads": threading.active_count(),
            "cgroup": open("/proc/self/cgroup").read(),
            "version": VERSION,
            "shadowed": getattr(sys.modules.get("fnmatch"), "SHADOWED", False),
        }
        with open(self.out, "w") as f:
            json.dump(facts, f)
        if self.exit != "0":
            os._exit(int(self.exit))
        return
        yield


VERSION = "one"
'''

# Facts that differ between any two runs, cold or warm.
PER_RUN = ("random", "authkey")


class WarmLikeColdTests(unittest.TestCase):
    """The same jobs through a service with warm starts and one without
    (NETWEIR_SERVE_WARM_STARTS=0), on the same --dir, one after the other."""

    def setUp(self):
        self.base = os.path.abspath(self.mktemp())
        self.project = os.path.join(self.base, "project")
        os.makedirs(self.project)
        self.write_spiders(PROJECT)
        self.directory = os.path.join(self.base, "dir")

    def write_spiders(self, text):
        with open(os.path.join(self.project, "facts.py"), "w") as f:
            f.write(text)

    def daemon(self, warm):
        daemon = Daemon(self.directory, [f"shop={self.project}"],
                        env={"NETWEIR_SERVE_WARM_STARTS": "1" if warm else "0"}).start()
        self.addCleanup(daemon.kill)
        if warm:
            wait_until(lambda: "warm starts: ready" in daemon.output(), 60,
                       "the warm process to be ready")
        return daemon

    def facts(self, daemon, exit=0, jobid=None):
        out = os.path.join(self.base, f"facts-{time.monotonic_ns()}.json")
        jobid = daemon.must_schedule("shop", "facts", out=out, exit=str(exit),
                                     **({"jobid": jobid} if jobid else {}))
        entry = daemon.wait_state(jobid, "finished")
        with open(out) as f:
            return json.load(f), entry

    def test_a_warm_job_is_what_a_cold_one_is(self):
        cold_daemon = self.daemon(warm=False)
        cold, cold_entry = self.facts(cold_daemon, jobid="same")
        cold_daemon.stop()
        self.assertNotIn("warm starts:", cold_daemon.output())
        warm_daemon = self.daemon(warm=True)
        warm, warm_entry = self.facts(warm_daemon, jobid="same2")
        mark = "NETWEIR_JOB_RUN"
        for facts in (cold, warm):
            # Its own session, led by its parent; the mark of its run, also
            # where /proc shows it (leftovers are found by it).
            self.assertTrue(facts["session_is_parents"])
            self.assertTrue(facts["parent_leads_its_session"])
            self.assertEqual(len(facts["env"][mark]), 32)
            self.assertEqual(facts["proc_env"], sorted(f"{k}={v}" for k, v in
                                                       facts["env"].items()))
            self.assertIn(f"{mark}={facts['env'][mark]}", facts["parent_proc_env"])
        self.assertNotEqual(cold["env"][mark], warm["env"][mark])
        for key in sorted(set(cold) - set(PER_RUN)):
            if key in ("proc_env", "parent_proc_env"):
                continue
            a, b = cold[key], warm[key]
            if key == "env":
                a, b = ({k: v for k, v in e.items() if k != mark} for e in (a, b))
            if key == "argv":
                # The job's id and this test's file for its facts aside.
                a, b = ([w.replace("same2", "same") for w in e if not w.startswith("-aout=")]
                        for e in (a, b))
            self.assertEqual(a, b, key)
        self.assertEqual((cold_entry["outcome"], cold_entry["exit_status"]), ("finished", 0))
        self.assertEqual((warm_entry["outcome"], warm_entry["exit_status"]), ("finished", 0))

    def test_a_job_that_must_start_cold_through_a_spare_is_a_cold_one(self):
        # fnmatch.py in the project's folder, a working copy of the standard
        # library's: the spare execs the cold command line in place. What
        # the crawl sees is what a service without warm starts gives it.
        with open(os.path.join(self.project, "fnmatch.py"), "w") as f:
            f.write(SHADOW)
        cold_daemon = self.daemon(warm=False)
        cold, _ = self.facts(cold_daemon, jobid="same")
        cold_daemon.stop()
        warm_daemon = self.daemon(warm=True)
        warm, entry = self.facts(warm_daemon, jobid="same2")
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))
        self.assertEqual((cold["shadowed"], warm["shadowed"]), (True, True))
        for key in ("signals", "mask", "sys_path", "rlimits", "umask", "fds", "cwd",
                    "mp_dir", "cgroup"):
            self.assertEqual(cold[key], warm[key], key)
        self.assertTrue(warm["session_is_parents"])

    def test_exit_statuses_are_the_crawls_as_cold(self):
        daemon = self.daemon(warm=True)
        for status in (3, 0, 1):
            _facts, entry = self.facts(daemon, exit=status)
            self.assertEqual(entry["exit_status"], status)
            self.assertEqual(entry["outcome"], "finished" if status == 0 else "failed")

    def test_two_warm_jobs_draw_their_own_random_numbers_and_keys(self):
        daemon = self.daemon(warm=True)
        first, _ = self.facts(daemon)
        second, _ = self.facts(daemon)
        for key in PER_RUN:
            self.assertNotEqual(first[key], second[key], key)

    def test_a_spider_file_edited_between_two_jobs_is_read_afresh(self):
        daemon = self.daemon(warm=True)
        first, _ = self.facts(daemon)
        # Same size, same second: only the content tells them apart.
        self.write_spiders(PROJECT.replace('VERSION = "one"', 'VERSION = "two"'))
        second, _ = self.facts(daemon)
        self.write_spiders(PROJECT.replace('VERSION = "one"', 'VERSION = "three, longer"'))
        third, _ = self.facts(daemon)
        self.assertEqual([first["version"], third["version"]], ["one", "three, longer"])
        # As a cold start would: Python's cache of compiled files goes by
        # mtime and size, so an edit within the same second and of the same
        # size may be missed by both; one of another size never is.
        self.assertIn(second["version"], ("one", "two"))

    def test_a_project_that_shadows_a_preloaded_module_starts_cold(self):
        # A package "email" in the project's folder: a cold start imports
        # it in place of the standard library's as netweir is imported
        # (and so must this one).
        os.makedirs(os.path.join(self.project, "email"))
        with open(os.path.join(self.project, "email", "__init__.py"), "w") as f:
            f.write("raise SystemExit(7)\n")
        daemon = self.daemon(warm=True)
        jobid = daemon.must_schedule("shop", "facts", out="x", exit="0")
        entry = daemon.wait_state(jobid, "finished")
        self.assertEqual(entry["exit_status"], 7)

    def test_the_warm_process_dying_falls_back_to_cold_and_is_said_once(self):
        daemon = self.daemon(warm=True)
        first, _ = self.facts(daemon)
        zygote = warm_process(daemon)
        os.kill(zygote, signal.SIGKILL)
        wait_until(lambda: "warm process ended" in daemon.output(), 30, "the end to be logged")
        second, entry = self.facts(daemon)
        self.assertEqual(entry["outcome"], "finished")
        self.assertEqual(daemon.output().count("warm process ended"), 1)
        # Started again at that job: the next ones are warm again.
        wait_until(lambda: warm_process(daemon) not in (None, zygote), 60,
                   "a new warm process")
        third, entry = self.facts(daemon)
        self.assertEqual(entry["outcome"], "finished")

    def test_a_warm_job_survives_its_warm_process_and_its_end_is_known(self):
        daemon = self.daemon(warm=True)
        out = os.path.join(self.base, "slow.json")
        self.write_spiders(PROJECT + SLOW)
        jobid = daemon.must_schedule("shop", "slow", out=out)
        entry = daemon.wait_state(jobid, "running")
        os.kill(warm_process(daemon), signal.SIGKILL)
        wait_until(lambda: "warm process ended" in daemon.output(), 30, "the end to be logged")
        self.assertTrue(alive(entry["pid"]))
        with open(out + ".go", "w"):
            pass
        entry = daemon.wait_state(jobid, "finished")
        self.assertEqual((entry["outcome"], entry["exit_status"]), ("finished", 0))


# A module of the standard library's name, in a project's folder, that
# works as the standard library's does (it loads that one and takes its
# names): a cold start imports it, as netweir imports fnmatch.
SHADOW = '''
import importlib.util
import os
import sysconfig

_spec = importlib.util.spec_from_file_location(
    "fnmatch", os.path.join(sysconfig.get_paths()["stdlib"], "fnmatch.py"))
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
SHADOWED = True
'''


SLOW = '''

class Slow(netweir.Spider):
    """Runs until the file ``out``.go appears."""
    name = "slow"
    settings = netweir.Settings(throttle=False)

    async def start(self):
        import asyncio
        while not os.path.exists(self.out + ".go"):
            await asyncio.sleep(0.05)
        return
        yield
'''


def warm_process(daemon):
    """The pid of ``daemon``'s warm process (a child of it), or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        parent = int(stat[stat.rfind(b")") + 2:].split()[1])
        if parent == daemon.process.pid and b"_zygote" in cmdline:
            return int(name)
    return None
