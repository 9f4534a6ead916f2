"""What the layers below the entry points may import."""

import subprocess
import sys

from twisted.trial import unittest

from .processes import ROOT


class LayerTests(unittest.TestCase):
    def test_the_daemon_imports_neither_netweir_nor_the_global_reactor(self):
        # makeService's module pulls in every part of the daemon; only the
        # entry points (cli) pick a reactor, and only the reader process
        # (spiders._loader) imports netweir.
        source = (
            "import sys, netweir_serve.service, netweir_serve.twistd_plugin;"
            "print(sorted(m for m in ('netweir', 'twisted.internet.reactor') if m in sys.modules))"
        )
        done = subprocess.run([sys.executable, "-c", source], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        self.assertEqual((done.stdout.strip(), done.returncode), ("[]", 0), done.stderr)
