"""Reading a project's spider files without letting them into the daemon.

Importing a spider file runs its code, which may crash, hang, print or exit,
so files are only ever read in a process of their own (the code that runs
there is netweir_serve.spiders._loader), a fresh one for every request: an edited
spider is seen at once, and a broken file is an error naming it rather than
the daemon's problem.

``SpiderReader`` keeps a *warm* helper process that has imported netweir
once and forks a fresh reader per request (a few milliseconds); with
``warm=False`` it starts a whole new interpreter per request instead (a few
hundred). Either way the reactor never waits: every method returns a
Deferred. A job's check that passed is given again without a reader
while the project's files stay unchanged (spiders.reuse): an edited,
added or removed file is read afresh.
"""

import os
import sys

from twisted.internet import defer
from zope.interface import implementer

from ..jobs.checked import FoundSpider, InspectError
from ..jobs.interfaces import ISpiderReader
from . import protocol
from .reuse import CheckReuse
from .runners import OneShotRunner, WarmRunner, last_lines

# Readers running at once: enough to keep two cores busy while one file
# sleeps at import, few enough that a burst of requests can't fork-bomb.
MAX_CONCURRENT_READS = 8

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# How reader processes start: this copy of netweir_serve importable, without
# leaving its folder (or the daemon's working directory) on sys.path for
# spider files to import from. Not ``python -m``, which would put the
# working directory first on sys.path.
_BOOTSTRAP = """\
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
parent = sys.argv[1]
added = parent not in sys.path
if added:
    sys.path.insert(0, parent)
from netweir_serve.spiders import _forkserver
if added:
    sys.path.remove(parent)
_forkserver.main(sys.argv[2:])
"""

# --- the daemon's interface ---------------------------------------------------------


@implementer(ISpiderReader)
class SpiderReader:
    """Lists a project's spiders and checks jobs before they are queued,
    reading the project's files in another process: each listing, and
    each check unless the same one passed with the files as they are now
    (``checks``, a spiders.reuse.CheckReuse).

    ``reactor`` provides IReactorProcess and IReactorTime. ``python`` is the
    interpreter for the reader processes (it needs netweir and this
    package's dependencies); ``timeout`` the seconds a project's files may
    take to load; ``env`` the readers' environment (default: the daemon's),
    best the same as the jobs get, since spider files may read it at import.
    ``warm=False`` starts a fresh interpreter per request instead of forking
    from a warm helper (slower; for platforms without fork, and comparison).
    ``wall`` is the time of day (``seconds()``; ``time.time`` if not given),
    which file times are compared with (spiders.reuse).
    """

    def __init__(self, reactor, python=sys.executable, timeout=10.0, env=None, warm=True,
                 wall=None):
        self._timeout = float(timeout)
        argv = [python, "-c", _BOOTSTRAP, _PACKAGE_PARENT, "warm" if warm else "once"]
        environment = dict(os.environ if env is None else env)
        runner_class = WarmRunner if warm else OneShotRunner
        self._runner = runner_class(reactor, argv, environment)
        self._slots = defer.DeferredSemaphore(MAX_CONCURRENT_READS)
        # A check is read once for as long as the project's files stay
        # unchanged (a burst of firings of one spider: one reader).
        self.checks = CheckReuse(reactor, self._read_check, wall=wall)

    def start(self):
        """Starts the warm helper now rather than at the first request, so
        the first request does not wait for netweir to be imported.
        Optional; a failure to start shows at the first request."""
        try:
            self._runner.start()
        except Exception:
            pass

    def listSpiders(self, project):
        """Deferred list of the sorted names of ``project``'s spiders; fails
        with InspectError (a broken file, a duplicate name, a timeout...)."""
        return defer.maybeDeferred(self._list_spiders, project)

    def _list_spiders(self, project):
        request = protocol.list_request(project.name, project.path, self._timeout)
        return self._ask(project, request)

    def checkJob(self, project, spider, settings, arguments, spelled=None):
        """Deferred FoundSpider if ``spider`` of ``project`` can run with
        ``settings`` and ``arguments``; fails with InspectError saying why
        not. The job core hands them over ready (jobs.checked.check_job):
        ``settings`` are ``(key, value)`` pairs, each key the setting it
        names, path settings already absolute; they are checked as
        ``netweir crawl -s`` reads them, on top of the spider's own
        settings (for ``warc`` and ``har`` the directory they go in must
        exist). ``spelled`` maps a key to how the user typed it, for the
        refusal to name it so. ``arguments``: ``(name, value)`` pairs, each
        to become an attribute of the spider."""
        return defer.maybeDeferred(self.checks.check, project, spider, settings, arguments,
                                   spelled or {})

    def _read_check(self, project, spider, settings, arguments, spelled):
        request = protocol.check_request(
            project.name, project.path, self._timeout, spider=spider, settings=settings,
            # MAX_ITEMS is max_items, but a refusal names what was typed.
            spelled=spelled, arguments=arguments,
        )
        checked = self._ask(project, request)
        checked.addCallback(lambda found: FoundSpider(found["spider"], found["file"]))
        return checked

    def stop(self):
        """Deferred that fires once no reader process is left: requests
        still in flight fail with InspectError, and later ones too."""
        return self._runner.stop()

    def _ask(self, project, request):
        answered = self._slots.run(self._runner.ask, request)
        answered.addCallback(self._result, project)
        return answered

    def _result(self, answer, project):
        """The result in a reader's answer, or InspectError saying why there
        is none."""
        answer = protocol.read_answer(answer)
        if answer.kind == protocol.OK:
            return answer.result
        if answer.kind == protocol.ERROR:
            raise InspectError(answer.error)
        if answer.kind == protocol.TIMEOUT:
            raise InspectError(
                f"the files of project {project.name!r} took too long to load (more than"
                f" {self._timeout:g} seconds), so reading them was stopped: does a spider"
                " file hang when it is imported?"
            )
        if answer.kind == protocol.HELPER_DIED:
            what = f"the helper process that reads spider files ended ({answer.how})"
        else:
            what = (
                f"the process reading them ended without answering ({answer.how});"
                " does a spider file call os._exit() or crash Python?"
            )
        message = f"reading the files of project {project.name!r} failed: {what}"
        tail = last_lines(answer.stderr)
        if tail:
            message += f"\nThe last lines of its error output:\n{tail}"
        raise InspectError(message)
