"""Checks the shop's prices, and fails: one book has none.

A check runs once the crawl has ended; returning a message fails it, so
`netweir crawl` exits with status 1 and the job's outcome is "failed",
with the message at the end of its log:

    curl http://127.0.0.1:6800/schedule.json -d project=example -d spider=audit \
        -d jobid=audit-1
    curl http://127.0.0.1:6800/logs/example/audit/audit-1.log
"""

import netweir

from helpers.bookshop import book_from, site_of


def every_book_has_a_price(stats, spider):
    if spider.unpriced:
        return f"{len(spider.unpriced)} book(s) without a price: {', '.join(spider.unpriced)}"
    return None


class Audit(netweir.Spider):
    name = "audit"
    settings = netweir.Settings(throttle=False)
    checks = [
        netweir.Checks(min_items=20),
        every_book_has_a_price,
    ]

    async def start(self):
        self.unpriced = []
        yield netweir.Request(f"{site_of(self)}/catalogue/page-1.html")

    async def parse(self, page):
        item = book_from(page)
        if item is not None:
            if item["price"] is None:
                self.unpriced.append(item["title"])
            yield item
            return
        # Catalogue pages: their books, and the next page.
        for href in page.css("a::attr(href)").getall():
            if "/books/" in href or "/catalogue/" in href:
                yield page.follow(href)
