#!/usr/bin/env python3
"""hlt-save libvirt --live of domains with writable disks (issue 27 item 7), against the project's test guest under
libvirt's embedded QEMU driver (TCG), with the machinery of libvirt_guest_test.py.

usage: libvirt_live_test.py --tools DIR --work DIR SCENARIO

  disks    the guest runs memcheck over 8 MiB with its journal on its virtio disk: every pass (about every 20 ms
           here) it checks that the disk holds the pass its memory remembers and writes the next one, so memory and
           disk move in lockstep. hlt-save libvirt --live saves it while it runs: the guest is paused only for the
           saved instant (the disk frozen, QEMU capturing devices and memory), then runs on, on its new overlay,
           without an error. The frozen image's journal ends at pass P. A clone, then the domain as itself, are
           restored from the checkpoint: each continues from pass P or P+1 (what its memory remembers) with every
           pass "disk=ok" (a disk ahead of or behind the memory turns a pass BAD). The frozen image never changes.
  errors   what a live save refuses or undoes, each with a clear message, no checkpoint and no overlay left, the
           domain running on its own image with memcheck going on: a disk in a block job (libvirt refuses the disk
           snapshot inside the pause: the guest runs again at once); a checkpoint on a full file system (the write
           fails after the disk was frozen and the guest resumed: the overlay is committed back into the image and
           removed). And a domain paused by its user: saved as it stands (a background snapshot would start it),
           and still paused afterwards.
  devices  libvirt_guest_test.py's devices scenario (UEFI NVRAM, TPM 2.0, disk, agent...) with the save made
           live: the NVRAM and the TPM state are read inside the pause; three clones each get copies equal to the
           source's and read the saved PCR 0.

Exit 0 pass, 1 fail, 77 skipped (as libvirt_guest_test.py, and the errors scenario without root: it mounts a
small tmpfs).
"""

import argparse
import glob
import os
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libvirt_guest_test as lt  # noqa: E402
from libvirt_guest_test import Fail, Skip, log, read  # noqa: E402
from hltharness.scratch import Scratch  # noqa: E402
from hltharness.wait import poll_until  # noqa: E402

# memcheck's disk journal (guest/memcheck.c): 64 slots of 4 KiB from 1 MiB on, each "HLTDISK1", seed, pass, sum.
JOURNAL_BASE, JOURNAL_SLOTS, SEED = 1 << 20, 64, 1
PAUSE_RX = re.compile(r"guest paused\s+([\d.]+) ms at the saved instant")
PASS_RX = re.compile(r"memcheck pass=(\d+) [^\r\n]*\r?\n")  # whole lines only (the last may be half written)


def journal_pass(image):
    """The newest pass memcheck's journal holds in a raw image (0 when none)."""
    best = 0
    with open(image, "rb") as f:
        for slot in range(JOURNAL_SLOTS):
            f.seek(JOURNAL_BASE + slot * 4096)
            rec = f.read(28)
            if len(rec) == 28 and rec[:8] == b"HLTDISK1":
                seed, npass = struct.unpack("<QQ", rec[8:24])
                if seed == SEED:
                    best = max(best, npass)
    return best


def passes_after(serial, offset):
    """memcheck's pass lines written to `serial` past byte `offset`: [(pass, verdict, line)]."""
    text = read(serial)[offset:]
    return [(int(m.group(1)), "OK" if " OK " in m.group(0) else "BAD", m.group(0).strip())
            for m in PASS_RX.finditer(text)]


def wait_continues(env, serial, offset, frozen_pass, count=8, timeout=240):
    """A restored guest continues from what its memory remembers: its first pass is the frozen journal's last
    (P: the instant fell between the disk write and the memory noting it) or the next one (P + 1), and every pass
    after it checks the disk against the memory ("disk=ok")."""
    def enough():
        text = read(serial)[offset:]
        if lt.FAIL_RX.search(text):
            raise Fail(f"{serial}: {lt.FAIL_RX.search(text).group(0)!r}:\n{text[-2000:]}")
        passes = passes_after(serial, offset)
        return passes if len(passes) >= count else None
    passes = poll_until(enough, timeout, poll=0.5)
    if passes:
        first = passes[0][0]
        text = read(serial)[offset:]
        if first not in (frozen_pass, frozen_pass + 1):
            raise Fail(f"{serial}: the restored guest's first pass is {first}, the frozen disk's journal ends at "
                       f"{frozen_pass}: memory and disk are not of one instant:\n{text[-1500:]}")
        bad = [line for _, verdict, line in passes if verdict != "OK" or "disk=ok" not in line]
        if bad:
            raise Fail(f"{serial}: passes not OK with disk=ok: {bad[:3]}")
        return [p for p, _, _ in passes]
    raise Fail(f"{serial}: fewer than {count} passes within {timeout} s after the restore:\n{read(serial)[-2000:]}")


