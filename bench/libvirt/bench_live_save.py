#!/usr/bin/env python3
"""Live save of a libvirt domain with a writable disk (issue 27 item 7): how long the guest is paused and how fast it
goes during the save, against the stopped-guest save of the same domain in the same run.

usage: bench_live_save.py --tools DIR [--sizes 1024,2048] [--runs 3] [--resident-pct 45] [--out DIR] [--work DIR]

For each guest size (MiB) it starts the project's test guest as a libvirt domain under the embedded QEMU driver
(TCG): memage first fills --resident-pct of its memory with long-running processes (a desktop's resident programs),
then memcheck runs over 64 MiB with its journal on the domain's virtio disk (memory and disk written in lockstep,
one pass about every 50 ms). Then, one after the other on the same running domain:

  live         hlt-save libvirt --live, --runs times (the first save of a fresh guest finds its RAM in 2 MiB
               pages; QEMU's background snapshot leaves it in 4 KiB pages, which it write-protects one by one)
  live-nowin   the same with --access-window 0 (no accessed-bit sampling before the save), --runs times
  stopped      hlt-save libvirt (the baseline: the guest paused for the whole stream), once with the default
               access window, once without

and measures for each save:

  pause_ms      the guest's pause: from virDomainSuspend to virDomainResume returning (hlt-save's own account;
                for a stopped save, its "guest paused" line), and its parts: suspend, disks and state files,
                QEMU capturing the guest, resume
  vcpus_ms      QEMU's STOP to RESUME events (QEMU 7.2 starts the vCPUs itself once it has captured the guest)
  qemu_down_ms  QEMU's own downtime of its background snapshot (query-migrate), which a live save without disks
                pays too
  save_s        hlt-save's run time; its access window's pauses (total and longest)
  rate_pct      the guest's progress (memcheck passes, stamped with the host's clock as they reach the serial
                log) while hlt-save runs, as a % of its rate in the 5 s before; also during the access window,
                the stream, and the compression after it
  gap_ms        the longest time between two passes while hlt-save runs (before: the longest in the 5 s before)

Prints a table and the ratios live / stopped, writes bench_live_save.csv and .json into --out. Needs root (the
embedded driver runs QEMU as root).
"""

import argparse
import csv
import json
import os
import re
import statistics
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402
from hltharness import testguest_libvirt as lt  # noqa: E402  (the libvirt guest tests' domain, not a test file)

PASS_RX = re.compile(rb"memcheck pass=(\d+) [^\r\n]*\r?\n")
PAUSE_RX = re.compile(r"guest paused\s+([\d.]+) ms at the saved instant: suspend ([\d.]+), disks and state files "
                      r"([\d.]+), QEMU capturing the guest ([\d.]+), resume ([\d.]+)")
VCPU_RX = re.compile(r"vCPUs stopped ([-\d.]+) ms .* setup (-?\d+) ms, downtime (-?\d+) ms")
STOPPED_RX = re.compile(r"guest paused\s+([\d.]+) s")
STREAM_RX = re.compile(r"stream \S+ \S+ in ([\d.]+) s")
WINDOW_RX = re.compile(r"access window\s+\d+ samples in ([\d.]+) s \(paused ([\d.]+) ms in all, at most ([\d.]+) ms\)")


class BenchEnv(lt.Env):
    """The test domain with memage's residents filling part of its memory before memcheck starts."""

    def __init__(self, tools, work, memory_mib, resident_pct):
        super().__init__(tools, work, memory_mib=memory_mib, memcheck_mib=64)
        self.resident_mib = memory_mib * resident_pct // 100

    def source_xml(self):
        cmdline = launch.kernel_cmdline(
            "memcheck", ["--mib", self.memcheck_mib, "--disk", "/dev/vda"],
            append=f"hlt.virtio=1 hlt.age=2 hlt.age_args=--resident-mib,{self.resident_mib},--procs,4")
        return re.sub(r"<cmdline>[^<]*</cmdline>", f"<cmdline>{cmdline}</cmdline>", super().source_xml())


class PassClock(threading.Thread):
    """memcheck's pass lines, stamped with the host's clock as they appear in the serial log."""

    def __init__(self, serial):
        super().__init__(daemon=True)
        self.serial, self.stamps, self.stop = serial, [], False

    def run(self):
        with open(self.serial, "rb") as f:
            pending = b""
            while not self.stop:
                chunk = f.read()
                now = time.time()
                if chunk:
                    pending += chunk
                    for m in PASS_RX.finditer(pending):
                        self.stamps.append(now)
                    cut = pending.rfind(b"\n")
                    pending = pending[cut + 1:] if cut >= 0 else pending
                time.sleep(0.005)

    def rate(self, t0, t1):
        n = sum(1 for t in list(self.stamps) if t0 <= t < t1)
        return n / (t1 - t0) if t1 > t0 else 0.0

    def longest_gap(self, t0, t1):
        inside = [t for t in list(self.stamps) if t0 <= t < t1]
        return max((b - a for a, b in zip(inside, inside[1:])), default=0.0)


