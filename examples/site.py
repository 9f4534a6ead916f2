"""A tiny bookshop web site for the example spiders to crawl, offline.

    python examples/site.py                 # http://127.0.0.1:8000/
    python examples/site.py --port 8123     # another port
    python examples/site.py --exit-with PID # close when process PID ends

It serves a robots.txt that allows everything, a home page, four catalogue
pages, four category pages and twenty book pages, each book with a title,
an author, a category and (all but one) a price. Nothing leaves this
machine; Ctrl-C stops it. Only the standard library is used, so any
Python 3 runs it.
"""

import argparse
import html
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (title, author, category, price in pence or None when there is none)
BOOKS = [
    ("A Lantern in the Fog", "Ida Marsh", "fiction", 899),
    ("The Cartographer's Daughter", "Tomas Reyes", "fiction", 1250),
    ("Salt and Iron", "Maeve Quinn", "history", 1599),
    ("Small Hours", "Jun Okada", "poetry", 750),
    ("Counting the Stars", "Priya Natarajan", "science", 1399),
    ("The Orchard Keeper's Year", "Ruth Ellery", "fiction", 999),
    ("Bridges of the North", "Anders Holm", "history", 2100),
    ("What the River Said", "Lena Duval", "poetry", 650),
    ("A Short History of Clocks", "Hugh Barrow", "history", 1875),
    ("The Quiet Engine", "Nadia Farouk", "science", 1425),
    ("Paper Boats", "Kit Morrow", "fiction", 799),
    ("Winter Letters", "Sofia Brandt", "poetry", 825),
    ("The Last Ferry", "Owen Pryce", "fiction", None),
    ("Microbes and Men", "Clara Venn", "science", 1650),
    ("The Long Road South", "Amos Kirby", "history", 1720),
    ("Seven Small Songs", "Ines Carvalho", "poetry", 599),
    ("The Glass Harbour", "Felix Adair", "fiction", 1099),
    ("Tides and Moons", "Hana Sato", "science", 1299),
    ("A Gazetteer of Lost Towns", "Bram Voss", "history", 2450),
    ("The Lighthouse Cat", "Edie Fenwick", "fiction", 699),
]
CATEGORIES = ["fiction", "history", "poetry", "science"]
PER_PAGE = 5
CATALOGUE_PAGES = (len(BOOKS) + PER_PAGE - 1) // PER_PAGE


def slug(title):
    """``the-last-ferry`` for "The Last Ferry": the book page's file name."""
    kept = "".join(c.lower() if c.isalnum() else " " for c in title)
    return "-".join(kept.split())


def book_href(index):
    return f"/books/{slug(BOOKS[index][0])}.html"


def page(title, body):
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)} | The Little Bookshop</title></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n"
        '<p><a href="/">Home</a></p></body></html>\n'
    )


def links(pairs):
    return "<ul>" + "".join(
        f'<li><a href="{href}">{html.escape(text)}</a></li>' for href, text in pairs
    ) + "</ul>"


def home():
    body = "<p>Twenty books, four shelves.</p>"
    body += links([("/catalogue/page-1.html", "Catalogue")]
                  + [(f"/category/{c}/", c.title()) for c in CATEGORIES])
    return page("The Little Bookshop", body)


def catalogue(number):
    first = (number - 1) * PER_PAGE
    body = links([(book_href(i), BOOKS[i][0])
                  for i in range(first, min(first + PER_PAGE, len(BOOKS)))])
    if number < CATALOGUE_PAGES:
        body += f'<p class="next"><a href="/catalogue/page-{number + 1}.html">Next page</a></p>'
    return page(f"Catalogue, page {number} of {CATALOGUE_PAGES}", body)


def category(name):
    body = links([(book_href(i), book[0]) for i, book in enumerate(BOOKS) if book[2] == name])
    return page(name.title(), body)


def book(index):
    title, author, shelf, pence = BOOKS[index]
    price = ("<p class=\"price\">£{}.{:02d}</p>".format(*divmod(pence, 100))
             if pence is not None else '<p class="no-price">Price on request</p>')
    body = (f'<p class="author">{html.escape(author)}</p>\n{price}\n'
            f'<p class="category"><a href="/category/{shelf}/">{shelf}</a></p>')
    return page(title, body)


def route(path):
    """(status, content type, text) for a request path."""
    if path == "/robots.txt":
        return 200, "text/plain; charset=utf-8", "User-agent: *\nAllow: /\n"
    if path in ("/", "/index.html"):
        return 200, "text/html; charset=utf-8", home()
    for number in range(1, CATALOGUE_PAGES + 1):
        if path == f"/catalogue/page-{number}.html":
            return 200, "text/html; charset=utf-8", catalogue(number)
    for name in CATEGORIES:
        if path == f"/category/{name}/":
            return 200, "text/html; charset=utf-8", category(name)
    for index in range(len(BOOKS)):
        if path == book_href(index):
            return 200, "text/html; charset=utf-8", book(index)
    return 404, "text/html; charset=utf-8", page("Not found", "<p>No such page.</p>")


class Handler(BaseHTTPRequestHandler):
    server_version = "LittleBookshop/1.0"
    protocol_version = "HTTP/1.1"
    quiet = False

    def do_GET(self, head=False):
        status, kind, text = route(self.path.split("?", 1)[0])
        body = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET(head=True)

    def log_message(self, format, *args):
        if not self.quiet:
            super().log_message(format, *args)


# A client that goes away mid-answer: Netweir resets its connections when
# a crawl is cancelled. Nothing went wrong in the shop, so nothing is said.
CLIENT_GONE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class Bookshop(ThreadingHTTPServer):
    """The shop's server: one thread a connection, quiet about clients
    that reset or hang up; any other error still prints its traceback."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], CLIENT_GONE):
            return
        super().handle_error(request, client_address)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def close_when_gone(server, pid):
    """Shuts ``server`` down once process ``pid`` has ended (./serve-example
    starts the shop this way, so it closes with the service)."""
    while alive(pid):
        time.sleep(1)
    server.shutdown()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Serve the example bookshop.")
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--quiet", action="store_true", help="don't log each request")
    parser.add_argument("--exit-with", type=int, metavar="PID",
                        help="close once the process PID has ended")
    options = parser.parse_args(argv)
    Handler.quiet = options.quiet
    server = Bookshop((options.host, options.port), Handler)
    if options.exit_with:
        threading.Thread(target=close_when_gone, args=(server, options.exit_with),
                         daemon=True).start()
    closes = (f"closes when process {options.exit_with} ends" if options.exit_with
              else "Ctrl-C closes it")
    print(f"The Little Bookshop is open on http://{options.host}:{server.server_port}/"
          f" ({closes})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
