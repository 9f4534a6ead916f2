"""The whole shop at a polite pace: one page a second, about half a minute.

Slow on purpose, so there is time to watch it run, cancel it, and carry on
from a checkpoint:

    curl http://127.0.0.1:6800/schedule.json -d project=example -d spider=browse \
        -d setting=checkpoint=browse -d jobid=browse-1
    curl http://127.0.0.1:6800/cancel.json -d project=example -d job=browse-1
    curl http://127.0.0.1:6800/schedule.json -d project=example -d spider=browse \
        -d setting=checkpoint=browse -d jobid=browse-2

The second job finds the checkpoint the first left in
DIR/data/example/browse and fetches only the pages the first didn't get to.
"""

import netweir

from helpers.bookshop import book_from, site_of


class Browse(netweir.Spider):
    name = "browse"
    # One request at a time, at least a second apart. Try
    # -d setting=min_delay=0.2 to hurry it along.
    settings = netweir.Settings(per_domain=1, min_delay=1.0)

    async def start(self):
        yield netweir.Request(f"{site_of(self)}/")

    async def parse(self, page):
        item = book_from(page)
        if item is not None:
            yield item
        for href in page.css("a::attr(href)").getall():
            yield page.follow(href)