def one_save(env, clock, method, run, extra):
    ckpt = env.path(f"{method}-{run}.hlt")
    live = method.startswith("live")
    argv = [env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri] + (["--live"] if live else []) + extra
    time.sleep(5.5)  # the rate before: 5 s of undisturbed guest
    t0 = time.time()
    _, out, _ = env.tool(argv, f"save-{method}-{run}")
    t1 = time.time()
    time.sleep(0.3)  # the last lines reach the log
    before = clock.rate(t0 - 5, t0)
    row = {"size_mib": env.memory_mib, "method": method, "run": run, "save_s": t1 - t0,
           "rate_before_per_s": before, "rate_pct": 100 * clock.rate(t0, t1) / before if before else 0,
           "gap_before_ms": 1e3 * clock.longest_gap(t0 - 5, t0), "gap_ms": 1e3 * clock.longest_gap(t0, t1)}
    stream = STREAM_RX.search(out)
    window = WINDOW_RX.search(out)
    row["stream_s"] = float(stream.group(1)) if stream else 0.0
    row["window_s"] = float(window.group(1)) if window else 0.0
    row["window_paused_ms"] = float(window.group(2)) if window else 0.0
    row["window_max_pause_ms"] = float(window.group(3)) if window else 0.0
    if live:
        p, v = PAUSE_RX.search(out), VCPU_RX.search(out)
        if not p or not v:
            raise lt.Fail(f"{method} {run}: no pause lines in hlt-save's output:\n{out}")
        row.update(pause_ms=float(p.group(1)), suspend_ms=float(p.group(2)), instant_ms=float(p.group(3)),
                   capture_ms=float(p.group(4)), resume_ms=float(p.group(5)), vcpus_ms=float(v.group(1)),
                   qemu_setup_ms=int(v.group(2)), qemu_down_ms=int(v.group(3)))
        # The phases after the access window: the stream (the guest runs, QEMU copies what it writes first), then
        # the compression (hlt-save's workers at low priority).
        stream_start = t0 + row["window_s"]
        row["rate_window_pct"] = 100 * clock.rate(t0, stream_start) / before if before and row["window_s"] else 0
        stream_end = stream_start + row["stream_s"]
        row["rate_stream_pct"] = 100 * clock.rate(stream_start, stream_end) / before if before else 0
        row["rate_after_stream_pct"] = (100 * clock.rate(stream_start + row["stream_s"], t1) / before
                                        if before and t1 > stream_start + row["stream_s"] + 0.2 else 0)
    else:
        s = STOPPED_RX.search(out)
        row["pause_ms"] = 1e3 * float(s.group(1)) if s else 0.0
    for f in (ckpt,):
        row["ckpt_bytes"] = os.path.getsize(f)
        os.unlink(f)
    return row


def bench_size(env, runs):
    env.boot_source(passes=3)
    clock = PassClock(env.path("desk.serial.log"))
    clock.start()
    rows = []
    try:
        plan = [("live", r, []) for r in range(runs)] + [("live-nowin", r, ["--access-window", "0"])
                                                         for r in range(runs)]
        plan += [("stopped", 0, []), ("stopped-nowin", 0, ["--access-window", "0"])]
        for method, run, extra in plan:
            row = one_save(env, clock, method, run, extra)
            lt.log(f"{env.memory_mib} MiB {method} {run}: pause {row['pause_ms']:.1f} ms, guest at "
                   f"{row['rate_pct']:.0f}% during the save")
            rows.append(row)
        text = lt.read(env.path("desk.serial.log"))
        if lt.FAIL_RX.search(text) or "disk=ok" not in text:
            raise lt.Fail("the guest reported a failure during the bench:\n" + text[-2000:])
    finally:
        clock.stop = True
    return rows


def med(rows, key):
    vals = [r[key] for r in rows if key in r]
    return statistics.median(vals) if vals else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--resident-pct", type=int, default=45)
    ap.add_argument("--out", default=".")
    ap.add_argument("--work", default="/tmp/hlt-bench-live-save")
    a = ap.parse_args()
    rows = []
    for size in [int(s) for s in a.sizes.split(",")]:
        env = BenchEnv(a.tools, os.path.join(a.work, str(size)), size, a.resident_pct)
        try:
            env.setup()
            rows += bench_size(env, a.runs)
        finally:
            env.cleanup()
    cols = ("pause_ms", "suspend_ms", "instant_ms", "capture_ms", "resume_ms", "vcpus_ms", "qemu_down_ms",
            "save_s", "window_paused_ms", "window_max_pause_ms", "rate_pct", "rate_stream_pct", "gap_before_ms",
            "gap_ms")
    print(f"{'size':>5} {'method':<14} {'run':>3} " + " ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print(f"{r['size_mib']:>4}M {r['method']:<14} {r['run']:>3} " +
              " ".join(f"{r.get(c, float('nan')):>12.1f}" for c in cols))
    print("\nmedians; live / stopped (the baseline: the stopped-guest save of the same domain in the same run):")
    for size in sorted({r["size_mib"] for r in rows}):
        for suffix in ("", "-nowin"):
            live = [r for r in rows if r["size_mib"] == size and r["method"] == "live" + suffix]
            later = [r for r in live if r["run"] > 0]
            stopped = [r for r in rows if r["size_mib"] == size and r["method"] == "stopped" + suffix]
            print(f"  {size}M{suffix or ' (access window on)'}: pause {med(live, 'pause_ms'):.1f} ms (first save "
                  f"{live[0]['pause_ms']:.1f}, later {med(later, 'pause_ms'):.1f}; vCPUs {med(live, 'vcpus_ms'):.1f}, "
                  f"QEMU's own downtime {med(live, 'qemu_down_ms'):.0f}) against {med(stopped, 'pause_ms'):.0f} ms "
                  f"stopped: {med(live, 'pause_ms') / med(stopped, 'pause_ms'):.3f}; guest rate during the save "
                  f"{med(live, 'rate_pct'):.0f}% (stopped {med(stopped, 'rate_pct'):.0f}%), longest gap "
                  f"{med(live, 'gap_ms'):.0f} ms (stopped {med(stopped, 'gap_ms'):.0f}, before "
                  f"{med(live, 'gap_before_ms'):.0f})")
    os.makedirs(a.out, exist_ok=True)
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("size_mib", "method", "run"), k))
    with open(os.path.join(a.out, "bench_live_save.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(a.out, "bench_live_save.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
