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


# What each package below the entry points may import of the service
# (docs/architecture.md): arrows point down, the store is the bottom floor.
MAY_IMPORT = {
    "store": {"store", "names", "reliability", "health"},
    "reliability": {"reliability", "names", "_proctree"},
    "health": {"health", "names", "reliability"},
    "watching": {"watching"},
    "jobs": {"jobs", "store", "names", "projects", "_proctree", "folders", "reliability",
             "health"},
    "spiders": {"spiders", "jobs", "names", "projects", "_proctree"},
    "schedules": {"schedules", "jobs", "store", "names", "reliability", "health"},
    "cluster": {"cluster", "jobs", "store", "names"},
    "access": {"access", "store", "names", "reliability"},
}


def service_imports(path, package):
    """The netweir_serve modules ``path`` (a module of ``package``, dotted)
    imports, at its top or inside functions, relative imports resolved."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                names = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
            found.update(n for n in names if n.startswith("netweir_serve."))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("netweir_serve."))
    return found


class LayeringTests(unittest.TestCase):
    def test_each_package_imports_only_what_lies_below_it(self):
        import glob
        import os
        wrong = []
        for top, allowed in MAY_IMPORT.items():
            for path in glob.glob(os.path.join(ROOT, "netweir_serve", top, "*.py")):
                for module in service_imports(path, f"netweir_serve.{top}"):
                    if module.split(".")[1] not in allowed:
                        wrong.append(f"{top}/{os.path.basename(path)} imports {module}")
        self.assertEqual(wrong, [])

    def test_the_check_sees_relative_and_late_imports(self):
        import os
        found = service_imports(os.path.join(ROOT, "netweir_serve", "web", "files.py"),
                                "netweir_serve.web")
        self.assertIn("netweir_serve.names", found)
        self.assertIn("netweir_serve.web.jobfile", found)  # imported inside a method
