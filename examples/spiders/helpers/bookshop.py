"""Reading the example bookshop (examples/site.py)."""

# Where examples/site.py listens unless told otherwise. Every example spider
# takes a `site` argument to crawl another copy: -d site=http://host:port
DEFAULT_SITE = "http://127.0.0.1:8000"


def site_of(spider):
    """The shop's address for ``spider``: its ``site`` argument, if given."""
    return getattr(spider, "site", DEFAULT_SITE).rstrip("/")


def price_of(text):
    """12.5 for "£12.50"; None for no price."""
    if not text:
        return None
    return float(text.strip().lstrip("£"))


def book_from(page):
    """The item a book page makes, or None for any other page."""
    author = page.css("p.author::text").get()
    if author is None:
        return None
    return {
        "title": page.css("h1::text").get(),
        "author": author,
        "category": page.css("p.category a::text").get(),
        "price": price_of(page.css("p.price::text").get()),
        "url": page.url,
    }
