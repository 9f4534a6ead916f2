"""netweir-serve as a new user installs it: a wheel, or an editable install,
in a fresh virtualenv, run by twistd from somewhere else than the checkout.

Design, to prove the packaging in seconds, needing an index only for what
a user's build fetches too (setuptools, for pip's build isolation):

- The sources are copied from the checkout into a temp dir first (leaving
  out .git, virtualenvs, build/, *.egg-info, _trial_temp and __pycache__),
  and built there, with the same command a user types in the checkout
  (``python -m pip wheel --no-deps -w DIR .``, build isolation included,
  so the build uses the setuptools pip picks, as a user's would). An
  in-tree build would write build/ and *.egg-info into a work tree that
  others are editing, and setuptools packs whatever stale files build/lib
  still holds into the wheel; a copy has neither problem.
- Each install goes into a virtualenv made by ``venv.create`` (no pip, no
  system site-packages), by this venv's pip pointed at it (``pip --python
  VENV/bin/python install --no-deps ...``): a real install, with the
  venv's own site-packages, dist-info and console script. Only the
  dependencies (Twisted, Netweir...) are not installed again, which would
  need an index and take far longer without pip's cache: a ``.pth`` file in the fresh venv names
  this venv's site-packages folder as one more sys.path entry. A .pth line
  only adds its folder; the .pth files inside that folder are not read, so
  the editable install of this venv (whose .pth puts the checkout on
  sys.path) stays out. Twisted's own package is thus in another sys.path
  entry than the installed dropin; Twisted looks for twisted/plugins in
  every entry, so the dropin is found as it would be next to Twisted, and
  test_wheel_contents checks that the wheel brings no __init__.py that
  would shadow or overwrite Twisted's.
- Twisted's console script is not in the fresh venv (Twisted is not
  installed there), so the tests write the same three lines its entry
  point would make, as VENV/bin/twistd.
- Every command runs from a temp dir, without PYTHONPATH: from the
  checkout's root, ``python -c`` or ``-m`` would have the checkout's
  twisted/plugins on sys.path whatever the packaging. twistd itself adds
  neither its working directory nor the .tac file's folder to sys.path,
  so the .tac that the installed ``netweir-serve --print-tac`` writes out
  imports the installed package.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import venv
import zipfile

from twisted.trial import unittest

from .processes import ROOT, Daemon, free_port, shared

DIST = "netweir_serve"

SPIDER = '''
import netweir


class Echo(netweir.Spider):
    """Asks for nothing, so its crawl ends at once."""
    name = "echo"
    start_urls = []

    async def parse(self, page):
        yield {}
'''

# What the sources copy leaves out: version control, environments and
# build or test leftovers, never anything the build reads.
LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "dist", "*.egg-info", "_trial_temp*", "__pycache__",
    "*.pyc", "netweir-serve")


def run(argv, **kw):
    """Runs a command to its end; fails with its output if it fails."""
    kw.setdefault("timeout", 120)
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    if done.returncode != 0:
        raise AssertionError(f"{argv} exited with {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def this_venv_sites():
    """The site-packages folders of the venv running the tests."""
    return sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})


def inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


class FreshVenv:
    """A virtualenv of its own that sees this venv's packages (see above)."""

    def __init__(self, base, name):
        self.path = os.path.join(base, name)
        venv.create(self.path, with_pip=False, system_site_packages=False, symlinks=True)
        self.bin = os.path.join(self.path, "bin")
        self.python = os.path.join(self.bin, "python")
        self.site = run([self.python, "-c",
                         "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        env=self.env()).stdout.strip()
        # "zz": .pth files are read in name order; this venv's packages last.
        with open(os.path.join(self.site, "zz_test_venv_packages.pth"), "w") as f:
            f.write("\n".join(this_venv_sites()) + "\n")
        self.twistd = os.path.join(self.bin, "twistd")
        with open(self.twistd, "w") as f:
            f.write(f"#!{self.python}\nimport sys\nfrom twisted.scripts.twistd import run\n"
                    "sys.exit(run())\n")
        os.chmod(self.twistd, 0o755)
        # Where the commands run: in no checkout, nor under one.
        self.cwd = os.path.join(base, "elsewhere-" + name)
        os.makedirs(self.cwd)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTHON", "NETWEIR_SERVE_")) and k != "VIRTUAL_ENV"}
        env["PATH"] = os.path.join(self.path, "bin") + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = self.path
        env.update(extra)
        return env

    def pip_install(self, *args):
        return run([sys.executable, "-m", "pip", "--python", self.python, "install",
                    "--no-deps", "--no-input", *args], cwd=self.cwd, env=self.env(), timeout=300)

    def run(self, argv, **kw):
        kw.setdefault("cwd", self.cwd)
        kw.setdefault("env", self.env())
        return run(argv, **kw)

    def where(self):
        """sys.path, and the files of netweir_serve and of the dropin, as
        the venv's python sees them from elsewhere."""
        code = ("import json, sys, netweir_serve, twisted.plugins.netweir_serve_plugin as p;"
                "print(json.dumps([sys.path, netweir_serve.__file__, p.__file__]))")
        return json.loads(self.run([self.python, "-c", code]).stdout)


def copy_sources(base):
    """Copies the checkout's sources into ``base``/source; returns that."""
    return shutil.copytree(ROOT, os.path.join(base, "source"), ignore=LEFT_OUT, symlinks=True)


class Installed:
    """A sources copy, its wheel, and a fresh venv holding that wheel."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="netweir-serve-install-")
        try:
            self.source = copy_sources(self.base)
            wheels = os.path.join(self.base, "wheels")
            run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-input", "-w", wheels,
                 "."], cwd=self.source, timeout=300)
            [name] = os.listdir(wheels)
            self.wheel = os.path.join(wheels, name)
            self.venv = FreshVenv(self.base, "wheel-venv")
            self.venv.pip_install(self.wheel)
        except BaseException:
            self.remove()
            raise

    def remove(self):
        shutil.rmtree(self.base, ignore_errors=True)


def installed():
    return shared("installed-wheel", Installed, Installed.remove)


class InstalledDaemon(Daemon):
    """A Daemon run by the fresh venv, from elsewhere than the checkout
    (from ``cwd``, if given: by default the venv's own folder for it)."""

    def __init__(self, fresh, directory, command, cwd=None, **kw):
        super().__init__(directory, command=command, **kw)
        self.fresh = fresh
        self.cwd = cwd or fresh.cwd

    def spawn(self):
        if self.port is None:
            self.port = free_port()
        self._output = open(self.output_path, "ab")
        self.process = subprocess.Popen(
            self.argv(), cwd=self.cwd, env=self.fresh.env(**(self.env or {})),
            stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT,
            start_new_session=True)
        return self


class WheelTests(unittest.TestCase):
    """The wheel, and twistd in the venv it is installed in."""

    def setUp(self):
        self.installed = installed()
        self.fresh = self.installed.venv
        self.spiders = os.path.join(self.fresh.cwd, "spiders")
        if not os.path.exists(self.spiders):
            os.makedirs(self.spiders)
            with open(os.path.join(self.spiders, "echo.py"), "w") as f:
                f.write(SPIDER)

    def test_wheel_contents(self):
        """The dropin is twisted/plugins/netweir_serve_plugin.py, and it is
        all the wheel puts under twisted/: an __init__.py there would
        replace Twisted's own package (or its plugins package)."""
        with zipfile.ZipFile(self.installed.wheel) as wheel:
            names = wheel.namelist()
        self.assertEqual([n for n in names if n.startswith("twisted/")],
                         ["twisted/plugins/netweir_serve_plugin.py"])
        self.assertIn(f"{DIST}/__init__.py", names)
        self.assertIn(f"{DIST}/twistd_plugin.py", names)
        # The .tac, which netweir-serve --print-tac writes out.
        self.assertIn(f"{DIST}/netweir-serve.tac", names)
        # The console's static files are package data.
        for name in ("console.js", "console.css", "jobs.js", "job.js", "schedules.js",
                     "spider.js", "nodes.js", "uPlot.iife.min.js", "uPlot.min.css",
                     "uPlot.LICENSE"):
            self.assertIn(f"{DIST}/web/console/{name}", names)
        self.assertIn(f"{DIST}/web/favicon.ico", names)
        self.assertEqual([n for n in names if "__pycache__" in n or n.endswith(".pyc")], [])
        for name in ("twisted/__init__.py", "twisted/plugins/__init__.py"):
            self.assertFalse(os.path.exists(os.path.join(self.fresh.site, name)), name)
        self.assertTrue(os.path.exists(
            os.path.join(self.fresh.site, "twisted", "plugins", "netweir_serve_plugin.py")))

    def test_the_installed_copy_runs(self):
        """The venv imports netweir_serve and the dropin from its own
        site-packages; neither the checkout nor the sources copy is on
        its sys.path."""
        path, package, dropin = self.fresh.where()
        self.assertTrue(inside(package, self.fresh.site), package)
        self.assertTrue(inside(dropin, self.fresh.site), dropin)
        # Under the checkout, only this venv's site-packages (for the
        # dependencies; this venv's own .pth files are not read).
        allowed = [os.path.realpath(p) for p in this_venv_sites()]
        for entry in filter(None, path):
            self.assertFalse(inside(entry, self.installed.source), entry)
            if os.path.realpath(entry) not in allowed:
                self.assertFalse(inside(entry, ROOT), entry)
        with open(os.path.join(self.fresh.bin, "netweir-serve")) as f:
            self.assertEqual(f.readline().strip(), "#!" + self.fresh.python)

    def test_twistd_knows_the_plugin(self):
        done = self.fresh.run([self.fresh.twistd, "netweir-serve", "--help"])
        self.assertIn("Usage: twistd [options] netweir-serve", done.stdout)
        done = self.fresh.run([self.fresh.twistd, "--help"])
        self.assertIn("netweir-serve", done.stdout)

    def check_serves(self, daemon):
        """Starts the daemon, runs a job through it, stops it with SIGTERM."""
        self.addCleanup(daemon.kill)
        daemon.start(timeout=60)
        status, answer = daemon.get("daemonstatus.json")
        self.assertEqual((status, answer["status"]), (200, "ok"), daemon.output())
        self.assertEqual(daemon.get("listspiders.json", {"project": "shop"})[1]["spiders"],
                         ["echo"])
        # A job: its process runs the installed package's spider runner.
        jobid = daemon.must_schedule("shop", "echo")
        daemon.wait_state(jobid, "finished")
        self.assertEqual(daemon.stop(signal.SIGTERM), 0, daemon.output())

    def test_twistd_plugin_serves(self):
        directory = os.path.join(self.fresh.cwd, self.id().rsplit(".", 1)[-1])
        self.check_serves(InstalledDaemon(
            self.fresh, directory, [self.fresh.twistd, "-n", "--pidfile=", "netweir-serve"],
            projects=[f"shop={self.spiders}"]))

    def test_console_script_serves(self):
        directory = os.path.join(self.fresh.cwd, self.id().rsplit(".", 1)[-1])
        self.check_serves(InstalledDaemon(
            self.fresh, directory, [os.path.join(self.fresh.bin, "netweir-serve")],
            projects=[f"shop={self.spiders}"]))

    def test_tac_file_serves(self):
        """As docs/production.md says, with nothing from the checkout:
        ``netweir-serve --print-tac > netweir-serve.tac``, then
        ``twistd -ny netweir-serve.tac`` in that folder (which also holds
        its twistd.pid while it runs)."""
        directory = os.path.join(self.fresh.cwd, self.id().rsplit(".", 1)[-1])
        here = directory + "-tac"
        os.makedirs(here)
        tac = os.path.join(here, "netweir-serve.tac")
        with open(tac, "w") as out:
            subprocess.run([os.path.join(self.fresh.bin, "netweir-serve"), "--print-tac"],
                           stdout=out, cwd=here, env=self.fresh.env(), check=True, timeout=60)
        with open(tac) as f:
            self.assertIn("application = tac_application()", f.read())
        daemon = InstalledDaemon(self.fresh, directory,
                                 [self.fresh.twistd, "-ny", "netweir-serve.tac"], cwd=here)
        daemon.port = free_port()
        daemon.argv = lambda: list(daemon.command)
        daemon.env = {"NETWEIR_SERVE_OPTIONS":
                      f"--project shop={self.spiders} --port {daemon.port} --dir {directory}"}
        self.check_serves(daemon)
        self.assertFalse(os.path.exists(os.path.join(here, "twistd.pid")))


class EditableTests(unittest.TestCase):
    """``pip install -e`` of the sources copy: the default mode, and the
    compat mode that ./run-tests and ./serve-example use. Both must leave
    a folder holding twisted/plugins on sys.path, as twistd looks nowhere
    else for plugins."""

    def check(self, *options):
        base = tempfile.mkdtemp(prefix="netweir-serve-editable-")
        self.addCleanup(shutil.rmtree, base, ignore_errors=True)
        # A copy of its own: an editable install writes *.egg-info into it.
        source = copy_sources(base)
        fresh = FreshVenv(base, "editable-venv")
        fresh.pip_install(*options, "-e", source)
        done = fresh.run([fresh.twistd, "netweir-serve", "--help"])
        self.assertIn("Usage: twistd [options] netweir-serve", done.stdout)
        path, package, dropin = fresh.where()
        self.assertTrue(inside(package, source), package)
        self.assertTrue(inside(dropin, os.path.join(source, "twisted", "plugins")), dropin)
        self.assertNotIn(os.path.realpath(ROOT), [os.path.realpath(p) for p in path if p])
        # What makes the dropin visible: the sources' root on sys.path.
        self.assertIn(os.path.realpath(source), [os.path.realpath(p) for p in path if p])

    def test_default_mode(self):
        self.check()

    def test_compat_mode(self):
        self.check("--config-settings", "editable_mode=compat")
