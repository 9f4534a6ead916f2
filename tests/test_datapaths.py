"""Path settings stay inside the project's data directory."""

import errno
import os

from twisted.trial import unittest

from netweir_serve.jobs.datapaths import (
    MAX_DEPTH, MAX_NAME_BYTES, MAX_PATH_BYTES, PATH_SETTINGS, prepare, prepare_all, resolve,
    resolve_settings)


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


class LimitTests(unittest.TestCase):
    """Paths the file system would choke on are refused with a ValueError
    naming the setting, never a traceback."""

    def setUp(self):
        self.data_dir = os.path.abspath(os.path.join(self.mktemp(), "data", "shop"))
        os.makedirs(self.data_dir)

    def refusal(self, value, key="checkpoint", call=resolve):
        with self.assertRaises(ValueError) as raised:
            call(self.data_dir, key, value)
        message = str(raised.exception)
        self.assertIn(f"setting {key}", message)
        return message

    def test_a_very_deep_path_is_refused(self):
        for call in (resolve, prepare):
            self.assertIn("too deep", self.refusal("a/" * 1100 + "x", call=call))
        self.assertEqual(os.listdir(self.data_dir), [])

    def test_the_deepest_path_allowed(self):
        value = "/".join(["d"] * MAX_DEPTH)
        path = prepare(self.data_dir, "cache", value)
        self.assertEqual(path, os.path.join(self.data_dir, *["d"] * MAX_DEPTH))
        self.assertTrue(os.path.isdir(os.path.dirname(path)))
        self.assertIn("too deep", self.refusal(value + "/d", "cache"))

    def test_dots_and_doubled_slashes_do_not_count_as_depth(self):
        value = "./" * 200 + "x" + "//" * 200
        self.assertEqual(resolve(self.data_dir, "har", value), os.path.join(self.data_dir, "x"))

    def test_an_overlong_value_is_refused_and_shown_cut_short(self):
        message = self.refusal("x" * 100_000)
        self.assertIn("too long", message)
        self.assertLess(len(message), 400)

    def test_a_path_longer_than_path_max_is_refused(self):
        # Short enough itself, too long inside the data directory.
        length = MAX_PATH_BYTES - len(self.data_dir)
        folders = ("n" * 200 + "/") * ((length - 1) // 201)
        value = folders + "m" * (length - len(folders))
        self.assertEqual(len(os.path.join(self.data_dir, value)), MAX_PATH_BYTES + 1)
        self.assertIn(f"longer than {MAX_PATH_BYTES} bytes", self.refusal(value, "warc"))
        resolve(self.data_dir, "warc", value[:-1])

    def test_a_name_longer_than_name_max_is_refused(self):
        self.assertIn(f"longer than {MAX_NAME_BYTES} bytes", self.refusal("a/" + "n" * 256))
        # Bytes, not characters: 128 two-byte characters are 256 bytes.
        self.assertIn("longer than", self.refusal("\u00e9" * 128))
        resolve(self.data_dir, "checkpoint", "n" * MAX_NAME_BYTES)

    def test_a_name_too_long_for_the_file_system_is_refused(self):
        def too_long(path, *args, **kwargs):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)

        self.patch(os, "mkdir", too_long)
        message = self.refusal("runs/x.warc", "warc", call=prepare)
        self.assertIn("too long", message)
        self.patch(os, "stat", too_long)
        self.assertIn("too long", self.refusal("runs/x.warc", "warc"))

    def test_an_unencodable_name_is_refused(self):
        self.assertIn("characters a file name cannot have", self.refusal("\ud800x"))

    def test_a_path_through_a_file_is_refused(self):
        open(os.path.join(self.data_dir, "f"), "w").close()
        for call in (resolve, prepare):
            for value in ("f/x.warc", "f/deeper/x.warc", "./f//x.warc"):
                message = self.refusal(value, "warc", call=call)
                self.assertIn("'f', which is a file, not a folder", message)
        self.assertEqual(os.listdir(self.data_dir), ["f"])

    def test_naming_a_file_itself_is_fine(self):
        open(os.path.join(self.data_dir, "seen"), "w").close()
        self.assertEqual(prepare(self.data_dir, "deltafetch", "seen"),
                         os.path.join(self.data_dir, "seen"))

    def test_a_symlink_loop_is_refused(self):
        os.symlink("loop", os.path.join(self.data_dir, "loop"))
        self.refusal("loop/x", "cache")

    def test_a_data_dir_that_is_a_file_is_refused(self):
        data_dir = os.path.join(self.data_dir, "file")
        open(data_dir, "w").close()
        for value in ("x", "a/x"):
            with self.assertRaises(ValueError) as raised:
                prepare(data_dir, "cache", value)
            self.assertIn("setting cache", str(raised.exception))

    def test_the_file_system_refusing_a_look_is_a_value_error(self):
        def refused(path, *args, **kwargs):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

        self.patch(os, "stat", refused)
        self.assertIn("permission denied", self.refusal("a/b").lower())

    def test_a_recursion_error_is_a_value_error(self):
        def deep(path, *args, **kwargs):
            raise RecursionError("maximum recursion depth exceeded")

        self.patch(os.path, "realpath", deep)
        self.assertIn("nested too deeply", self.refusal("a/b"))


