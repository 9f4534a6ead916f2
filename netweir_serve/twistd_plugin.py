"""What twistd's ServiceMaker loads: the options class and makeService.

twistd imports this module only to run netweir-serve, before it reads the
options: the process is made non-dumpable first, as the program's own
entry point does (entry.py), so its environment is out of the reach of
other processes of its user from here on."""

from . import _proctree

_proctree.make_undumpable()

from .cli import twistd_service  # noqa: E402
from .options import ServeOptions as Options  # noqa: E402


def makeService(options):
    return twistd_service(options)


__all__ = ["Options", "makeService"]
