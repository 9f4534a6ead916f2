"""Memory and CPU limits on real control groups (issue 24): the groups made
on this machine's own hierarchies, and real crawls run by the job's parent
inside them, one killed by the kernel for memory while another runs on."""

import json
import os
import signal
import subprocess
import sys
import tempfile

from twisted.trial import unittest

from netweir_serve.jobs.files import job_files, read_exit_status
from netweir_serve.jobs.launcher import limited_settings, max_memory_setting
from netweir_serve.jobs.process import (
    crawl_command, job_environment, private_arguments, write_private_file)
from netweir_serve.reliability import cgroupfs
from netweir_serve.reliability.cgroups import JobGroups
from netweir_serve.store.records import JobRecord

from .processes import Daemon, remove_control_groups, wait_until
from .spiders import HEADER
from .test_adoption import AdoptionTestCase, parse_time
from .test_cluster import ClusterTestCase
from .test_jobs import CrawlTestCase

MIB = 1 << 20

# A spider that takes memory fast (16 MiB a step, each page of it
# written, so it is resident) until it holds 1 GiB: under memory=200M the
# kernel kills it before Netweir's once-a-second look at max_memory.
HOG = '''
class Hog(netweir.Spider):
    name = "hog"
    settings = netweir.Settings(throttle=False)
    start_urls = [SITE + "/one"]

    async def parse(self, page):
        hoard = []
        for _ in range(64):
            hoard.append(b"x" * (16 << 20))
        yield {"held": len(hoard)}
'''


def here(test):
    """This machine's JobGroups for a fresh DIR of ``test``'s; the test is
    skipped only where the machine has no cgroup memory and cpu
    controllers to use."""
    directory = os.path.abspath(test.mktemp())
    os.makedirs(directory)
    groups = JobGroups.detect(directory)
    if groups.available() != {"memory": True, "cpu": True}:
        raise unittest.SkipTest(f"no cgroup limits here: {groups.refusals}")
    return groups


def read(path):
    with open(path) as f:
        return f.read().strip()


