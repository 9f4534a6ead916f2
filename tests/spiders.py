"""Spider files for integration tests, written into a temp project."""

import os

HEADER = '''
import json
import os
import netweir

SITE = {site!r}
'''

FILES = {
    "books.py": '''
class Books(netweir.Spider):
    """Thirty linked pages, an item each."""
    name = "books"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/page/0"]

    async def parse(self, page):
        yield {"title": page.css("h1::text").get()}
        for href in page.css("a::attr(href)").getall():
            yield page.follow(href)
''',
    "echo.py": '''
class Echo(netweir.Spider):
    """One item saying where it ran and what it was given."""
    name = "echo"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        yield {"cwd": os.getcwd(), "category": getattr(self, "category", None),
               "environ": sorted(k for k in os.environ if k.startswith("NETWEIR_SERVE")),
               "libpq": sorted(k for k in os.environ if k.startswith("PG")),
               "holding_a_secret": sorted(k for k, v in os.environ.items()
                                          if v.startswith("secret-"))}
''',
    "counted.py": '''
class Counted(netweir.Spider):
    """One page and as many items as its argument ``count`` says (10)."""
    name = "counted"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        for n in range(int(getattr(self, "count", "10"))):
            yield {"n": n}
''',
    "failing.py": '''
class Failing(netweir.Spider):
    """Crawls fine; its end-of-crawl check fails, so the crawl exits 1."""
    name = "failing"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]
    checks = [lambda stats, spider: "this check always fails"]

    async def parse(self, page):
        yield {"ok": True}
''',
    "slow.py": '''
class Slow(netweir.Spider):
    """Follows a chain of slow pages until stopped; logs each page."""
    name = "slow"
    settings = netweir.Settings(throttle=False)
    # start_urls rather than start(): a crawl resumed from a checkpoint does
    # not fetch its start URLs again.
    start_urls = [SITE + "/slow/0?d=0.1"]

    async def parse(self, page):
        n = int(page.url.split("/slow/")[1].split("?")[0])
        self.logger.info("slow page %d", n)
        yield {"n": n, "url": page.url}
        if n + 1 < int(getattr(self, "pages", "100000")):
            yield page.follow(SITE + f"/slow/{n + 1}?d=" + getattr(self, "delay", "0.2"))
''',
    "stubborn.py": '''
import signal
import subprocess
import sys


class Stubborn(netweir.Spider):
    """Ignores SIGTERM and SIGINT, starts a child that does too, and
    records both pids in the file its pidfile argument names."""
    name = "stubborn"
    settings = netweir.Settings(throttle=False)

    async def start(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        signal.signal = lambda *args: None
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            " signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"])
        with open(self.pidfile + ".tmp", "w") as f:
            json.dump({"pid": os.getpid(), "child": child.pid}, f)
        os.replace(self.pidfile + ".tmp", self.pidfile)
        yield netweir.Request(SITE + "/slow/0?d=0.3")

    async def parse(self, page):
        n = int(page.url.split("/slow/")[1].split("?")[0])
        yield {"n": n}
        yield page.follow(SITE + f"/slow/{n + 1}?d=0.3")
''',
    "orphaning.py": '''
import subprocess
import sys


class Orphaning(netweir.Spider):
    """Starts a long-lived child and finishes, leaving the child behind."""
    name = "orphaning"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(self.pidfile + ".tmp", "w") as f:
            json.dump({"pid": os.getpid(), "child": child.pid}, f)
        os.replace(self.pidfile + ".tmp", self.pidfile)
        yield {"child": child.pid}
''',
}


def write_project(folder, site):
    """Writes every spider file into ``folder`` for the site at ``site``."""
    os.makedirs(folder, exist_ok=True)
    for name, body in FILES.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(HEADER.format(site=site) + body)
    return folder
