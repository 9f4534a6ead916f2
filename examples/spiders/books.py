"""Every book in the shop, or one shelf of it.

    curl http://127.0.0.1:6800/schedule.json -d project=example -d spider=books
    curl http://127.0.0.1:6800/schedule.json -d project=example -d spider=books \
        -d category=poetry

``category`` and ``site`` are spider arguments: any parameter of
schedule.json that isn't one of its own arrives here as an attribute, as a
string (netweir crawl -a category=poetry does the same).
"""

import netweir

from helpers.bookshop import book_from, site_of


class Books(netweir.Spider):
    name = "books"
    # The spider's own settings. A job's setting=KEY=VALUE parameters are
    # applied on top of these, e.g. -d setting=max_items=5.
    settings = netweir.Settings(throttle=False)

    async def start(self):
        # Arguments are set after the spider is made, so they are read here,
        # when the crawl starts, rather than in the class body.
        category = getattr(self, "category", None)
        if category:
            yield netweir.Request(f"{site_of(self)}/category/{category}/")
        else:
            yield netweir.Request(f"{site_of(self)}/")

    async def parse(self, page):
        item = book_from(page)
        if item is not None:
            yield item
            return
        for href in page.css("a::attr(href)").getall():
            # On a shelf, only its books; otherwise the whole shop.
            if getattr(self, "category", None) and "/books/" not in href:
                continue
            yield page.follow(href)
