"""A real headless browser for the console's tests: Debian's chromium,
driven by Playwright's Python package (its own browser downloads are never
used: ``executable_path``). Where there is none, it installs Debian's
``chromium`` if it runs as root with apt-get; under ``CI=true`` a test
fails rather than skips when no browser (or no Playwright) can be had.

``BrowserCase`` opens pages in one browser per test (closed at cleanup),
collects the page's script errors (a test asserts there are none), and
``screenshots`` takes a page's pictures for docs/console.md: light and
dark, laptop and phone width. They are written to the test's folder, and
to ``docs/console/`` as well when ``CONSOLE_SCREENSHOTS=1`` (the docs'
pictures are made so, from a real run: ``CONSOLE_SCREENSHOTS=1
./run-tests tests.test_console_jobs ...``).
"""

import os
import shutil
import subprocess

from twisted.trial import unittest

from .processes import ROOT

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SCREENSHOT_VARIABLE = "CONSOLE_SCREENSHOTS"
DOCS_PICTURES = os.path.join(ROOT, "docs", "console")

# (width, height) of a phone and of a laptop.
PHONE, LAPTOP = (390, 844), (1280, 800)
SIZES = {"laptop": LAPTOP, "phone": PHONE}
SCHEMES = ("light", "dark")
PNG = b"\x89PNG\r\n\x1a\n"


def find_browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def install_browser():
    """Debian's chromium, where this may install packages; its path or None."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900,
                 env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
    if subprocess.run(install, **quiet).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], **quiet)
        subprocess.run(install, **quiet)
    return find_browser()


def browser_or_skip(test):
    """(sync_playwright, browser path); skips, or under CI fails, without."""
    in_ci = os.environ.get("CI", "").lower() == "true"

    def unavailable(why):
        if in_ci:
            test.fail(f"CI=true and {why}")
        raise unittest.SkipTest(why)

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright's Python package is not installed (pip install -e '.[test]')")
    path = find_browser() or install_browser()
    if path is None:
        unavailable("no chromium to drive (apt-get install chromium)")
    return sync_playwright, path


class BrowserMixin:
    """For a TestCase: ``self.open(base_url + path)`` gives a Playwright page
    in this test's browser; ``self.errors`` collects its script errors."""

    def browser(self):
        if getattr(self, "_browser", None) is None:
            sync_playwright, executable = browser_or_skip(self)
            playwright = sync_playwright().start()
            self.addCleanup(playwright.stop)
            self._browser = playwright.chromium.launch(executable_path=executable)
            self.addCleanup(self._browser.close)
            self.errors = []
        return self._browser

    def open(self, url, size=LAPTOP, scheme="light", http_credentials=None, watch=None):
        """A new page (in a context of its own: its own cookies and
        credentials) at ``url``; ``watch(page)`` is called before it loads."""
        context = self.browser().new_context(
            viewport={"width": size[0], "height": size[1]}, color_scheme=scheme,
            http_credentials=http_credentials)
        self.addCleanup(context.close)
        page = context.new_page()
        page.on("pageerror", lambda e: self.errors.append(f"{url}: {e}"))
        if watch is not None:
            watch(page)
        page.goto(url)
        return page

    def screenshots(self, page, name, ready=None, folder=None):
        """``name``-light-laptop.png ... ``name``-dark-phone.png of ``page``
        (reloaded at each size and scheme; ``ready(page)`` waits until it is
        drawn), in ``folder`` (the test's), and in docs/console/ when
        CONSOLE_SCREENSHOTS=1. The paths written."""
        folder = folder or os.path.abspath("screenshots")
        os.makedirs(folder, exist_ok=True)
        written = []
        for scheme in SCHEMES:
            page.emulate_media(color_scheme=scheme)
            for size_name, (width, height) in SIZES.items():
                page.set_viewport_size({"width": width, "height": height})
                page.reload()
                if ready is not None:
                    ready(page)
                path = os.path.join(folder, f"{name}-{scheme}-{size_name}.png")
                page.screenshot(path=path, full_page=False)
                with open(path, "rb") as f:
                    if f.read(8) != PNG:
                        raise AssertionError(f"{path} is not a PNG")
                # No horizontal scroll at either width.
                overflow = page.evaluate(
                    "document.documentElement.scrollWidth - document.documentElement.clientWidth")
                if overflow > 1:
                    raise AssertionError(f"{name} at {size_name} width scrolls sideways by"
                                         f" {overflow}px")
                if os.environ.get(SCREENSHOT_VARIABLE) == "1":
                    os.makedirs(DOCS_PICTURES, exist_ok=True)
                    shutil.copyfile(path, os.path.join(DOCS_PICTURES, os.path.basename(path)))
                written.append(path)
        page.emulate_media(color_scheme="light")
        return written
