"""The program's entry point (``netweir-serve``, ``python -m
netweir_serve``): before anything else, the process is made non-dumpable.

The service's password (and any secret in its environment) is readable in
``/proc/PID/environ`` by every process of the same user until then, the
crawls it left running across a restart included: done where the service
is built, that was after Twisted's import and the options, 460-700 ms in
which an adopted crawl read it. Here it costs the interpreter's own start
only (docs/security.md). Standard library only above the call."""

from . import _proctree


def main(argv=None):
    _proctree.make_undumpable()
    from .cli import main as serve

    return serve(argv)
