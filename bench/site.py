"""The local test site the benchmark's crawls fetch, as a process of its own:

    python -m bench.site            (prints "PORT <n>" once it listens)

``/robots.txt`` allows everything; any other path is one small HTML page.
HTTP/1.1 with keep-alive, one thread per connection (stdlib only), bound to
127.0.0.1. It stops when its standard input closes, so it never outlives
the benchmark that started it, however that ends.
"""

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROBOTS = b"User-agent: *\nAllow: /\n"
PAGE = b"<html><head><title>bench</title></head><body><h1>bench</h1></body></html>"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/robots.txt":
            body, kind = ROBOTS, "text/plain"
        else:
            body, kind = PAGE, "text/html; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write(f"PORT {server.server_address[1]}\n")
    sys.stdout.flush()
    # Until the parent closes our stdin (or dies).
    sys.stdin.buffer.read()
    server.shutdown()


if __name__ == "__main__":
    main()
