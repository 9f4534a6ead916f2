"""The twistd dropin: ``twistd -n netweir-serve [options]``."""

from twisted.application.service import ServiceMaker

NetweirServe = ServiceMaker(
    "netweir-serve",
    "netweir_serve.twistd_plugin",
    "Run Netweir spiders as jobs over a scrapyd-shaped HTTP API",
    "netweir-serve",
)
