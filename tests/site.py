"""A small web site for real crawls in tests, run as its own process:

    python -m tests.site        (prints "PORT <n>" once it listens)

/robots.txt allows everything; /page/N is a chain of 30 linked pages with
an <h1> each; /slow/N?d=S answers after S seconds and links to /slow/N+1;
/one is a single page.
"""

import sys

from twisted.internet import reactor, task
from twisted.web import resource, server

PAGES = 30


def _html(title, links=()):
    anchors = "".join(f'<a href="{href}">{href}</a>' for href in links)
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{anchors}</body></html>".encode()


class Site(resource.Resource):
    isLeaf = True

    def render_GET(self, request):
        parts = request.path.decode().strip("/").split("/")
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if parts == ["robots.txt"]:
            request.setHeader(b"content-type", b"text/plain")
            return b"User-agent: *\nAllow: /\n"
        if parts == ["one"]:
            return _html("one")
        if len(parts) == 2 and parts[0] == "page" and parts[1].isdigit():
            n = int(parts[1])
            links = [f"/page/{n + 1}"] if n + 1 < PAGES else []
            return _html(f"page {n}", links)
        if len(parts) == 2 and parts[0] == "slow" and parts[1].isdigit():
            n = int(parts[1])
            delay = float((request.args.get(b"d") or [b"0.3"])[0])
            d = task.deferLater(reactor, delay, lambda: _html(f"slow {n}", [f"/slow/{n + 1}"]))
            d.addCallback(lambda body: (request.write(body), request.finish()))
            d.addErrback(lambda _: None)
            return server.NOT_DONE_YET
        request.setResponseCode(404)
        return _html("not found")


def main():
    site = server.Site(Site())
    site.log = lambda request: None
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    sys.stdout.write(f"PORT {port.getHost().port}\n")
    sys.stdout.flush()
    reactor.run()


if __name__ == "__main__":
    main()
