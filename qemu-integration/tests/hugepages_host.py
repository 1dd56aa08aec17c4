"""Huge pages for a test guest: reserve 2 MiB pages on the host, find or mount hugetlbfs, and give both back.

    with hugepages_host.HugePages(pages=264, work_dir=DIR) as hp:   # raises Unavailable(reason) if it cannot
        hp.mount        # a directory on hugetlbfs (2 MiB pages) for QEMU's mem-path
        hp.free()       # HugePages_Free now

The pool (/proc/sys/vm/nr_hugepages) is raised only by what is missing and put back to its old value on exit;
/dev/hugepages is used when it is a hugetlbfs mount, else a private mount under work_dir is made and removed.
Needs root.
"""

import os
import subprocess
import time

MEMINFO = "/proc/meminfo"
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


class Unavailable(Exception):
    pass


def meminfo(field):
    with open(MEMINFO) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise Unavailable(f"{MEMINFO} has no {field}")


def hugetlbfs_mounts():
    """(mount point, options) of every hugetlbfs mount."""
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[2] == "hugetlbfs":
                out.append((parts[1], parts[3]))
    return out


class HugePages:
    def __init__(self, pages, work_dir):
        self.pages = pages
        self.work_dir = work_dir
        self.mount = None
        self.old_pool = None
        self.mounted_here = None

    def free(self):
        return meminfo("HugePages_Free")

    def __enter__(self):
        try:
            self._reserve()
            self._find_mount()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _write_pool(self, n):
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(n))

    def _reserve(self):
        if os.geteuid() != 0:
            raise Unavailable("reserving huge pages needs root (it writes /proc/sys/vm/nr_hugepages and may mount "
                              "hugetlbfs)")
        if meminfo("Hugepagesize") != 2048:
            raise Unavailable(f"the default huge page size here is {meminfo('Hugepagesize')} kB, not 2048 kB")
        with open(NR_HUGEPAGES) as f:
            self.old_pool = int(f.read())
        missing = self.pages - self.free()
        if missing <= 0:
            return
        for attempt in range(2):
            try:
                self._write_pool(self.old_pool + missing)
            except OSError as e:
                raise Unavailable(f"cannot raise {NR_HUGEPAGES} to {self.old_pool + missing}: {e}")
            if self.free() >= self.pages:
                return
            if attempt == 0:
                # Free memory too fragmented for 2 MiB pages: compact it once and try again.
                try:
                    with open("/proc/sys/vm/compact_memory", "w") as f:
                        f.write("1")
                except OSError:
                    pass
                time.sleep(1)
        raise Unavailable(f"asked the kernel for {self.pages} free 2 MiB huge pages; it has {self.free()} "
                          f"(MemFree {meminfo('MemFree') // 1024} MiB: memory too small or too fragmented)")

    def _find_mount(self):
        for point, options in hugetlbfs_mounts():
            if point == "/dev/hugepages" and "pagesize=1" not in options:
                self.mount = point
                return
        target = os.path.join(self.work_dir, "hugetlbfs")
        os.makedirs(target, exist_ok=True)
        p = subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "none", target], capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise Unavailable(f"/dev/hugepages is not a hugetlbfs mount and mounting one on {target} failed: "
                              f"{(p.stdout + p.stderr).strip()}")
        self.mount = target
        self.mounted_here = target

    def __exit__(self, *exc):
        if self.mounted_here:
            # QEMU unlinks its backing file at once; a QEMU still dying may hold the mount a moment.
            for _ in range(50):
                if subprocess.run(["umount", self.mounted_here], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            else:
                subprocess.run(["umount", "-l", self.mounted_here], capture_output=True)
            self.mounted_here = None
        if self.old_pool is not None:
            try:
                self._write_pool(self.old_pool)  # the kernel frees only pages nobody uses
            except OSError:
                pass
            self.old_pool = None
        return False
