"""Incremental checkpoints (hlt-save --parent) of a restored guest, restored lazily through the chain.
"""

import os
import re
import subprocess

from qemu_guest_common import stop_image_server
from hltharness.guesttest import Fail, Skip, log, pass_numbers  # noqa: E402
from hltharness.proc import run_tool  # noqa: E402
from hltharness.wait import read_text as read  # noqa: E402


def incremental(env, name, restore_extra, expect_unwritten):
    """Issue 12: the stopped-guest checkpoint is restored and runs on; it is saved again with --parent (an
    incremental child), the QEMU dies, and the child alone (a chain of two files) is restored lazily: memcheck
    continues with every page verified, no reboot. `restore_extra` chooses how the first restore maps memory."""
    base, last = env.stopped_checkpoint()
    qmp = env.path(name + "1.qmp")
    rc, out, err, serial = env.restore(base, name + "1", restore_extra, qmp=qmp)
    if rc != 0:
        raise Fail(f"hlt-restore qemu of the parent exited {rc}")
    env.expect_continues(serial, last)
    child = env.path(name + "-child.hlt")
    if os.path.exists(child):
        os.unlink(child)
    rc, save_out, save_err = run_tool([env.save_bin, "qemu", "--qmp", qmp, "-o", child, "--parent", base,
                                       "--then", "stop"], child + ".save.log", 300)
    print(save_out + save_err, flush=True)
    if rc != 0:
        raise Fail(f"hlt-save qemu --parent exited {rc}")
    last_child = pass_numbers(read(serial))[-1]
    env.cleanup()  # the source QEMU dies: only the chain is left
    env.pids = []
    m = re.search(r"in parent\s+(\d+) pages .*?(\d+) parent blocks decoded", save_out)
    if not m or int(m.group(1)) == 0:
        raise Fail("the child stores no page as a reference into its parent")
    in_parent, decoded = int(m.group(1)), int(m.group(2))
    child_bytes, base_bytes = os.path.getsize(child), os.path.getsize(base)
    log(f"child: {child_bytes} bytes ({child_bytes / base_bytes:.2f}x the parent's {base_bytes}), {in_parent} pages "
        f"in the parent, {decoded} parent blocks decoded to compare")
    if child_bytes >= base_bytes:
        raise Fail("the child is not smaller than its parent")
    u = re.search(r"parent's image\s+QEMU maps (\S+): (\d+) pages never written", save_out)
    if expect_unwritten:
        if not u or int(u.group(2)) == 0:
            raise Fail("the save did not use the clone's page map of the parent's image")
        unwritten = int(u.group(2))
        log(f"page map: {unwritten} pages of pc.ram never written by the clone, declared in the parent unread")
        if unwritten > in_parent:
            raise Fail(f"{unwritten} unwritten pages but only {in_parent} in the parent")
    elif u:
        raise Fail("a copy restore's QEMU maps no image of the parent, yet the save says it does")
    info = subprocess.run([env.restore_bin, "info", child], capture_output=True, text=True)
    if info.returncode != 0 or "chain        2 files" not in info.stdout:
        raise Fail("hlt-restore info does not show a chain of two files:\n" + info.stdout + info.stderr)
    rc, out, err, serial2 = env.restore(child, name + "2")
    if rc != 0:
        raise Fail(f"hlt-restore qemu of the child exited {rc}")
    env.expect_continues(serial2, last_child)
    log(f"PASS {name}: the child restored lazily through its parent; memcheck continues")


def scenario_incremental(env):
    incremental(env, "incremental", [], expect_unwritten=False)


def scenario_incremental_shared(env):
    """The same from a --memory shared clone: the pages it never wrote are known from QEMU's page map (they still
    read from the parent's image) and go into the child as references without being read or compared."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server behind --memory shared is a FUSE file system")
    images = env.path("images-incremental")
    os.makedirs(images, exist_ok=True)
    try:
        incremental(env, "incremental-shared", ["--memory", "shared", "--image-dir", images], expect_unwritten=True)
    finally:
        env.cleanup()
        env.pids = []
        stop_image_server(images)