def tree(top):
    """Every folder and file under ``top``, relative to it."""
    found = set()
    for here, folders, files in os.walk(top):
        for name in folders + files:
            found.add(os.path.relpath(os.path.join(here, name), top))
    return found


class PrepareAllTests(unittest.TestCase):
    def setUp(self):
        self.directory = os.path.abspath(self.mktemp())  # DIR
        os.makedirs(self.directory)
        self.data_dir = os.path.join(self.directory, "data", "shop")

    def test_makes_the_folders_and_resolves_the_settings(self):
        settings = [("concurrency", "8"), ("warc", "runs/today/x.warc"), ("har", None),
                    ("checkpoint", "cp"), ("cache", "NONE"), ("deltafetch", "seen/db")]
        prepared = prepare_all(self.data_dir, settings)
        self.assertEqual(prepared.settings, resolve_settings(self.data_dir, settings))
        self.assertEqual(tree(self.directory),
                         {"data", "data/shop", "data/shop/runs", "data/shop/runs/today",
                          "data/shop/seen"})
        self.assertEqual(
            prepared.created,
            tuple(os.path.join(self.directory, p) for p in
                  ("data", "data/shop", "data/shop/runs", "data/shop/runs/today",
                   "data/shop/seen")))

    def test_nothing_is_made_when_any_setting_is_refused(self):
        open(os.path.join(self.directory, "file"), "w").close()
        os.makedirs(self.data_dir)
        open(os.path.join(self.data_dir, "f"), "w").close()
        before = tree(self.directory)
        deep = "/".join(f"d{i}" for i in range(60)) + "/x"
        for bad in [("har", "s3://b/x"), ("cache", "../x"), ("warc", "f/x.warc"),
                    ("checkpoint", "a/" * 1100 + "x"), ("deltafetch", "")]:
            settings = [("warc", deep), ("cache", "c/d/e"), ("concurrency", "1"), bad]
            with self.assertRaises(ValueError) as raised:
                prepare_all(self.data_dir, settings)
            self.assertIn(f"setting {bad[0]}", str(raised.exception))
            self.assertEqual(tree(self.directory), before, bad)

    def test_nothing_is_made_when_the_data_dir_does_not_exist_yet(self):
        with self.assertRaises(ValueError):
            prepare_all(self.data_dir, [("cache", "a/b/c"), ("warc", "/etc/x")])
        self.assertEqual(os.listdir(self.directory), [])

    def test_undo_removes_exactly_what_was_made(self):
        os.makedirs(os.path.join(self.data_dir, "runs", "old"))
        open(os.path.join(self.data_dir, "runs", "old", "a.warc"), "w").close()
        os.makedirs(os.path.join(self.data_dir, "empty"))
        before = tree(self.directory)
        prepared = prepare_all(self.data_dir, [
            ("warc", "runs/new/deeper/x.warc"), ("har", "runs/old/x.har"),
            ("cache", "empty/pages/x"), ("checkpoint", "cp/state"), ("deltafetch", "seen")])
        self.assertEqual(len(prepared.created), 4)
        self.assertNotEqual(tree(self.directory), before)
        prepared.undo()
        self.assertEqual(tree(self.directory), before)
        prepared.undo()
        self.assertEqual(tree(self.directory), before)

    def test_undo_removes_the_data_dir_only_if_it_made_it(self):
        prepared = prepare_all(self.data_dir, [("warc", "runs/x.warc")])
        prepared.undo()
        self.assertEqual(os.listdir(self.directory), [])
        os.makedirs(self.data_dir)
        prepare_all(self.data_dir, [("warc", "runs/x.warc")]).undo()
        self.assertEqual(tree(self.directory), {"data", "data/shop"})

    def test_undo_leaves_what_others_put_there_since(self):
        first = prepare_all(self.data_dir, [("warc", "runs/a/x.warc"), ("cache", "c/d")])
        # Another job's folder, and a file a job wrote, in folders made above.
        second = prepare_all(self.data_dir, [("warc", "runs/b/x.warc")])
        open(os.path.join(self.data_dir, "c", "note"), "w").close()
        first.undo()
        self.assertEqual(tree(self.directory),
                         {"data", "data/shop", "data/shop/runs", "data/shop/runs/b",
                          "data/shop/c", "data/shop/c/note"})
        second.undo()
        # runs was first's to take back, and was not empty then.
        self.assertEqual(tree(self.directory), {"data", "data/shop", "data/shop/runs",
                                                "data/shop/c", "data/shop/c/note"})

    def test_undo_leaves_a_folder_made_anew_by_someone_else(self):
        prepared = prepare_all(self.data_dir, [("warc", "runs/x.warc")])
        runs = os.path.join(self.data_dir, "runs")
        other = os.path.join(self.directory, "other")
        os.mkdir(other)  # before the rmdir, so not on a reused inode
        os.rmdir(runs)
        os.rename(other, runs)
        prepared.undo()
        self.assertTrue(os.path.isdir(runs))

    def test_nothing_to_make(self):
        prepared = prepare_all(self.data_dir, [("concurrency", "2"), ("cache", "none")])
        self.assertEqual(prepared.created, ())
        self.assertEqual(os.listdir(self.directory), [])
        prepared.undo()

    def test_a_file_in_the_way_while_making_undoes_the_partial_work(self):
        os.makedirs(self.data_dir)
        real_mkdir = os.mkdir

        def mkdir(path, *args, **kwargs):
            # A file appears where the third folder goes, after the checks.
            if os.path.basename(path) == "c":
                open(path, "w").close()
            return real_mkdir(path, *args, **kwargs)

        self.patch(os, "mkdir", mkdir)
        with self.assertRaises(ValueError) as raised:
            prepare_all(self.data_dir, [("cache", "x/y/z"), ("warc", "a/b/c/d/x.warc")])
        message = str(raised.exception)
        self.assertIn("setting warc='a/b/c/d/x.warc'", message)
        self.assertIn("a file is in the way", message)
        self.assertEqual(tree(self.directory), {"data", "data/shop", "data/shop/a",
                                                "data/shop/a/b", "data/shop/a/b/c"})
        self.assertTrue(os.path.isfile(os.path.join(self.data_dir, "a", "b", "c")))

    def test_a_full_or_read_only_disk_undoes_the_partial_work(self):
        real_mkdir = os.mkdir
        for number in (errno.ENOSPC, errno.EROFS, errno.EACCES):
            made = []

            def mkdir(path, *args, **kwargs):
                if len(made) == 3:
                    raise OSError(number, os.strerror(number), path)
                made.append(path)
                return real_mkdir(path, *args, **kwargs)

            self.patch(os, "mkdir", mkdir)
            with self.assertRaises(ValueError) as raised:
                prepare_all(self.data_dir, [("har", "a/b/c/x.har")])
            self.assertIn("setting har", str(raised.exception))
            self.assertIn(os.strerror(number).lower(), str(raised.exception))
            self.assertEqual(os.listdir(self.directory), [], number)

    def test_prepare_keeps_its_folders(self):
        path = prepare(self.data_dir, "warc", "runs/x.warc")
        self.assertEqual(path, os.path.join(self.data_dir, "runs", "x.warc"))
        self.assertTrue(os.path.isdir(os.path.join(self.data_dir, "runs")))
        self.assertEqual(prepare(self.data_dir, "cache", "None"), "None")

    def test_prepare_refuses_a_setting_without_a_value(self):
        with self.assertRaises(ValueError) as raised:
            prepare(self.data_dir, "cache", None)
        self.assertIn("setting cache is empty", str(raised.exception))
