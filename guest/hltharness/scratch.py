"""A test's scratch outputs: kept when it fails (to look at), their large part removed when it passes.

The guest tests write checkpoints, disks and block caches of hundreds of MiB each; left behind by every passing
scenario they filled CI's disk ("No space left on device"). A scenario names its outputs through `Scratch.path`
(or owns a whole directory); `finish(passed=True)` removes the large ones and leaves the small logs, which the
next run overwrites. `finish(passed=False)` removes nothing and says what it kept and where.

Large: a regular file of at least LARGE bytes, or a directory that still holds LARGE bytes once its large files
are gone (a block cache is many small files). A directory with a file system mounted under it is never entered
(an image server's FUSE mount that is still up).
"""

import os
import shutil

LARGE = 1 << 20


def _mount_points():
    try:
        with open("/proc/self/mounts") as f:
            return [line.split()[1].replace("\\040", " ") for line in f]
    except OSError:
        return []


def _size(path, mounts=()):
    """Bytes under `path` (files only; a vanished entry counts 0; mounted file systems are not entered)."""
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            return os.lstat(path).st_size
    except OSError:
        return 0
    total = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in mounts]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class Scratch:
    def __init__(self, work, whole=False, log=print):
        """`work`: the directory the test writes in. `whole`: the whole directory is this test's (else only the
        paths handed out by `path`, and their siblings NAME.*, are)."""
        self.work = work
        self.whole = whole
        self.log = log
        self.names = set()

    def path(self, name):
        self.names.add(name)
        return os.path.join(self.work, name)

    def _owned(self):
        """The top-level entries of the work directory that are this test's."""
        try:
            entries = sorted(os.listdir(self.work))
        except OSError:
            return []
        if self.whole:
            return [os.path.join(self.work, e) for e in entries]
        return [os.path.join(self.work, e) for e in entries
                if e in self.names or any(e.startswith(n + ".") for n in self.names)]

    def large_outputs(self):
        """(path, bytes) of the owned outputs of LARGE bytes or more, files and directories alike."""
        mounts = set(_mount_points())
        return [(p, s) for p in self._owned() if p not in mounts for s in [_size(p, mounts)] if s >= LARGE]

    def _prune(self, path, mounts):
        """Removes the large part of `path`; returns the bytes removed."""
        if os.path.islink(path) or not os.path.isdir(path):
            size = _size(path)
            if size >= LARGE:
                os.unlink(path)
                return size
            return 0
        prefix = path.rstrip("/") + "/"
        if any(m == path or m.startswith(prefix) for m in mounts):
            self.log(f"scratch: not entering {path}: a file system is mounted there")
            return 0
        freed = sum(self._prune(os.path.join(path, e), mounts) for e in sorted(os.listdir(path)))
        rest = _size(path)
        if rest >= LARGE:
            shutil.rmtree(path)
            freed += rest
        elif freed and not os.listdir(path):
            os.rmdir(path)  # emptied by the removals above
        return freed

    def finish(self, passed):
        """Passed: remove the large outputs and say how much went. Failed: keep everything and list it."""
        if not passed:
            kept = self.large_outputs()
            if kept:
                self.log("kept for inspection (the test failed; delete them once done): " +
                         ", ".join(f"{p} ({s / (1 << 20):.0f} MiB)" for p, s in kept))
            return 0
        mounts = _mount_points()
        freed = sum(self._prune(p, mounts) for p in self._owned())
        if freed:
            self.log(f"scratch: removed {freed / (1 << 20):.0f} MiB of checkpoints, disks and caches "
                     f"(the test passed; logs stay in {self.work})")
        return freed
