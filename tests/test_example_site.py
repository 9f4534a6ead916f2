"""The example bookshop (examples/site.py) stays quiet when a client resets
its connection -- Netweir does when a crawl is cancelled mid-request -- and
still reports any other error. ./serve-example runs the shop in the same
terminal as the service, where a traceback per reset reads like a fault.

The shop runs in this process, on a real socket, reached by real clients;
its handler threads are joined when it closes, so everything it could
print has been printed when the test reads it."""

import importlib.util
import io
import os
import socket
import struct
import sys
import threading

from twisted.trial.unittest import TestCase

from .processes import ROOT


def load_shop():
    """examples/site.py as a module (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "example_site", os.path.join(ROOT, "examples", "site.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ExampleSiteTests(TestCase):
    def setUp(self):
        self.shop = load_shop()
        self.printed = io.StringIO()
        self.patch(sys, "stderr", self.printed)
        self.patch(self.shop.Handler, "quiet", True)
        self.server = self.shop.Bookshop(("127.0.0.1", 0), self.shop.Handler)
        # Joined at server_close (the command line's shop does not wait).
        self.server.daemon_threads = False
        self.port = self.server.server_port
        self.serving = threading.Thread(target=self.server.serve_forever)
        self.serving.start()
        self.addCleanup(self.close)

    def close(self):
        if self.serving.is_alive():
            self.server.shutdown()
            self.serving.join()
            self.server.server_close()

    def get(self, path, reset=False):
        """GET ``path``; with ``reset``, close at once with a TCP reset
        (SO_LINGER 0) instead of reading the answer."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=20) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: shop\r\n".encode()
                         + (b"\r\n" if reset else b"Connection: close\r\n\r\n"))
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return None
            answer = b""
            while piece := sock.recv(65536):
                answer += piece
            return answer

    def test_client_resets_print_nothing(self):
        for _ in range(5):
            self.get("/catalogue/page-1.html", reset=True)
        # Still serving, and nothing printed once every handler has ended.
        self.assertIn(b"Catalogue, page 1", self.get("/catalogue/page-1.html"))
        self.close()
        self.assertEqual(self.printed.getvalue(), "")

    def test_other_errors_are_still_reported(self):
        try:
            raise ValueError("a real fault of the shop")
        except ValueError:
            self.server.handle_error(None, ("127.0.0.1", 1234))
        printed = self.printed.getvalue()
        self.assertIn("Traceback", printed)
        self.assertIn("ValueError: a real fault of the shop", printed)