def live_env(tools, work):
    # 8 MiB: a pass every few tens of ms under TCG, each writing the journal: disk and memory move in lockstep.
    return lt.Env(tools, work, memory_mib=512, memcheck_mib=8)


def disk_of(env, name):
    return re.search(r"^\s*vda\s+(\S+)", env.virsh("domblklist", name), re.M).group(1)


def overlays_of(image):
    return sorted(glob.glob(glob.escape(image) + ".hlt-*.qcow2"))


def scenario_disks(env):
    env.boot_source(passes=3)
    serial, image = env.path("desk.serial.log"), env.path("desk.img")
    ckpt = env.path("desk.hlt")
    _, out, _ = env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--live"], "save")
    after_save = len(read(serial))
    pause = PAUSE_RX.search(out)
    m = re.search(r"disk vda\s+frozen (\S+) .* goes on on (\S+)", out)
    if "live save" not in out or not pause or not m or m.group(1) != image:
        raise Fail("hlt-save --live did not report a live save, its pause and the frozen disk:\n" + out)
    overlay = m.group(2)
    log(f"live save: guest paused {pause.group(1)} ms; the domain goes on on {overlay}")
    # The source runs on, on its overlay, checking its disk against its memory as before.
    if "running" not in env.virsh("domstate", "desk") or disk_of(env, "desk") != overlay:
        raise Fail(f"after the save: {env.virsh('domstate', 'desk', '--reason')} on {disk_of(env, 'desk')}")
    poll_until(lambda: len(passes_after(serial, after_save)) >= 5, 60, poll=0.2)
    source_after = passes_after(serial, after_save)
    if len(source_after) < 5 or any(v != "OK" or "disk=ok" not in line for _, v, line in source_after):
        raise Fail(f"the source did not run on cleanly after the save: {source_after[:6]}\n{read(serial)[-1500:]}")
    frozen_pass = journal_pass(image)
    frozen_hash = lt.sha256(image)
    if frozen_pass == 0 or frozen_pass >= source_after[-1][0]:
        raise Fail(f"the frozen image's journal ends at pass {frozen_pass}, the source is at {source_after[-1][0]}")
    log(f"frozen journal at pass {frozen_pass}; the source went on to pass {source_after[-1][0]}")

    os.makedirs(env.path("disks"))
    env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c1",
              "--disk-dir", env.path("disks")], "restore_c1")
    c1 = wait_continues(env, env.path("desk.serial.log.c1"), 0, frozen_pass)
    log(f"clone c1 continues from pass {c1[0]}: memory and disk agree ({len(c1)} passes disk=ok)")
    # As itself: the source must go first (same name and UUID). Its console log is kept aside: the restored
    # domain's starts afresh under the same name (a dying QEMU may still write a line to the old one).
    env.destroy("desk")
    os.rename(serial, serial + ".source")
    env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--disk-dir", env.path("disks")],
             "restore_self")
    me = wait_continues(env, serial, 0, frozen_pass)
    log(f"desk as itself continues from pass {me[0]}")
    if lt.sha256(image) != frozen_hash or journal_pass(image) != frozen_pass:
        raise Fail("the frozen image changed after the save")
    log(f"PASS disks: live save with the guest paused {pause.group(1)} ms; the clone and the domain as itself "
        f"resume with memory and disk of one instant (journal pass {frozen_pass})")


def running_on_its_image(env, image, serial, what):
    """After a refused or undone save: the domain runs on `image`, no overlay is left, memcheck goes on."""
    state = env.virsh("domstate", "desk")
    if "running" not in state or disk_of(env, "desk") != image or overlays_of(image):
        raise Fail(f"{what}: domain {state.strip()} on {disk_of(env, 'desk')}, overlays left {overlays_of(image)}")
    offset = len(read(serial))
    poll_until(lambda: len(passes_after(serial, offset)) >= 3, 60, poll=0.2)
    after = passes_after(serial, offset)
    if len(after) < 3 or any(v != "OK" or "disk=ok" not in line for _, v, line in after):
        raise Fail(f"{what}: memcheck did not go on cleanly: {after}\n{read(serial)[-1500:]}")