class RealGroupTests(unittest.TestCase):
    def setUp(self):
        self.groups = here(self)
        self.addCleanup(self.groups.remove_dir_groups)

    def test_limits_are_written_in_the_machines_hierarchies_and_removed(self):
        made = self.groups.create("Limits-1", memory=200 * MIB, cpu=0.2)
        self.addCleanup(self.groups.remove, "limits-1")
        self.assertEqual(len(made), len({p.base for p in self.groups.places.values()}))
        [memory] = self.groups.directories("limits-1", ["memory"])
        [cpu] = self.groups.directories("limits-1", ["cpu"])
        if self.groups.places["memory"].version == 1:
            self.assertEqual(read(os.path.join(memory, "memory.limit_in_bytes")),
                             str(200 * MIB))
            self.assertEqual(read(os.path.join(memory, "memory.swappiness")).strip(), "0")
            if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
                # No swap: memory and swap together at the same limit.
                self.assertEqual(read(os.path.join(memory, "memory.memsw.limit_in_bytes")),
                                 str(200 * MIB))
            self.assertEqual(read(os.path.join(cpu, "cpu.cfs_quota_us")), "20000")
            self.assertEqual(read(os.path.join(cpu, "cpu.cfs_period_us")), "100000")
        else:
            self.assertEqual(read(os.path.join(memory, "memory.max")), str(200 * MIB))
            self.assertEqual(read(os.path.join(cpu, "cpu.max")), "20000 100000")
        self.assertEqual(self.groups.leftovers(), ["job-limits-1"])
        self.assertEqual(self.groups.remove("LIMITS-1"), [])
        self.assertFalse(any(os.path.exists(p) for p in made))
        self.assertEqual(self.groups.leftovers(), [])
        # The DIR's own groups went with the last job's.
        self.assertFalse(any(os.path.exists(os.path.dirname(p)) for p in made))

    def test_a_process_in_a_group_is_killed_when_the_group_is_removed(self):
        made = self.groups.create("busy", memory=64 * MIB)
        sleeper = subprocess.Popen(["sleep", "600"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        cgroupfs.join(made, sleeper.pid)
        self.assertEqual(cgroupfs.members(made), [sleeper.pid])
        # The kernel keeps a group that holds a process.
        self.assertEqual(cgroupfs.remove(made), made)
        self.groups.remove("busy")
        self.assertEqual(sleeper.wait(10), -9)
        self.assertEqual(self.groups.remove("busy"), [])
        self.assertFalse(os.path.exists(made[0]))

    def test_the_sweep_keeps_the_groups_of_running_jobs(self):
        self.groups.create("running", cpu=1)
        self.groups.create("ended", memory=64 * MIB, cpu=1)
        self.addCleanup(self.groups.remove, "running")
        self.assertEqual(self.groups.sweep(["RUNNING"]), ["job-ended"])
        self.assertEqual(self.groups.leftovers(), ["job-running"])
        # The DIR's group stays in a hierarchy while a job's group is in it.
        [cpu] = self.groups.directories("running", ["cpu"])
        self.assertTrue(os.path.isdir(cpu))
        if self.groups.places["memory"].base != self.groups.places["cpu"].base:
            [memory] = self.groups.directories("running", ["memory"])
            self.assertFalse(os.path.exists(os.path.dirname(memory)))


class ParentTests(CrawlTestCase):
    """The job's parent (jobs/_crawlparent.py) run as the launcher runs it,
    with real crawls of the test site."""

    def setUp(self):
        super().setUp()
        self.groups = here(self)
        self.addCleanup(self.groups.remove_dir_groups)
        with open(os.path.join(self.shop, "hog.py"), "w") as f:
            f.write(HEADER.format(site=self.site.base) + HOG)
        self.dir = os.path.join(self.base, "dir")

    def start(self, jobid, spider, memory=None, cpu=None, groups=None):
        """Starts ``spider``'s job as the launcher does; (process, files, groups)
        (``groups``: directories to give it, made or not, instead)."""
        record = JobRecord(id=jobid, project="shop", spider=spider,
                           spider_file=os.path.join(self.shop, spider + ".py"),
                           settings=(("throttle", "false"),), start_time=1.0)
        files = job_files(self.dir, "shop", spider, jobid)
        for path in files.all():
            os.makedirs(os.path.dirname(path), exist_ok=True)
        groups = groups or []
        if memory is not None or cpu is not None:
            groups = self.groups.create(jobid, memory=memory, cpu=cpu)
            self.addCleanup(self.groups.remove, jobid)
        private = os.path.join(self.dir, "run", jobid + ".json")
        write_private_file(private, private_arguments(
            JobRecord(**{**record.__dict__,
                         "settings": limited_settings(record.settings, memory)}),
            self.dir))
        with open(files.log, "ab") as log:
            process = subprocess.Popen(
                crawl_command(sys.executable, record, files, private, groups),
                cwd=self.shop, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=job_environment(os.environ))
        self.addCleanup(lambda: process.poll() is None and process.kill())
        return process, files, groups

    def test_a_crawl_past_its_memory_limit_is_killed_while_another_runs_on(self):
        hog, hog_files, hog_groups = self.start("hog1", "hog", memory=200 * MIB)
        books, books_files, _ = self.start("books1", "books")
        self.assertEqual(hog.wait(120), 0)
        self.assertEqual(books.wait(120), 0)
        written = read_exit_status(hog_files.status)
        # Killed by the kernel (SIGKILL), and the parent saw why.
        self.assertEqual((written["exit_status"], written.get("oom")), (-9, True), written)
        # The group went with the crawl.
        self.assertFalse(any(os.path.exists(p) for p in hog_groups))
        # The other crawl ran on to its end, all thirty pages.
        self.assertEqual(read_exit_status(books_files.status)["exit_status"], 0)
        with open(books_files.items) as f:
            self.assertEqual(len(f.read().splitlines()), 30)
        with open(books_files.status) as f:
            self.assertNotIn("oom", json.load(f))

    def test_the_last_jobs_parent_removes_the_dirs_group_too(self):
        # As if the service had died meanwhile: nobody else would.
        crawl, files, groups = self.start("last1", "books", memory=256 * MIB, cpu=1)
        self.assertEqual(crawl.wait(120), 0)
        self.assertEqual(read_exit_status(files.status)["exit_status"], 0)
        self.assertFalse(any(os.path.exists(os.path.dirname(p)) for p in groups))
        # The service makes it again for its next job.
        self.assertEqual(len(self.groups.create("next1", cpu=1)), 1)
        self.assertEqual(self.groups.remove("next1"), [])

    def test_a_parent_leaves_the_dirs_group_while_another_jobs_group_is_in_it(self):
        other = self.groups.create("other1", cpu=1)
        self.addCleanup(self.groups.remove, "other1")
        crawl, _, groups = self.start("first1", "books", cpu=1)
        self.assertEqual(crawl.wait(120), 0)
        self.assertFalse(os.path.exists(groups[0]))
        self.assertTrue(os.path.isdir(os.path.dirname(other[0])))

    def test_the_crawl_is_in_its_group_and_the_parent_outside(self):
        crawl, files, groups = self.start("slow1", "slow", memory=256 * MIB, cpu=0.5)
        # The crawl's pid is in the group once it has started.
        members = wait_until(lambda: cgroupfs.members(groups), 30, "the crawl in its group")
        self.assertNotIn(crawl.pid, members)
        self.assertTrue(all(pid in cgroupfs.members([g]) for g in groups for pid in members))
        for pid in members:
            with open(f"/proc/{pid}/status") as f:
                parent = [line.split()[1] for line in f if line.startswith("PPid:")]
            self.assertEqual(parent, [str(crawl.pid)])

        def crawling():
            with open(files.log) as f:
                return "slow page 1" in f.read()

        # Cancelled once netweir runs (before, SIGTERM ends it outright).
        wait_until(crawling, 60, "the crawl to fetch its pages")
        crawl.terminate()
        self.assertEqual(crawl.wait(60), 0)
        written = read_exit_status(files.status)
        self.assertEqual(written["exit_status"], 130)
        self.assertNotIn("oom", written)
        self.assertFalse(any(os.path.exists(p) for p in groups))

    def test_max_memory_is_most_of_the_limit_unless_the_job_sets_it(self):
        self.assertEqual(max_memory_setting(200 * MIB), 170)
        self.assertEqual(limited_settings((("a", "1"),), 200 * MIB),
                         (("a", "1"), ("max_memory", "170")))
        self.assertEqual(limited_settings((("MAX_MEMORY", "50"),), 200 * MIB),
                         (("MAX_MEMORY", "50"),))
        self.assertEqual(limited_settings((("a", "1"),), None), (("a", "1"),))


class JoinRefusedTests(CrawlTestCase):
    """A crawl whose control group cannot be joined (gone since it was
    made): the parent says it never started. No real group needed."""

    def test_the_parent_writes_not_started_with_the_reason(self):
        self.dir = os.path.join(self.base, "dir")
        gone = os.path.join(self.base, "no-such-group")
        process, files, _ = ParentTests.start(self, "nojoin", "books", groups=[gone])
        self.assertEqual(process.wait(60), 0)
        written = read_exit_status(files.status)
        self.assertEqual(written["exit_status"], 127)
        self.assertIn("could not join its control group", written["not_started"])
        self.assertIn("No such file or directory", written["not_started"])


class DaemonTests(AdoptionTestCase):
    """The real daemon, jobs queued with ``_memory=`` and ``_cpu=``."""

    def setUp(self):
        super().setUp()
        here(self)
        with open(os.path.join(self.shop, "hog.py"), "w") as f:
            f.write(HEADER.format(site=self.site.base) + HOG)

    def groups_of(self, daemon):
        return JobGroups.detect(daemon.directory)

    def new_dir(self):
        directory = super().new_dir()
        # Whatever groups of ``directory`` a test left (its daemon killed
        # with a job running) go, with what is in them.
        self.addCleanup(remove_control_groups, directory)
        return directory

    def test_a_spider_past_memory_200M_fails_with_reason_memory_while_another_runs_on(self):
        daemon = self.serve(self.new_dir())
        other = daemon.must_schedule("shop", "slow", jobid="other", pages="60", delay="0.1")
        self.running_pid(daemon, other)
        hog = daemon.must_schedule("shop", "hog", jobid="hog", _memory="200M")
        entry = daemon.wait_state(hog, "finished", timeout=120)
        self.assertEqual((entry["outcome"], entry["reason"], entry["exit_status"]),
                         ("failed", "memory", -9))
        # The other crawl was running when the kernel killed the hog (it
        # started before the hog and ended after it), and ran on to its end.
        done = daemon.wait_state(other, "finished", timeout=120)
        self.assertEqual((done["outcome"], done["reason"]), ("finished", "exit 0"))
        self.assertLess(parse_time(done["start_time"]), parse_time(entry["start_time"]))
        self.assertGreater(parse_time(done["end_time"]), parse_time(entry["end_time"]))
        self.assertComplete(daemon, done, 60)
        self.assertEqual(self.groups_of(daemon).leftovers(), [])

    def test_a_cpu_limited_jobs_group_has_the_quota_and_is_gone_after_its_end(self):
        daemon = self.serve(self.new_dir())
        jobid = daemon.must_schedule("shop", "slow", jobid="cpu1", pages="20", delay="0.1",
                                     _cpu="0.2")
        parent = self.running_pid(daemon, jobid)
        groups = self.groups_of(daemon)
        [cpu] = groups.directories(jobid, ["cpu"])
        quota = "cpu.max" if groups.places["cpu"].version == 2 else "cpu.cfs_quota_us"
        self.assertEqual(read(os.path.join(cpu, quota)).split()[0], "20000")
        crawl = wait_until(lambda: cgroupfs.members([cpu]), 30, "the crawl in its group")
        self.assertNotIn(parent, crawl)
        # Only the limit asked: no memory group.
        if groups.places["memory"].base != groups.places["cpu"].base:
            self.assertFalse(os.path.exists(groups.directories(jobid, ["memory"])[0]))
        entry = daemon.wait_state(jobid, "finished", timeout=120)
        self.assertEqual(entry["outcome"], "finished")
        self.assertFalse(os.path.exists(cpu))
        self.assertEqual(groups.leftovers(), [])

    def test_an_adopted_jobs_group_is_removed_when_it_ends(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="adopted", _memory="256M")
        parent = self.running_pid(daemon, jobid)
        groups = JobGroups.detect(directory)
        [memory] = groups.directories(jobid, ["memory"])
        wait_until(lambda: cgroupfs.members([memory]), 30, "the crawl in its group")
        self.kill_9(daemon)
        again = self.serve(directory)
        self.assertEqual(again.find(jobid)[0], "running")
        # Its parent killed: the crawl is left in the group, and the
        # service that adopted the job empties and removes it.
        os.kill(parent, signal.SIGKILL)
        entry = again.wait_state(jobid, "finished", timeout=30)
        self.assertEqual(entry["outcome"], "lost")
        wait_until(lambda: not os.path.exists(memory), 10, "the group to be removed")
        self.assertNothingLeft(again)

    def test_the_next_start_removes_the_group_of_a_job_that_ended_unwatched(self):
        directory = self.new_dir()
        daemon = self.serve(directory)
        jobid = daemon.must_schedule("shop", "slow", jobid="unwatched", _cpu="0.5")
        parent = self.running_pid(daemon, jobid)
        groups = JobGroups.detect(directory)
        [cpu] = groups.directories(jobid, ["cpu"])
        wait_until(lambda: cgroupfs.members([cpu]), 30, "the crawl in its group")
        self.kill_9(daemon)
        os.kill(parent, signal.SIGKILL)
        again = self.serve(directory)
        self.assertEqual(again.find(jobid)[1]["outcome"], "lost")
        wait_until(lambda: not os.path.exists(cpu), 10, "the group to be removed")
        self.assertEqual(groups.leftovers(), [])
        self.assertNothingLeft(again)

    def test_the_start_removes_a_leftover_group_of_no_running_job(self):
        # A job group of this DIR that no job in the table runs (its job
        # ended while no service watched and its parent was killed), and
        # the DIR's group: the start sweeps both (Launcher.sweep_groups).
        directory = self.new_dir()
        groups = JobGroups.detect(directory)
        made = groups.create("ghost", memory=64 * MIB, cpu=1)
        self.assertEqual(groups.leftovers(), ["job-ghost"])
        daemon = self.serve(directory)
        wait_until(lambda: not any(os.path.exists(p) for p in made), 10,
                   "the leftover group to be removed")
        self.assertEqual(groups.leftovers(), [])
        self.assertFalse(any(os.path.exists(os.path.dirname(p)) for p in made))
        self.assertNothingLeft(daemon)


# The daemon in a mount namespace of its own with every cgroup hierarchy
# unmounted: a machine without control groups, as far as it can see.
WITHOUT_CGROUPS = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'umount -R /sys/fs/cgroup && exec "$0" "$@"', sys.executable, "-m",
                   "netweir_serve"]


class NoCgroupsDaemonTests(CrawlTestCase):
    def setUp(self):
        super().setUp()
        probe = subprocess.run(WITHOUT_CGROUPS[:7] + ["true"], capture_output=True)
        if probe.returncode != 0:
            raise unittest.SkipTest(f"no mount namespace to hide the cgroups in: {probe.stderr}")

    def test_limits_are_refused_with_the_reason_and_other_jobs_run(self):
        daemon = Daemon(tempfile.mkdtemp(prefix="dir-", dir=self.base), [f"shop={self.shop}"],
                        command=WITHOUT_CGROUPS).start()
        self.addCleanup(daemon.kill)
        self.assertEqual(daemon.get("daemonstatus.json")[1]["limits"],
                         {"memory": False, "cpu": False})
        for key, value in (("_memory", "200M"), ("_cpu", "0.5")):
            status, answer = daemon.schedule("shop", "echo", **{key: value})
            self.assertEqual((status, answer["status"]), (400, "error"), answer)
            self.assertIn(f"{key[1:]} cannot be limited here: this machine has no cgroup"
                          f" {key[1:]} controller", answer["message"])
        status, answer = daemon.post("addschedule.json", {
            "project": "shop", "spider": "echo", "every": "1h", "name": "hourly",
            "memory": "1G"})
        self.assertEqual(status, 400, answer)
        self.assertIn("memory cannot be limited here", answer["message"])
        self.assertEqual(daemon.get("listjobs.json")[1]["pending"], [])
        self.assertEqual(daemon.get("listschedules.json")[1]["schedules"], [])
        # A job that asks for no limit runs as ever.
        entry = daemon.wait_state(daemon.must_schedule("shop", "echo"), "finished")
        self.assertEqual(entry["outcome"], "finished")

    def test_a_policy_rule_with_a_limit_is_refused_at_start(self):
        done = subprocess.run(
            WITHOUT_CGROUPS + ["--project", f"shop={self.shop}", "--dir",
                               os.path.join(self.base, "dir"), "--policy",
                               "shop/books:memory=1G"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("--policy 'shop/books:memory=1G': memory cannot be limited here",
                      done.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.base, "dir")))


class PostgresMemoryTests(ClusterTestCase):
    """The kernel's kill at a job's memory limit, on a node of a shared
    PostgreSQL job table: the same end, reason and neighbour left alone."""

    def setUp(self):
        super().setUp()
        here(self)
        with open(os.path.join(self.shop, "hog.py"), "w") as f:
            f.write(HEADER.format(site=self.site.base) + HOG)

    def test_a_spider_past_memory_200M_fails_with_reason_memory_while_another_runs_on(self):
        node = self.node("a")
        self.addCleanup(remove_control_groups, node.directory)
        other = node.must_schedule("shop", "slow", jobid="other", pages="60", delay="0.1")
        node.wait_state(other, "running")
        hog = node.must_schedule("shop", "hog", jobid="hog", _memory="200M")
        entry = node.wait_state(hog, "finished", timeout=120)
        self.assertEqual((entry["outcome"], entry["reason"], entry["exit_status"]),
                         ("failed", "memory", -9))
        done = node.wait_state(other, "finished", timeout=120)
        self.assertEqual((done["outcome"], done["reason"]), ("finished", "exit 0"))
        self.assertLess(parse_time(done["start_time"]), parse_time(entry["start_time"]))
        self.assertGreater(parse_time(done["end_time"]), parse_time(entry["end_time"]))
        self.assertEqual(JobGroups.detect(node.directory).leftovers(), [])
