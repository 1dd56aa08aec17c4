"""hlt-save --live: a background snapshot of a running guest, and one onto a full file system.
"""

import os
import re
import subprocess

import qemu_guest_common  # noqa: F401  (first: it puts the harness on sys.path)
from hltharness.guesttest import FAIL_RX, Fail, Skip, log, pass_numbers  # noqa: E402
from hltharness.proc import run_tool  # noqa: E402
from hltharness.wait import read_text as read  # noqa: E402


def scenario_live(env):
    g, qmp = env.boot_source("live-src")
    try:
        ckpt = env.path("live.hlt")
        # The guest must keep running during a live save: its serial log keeps growing.
        before = len(pass_numbers(read(g.serial_log)))
        out, last = env.save_from(g, qmp, ckpt, ["--live"])
    finally:
        g.stop()
    m = re.search(r"working set\s+(\d+) pages written by the guest during the save", out)
    if not m or int(m.group(1)) == 0:
        raise Fail("a live save of a guest running memcheck saw no page written during the save")
    log(f"live save: {m.group(1)} pages in the save-time working set; source passes {before} -> {last}")
    rc, out, err, serial = env.restore(ckpt, "live")
    if rc != 0:
        raise Fail(f"hlt-restore qemu exited {rc}")
    env.expect_continues(serial, 0)


def scenario_live_failed(env):
    if os.geteuid() != 0:
        raise Skip("live_failed mounts a small tmpfs (a file system too small for the checkpoint): needs root")
    g, qmp = env.boot_source("live-failed-src")
    full = env.path("full")
    os.makedirs(full, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "hlt-live-failed", full], check=True)
    try:
        rc, out, err = run_tool([env.save_bin, "qemu", "--qmp", qmp, "-o", os.path.join(full, "x.hlt"), "--live"],
                                env.path("live-failed.save.log"), 300)
        left = os.listdir(full)
        before = len(pass_numbers(read(g.serial_log)))
        # The guest goes on: memcheck writes all of its memory every pass, so a page still write-protected by QEMU
        # would stop it at once.
        g.wait_for(re.compile(r"memcheck pass=%d .* OK" % (before + 3)), 1, 60, fail=FAIL_RX)
    finally:
        subprocess.run(["umount", full], check=True)
        g.stop()
    if rc == 0 or "No space left on device" not in err or "read and dropped" not in err or left:
        raise Fail(f"hlt-save --live onto a full file system: exit {rc}, left {left}: {err}")
    log(f"the failed live save said: {err.strip()[-200:]}; the guest went on past pass {before + 3}")
