"""The projects both services serve: 1, 10 and 50 spider files.

``one`` is a single file with every spider the benchmark schedules:

* ``trivial`` fetches one page of the local site and yields one item;
* ``stamp`` writes ``time.time()`` to the file its ``stampfile`` argument
  names as soon as its code runs, and fetches nothing;
* ``blocker`` sleeps until it is cancelled (it holds a job slot).

``ten`` and ``fifty`` hold 10 and 50 files of one trivial spider each, for
listing.
"""

import os

HEADER = '''\
import asyncio
import time

import netweir

SITE = {site!r}
'''

TRIVIAL = '''

class {cls}(netweir.Spider):
    """Fetches one page and yields one item."""
    name = {name!r}
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/page"]

    async def parse(self, page):
        yield {{"title": page.css("h1::text").get()}}
'''

STAMP = '''

class Stamp(netweir.Spider):
    """Records when its code first runs, then ends."""
    name = "stamp"
    settings = netweir.Settings(throttle=False)

    async def start(self):
        with open(self.stampfile + ".tmp", "w") as f:
            f.write(repr(time.time()))
        import os
        os.replace(self.stampfile + ".tmp", self.stampfile)
        return
        yield
'''

BLOCKER = '''

class Blocker(netweir.Spider):
    """Holds a job slot until cancelled (an hour at most)."""
    name = "blocker"
    settings = netweir.Settings(throttle=False)

    async def start(self):
        for _ in range(3600):
            await asyncio.sleep(1)
        return
        yield
'''

# Project name -> number of files.
SIZES = {"one": 1, "ten": 10, "fifty": 50}
MAIN_FILE = "spiders.py"


def write_projects(root, site):
    """Writes the projects under ``root`` for the site at URL ``site``;
    {project name: directory}."""
    projects = {}
    for project, files in SIZES.items():
        folder = os.path.join(root, project)
        os.makedirs(folder, exist_ok=True)
        if files == 1:
            body = HEADER.format(site=site) + TRIVIAL.format(cls="Trivial", name="trivial")
            body += STAMP + BLOCKER
            _write(os.path.join(folder, MAIN_FILE), body)
        else:
            for n in range(files):
                body = HEADER.format(site=site) + TRIVIAL.format(cls=f"Trivial{n}",
                                                                  name=f"trivial{n}")
                _write(os.path.join(folder, f"spider{n:02d}.py"), body)
        projects[project] = folder
    return projects


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
