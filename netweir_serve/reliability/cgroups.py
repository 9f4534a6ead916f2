"""Control groups for the jobs' ``memory`` and ``cpu`` limits.

What this machine offers is found once, at start (``JobGroups.detect``),
from /proc/self/mounts and /proc/self/cgroup, per controller:

- cgroup v2 where the unified tree is mounted and the service's own group
  lists the controller in its ``cgroup.controllers`` and is delegated to
  it (``delegated_v2``: systemd's delegate mark, owned by the service's
  user, or the root of the tree it sees, as in a container's private
  cgroup namespace; writable alone is not enough, root may write
  anything). Under systemd that is a unit with ``Delegate=yes``
  (``Delegate=memory cpu`` at least). v2 lets no group that holds
  processes hand controllers to its children (only the true root, which
  has no cgroup.type, is spared), so before the first job's group is made
  every process of the service's own group (the service, its jobs'
  parents, a container's init) moves into a leaf of it, ``service``, as
  systemd's delegation guide asks of a delegated unit; a service that
  finds itself in such a leaf uses the group above it.
- cgroup v1's ``memory`` and ``cpu`` hierarchies otherwise, each where
  it is mounted, under the service's own group in it, if writable.

Every job's group lives in a group of the service's DIR,
``netweir-serve-<hash of DIR>``, beneath the service's own group, so two
services on one machine never share one, and is named from the job's id
(``job-<id>``, folded), so a restarted service finds the group of a job it
adopts. Where the DIR's groups were made is remembered in DIR/cgroups.json:
a service restarted from another group of its own (so its groups go
elsewhere now) still finds, reads and removes the last run's. The limits
written:

- memory: ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1). Swap is
  off for the crawl: ``memory.swap.max`` 0 (v2), and v1's
  ``memory.memsw.limit_in_bytes`` (memory plus swap) at the same limit
  where the kernel accounts swap, and v1's ``memory.swappiness`` 0 always; a crawl over its limit is killed, never
  left to swap the machine to a crawl. v2's ``memory.oom.group`` is 1: an
  OOM kill takes the crawl's workers with it.
- cpu: a quota per period of 100 ms, ``cpu.max`` (v2) or
  ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (v1).

Pure file operations on the roots the mounts name, so tests point them at
a temporary tree shaped like either version, or at the real
/sys/fs/cgroup. A group's life once made (join, OOM count, removal) is
reliability/cgroupfs.py, which the crawl's parent uses.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field

from ..names import fold
from . import cgroupfs

CONTROLLERS = ("memory", "cpu")
# The leaf of a delegated v2 group that its own processes move into (see above).
V2_LEAF = "service"
JOB_PREFIX = "job-"
# The file under DIR that remembers where this DIR's groups have been made
# ({controller: [DIR group directories]}): a service started from another
# group of its own finds the groups of the last run's jobs there.
RECORD_NAME = "cgroups.json"
DIR_PREFIX = "netweir-serve-"
# The CPU quota's period: the kernel's default, 100 ms.
CPU_PERIOD_US = 100000
# Tries at making a job's group while job parents remove the DIR's group
# above it as they leave it empty (jobs/_crawlparent.py).
DIR_GROUP_ATTEMPTS = 5
# The least quota the kernel takes (1 ms per period).
MIN_CPU_QUOTA_US = 1000


class CgroupError(Exception):
    """A group that could not be made or set; the message says which file."""

    @property
    def message(self):
        return self.args[0]


@dataclass(frozen=True)
class Place:
    """Where one controller's groups go: ``version`` 1 or 2, ``base`` the
    service's own group's directory in that hierarchy."""

    controller: str
    version: int
    base: str
    # The hierarchy's root as the service sees it (its mount point).
    root: str = None


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def parse_mounts(text):
    """({controller: v1 mount point}, the v2 mount point or None) from the
    text of /proc/self/mounts."""
    v1, v2 = {}, None
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4:
            continue
        point, kind, options = words[1].replace("\\040", " "), words[2], words[3].split(",")
        if kind == "cgroup2" and v2 is None:
            v2 = point
        elif kind == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    v1.setdefault(controller, point)
    return v1, v2


def parse_own(text):
    """({v1 controller: path}, v2 path or None): the service's own groups,
    from the text of /proc/self/cgroup."""
    v1, v2 = {}, None
    for line in text.splitlines():
        number, colon, rest = line.partition(":")
        controllers, colon2, path = rest.partition(":")
        if not colon or not colon2:
            continue
        if number == "0" and controllers == "":
            v2 = path
        for controller in controllers.split(","):
            v1.setdefault(controller, path)
    return v1, v2


def _beneath(mount, path):
    return os.path.join(mount, path.lstrip("/")) if path not in ("", "/") else mount


def is_true_root(path):
    """Whether the v2 group ``path`` is the hierarchy's true root. The
    kernel gives every group a cgroup.type but the root; the root of a
    cgroup namespace (a container's ``0::/``) is a group like any other,
    and v2's no-internal-process rule holds for it."""
    return not os.path.exists(os.path.join(path, "cgroup.type"))


# The extended attributes systemd puts on a group it delegates (Delegate=
# yes): trusted.* by the system manager, user.* by a user's manager.
DELEGATE_MARKS = ("trusted.delegate", "user.delegate")


def delegated_v2(base, mount, euid):
    """Whether the v2 group ``base`` is the service's to divide, not just
    writable (for root everything is). Yes for:

    - a group systemd marked delegated (a delegate extended attribute);
    - a group owned by the service's user, other than root (a delegation
      to a user is made by giving the group to it);
    - the root of the hierarchy the service sees (``mount``): the true
      root's processes are the machine's, where nothing is delegated to
      anyone; a cgroup namespace's root is what the container runtime
      gave the container whole.

    In each case only if its cgroup.subtree_control may be written."""
    if not os.access(os.path.join(base, "cgroup.subtree_control"), os.W_OK):
        return False
    if os.path.normpath(base) == os.path.normpath(mount):
        return True
    for mark in DELEGATE_MARKS:
        try:
            if os.getxattr(base, mark).strip() not in (b"", b"0"):
                return True
        except OSError:
            pass
    try:
        owner = os.stat(base).st_uid
    except OSError:
        return False
    return euid != 0 and owner == euid


def dir_group_name(directory):
    """The group of one service's DIR: the same name for every start on it."""
    digest = hashlib.sha256(os.path.realpath(directory).encode("utf-8", "surrogateescape"))
    return DIR_PREFIX + digest.hexdigest()[:16]


def job_group_name(jobid):
    """A job's group, from its id (which ignores case, as the job does)."""
    return JOB_PREFIX + fold(jobid)


def cpu_quota_us(cores):
    return max(MIN_CPU_QUOTA_US, round(cores * CPU_PERIOD_US))


def _write(directory, name, value):
    path = os.path.join(directory, name)
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(value)
    except OSError as e:
        raise CgroupError(f"cannot write {value!r} to {path}: {e.strerror}") from None


@dataclass
class JobGroups:
    """The control groups of one service's jobs. ``places`` has a Place per
    controller this machine lets the service use; ``refusals`` says, per
    controller that it does not, why, in a sentence for the requester."""

    places: dict
    refusals: dict
    dir_name: str
    # DIR/cgroups.json, or None (nothing remembered: a check of options).
    record_path: str = None
    # v2 bases whose own processes have moved to a leaf and handed on
    # the controllers (done once, at the first job's group).
    _delegated: set = field(default_factory=set)

    @classmethod
    def detect(cls, directory, mounts_text=None, own_text=None, euid=None):
        """What this machine offers, from the texts of /proc/self/mounts
        and /proc/self/cgroup (read here when not given), to the user
        ``euid`` (this process's effective user when not given).

        Detected when called, as the user calling: the service does so in
        makeService, before twistd's --uid drops privileges, so a service
        started as root and run as another user is judged as root."""
        if euid is None:
            euid = os.geteuid()
        if mounts_text is None:
            mounts_text = read_text("/proc/self/mounts")
        if own_text is None:
            own_text = read_text("/proc/self/cgroup")
        v1_mounts, v2_mount = parse_mounts(mounts_text)
        v1_own, v2_own = parse_own(own_text)
        places, refusals = {}, {}
        v2_base = None
        if v2_mount is not None and v2_own is not None:
            v2_base = _beneath(v2_mount, v2_own)
            if os.path.basename(v2_base) == V2_LEAF:
                v2_base = os.path.dirname(v2_base)
        v2_offers = read_text(os.path.join(v2_base, "cgroup.controllers")).split() \
            if v2_base else []
        v2_delegated = bool(v2_offers) and delegated_v2(v2_base, v2_mount, euid)
        for controller in CONTROLLERS:
            if controller in v2_offers:
                if v2_delegated:
                    places[controller] = Place(controller, 2, v2_base, v2_mount)
                else:
                    refusals[controller] = (
                        f"the service's control group {v2_base} (cgroup v2) is not delegated"
                        f" to it: it has no delegate mark (trusted.delegate or user.delegate)"
                        f" nor belongs to the service's user, or its cgroup.subtree_control"
                        f" is not writable (under systemd, give the unit Delegate=yes)")
            elif controller in v1_mounts:
                base = _beneath(v1_mounts[controller], v1_own.get(controller, "/"))
                if os.access(base, os.W_OK):
                    places[controller] = Place(controller, 1, base, v1_mounts[controller])
                else:
                    refusals[controller] = (
                        f"the service may not make control groups in {base} (cgroup v1's"
                        f" {controller} hierarchy): it is not writable")
            else:
                refusals[controller] = (
                    f"this machine has no cgroup {controller} controller the service can"
                    f" use (not in cgroup v2's cgroup.controllers"
                    f"{' at ' + v2_base if v2_base else ''}, no cgroup v1 {controller}"
                    f" hierarchy mounted)")
        return cls(places, refusals, dir_group_name(directory),
                   os.path.join(directory, RECORD_NAME))

    # -- what may be asked -----------------------------------------------------

    def describe(self):
        """A line for the log: where each limit's groups go, or why none."""
        return "; ".join(
            f"{c} in {os.path.join(self.places[c].base, self.dir_name)} (cgroup"
            f" v{self.places[c].version})" if c in self.places
            else f"no {c} limits: {self.refusals[c]}" for c in CONTROLLERS)

    def available(self):
        """{"memory": bool, "cpu": bool}, for daemonstatus.json."""
        return {controller: controller in self.places for controller in CONTROLLERS}

    def refusal(self, policy):
        """None if the limits of ``policy`` (a JobPolicy) can be enforced
        here; otherwise a sentence naming the limit and why not."""
        for controller in CONTROLLERS:
            if getattr(policy, controller, None) is not None and controller not in self.places:
                return f"{controller} cannot be limited here: {self.refusals[controller]}"
        return None

    def can_run(self, record):
        """Whether the limits of ``record``'s policy (a job's record, its
        ``policy`` a JSON dict) can be enforced here: a node's claim takes
        no job it cannot (IJobStore.claim_next), another node may."""
        values = record.policy or {}
        return all(values.get(c) is None or c in self.places for c in CONTROLLERS)

    # -- a job's group ---------------------------------------------------------

    def _dir_groups(self, controllers=CONTROLLERS):
        found = []
        for controller in controllers:
            place = self.places.get(controller)
            if place is not None:
                path = os.path.join(place.base, self.dir_name)
                if path not in found:
                    found.append(path)
        return found

    def _recorded(self):
        """{controller: [DIR group directories]} from DIR/cgroups.json."""
        if self.record_path is None:
            return {}
        try:
            with open(self.record_path, encoding="utf-8") as f:
                recorded = json.load(f)
        except (OSError, ValueError):
            return {}
        if not isinstance(recorded, dict):
            return {}
        return {c: [p for p in recorded.get(c, ()) if isinstance(p, str) and os.path.isabs(p)
                    and os.path.basename(p) == self.dir_name]
                for c in CONTROLLERS if isinstance(recorded.get(c), list)}

    def _record(self, recorded):
        if self.record_path is None:
            return
        temporary = f"{self.record_path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(recorded, f)
            os.replace(temporary, self.record_path)
        except OSError:
            # No DIR (a test's, an option check): the groups of this start
            # are still found from the service's own group.
            pass

    def _remember(self, controllers):
        """Adds where ``controllers``' DIR groups are now to the record."""
        recorded = self._recorded()
        changed = False
        for controller in controllers:
            path = os.path.join(self.places[controller].base, self.dir_name)
            paths = recorded.setdefault(controller, [])
            if path not in paths:
                paths.append(path)
                changed = True
        if changed:
            self._record(recorded)

    def _known_dir_groups(self, controllers=CONTROLLERS):
        """This DIR's groups where they are made now and where earlier
        starts (from other groups of their own) made them."""
        found = self._dir_groups(controllers)
        recorded = self._recorded()
        for controller in controllers:
            for path in recorded.get(controller, ()):
                if path not in found:
                    found.append(path)
        return found

    def _existing(self, jobid, controllers=CONTROLLERS):
        name = job_group_name(jobid)
        return [os.path.join(path, name) for path in self._known_dir_groups(controllers)
                if os.path.isdir(os.path.join(path, name))]

    def directories(self, jobid, controllers=CONTROLLERS):
        """The directories of ``jobid``'s group, one per hierarchy of the
        ``controllers`` (whether they exist or not)."""
        name = job_group_name(jobid)
        return [os.path.join(path, name) for path in self._dir_groups(controllers)]

    def create(self, jobid, memory=None, cpu=None):
        """Makes ``jobid``'s group with the limits given (bytes, cores) and
        returns its directories, for the crawl to join. A group of an
        earlier run of the same id is removed first. Raises CgroupError
        (a limit asked that cannot be enforced here, a file refused)."""
        asked = [c for c, v in (("memory", memory), ("cpu", cpu)) if v is not None]
        for controller in asked:
            if controller not in self.places:
                raise CgroupError(f"{controller} cannot be limited here:"
                                  f" {self.refusals[controller]}")
        for controller in asked:
            place = self.places[controller]
            if place.version == 2:
                self._delegate_v2(place.base)
        directories = self.directories(jobid, asked)
        self._remember(asked)
        if cgroupfs.remove(directories):
            raise CgroupError(f"the control group of an earlier run of job {jobid}"
                              f" ({', '.join(directories)}) still holds processes")
        for attempt in range(DIR_GROUP_ATTEMPTS):
            try:
                self._make_dirs(asked, directories)
                break
            except FileNotFoundError:
                # The last job's parent removed the DIR's group just now
                # (it does when it leaves it empty): made again.
                if attempt == DIR_GROUP_ATTEMPTS - 1:
                    cgroupfs.remove(directories)
                    raise CgroupError(f"cannot make the control group of job {jobid}:"
                                      f" the DIR's group above it keeps being removed") \
                        from None
        try:
            if memory is not None:
                self._limit_memory(self.directories(jobid, ["memory"])[0],
                                   self.places["memory"].version, memory)
            if cpu is not None:
                self._limit_cpu(self.directories(jobid, ["cpu"])[0],
                                self.places["cpu"].version, cpu)
        except CgroupError:
            cgroupfs.remove(directories)
            raise
        return directories

    def _make_dirs(self, asked, directories):
        """The DIR's groups (controllers handed on, on v2), then the job's.
        FileNotFoundError if a DIR's group went in between."""
        for path in self._dir_groups(asked):
            _make_dir(path)
            if any(self.places[c].version == 2 for c in asked):
                _enable(path, [c for c in asked if self.places[c].version == 2])
        for path in directories:
            _make_dir(path, missing_parent_raises=True)

    @staticmethod
    def _limit_memory(path, version, size):
        if version == 2:
            _write(path, "memory.max", str(size))
            _write_if_there(path, "memory.swap.max", "0")
            _write_if_there(path, "memory.oom.group", "1")
        else:
            _write(path, "memory.limit_in_bytes", str(size))
            # The group's pages are not swapped out: without swap
            # accounting (no memsw files) the limit holds only what is
            # in memory, and a crawl would swap past it.
            _write(path, "memory.swappiness", "0")
            # Memory and swap together at the same limit: no swap. Only
            # where the kernel accounts swap (swapaccount=1).
            _write_if_there(path, "memory.memsw.limit_in_bytes", str(size))

    @staticmethod
    def _limit_cpu(path, version, cores):
        quota = cpu_quota_us(cores)
        if version == 2:
            _write(path, "cpu.max", f"{quota} {CPU_PERIOD_US}")
        else:
            _write(path, "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(path, "cpu.cfs_quota_us", str(quota))

    def _delegate_v2(self, base):
        """Readies the delegated v2 group ``base`` to have children with
        controllers: its processes moved into its leaf (v2's rule: a group
        holding processes hands no controller on; the true root of the
        hierarchy is spared it, and its processes are the whole machine's,
        but not a cgroup namespace's root, a container's ``0::/``),
        then the controllers enabled in its cgroup.subtree_control. Once
        per base."""
        if base in self._delegated:
            return
        leaf = os.path.join(base, V2_LEAF)
        wanted = [c for c in CONTROLLERS if c in self.places and self.places[c].version == 2]
        enabled = read_text(os.path.join(base, "cgroup.subtree_control")).split()
        if not all(c in enabled for c in wanted):
            # Every process of the group moves: delegation is proven
            # (delegated_v2), so they are all the service's unit's (or its
            # container's), and one left behind would make the kernel
            # refuse the controllers (EBUSY).
            pids = [] if is_true_root(base) else cgroupfs.members([base])
            if pids:
                _make_dir(leaf)
                for pid in pids:
                    try:
                        cgroupfs.join([leaf], pid)
                    except ProcessLookupError:
                        pass
                    except OSError as e:
                        raise CgroupError(f"cannot move process {pid} into {leaf}:"
                                          f" {e.strerror}") from None
            _enable(base, wanted)
        self._delegated.add(base)

    def oom_killed(self, jobid):
        """Whether the kernel killed a process of ``jobid``'s group for memory."""
        return bool(cgroupfs.oom_kills(self._existing(jobid, ["memory"])))

    def remove(self, jobid):
        """Removes ``jobid``'s group, killing what is still in it first,
        and this DIR's groups if no other job's is left in them (so a
        service killed while no limited job ran leaves nothing behind).
        Returns the directories of the job's group that are still there (a
        process in them not gone yet): a later try or sweep takes them."""
        directories = self._existing(jobid)
        cgroupfs.kill_members(directories)
        left = cgroupfs.remove(directories)
        if not left:
            # The kernel refuses (EBUSY) while another job's group is there.
            self.remove_dir_groups()
        return left

    def leftovers(self):
        """The names of the job groups of this DIR that exist now."""
        found = set()
        for path in self._known_dir_groups():
            try:
                names = os.listdir(path)
            except OSError:
                continue
            found.update(n for n in names if n.startswith(JOB_PREFIX)
                         and os.path.isdir(os.path.join(path, n)))
        return sorted(found)

    def sweep(self, running_ids):
        """Removes every job group of this DIR but those of ``running_ids``
        (the jobs running or adopted now): the groups of jobs that ended
        while no service watched, whose parent could not remove them.
        Returns the names of the groups removed."""
        keep = {job_group_name(jobid) for jobid in running_ids}
        removed = []
        for name in self.leftovers():
            if name in keep:
                continue
            directories = self._existing(name[len(JOB_PREFIX):])
            cgroupfs.kill_members(directories)
            if not cgroupfs.remove(directories):
                removed.append(name)
        self.remove_dir_groups()
        return removed

    def remove_dir_groups(self):
        """Removes this DIR's groups if no job group is left in them (where
        earlier starts made them too); those gone are forgotten."""
        left = cgroupfs.remove(self._known_dir_groups())
        recorded = self._recorded()
        kept = {c: [p for p in paths if p in left] for c, paths in recorded.items()}
        if kept != recorded:
            self._record({c: paths for c, paths in kept.items() if paths})
        return left


def _make_dir(path, missing_parent_raises=False):
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except FileNotFoundError:
        if missing_parent_raises:
            raise
        raise CgroupError(f"cannot make the control group {path}: its parent is gone") \
            from None
    except OSError as e:
        raise CgroupError(f"cannot make the control group {path}: {e.strerror}") \
            from None


def _enable(path, controllers):
    """Hands ``controllers`` to the children of the v2 group ``path``."""
    enabled = read_text(os.path.join(path, "cgroup.subtree_control")).split()
    missing = [c for c in controllers if c not in enabled]
    if missing:
        _write(path, "cgroup.subtree_control", " ".join("+" + c for c in missing))


def _write_if_there(directory, name, value):
    if os.path.exists(os.path.join(directory, name)):
        _write(directory, name, value)
