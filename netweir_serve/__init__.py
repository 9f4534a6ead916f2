"""netweir-serve: a Twisted daemon that runs Netweir spiders as jobs."""

__version__ = "0.1.0"
