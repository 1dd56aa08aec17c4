"""Lazy restores of the stopped-guest checkpoint: placement (direct, channel, fallback without ptrace permission),
attaching to a QEMU started by the test, the access window of the save and learned layouts.
"""

import json
import os
import re
import shutil
import subprocess

from qemu_guest_common import MEM, MIB, check_eager, check_placement
import launch  # noqa: E402
from hltharness.guesttest import Fail, Skip, log  # noqa: E402
from hltharness.proc import run_tool  # noqa: E402
from hltharness.wait import read_text as read, wait_for_path  # noqa: E402


def scenario_lazy(env, extra=(), placement="direct", name="lazy"):
    ckpt, last = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, name, extra)
    if rc != 0:
        raise Fail(f"hlt-restore qemu exited {rc}")
    if "to guest running" not in out or "bytes read" not in out:
        raise Fail("hlt-restore did not print the time to running and the engine statistics")
    check_placement(env.path(name + ".stats.json"), out, placement)
    env.expect_continues(serial, last)


def scenario_placement_channel(env):
    scenario_lazy(env, ["--placement", "channel"], "channel", "channel")


def scenario_placement_fallback(env):
    """A QEMU of root restored by hlt-restore running as nobody: pidfd_getfd is not permitted (a real refusal,
    not a simulated one), so --placement auto uses the channel, lazy (postcopy) and --eager (a precopy load);
    --placement direct refuses before sending."""
    if os.geteuid() != 0:
        raise Skip("needs root, to run QEMU as root and hlt-restore as nobody (no ptrace permission over QEMU)")
    if not shutil.which("setpriv"):
        raise Skip("setpriv (util-linux) is missing")
    ckpt, last = env.stopped_checkpoint()
    os.chmod(ckpt, 0o644)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    for name, flags in (("fallback", []), ("fallback-eager", ["--eager"])):
        serial, qmp = env.path(name + ".serial.log"), env.path(name + ".qmp")
        stats = "/tmp/halite-%s-%d.stats.json" % (name, os.getpid())  # nobody must be able to write it
        for p in (serial, qmp, stats):
            if os.path.exists(p):
                os.unlink(p)
        g = launch.Guest.start(serial, stderr_path=env.path(name + ".qemu-stderr.log"), mem=MEM, workload="memcheck",
                               workload_args=["--mib", MIB], qmp=qmp, incoming="defer")
        env.pids.append(g.proc.pid)
        try:
            wait_for_path(qmp, 5)
            os.chmod(qmp, 0o666)  # nobody may talk to QEMU's monitor, but not ptrace it
            if not flags:
                rc, out, err = run_tool(nobody + [env.restore_bin, "qemu", ckpt, "--qmp", qmp, "--placement", "direct"],
                                        env.path("fallback-direct.restore.log"), 60)
                print(out + err, flush=True)
                if rc == 0 or "ptrace permission" not in err:
                    raise Fail(f"--placement direct without ptrace permission: exit {rc}, expected a refusal naming it")
            rc, out, err = run_tool(nobody + [env.restore_bin, "qemu", ckpt, "--qmp", qmp, "--stats-json", stats,
                                              *flags], env.path(name + ".restore.log"), 120)
            print(out + err, flush=True)
            if rc != 0:
                raise Fail(f"hlt-restore qemu --qmp {' '.join(flags)} as nobody exited {rc}")
            st = check_eager(stats, out, "channel") if flags else check_placement(stats, out, "channel")
            if "ptrace permission" not in st["placement_reason"]:
                raise Fail("the fallback does not say why: " + st["placement_reason"])
            env.expect_continues(serial, last)
        finally:
            g.stop()
            if os.path.exists(stats):
                os.unlink(stats)


