"""What twistd's ServiceMaker loads: the options class and makeService."""

from .cli import twistd_service
from .options import ServeOptions as Options


def makeService(options):
    return twistd_service(options)


__all__ = ["Options", "makeService"]
