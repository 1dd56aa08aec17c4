#!/usr/bin/env python3
"""Restore of a libvirt domain: hlt-restore libvirt (lazy) against libvirt's own `virsh restore` of its own save
image of the same domain, in one run, under libvirt's embedded QEMU driver (TCG).

usage: bench_libvirt.py --tools DIR [--sizes 1024,4096] [--repeat N] [--out DIR] [--work DIR]

For each guest size (MiB) it starts the project's test guest as a libvirt domain (memcheck over half of its RAM,
a virtio disk), waits for two OK passes, saves it with `hlt-save libvirt --then cont` (memory, then the disk
frozen), lets it run, saves it with `virsh save` (libvirt's image: its XML, then QEMU's migration stream), and
destroys it. Then, each run with the page cache dropped first, it restores:

  virsh-restore  virsh restore IMAGE (eager: libvirt starts QEMU with -incoming and streams the whole image;
                 the command returns with the guest running)
  hlt-libvirt    hlt-restore libvirt CKPT --clone (a new identity and disk overlay; lazy: the guest runs at once,
                 its pages follow); running_ms is its own "running" line

and measures from the restoring command's start:
  running_ms   to the guest running (virsh restore: its return; hlt-restore: its "running" line)
  first_ok_ms  to memcheck's first OK line on the restored guest's console
  done_ms      to the command's exit (hlt-restore: every page in)

Prints a table with hlt-libvirt / virsh-restore ratios and writes bench_libvirt.csv and bench_libvirt.json into
--out. Needs root (drop_caches, the embedded driver runs QEMU as root).
"""

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
from hltharness import testguest_libvirt as lt  # noqa: E402  (the libvirt guest tests' domain, not a test file)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def first_ok_after(serial, start_size, t0, timeout=600):
    """Seconds from t0 to the first OK line written to `serial` past byte start_size."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = lt.read(serial)[start_size:]
        if lt.FAIL_RX.search(text):
            raise lt.Fail(f"{serial}: {lt.FAIL_RX.search(text).group(0)!r}")
        if lt.OK_RX.search(text):
            return time.time() - t0
        time.sleep(0.02)
    raise lt.Fail(f"{serial}: no OK line within {timeout} s")


def bench_size(env, size_mib, repeat):
    env.boot_source(passes=2)
    ckpt, image = env.path("desk.hlt"), env.path("desk.virsh-save")
    env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--then", "cont"], "save_hlt")
    time.sleep(1)
    t = time.time()
    env.virsh("save", "desk", image)
    virsh_save_s = time.time() - t
    # The image's domain runs on the overlay hlt-save left it on, and each run of it writes there: every run starts
    # from the disk as it was at `virsh save` (else the second run's memory meets a disk ahead of it).
    disk = re.search(r"<source file='([^']+)'", env.virsh("save-image-dumpxml", image)).group(1)
    pristine = disk + ".at-virsh-save"
    subprocess.run(["cp", "--sparse=always", disk, pristine], check=True)
    rows = []
    serial = env.path("desk.serial.log")
    for r in range(repeat):
        # libvirt's own restore: the saved domain comes back as itself.
        subprocess.run(["cp", "--sparse=always", pristine, disk], check=True)
        cold = drop_caches()
        start = len(lt.read(serial))
        t0 = time.time()
        env.virsh("restore", image)
        running = time.time() - t0
        ok = first_ok_after(serial, start, t0)
        rows.append({"size_mib": size_mib, "method": "virsh-restore", "run": r, "cold": cold,
                     "running_ms": running * 1e3, "first_ok_ms": ok * 1e3, "done_ms": running * 1e3})
        env.destroy("desk")
        # Ours, as a clone (its own name, overlay and serial log).
        name = f"b{size_mib}-{r}"
        cold = drop_caches()
        t0 = time.time()
        code, out, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", name,
                                   "--disk-dir", env.path("disks")], f"restore_{name}", expect_ok=True)
        done = time.time() - t0
        m = re.search(r"^running \S+ ([\d.]+) ms", out, re.M)
        clone_serial = serial + "." + name
        ok = first_ok_after(clone_serial, 0, t0)
        rows.append({"size_mib": size_mib, "method": "hlt-libvirt", "run": r, "cold": cold,
                     "running_ms": float(m.group(1)), "first_ok_ms": ok * 1e3, "done_ms": done * 1e3})
        env.destroy(name)
    for f in (ckpt, image):
        rows_size = os.path.getsize(f)
        for row in rows:
            row["ckpt_bytes" if f == ckpt else "image_bytes"] = rows_size
    return rows, virsh_save_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=".")
    ap.add_argument("--work", default="/tmp/hlt-bench-libvirt")
    a = ap.parse_args()
    all_rows = []
    for size in [int(s) for s in a.sizes.split(",")]:
        env = lt.Env(a.tools, os.path.join(a.work, str(size)), memory_mib=size, memcheck_mib=size // 2)
        try:
            env.setup()
            os.makedirs(env.path("disks"))
            rows, _ = bench_size(env, size, a.repeat)
            all_rows += rows
        finally:
            env.cleanup()
    print(f"{'size':>6} {'method':<14} {'running_ms':>11} {'first_ok_ms':>12} {'done_ms':>9}  cold")
    for row in all_rows:
        print(f"{row['size_mib']:>5}M {row['method']:<14} {row['running_ms']:>11.1f} {row['first_ok_ms']:>12.1f} "
              f"{row['done_ms']:>9.1f}  {row['cold']}")
    print("\nratios (hlt-libvirt / virsh-restore, medians; below 1 is faster):")
    for size in sorted({r["size_mib"] for r in all_rows}):
        med = {m: {k: statistics.median(r[k] for r in all_rows if r["size_mib"] == size and r["method"] == m)
                   for k in ("running_ms", "first_ok_ms", "done_ms")} for m in ("hlt-libvirt", "virsh-restore")}
        print(f"  {size}M: running {med['hlt-libvirt']['running_ms'] / med['virsh-restore']['running_ms']:.3f}, "
              f"first OK {med['hlt-libvirt']['first_ok_ms'] / med['virsh-restore']['first_ok_ms']:.3f}, "
              f"done {med['hlt-libvirt']['done_ms'] / med['virsh-restore']['done_ms']:.3f}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "bench_libvirt.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(all_rows[0].keys()))
        w.writeheader()
        w.writerows(all_rows)
    with open(os.path.join(a.out, "bench_libvirt.json"), "w") as f:
        json.dump(all_rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
