#!/usr/bin/env python3
"""hltharness's clock seam (wait), processes (proc) and scratch outputs (scratch), without a guest: a wait returns
as soon as its condition holds and names what it waited for when it times out; a zombie counts as stopped; a
passing test's large outputs go and its logs stay; a failing test keeps everything and says where."""

import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from hltharness import proc, scratch, wait  # noqa: E402

MIB = 1 << 20


def write(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: st_size counts, the disk is not used


class Wait(unittest.TestCase):
    def test_returns_as_soon_as_the_file_appears(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            path = os.path.join(d, "later")
            threading.Timer(0.2, lambda: open(path, "w").close()).start()
            t0 = time.monotonic()
            wait.wait_for_path(path, 10)
            self.assertLess(time.monotonic() - t0, 5)

    def test_timeout_names_what_was_awaited(self):
        with self.assertRaises(wait.WaitTimeout) as e:
            wait.wait_until(lambda: False, 0.1, "the moon to rise")
        self.assertIn("the moon to rise", str(e.exception))

    def test_give_up_stops_at_once(self):
        t0 = time.monotonic()
        with self.assertRaises(wait.WaitTimeout) as e:
            wait.wait_until(lambda: False, 30, "x", give_up=lambda: "its writer died")
        self.assertIn("its writer died", str(e.exception))
        self.assertLess(time.monotonic() - t0, 5)

    def test_match_and_json_field(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            log, status = os.path.join(d, "log"), os.path.join(d, "status.json")
            with open(log, "w") as f:
                f.write("a\nguest running after 12 ms\n")
            self.assertEqual(wait.wait_for_match(log, r"after (\d+) ms", 1).group(1), "12")
            with open(status, "w") as f:
                f.write('{"state": "lo')  # half-written: not yet a value
            threading.Timer(0.2, lambda: open(status, "w").write('{"state": "done"}')).start()
            self.assertEqual(wait.wait_for_json_field(status, "state", lambda v: v == "done", 10), "done")


class Proc(unittest.TestCase):
    def test_a_zombie_counts_as_stopped(self):
        p = subprocess.Popen(["true"])
        wait.wait_until(lambda: not proc.pid_alive(p.pid), 10, "true to exit")  # not reaped yet: a zombie
        with open(f"/proc/{p.pid}/stat") as f:
            self.assertEqual(f.read().rsplit(")", 1)[1].split()[0], "Z")
        proc.wait_gone([p.pid], 1)
        self.assertTrue(proc.stop_pid(p.pid, 1))
        p.wait()

    def test_stop_pid_escalates_to_sigkill(self):
        p = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
        try:
            time.sleep(0.2)  # the shell sets its trap first (a moment, not a wait for an event)
            self.assertFalse(proc.stop_pid(p.pid, 1))
            self.assertEqual(p.wait(10), -9)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


class Scratch(unittest.TestCase):
    def make(self, d):
        write(os.path.join(d, "mine.hlt"), 300 * MIB)
        write(os.path.join(d, "mine.restore.log"), 2000)
        for i in range(40):  # a block cache: many small files
            write(os.path.join(d, "mine-cache", "ab", f"{i}"), 64 << 10)
        write(os.path.join(d, "mine.qemu", "qemu.log"), 500)
        write(os.path.join(d, "shared.hlt"), 300 * MIB)  # another scenario's: never touched

    def test_pass_removes_large_outputs_and_keeps_logs(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            self.make(d)
            s = scratch.Scratch(d, log=lambda m: None)
            for n in ("mine.hlt", "mine.restore.log", "mine-cache", "mine"):
                s.path(n)
            freed = s.finish(passed=True)
            self.assertEqual(freed, 300 * MIB + 40 * (64 << 10))
            self.assertEqual(sorted(os.listdir(d)), ["mine.qemu", "mine.restore.log", "shared.hlt"])
            self.assertTrue(os.path.exists(os.path.join(d, "mine.qemu", "qemu.log")))

    def test_fail_keeps_everything_and_says_where(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            self.make(d)
            lines = []
            s = scratch.Scratch(d, log=lines.append)
            s.path("mine.hlt")
            s.path("mine-cache")
            self.assertEqual(s.finish(passed=False), 0)
            self.assertTrue(os.path.exists(os.path.join(d, "mine.hlt")))
            self.assertEqual(len(lines), 1)
            self.assertIn("kept for inspection", lines[0])
            self.assertIn(os.path.join(d, "mine.hlt"), lines[0])
            self.assertIn(os.path.join(d, "mine-cache"), lines[0])

    def test_whole_directory(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            self.make(d)
            scratch.Scratch(d, whole=True, log=lambda m: None).finish(passed=True)
            self.assertEqual(sorted(os.listdir(d)), ["mine.qemu", "mine.restore.log"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
