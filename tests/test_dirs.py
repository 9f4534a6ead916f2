"""A --dir the service cannot use stops it with one line, and nothing made."""

import errno
import os
import subprocess
import sys

from twisted.trial import unittest

from netweir_serve import dirlock
from netweir_serve.dirlock import (
    LOCK_NAME, DirectoryBusy, DirectoryError, DirectoryUnusable, lock_directory)

from .processes import ROOT, free_port


def everything_under(top):
    found = set()
    for here, folders, files in os.walk(top):
        for name in folders + files:
            found.add(os.path.relpath(os.path.join(here, name), top))
    return found


class LockDirectoryTests(unittest.TestCase):
    def setUp(self):
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)
        self.file = os.path.join(self.base, "file")
        with open(self.file, "w") as f:
            f.write("not a folder\n")

    def unusable(self, directory):
        before = everything_under(self.base)
        with self.assertRaises(DirectoryUnusable) as raised:
            lock_directory(directory)
        message = str(raised.exception)
        self.assertTrue(message.startswith(f"cannot use --dir {directory}: "), message)
        self.assertNotIn("\n", message)
        self.assertEqual(everything_under(self.base), before)
        return message

    def test_makes_the_directory_and_its_parents(self):
        directory = os.path.join(self.base, "a", "b", "c")
        lock = lock_directory(directory)
        self.addCleanup(lock.close)
        with open(os.path.join(directory, LOCK_NAME)) as f:
            self.assertEqual(f.read(), f"{os.getpid()}\n")

    def test_a_path_through_a_file(self):
        for directory in (os.path.join(self.file, "sub"), os.path.join(self.file, "a", "b")):
            self.assertIn(f"{self.file} is a file, not a folder", self.unusable(directory))

    def test_a_file_given_as_the_directory(self):
        self.assertIn(f"{self.file} is a file, not a folder", self.unusable(self.file))

    def test_a_lock_file_that_is_a_folder(self):
        directory = os.path.join(self.base, "dir")
        os.makedirs(os.path.join(directory, LOCK_NAME))
        self.assertIn("is a folder", self.unusable(directory))

    def test_a_file_system_that_makes_no_folders(self):
        message = self.unusable("/proc/netweir-test")
        self.assertIn("cannot make the folder /proc/netweir-test", message)

    def test_a_refused_folder_takes_back_those_made_above_it(self):
        real_mkdir = os.mkdir

        def mkdir(path, *args, **kwargs):
            if os.path.basename(path) == "c":
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return real_mkdir(path, *args, **kwargs)

        self.patch(os, "mkdir", mkdir)
        message = self.unusable(os.path.join(self.base, "a", "b", "c"))
        self.assertIn("permission denied", message)

    def test_a_full_disk_takes_back_the_lock_file_and_folder(self):
        def full(*args):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        self.patch(dirlock.os, "ftruncate", full)
        message = self.unusable(os.path.join(self.base, "new"))
        self.assertIn("cannot write", message)
        self.assertIn("no space left on device", message)

    def test_an_existing_lock_file_is_kept_when_writing_fails(self):
        directory = os.path.join(self.base, "dir")
        lock_directory(directory).close()

        def full(*args):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        self.patch(dirlock.os, "ftruncate", full)
        self.unusable(directory)
        self.assertTrue(os.path.exists(os.path.join(directory, LOCK_NAME)))

    def test_a_busy_directory_keeps_its_lock_file(self):
        directory = os.path.join(self.base, "dir")
        lock = lock_directory(directory)
        self.addCleanup(lock.close)
        with self.assertRaises(DirectoryBusy):
            lock_directory(directory)
        self.assertEqual(os.listdir(directory), [LOCK_NAME])

    def test_both_are_directory_errors(self):
        self.assertTrue(issubclass(DirectoryBusy, DirectoryError))
        self.assertTrue(issubclass(DirectoryUnusable, DirectoryError))

    def test_a_read_only_directory(self):
        directory = os.path.join(self.base, "ro")
        if os.geteuid() != 0:
            os.mkdir(directory, 0o500)
            self.addCleanup(os.chmod, directory, 0o700)
            self.assertIn("permission denied", self.unusable(os.path.join(directory, "sub")))
            return
        # Root writes in any folder whatever its mode: a read-only file
        # system is what refuses root.
        os.mkdir(directory)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", directory],
                       check=True, capture_output=True)
        self.addCleanup(subprocess.run, ["umount", directory], capture_output=True)
        self.assertIn("read-only file system", self.unusable(os.path.join(directory, "sub")))


class CommandLineTests(unittest.TestCase):
    """The real command: exit status 1, one line on stderr, nothing written."""

    def run_serve(self, directory):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("NETWEIR_SERVE_")}
        return subprocess.run(
            [sys.executable, "-m", "netweir_serve", "--dir", directory,
             "--port", str(free_port())],
            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60)

    def test_an_unusable_dir_ends_the_start_with_one_line(self):
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        regular = os.path.join(base, "somefile")
        open(regular, "w").close()
        lock_is_a_folder = os.path.join(base, "dir")
        os.makedirs(os.path.join(lock_is_a_folder, LOCK_NAME))
        before = everything_under(base)
        for directory in (os.path.join(regular, "sub"), os.path.join(regular, "a", "b"),
                          regular, lock_is_a_folder, "/proc/netweir-test"):
            done = self.run_serve(directory)
            self.assertEqual(done.returncode, 1, (directory, done.stderr))
            self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
            self.assertTrue(
                done.stderr.startswith(f"netweir-serve: error: cannot use --dir {directory}: "),
                done.stderr)
            self.assertEqual(done.stdout, "")
            self.assertEqual(everything_under(base), before, directory)
        self.assertFalse(os.path.exists("/proc/netweir-test"))
