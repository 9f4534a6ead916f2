"""Control groups for the jobs' memory and CPU limits
(reliability/cgroups.py, reliability/cgroupfs.py): on temporary trees
shaped like cgroup v1 and v2, then on this machine's own hierarchies."""

import os

from twisted.trial import unittest

from netweir_serve.jobs.submit import JobRefused, JobSubmitter
from netweir_serve.projects import ProjectTable
from netweir_serve.reliability import cgroupfs
from netweir_serve.reliability.cgroups import (
    CgroupError, JobGroups, dir_group_name, parse_mounts, parse_own)
from netweir_serve.reliability.policy import JobPolicy
from netweir_serve.reliability.rules import PolicyRules

MIB = 1 << 20


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


class ParsingTests(unittest.TestCase):
    def test_mounts_name_each_controllers_hierarchy(self):
        v1, v2 = parse_mounts(
            "sysfs /sys sysfs rw 0 0\n"
            "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
            "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
        self.assertEqual(v1, {"cpu": "/sys/fs/cgroup/cpu,cpuacct",
                              "memory": "/sys/fs/cgroup/memory"})
        self.assertEqual(v2, "/sys/fs/cgroup/unified")

    def test_cpuacct_alone_is_not_cpu(self):
        v1, _ = parse_mounts("cgroup /x/cpuacct cgroup rw,cpuacct 0 0\n")
        self.assertEqual(v1, {})

    def test_own_groups_per_controller_and_v2(self):
        v1, v2 = parse_own("9:name=systemd:/\n4:memory:/process_api/abc\n"
                           "1:cpu,cpuacct:/jobs\n0::/user.slice\n")
        self.assertEqual((v1["memory"], v1["cpu"], v1["cpuacct"]),
                         ("/process_api/abc", "/jobs", "/jobs"))
        self.assertEqual(v2, "/user.slice")


class V1TreeTests(unittest.TestCase):
    """A tree shaped like cgroup v1: memory and cpu hierarchies, the
    service in a group of its own in the memory one."""

    def setUp(self):
        self.root = os.path.abspath(self.mktemp())
        self.memory = os.path.join(self.root, "memory", "process_api", "abc")
        self.cpu = os.path.join(self.root, "cpu,cpuacct")
        os.makedirs(self.memory)
        os.makedirs(self.cpu)
        # The unified tree of a hybrid machine, with no controller of ours.
        write(os.path.join(self.root, "unified", "cgroup.controllers"), "hugetlb\n")
        self.mounts = (f"cgroup {self.root}/memory cgroup rw,memory 0 0\n"
                       f"cgroup {self.cpu} cgroup rw,cpu,cpuacct 0 0\n"
                       f"cgroup2 {self.root}/unified cgroup2 rw 0 0\n")
        self.own = "4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n"
        self.directory = os.path.abspath(self.mktemp())
        self.groups = JobGroups.detect(self.directory, self.mounts, self.own)

    def test_both_limits_are_available_in_v1(self):
        self.assertEqual(self.groups.available(), {"memory": True, "cpu": True})
        self.assertEqual({c: (p.version, p.base) for c, p in self.groups.places.items()},
                         {"memory": (1, self.memory), "cpu": (1, self.cpu)})
        self.assertIsNone(self.groups.refusal(JobPolicy(memory=200 * MIB, cpu=0.5)))

    def test_a_jobs_group_under_the_services_own_named_from_dir_and_job(self):
        made = self.groups.create("Shop-Job1", memory=200 * MIB, cpu=0.2)
        name = dir_group_name(self.directory)
        self.assertTrue(name.startswith("netweir-serve-"))
        memory = os.path.join(self.memory, name, "job-shop-job1")
        cpu = os.path.join(self.cpu, name, "job-shop-job1")
        self.assertEqual(made, [memory, cpu])
        self.assertEqual(read(os.path.join(memory, "memory.limit_in_bytes")), str(200 * MIB))
        # Swap accounting or not, the group's pages are never swapped.
        self.assertEqual(read(os.path.join(memory, "memory.swappiness")), "0")
        self.assertEqual(read(os.path.join(cpu, "cpu.cfs_period_us")), "100000")
        self.assertEqual(read(os.path.join(cpu, "cpu.cfs_quota_us")), "20000")
        # The same job id in any case is the same group.
        self.assertEqual(self.groups.directories("shop-JOB1"), made)
        self.assertEqual(self.groups.leftovers(), ["job-shop-job1"])

    def test_another_dir_has_groups_of_its_own(self):
        other = JobGroups.detect(self.directory + "-other", self.mounts, self.own)
        self.assertNotEqual(other.directories("j"), self.groups.directories("j"))

    def test_a_memory_limit_alone_makes_no_cpu_group(self):
        made = self.groups.create("j", memory=64 * MIB)
        self.assertEqual(made, self.groups.directories("j", ["memory"]))
        self.assertFalse(os.path.exists(self.groups.directories("j", ["cpu"])[0]))

    def test_the_oom_count_is_read_from_memory_oom_control(self):
        [memory] = self.groups.create("j", memory=64 * MIB)
        self.assertFalse(self.groups.oom_killed("j"))
        write(os.path.join(memory, "memory.oom_control"),
              "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
        self.assertEqual(cgroupfs.oom_kills([memory]), 2)
        self.assertTrue(self.groups.oom_killed("j"))

    def test_a_service_started_from_another_group_finds_the_last_runs_groups(self):
        os.makedirs(self.directory)
        [memory, cpu] = self.groups.create("j", memory=64 * MIB, cpu=1)
        write(os.path.join(memory, "memory.oom_control"), "oom_kill 1\n")
        # Restarted from another group of its own: its groups go elsewhere
        # now, and the last run's are found from DIR/cgroups.json.
        os.makedirs(os.path.join(self.root, "memory", "process_api", "xyz"))
        again = JobGroups.detect(self.directory, self.mounts,
                                 "4:memory:/process_api/xyz\n1:cpu,cpuacct:/\n0::/\n")
        self.assertNotEqual(again.directories("j", ["memory"]), [memory])
        self.assertTrue(again.oom_killed("j"))
        self.assertEqual(again.leftovers(), ["job-j"])
        os.unlink(os.path.join(memory, "memory.oom_control"))
        for path in (memory, cpu):
            for name in os.listdir(path):
                os.unlink(os.path.join(path, name))
        self.assertEqual(again.remove("j"), [])
        self.assertFalse(os.path.exists(os.path.dirname(memory)))
        self.assertFalse(os.path.exists(os.path.dirname(cpu)))
        # Gone, and forgotten.
        self.assertEqual(read(os.path.join(self.directory, "cgroups.json")), "{}")

    def test_the_least_cpu_quota_is_the_kernels(self):
        [cpu] = self.groups.create("j", cpu=0.001)
        self.assertEqual(read(os.path.join(cpu, "cpu.cfs_quota_us")), "1000")


class V2TreeTests(unittest.TestCase):
    """A tree shaped like cgroup v2: a unit delegated by systemd, holding
    the service's process."""

    def setUp(self):
        self.root = os.path.abspath(self.mktemp())
        self.unit = os.path.join(self.root, "system.slice", "netweir.service")
        write(os.path.join(self.unit, "cgroup.controllers"), "cpuset cpu io memory pids\n")
        write(os.path.join(self.unit, "cgroup.subtree_control"), "")
        write(os.path.join(self.unit, "cgroup.procs"), "4242\n")
        # The kernel makes cgroup.procs with the group; a temp tree cannot.
        write(os.path.join(self.unit, "service", "cgroup.procs"), "")
        write(os.path.join(self.unit, "cgroup.type"), "domain\n")
        # What systemd marks a unit with Delegate=yes with (user.* here:
        # the test's user may set it, root or not).
        os.setxattr(self.unit, "user.delegate", b"1")
        self.mounts = f"cgroup2 {self.root} cgroup2 rw,nsdelegate 0 0\n"
        self.directory = os.path.abspath(self.mktemp())
        self.groups = JobGroups.detect(self.directory, self.mounts,
                                       "0::/system.slice/netweir.service\n")

    def test_both_limits_are_available_in_the_delegated_unit(self):
        self.assertEqual(self.groups.available(), {"memory": True, "cpu": True})
        self.assertEqual({c: (p.version, p.base) for c, p in self.groups.places.items()},
                         {"memory": (2, self.unit), "cpu": (2, self.unit)})

    def test_the_first_group_moves_the_units_processes_to_a_leaf_and_enables_controllers(self):
        made = self.groups.create("j1", memory=256 * MIB, cpu=1.5)
        # One directory: memory and cpu share the unified tree.
        dir_group = os.path.join(self.unit, dir_group_name(self.directory))
        self.assertEqual(made, [os.path.join(dir_group, "job-j1")])
        self.assertEqual(read(os.path.join(self.unit, "service", "cgroup.procs")), "4242")
        self.assertEqual(read(os.path.join(self.unit, "cgroup.subtree_control")),
                         "+memory +cpu")
        self.assertEqual(read(os.path.join(dir_group, "cgroup.subtree_control")),
                         "+memory +cpu")
        self.assertEqual(read(os.path.join(made[0], "memory.max")), str(256 * MIB))
        self.assertEqual(read(os.path.join(made[0], "cpu.max")), "150000 100000")

    def test_the_oom_count_is_read_from_memory_events(self):
        [group] = self.groups.create("j1", memory=64 * MIB)
        write(os.path.join(group, "memory.events"),
              "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n")
        self.assertTrue(self.groups.oom_killed("j1"))

    def test_a_service_already_in_its_leaf_uses_the_unit(self):
        again = JobGroups.detect(self.directory, self.mounts,
                                 "0::/system.slice/netweir.service/service\n")
        self.assertEqual(again.places["memory"].base, self.unit)


    def test_a_writable_unit_without_the_delegate_mark_is_not_delegated_to_root(self):
        # Root may write every group: a unit without Delegate=yes is not
        # the service's to divide, and none of its processes is moved.
        os.removexattr(self.unit, "user.delegate")
        groups = JobGroups.detect(self.directory, self.mounts,
                                  "0::/system.slice/netweir.service\n", euid=0)
        self.assertEqual(groups.available(), {"memory": False, "cpu": False})
        self.assertIn("is not delegated", groups.refusal(JobPolicy(memory=64 * MIB)))
        self.assertRaises(CgroupError, groups.create, "j", memory=64 * MIB)
        self.assertEqual(read(os.path.join(self.unit, "cgroup.procs")), "4242\n")

    def test_the_systemd_delegate_mark_makes_it_delegated_to_root(self):
        groups = JobGroups.detect(self.directory, self.mounts,
                                  "0::/system.slice/netweir.service\n", euid=0)
        self.assertEqual(groups.available(), {"memory": True, "cpu": True})

    def test_a_unit_owned_by_the_services_user_is_delegated_to_it(self):
        os.removexattr(self.unit, "user.delegate")
        owner = os.stat(self.unit).st_uid
        if owner == 0:
            # Made by root: give it to a user, as a user's delegation does.
            owner = 4321
            os.chown(self.unit, owner, -1)
        groups = JobGroups.detect(self.directory, self.mounts,
                                  "0::/system.slice/netweir.service\n", euid=owner)
        self.assertEqual(groups.available(), {"memory": True, "cpu": True})


class NoCgroupsTests(unittest.TestCase):
    def setUp(self):
        self.root = os.path.abspath(self.mktemp())
        write(os.path.join(self.root, "cgroup.controllers"), "pids\n")
        write(os.path.join(self.root, "cgroup.subtree_control"), "")
        self.groups = JobGroups.detect(self.mktemp(), f"cgroup2 {self.root} cgroup2 rw 0 0\n",
                                       "0::/\n")

    def test_nothing_is_available_and_a_limit_is_refused_with_the_reason(self):
        self.assertEqual(self.groups.available(), {"memory": False, "cpu": False})
        self.assertIsNone(self.groups.refusal(JobPolicy(timeout=60)))
        refusal = self.groups.refusal(JobPolicy(memory=200 * MIB))
        self.assertIn("memory cannot be limited here", refusal)
        self.assertIn("no cgroup memory controller", refusal)
        self.assertIn("cpu cannot be limited here", self.groups.refusal(JobPolicy(cpu=1.0)))

    def test_creating_a_group_is_refused_with_the_reason(self):
        e = self.assertRaises(CgroupError, self.groups.create, "j", memory=64 * MIB)
        self.assertIn("memory cannot be limited here", e.message)

    def test_a_machine_without_any_cgroup_mount(self):
        groups = JobGroups.detect(self.mktemp(), "proc /proc proc rw 0 0\n", "")
        self.assertEqual(groups.available(), {"memory": False, "cpu": False})


class FlagsTests(unittest.TestCase):
    def test_the_parents_group_words_come_before_crawl(self):
        self.assertEqual(cgroupfs.split_flags(["--cgroup=/a", "--cgroup=/b", "crawl", "x"]),
                         (["/a", "/b"], ["crawl", "x"]))
        self.assertEqual(cgroupfs.split_flags(["crawl", "--cgroup=/a"]),
                         ([], ["crawl", "--cgroup=/a"]))

    def test_the_parent_knows_the_flag_without_importing_cgroupfs(self):
        from netweir_serve.jobs import _crawlparent
        self.assertEqual(_crawlparent._GROUP_FLAG, cgroupfs.FLAG)


class SubmitterRefusalTests(unittest.TestCase):
    """JobSubmitter's enforceable hook is JobGroups.refusal (makeService):
    a job, a schedule or a --policy rule asking for a limit the machine
    cannot enforce is refused when it is asked, with the reason."""

    def submitter(self, controllers, rules=()):
        root = os.path.abspath(self.mktemp())
        write(os.path.join(root, "cgroup.controllers"), controllers)
        write(os.path.join(root, "cgroup.subtree_control"), "")
        groups = JobGroups.detect(self.mktemp(), f"cgroup2 {root} cgroup2 rw 0 0\n", "0::/\n")
        return JobSubmitter(ProjectTable([]), None, None, None, self.mktemp(),
                            rules=PolicyRules.parse(rules), enforceable=groups.refusal)

    def test_only_the_limit_the_machine_lacks_is_refused(self):
        submitter = self.submitter("cpu pids\n")
        self.assertEqual(submitter.policy_of("shop", "books", JobPolicy(cpu=0.5)).cpu, 0.5)
        e = self.assertRaises(JobRefused, submitter.policy_of, "shop", "books",
                              JobPolicy(memory=200 * MIB, cpu=0.5))
        self.assertIn("memory cannot be limited here", e.message)

    def test_a_limit_from_a_policy_rule_is_refused_for_its_jobs(self):
        submitter = self.submitter("pids\n", rules=["shop/books:cpu=2"])
        e = self.assertRaises(JobRefused, submitter.policy_of, "shop", "books")
        self.assertIn("cpu cannot be limited here", e.message)
        self.assertIsNone(submitter.policy_of("shop", "other").cpu)


class V2RootTests(unittest.TestCase):
    def test_a_container_namespaces_root_moves_its_processes_to_the_leaf(self):
        # --cgroupns=private: /proc/self/cgroup says 0::/ and the group is
        # the mount point, but it is not the true root (it has a
        # cgroup.type): v2's rule holds, its processes must move.
        root = os.path.abspath(self.mktemp())
        write(os.path.join(root, "cgroup.controllers"), "cpu memory pids\n")
        write(os.path.join(root, "cgroup.subtree_control"), "")
        write(os.path.join(root, "cgroup.type"), "domain\n")
        write(os.path.join(root, "cgroup.procs"), "1\n4242\n")
        write(os.path.join(root, "service", "cgroup.procs"), "")
        groups = JobGroups.detect(self.mktemp(), f"cgroup2 {root} cgroup2 rw 0 0\n",
                                  "0::/\n", euid=0)
        self.assertEqual(groups.available(), {"memory": True, "cpu": True})
        [made] = groups.create("j", memory=64 * MIB)
        self.assertEqual(os.path.dirname(os.path.dirname(made)), root)
        # A temp tree's cgroup.procs takes each write whole: the last pid.
        self.assertEqual(read(os.path.join(root, "service", "cgroup.procs")), "4242")
        self.assertEqual(read(os.path.join(root, "cgroup.subtree_control")), "+memory +cpu")

    def test_a_service_in_the_root_group_moves_nothing(self):
        # The true root (no cgroup.type) may hold processes and hand
        # controllers on: its processes are the machine's, none is moved.
        root = os.path.abspath(self.mktemp())
        write(os.path.join(root, "cgroup.controllers"), "cpu memory\n")
        write(os.path.join(root, "cgroup.subtree_control"), "")
        write(os.path.join(root, "cgroup.procs"), "1\n4242\n")
        directory = os.path.abspath(self.mktemp())
        groups = JobGroups.detect(directory, f"cgroup2 {root} cgroup2 rw 0 0\n", "0::/\n")
        [made] = groups.create("j", memory=64 * MIB)
        self.assertEqual(os.path.dirname(os.path.dirname(made)), root)
        self.assertFalse(os.path.exists(os.path.join(root, "service")))
        self.assertEqual(read(os.path.join(root, "cgroup.subtree_control")), "+memory +cpu")
