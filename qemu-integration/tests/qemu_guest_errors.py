"""Restores that must fail clearly: a RAM size mismatch, QEMU killed mid-restore, a damaged block.
"""

import os
import re
import shutil
import signal
import subprocess
import time

from qemu_guest_common import guest_argv
from hltharness.guesttest import Fail, log, pass_numbers  # noqa: E402
from hltharness.proc import wait_gone  # noqa: E402
from hltharness.wait import read_text as read, wait_for_match  # noqa: E402


def scenario_size_mismatch(env):
    ckpt, _ = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, "mismatch", mem="512M", timeout=60)
    if rc != 2:
        raise Fail(f"expected exit 2 for a RAM size mismatch, got {rc}")
    if "RAMBlock pc.ram" not in err or "-m" not in err:
        raise Fail("the error does not name the RAMBlock and the fix: " + err)
    m = re.search(r"QEMU \(pid (\d+)\)", out)
    if m:
        try:  # hlt-restore stops its QEMU before it exits; 1 s is what the check has always allowed
            wait_gone([int(m.group(1))], 1.0)
        except TimeoutError:
            raise Fail("hlt-restore left its QEMU running after the error")
    if pass_numbers(read(serial)):
        raise Fail("the mismatched guest ran")


def scenario_killed_mid_restore(env):
    ckpt, _ = env.stopped_checkpoint()
    serial = env.path("killed.serial.log")
    if os.path.exists(serial):
        os.unlink(serial)
    argv = guest_argv(serial)
    out_path = env.path("killed.restore.log")
    # A slow loader keeps the restore going long enough to kill QEMU in the middle of it.
    cmd = [env.restore_bin, "qemu", ckpt, "--rate-limit", "1M", "--qemu", argv[0], "--qemu-dir",
           env.path("killed.qemu"), "--", *argv[1:]]
    with open(out_path, "wb") as out, open(out_path + ".err", "wb") as errf:
        p = subprocess.Popen(cmd, stdout=out, stderr=errf)
    try:
        def ended():
            return p.poll() is not None and f"hlt-restore ended ({p.returncode}):\n" + read(out_path + ".err")
        try:
            wait_for_match(out_path, r"guest running", 30, give_up=ended)
        except TimeoutError as e:
            raise Fail(f"the guest did not start running: {e}")
        pid = int(re.search(r"QEMU \(pid (\d+)\)", read(out_path)).group(1))
        env.pids.append(pid)
        time.sleep(1.0)  # a moment into the (rate-limited) restore
        if p.poll() is not None:
            raise Fail("the restore finished before QEMU could be killed (is --rate-limit honoured?)")
        log(f"killing QEMU pid {pid} mid-restore")
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        rc = p.wait(30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = read(out_path + ".err")
    print(read(out_path) + err, flush=True)
    if rc != 3:
        raise Fail(f"expected exit 3 after QEMU died, got {rc}")
    if "killed by signal 9" not in err:
        raise Fail("the error does not say that QEMU was killed: " + err)
    log(f"hlt-restore noticed in {took:.2f} s and exited {rc}")


def scenario_corrupt_block(env):
    ckpt, _ = env.stopped_checkpoint()
    bad = env.path("corrupt.hlt")
    shutil.copyfile(ckpt, bad)
    size = os.path.getsize(bad)
    with open(bad, "r+b") as f:  # the middle of the file is block payload (the index is at the end)
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    rc, out, err, serial = env.restore(bad, "corrupt", timeout=90)
    if rc != 4:
        raise Fail(f"expected exit 4 for a damaged block, got {rc}")
    if "checksum mismatch" not in err or "postcopy-paused" not in err:
        raise Fail("the error does not name the damaged block and QEMU's paused postcopy: " + err)
    if re.search(r" BAD ", read(serial)):
        raise Fail("the guest ran on wrong memory")
    log("damaged block refused; QEMU's postcopy paused instead of running on wrong memory")