def working_set_blocks(env, ckpt):
    out = subprocess.run([env.restore_bin, "info", ckpt, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["working_set_blocks"]


def scenario_access_window(env):
    """A stopped-guest save of a running guest samples its page tables' accessed bits first (the default): the
    pages memcheck keeps touching become the working set; the guest, whose page tables were written, continues
    correctly from the checkpoint. With --access-window 0 there is no working set."""
    g, qmp = env.boot_source("window-src")
    try:
        ckpt = env.path("window.hlt")
        out, last = env.save_from(g, qmp, ckpt, ["--access-window", "1.5", "--access-interval", "150"])
    finally:
        g.stop()
    m = re.search(r"access window\s+(\d+) samples in [\d.]+ s \(paused ([\d.]+) ms in all, at most ([\d.]+) ms\), "
                  r"(\d+) address spaces seen, (\d+) measured; (\d+) pages touched, (\d+) given", out)
    if not m:
        raise Fail("hlt-save printed no access window line")
    samples, paused, max_pause, spaces, measured, touched, given = (float(x) for x in m.groups())
    if samples < 8 or measured < 1 or given < 1000:
        raise Fail(f"the access window saw too little of memcheck's {MIB} MiB: {m.group(0)}")
    blocks = working_set_blocks(env, ckpt)
    if blocks < given / 64:
        raise Fail(f"{int(given)} pages given as the working set but only {blocks} working-set blocks")
    log(f"access window: {int(samples)} samples, paused {paused:.1f} ms in all (max {max_pause:.1f} ms), "
        f"{int(spaces)} address spaces, {int(touched)} pages touched, {int(given)} given, {blocks} hot blocks")
    rc, out, err, serial = env.restore(ckpt, "window")
    if rc != 0:
        raise Fail(f"hlt-restore qemu exited {rc}")
    env.expect_continues(serial, last)

    g, qmp = env.boot_source("window-off-src")
    try:
        off = env.path("window-off.hlt")
        out, _ = env.save_from(g, qmp, off, ["--access-window", "0"])
    finally:
        g.stop()
    if "access window    skipped: off" not in out:
        raise Fail("--access-window 0 did not say the window was off")
    if working_set_blocks(env, off) != 0:
        raise Fail("a stopped-guest save without the access window has a working set")


def scenario_learn_layout(env):
    """--learn-layout: the first restore of a golden checkpoint writes GOLDEN.learned from the blocks its guest
    waited for; the next restore finds it and restores from it; both guests continue. (A learned file of another
    golden under the same name is refused: tests/core/learned_layout_test.cc.)"""
    ckpt, last = env.stopped_checkpoint()
    golden = env.path("golden.hlt")
    for p in (golden, golden + ".learned"):
        if os.path.exists(p):
            os.unlink(p)
    os.link(ckpt, golden)
    rc, out, err, serial = env.restore(golden, "learn1", ["--learn-layout"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --learn-layout exited {rc}")
    env.expect_continues(serial, last)
    if "learned layout   none used: no learned layout yet" not in out:
        raise Fail("the first restore did not say it found no learned layout")
    m = re.search(r"learned layout   (\S+) written in [\d.]+ s: (\d+) working-set blocks, then (\d+) blocks", out)
    if not m or m.group(1) != golden + ".learned" or not os.path.exists(golden + ".learned"):
        raise Fail("the first restore wrote no learned layout:\n" + out[-2000:])
    log(f"learned: {m.group(2)} working-set blocks, then {m.group(3)} blocks the first restore waited for")
    rc, out, err, serial = env.restore(golden, "learn2", ["--learn-layout"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --learn-layout (second) exited {rc}")
    env.expect_continues(serial, last)
    if f"learned layout   restoring from {golden}.learned" not in out or " written in " in out:
        raise Fail("the second restore did not restore from the learned layout (or learned again):\n" + out[-2000:])


def scenario_attach(env):
    ckpt, last = env.stopped_checkpoint()
    serial, qmp = env.path("attach.serial.log"), env.path("attach.qmp")
    for p in (serial, qmp):
        if os.path.exists(p):
            os.unlink(p)
    g = launch.Guest.start(serial, stderr_path=env.path("attach.qemu-stderr.log"), mem=MEM, workload="memcheck",
                           workload_args=["--mib", MIB], qmp=qmp, incoming="defer")
    env.pids.append(g.proc.pid)
    try:
        trace = env.path("attach.trace")
        wait_for_path(qmp, 5)
        stats = env.path("attach.stats.json")
        rc, out, err = run_tool([env.restore_bin, "qemu", ckpt, "--qmp", qmp, "--record-trace", trace,
                                 "--stats-json", stats], env.path("attach.restore.log"), 120)
        print(out + err, flush=True)
        if rc != 0:
            raise Fail(f"hlt-restore qemu --qmp exited {rc}")
        check_placement(stats, out, "direct")  # QEMU's pid from the QMP socket's peer
        env.expect_continues(serial, last)
        lines = [l for l in read(trace).splitlines() if l and not l.startswith("#")]
        if not lines:
            raise Fail("--record-trace wrote no page")
        log(f"recorded trace: {len(lines)} requested pages")
    finally:
        g.stop()