def scenario_errors(env):
    if os.geteuid() != 0:
        raise Skip("the errors scenario mounts a small tmpfs for a checkpoint that cannot be written: needs root")
    env.boot_source(passes=3)
    serial, image = env.path("desk.serial.log"), env.path("desk.img")
    ckpt = env.path("desk.hlt")

    # A disk in a block job (a copy mirroring it): libvirt refuses its snapshot inside the pause.
    copy = env.path("copy.img")
    env.virsh("blockcopy", "desk", "vda", copy)
    rc, _, err = env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--live"],
                          "save_block_job", expect_ok=False)
    if rc == 0 or "freezing the disks of domain desk" not in err or "block job" not in err or os.path.exists(ckpt):
        raise Fail(f"a disk in a block job: exit {rc}: {err}")
    running_on_its_image(env, image, serial, "disk in a block job")
    env.virsh("blockjob", "desk", "vda", "--abort")
    os.unlink(copy)
    log(f"a disk in a block job: refused inside the pause ({lt.error_message(err).strip()[-160:]})")

    # A checkpoint that cannot be written: the stream fails after the disk was frozen and the guest resumed.
    full = env.path("full")
    os.makedirs(full)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "hlt-live-full", full], check=True)
    try:
        before = journal_pass(image)
        rc, _, err = env.tool([env.save_bin, "libvirt", "desk", "-o", os.path.join(full, "desk.hlt"),
                               "--connect", env.uri, "--live"], "save_full", expect_ok=False)
        leftovers = os.listdir(full)
    finally:
        subprocess.run(["umount", full], check=True)
    if rc == 0 or "No space left on device" not in err or leftovers:
        raise Fail(f"a full file system: exit {rc}, left {leftovers}: {err}")
    running_on_its_image(env, image, serial, "a checkpoint on a full file system")
    # What the guest wrote while it ran on the overlay reached the image (committed back), and goes on there.
    if journal_pass(image) <= before:
        raise Fail(f"the image's journal is at pass {journal_pass(image)}, as before the save ({before})")
    log("a full file system: the write failed after the freeze; the overlay was committed back and removed")

    # A domain its user paused: saved as it stands, left paused (QEMU 7.2's background snapshot would start it).
    env.virsh("suspend", "desk")
    _, out, _ = env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--live"],
                         "save_paused")
    if "not live" not in out or "paused-guest save" not in out or "frozen" not in out:
        raise Fail("a paused domain's --live save did not say it was saved as it stands:\n" + out)
    if "paused" not in env.virsh("domstate", "desk"):
        raise Fail(f"the paused domain runs after its save: {env.virsh('domstate', 'desk', '--reason')}")
    env.virsh("resume", "desk")
    log("PASS errors: a block job and a full file system each refused with nothing left, the guest running on its "
        "image; a paused domain saved as it stands and left paused")


def scenario_devices(env):
    env.live_save = True  # libvirt_guest_test.scenario_devices saves with --live
    lt.scenario_devices(env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("scenario", choices=["disks", "errors", "devices"])
    a = ap.parse_args()
    work = os.path.join(a.work, "live_" + a.scenario)
    env = lt.Env(a.tools, work) if a.scenario == "devices" else live_env(a.tools, work)
    # The scenario's directory is its own (setup empties it): its disks and checkpoints go when it passes.
    scratch, passed = Scratch(work, whole=True, log=log), False
    try:
        env.setup()
        {"disks": scenario_disks, "errors": scenario_errors, "devices": scenario_devices}[a.scenario](env)
        passed = True
        return 0
    except Skip as e:
        passed = True
        print("*" * 70 + f"\nlibvirt_live_test: SKIPPED: {e}\n" + "*" * 70, flush=True)
        return 77
    except Fail as e:
        print(f"FAIL live {a.scenario}: {e}", flush=True)
        return 1
    finally:
        env.cleanup()
        scratch.finish(passed)


if __name__ == "__main__":
    sys.exit(main())
