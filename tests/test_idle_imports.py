"""What an idle daemon leaves unimported (issue 18: its idle memory is its
modules): pyOpenSSL, the metrics library, the HTTP client, static files
and the PostgreSQL driver come in when a request or an option needs them,
and each still works once it has. No memory figure is asserted: the names in
sys.modules and the libraries mapped say the same without the noise."""

import os
import signal
import sys

from .processes import Daemon, wait_until
from .test_jobs import CrawlTestCase

# The daemon's console script, with a SIGUSR2 handler (free in the daemon)
# that writes the names in sys.modules to the file named first.
WRAPPER = """
import os, signal, sys
out = sys.argv.pop(1)
def dump(signum, frame):
    names = sorted(name for name, module in list(sys.modules.items()) if module is not None)
    with open(out + ".part", "w") as f:
        f.write("\\n".join(names))
    os.replace(out + ".part", out)
signal.signal(signal.SIGUSR2, dump)
from netweir_serve.cli import main
sys.exit(main(sys.argv[1:]))
"""

# Not imported by an idle daemon with the default options.
NEVER_IDLE = (
    "OpenSSL", "cryptography", "service_identity",   # cli.py: TLS only
    "prometheus_client",                             # the first /metrics
    "twisted.web.client", "twisted.web._newclient",  # a shared table, --notify
    "twisted.web.proxy",                             # a file on another node
    "twisted.web.static", "netweir_serve.web.jobfile",  # the first file asked for
    "psycopg", "netweir_serve.store.postgres",  # --jobs-db postgresql://
    "cronsim", "fractions",                          # a schedule's rule
    "netweir",                                       # only in the reader and jobs
)

class IdleImportsTests(CrawlTestCase):
    def start(self):
        self.dump = os.path.join(self.base, "modules.txt")
        daemon = Daemon(os.path.join(self.base, "dir"), [f"shop={self.shop}"],
                        command=[sys.executable, "-c", WRAPPER, self.dump]).start()
        self.addCleanup(daemon.kill)
        return daemon

    def modules(self, daemon):
        if os.path.exists(self.dump):
            os.remove(self.dump)
        os.kill(daemon.process.pid, signal.SIGUSR2)
        wait_until(lambda: os.path.exists(self.dump), 30, "the list of modules")
        with open(self.dump) as f:
            return set(f.read().split("\n"))

    def test_idle_then_each_first_use(self):
        daemon = self.start()
        idle = self.modules(daemon)
        self.assertIn("twisted.web.server", idle)  # the list is the daemon's
        self.assertEqual(sorted(idle.intersection(NEVER_IDLE)), [])

        # The API and a job leave them out too.
        jobid = daemon.must_schedule("shop", "books")
        entry = daemon.wait_state(jobid, "finished")
        self.assertEqual(entry["outcome"], "finished")
        for endpoint in ("daemonstatus.json", "listprojects.json", "listjobs.json"):
            self.assertEqual(daemon.get(endpoint)[1]["status"], "ok")
        self.assertEqual(daemon.call("GET", "/")[0], 200)
        after_api = self.modules(daemon)
        self.assertEqual(sorted(after_api.intersection(NEVER_IDLE)), [])

        # Each first use brings what it needs, and works.
        status, headers, body = daemon.call("GET", entry["items_url"])
        self.assertEqual((status, len(body.splitlines())), (200, 30))
        status, headers, _ = daemon.call("GET", "/console/console.js")
        self.assertEqual((status, headers["Content-Type"]),
                         (200, "text/javascript; charset=utf-8"))
        self.assertIn("twisted.web.static", self.modules(daemon))
        status, _, body = daemon.call("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b"netweir_serve_jobs_ended_total{", body)
        scraped = self.modules(daemon)
        self.assertIn("prometheus_client", scraped)
        self.assertNotIn("OpenSSL", scraped)
        self.assertEqual(daemon.call("GET", "/metrics")[0], 200)
