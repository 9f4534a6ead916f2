"""Path settings stay inside the project's data directory."""

import os

from twisted.trial import unittest

from netweir_serve.jobs.datapaths import PATH_SETTINGS, resolve, resolve_settings


class ResolveTests(unittest.TestCase):
    def setUp(self):
        # DIR/data/PROJECT, as the daemon lays it out.
        self.data_dir = os.path.abspath(os.path.join(self.mktemp(), "data", "shop"))
        os.makedirs(self.data_dir)

    def refusal(self, value, key="checkpoint"):
        with self.assertRaises(ValueError) as raised:
            resolve(self.data_dir, key, value)
        message = str(raised.exception)
        self.assertIn(key, message)
        return message

    def test_relative_paths_land_inside_the_data_dir(self):
        self.assertEqual(
            resolve(self.data_dir, "checkpoint", "books"), os.path.join(self.data_dir, "books")
        )
        self.assertEqual(
            resolve(self.data_dir, "warc", "./runs//today.warc.gz"),
            os.path.join(self.data_dir, "runs", "today.warc.gz"),
        )

    def test_data_dir_need_not_exist_and_nothing_is_created(self):
        missing = os.path.abspath(os.path.join(self.mktemp(), "data", "news"))
        path = resolve(missing, "deltafetch", "seen")
        self.assertEqual(path, os.path.join(missing, "seen"))
        self.assertFalse(os.path.exists(os.path.dirname(missing)))

    def test_relative_data_dir_gives_an_absolute_path(self):
        cwd = os.getcwd()
        os.chdir(os.path.dirname(self.data_dir))
        self.addCleanup(os.chdir, cwd)
        self.assertEqual(resolve("shop", "har", "x.har"), os.path.join(self.data_dir, "x.har"))

    def test_none_turns_the_setting_off_rather_than_naming_a_file(self):
        for value in ("none", "None", "NONE"):
            self.assertEqual(resolve(self.data_dir, "checkpoint", value), value)

    def test_empty_value_is_refused(self):
        self.assertIn("is empty", self.refusal(""))

    def test_absolute_path_is_refused(self):
        self.assertIn("absolute path", self.refusal("/etc/cron.d"))
        self.assertIn("absolute path", self.refusal(os.path.join(self.data_dir, "x"), "cache"))

    def test_dot_dot_anywhere_is_refused(self):
        for value in ("..", "../x", "./../x", "a/../../x", "a/..", "a/../b"):
            self.assertIn("'..'", self.refusal(value, "deltafetch"), value)

    def test_names_that_merely_contain_dots_are_fine(self):
        for value in ("...", "..x", "x..", ".hidden"):
            self.assertEqual(
                resolve(self.data_dir, "cache", value), os.path.join(self.data_dir, value)
            )

    def test_urls_are_refused(self):
        for value in ("s3://bucket/cp", "gs://b/x", "file:///etc/passwd", "http://x/", "ftp:x"):
            self.assertIn("is a URL", self.refusal(value, "warc"), value)

    def test_nul_character_is_refused(self):
        self.assertIn("NUL", self.refusal("a\0b"))

    def test_the_data_dir_itself_is_refused(self):
        self.assertIn("data directory itself", self.refusal("."))

    def test_symlink_pointing_outside_is_refused(self):
        outside = os.path.abspath(self.mktemp())
        os.makedirs(outside)
        os.symlink(outside, os.path.join(self.data_dir, "escape"))
        for value in ("escape", "escape/checkpoint", "escape/new/deeper"):
            self.assertIn("symlink", self.refusal(value), value)
        self.assertEqual(os.listdir(outside), [])

    def test_dangling_symlink_pointing_outside_is_refused(self):
        # The crawl would create the target: where it points is what counts.
        target = os.path.abspath(self.mktemp())
        os.symlink(target, os.path.join(self.data_dir, "later"))
        self.assertIn("symlink", self.refusal("later/cp"))
        self.assertFalse(os.path.exists(target))

    def test_symlink_staying_inside_is_fine(self):
        os.makedirs(os.path.join(self.data_dir, "real"))
        os.symlink("real", os.path.join(self.data_dir, "alias"))
        self.assertEqual(
            resolve(self.data_dir, "cache", "alias/pages"),
            os.path.join(self.data_dir, "alias", "pages"),
        )

    def test_data_dir_reached_through_a_symlink_is_fine(self):
        linked = os.path.abspath(self.mktemp())
        os.symlink(self.data_dir, linked)
        self.assertEqual(resolve(linked, "checkpoint", "cp"), os.path.join(linked, "cp"))


class ResolveSettingsTests(unittest.TestCase):
    def test_only_path_settings_with_a_path_are_resolved(self):
        data_dir = os.path.abspath(self.mktemp())
        given = [
            ("concurrency", "8"),
            ("checkpoint", "books"),
            ("cache", "None"),
            ("har", None),
            ("warc", "run.warc"),
        ]
        self.assertEqual(
            resolve_settings(data_dir, given),
            [
                ("concurrency", "8"),
                ("checkpoint", os.path.join(data_dir, "books")),
                ("cache", "None"),
                ("har", None),
                ("warc", os.path.join(data_dir, "run.warc")),
            ],
        )

    def test_a_refused_path_refuses_all(self):
        with self.assertRaises(ValueError) as raised:
            resolve_settings("/srv/data/shop", [("checkpoint", "ok"), ("har", "s3://b/x.har")])
        self.assertIn("har", str(raised.exception))

    def test_the_path_settings(self):
        self.assertEqual(PATH_SETTINGS, ("checkpoint", "cache", "deltafetch", "warc", "har"))
