#!/usr/bin/env python3
"""Where a live save costs the guest: hlt-save qemu --live against QEMU's own background snapshot into /dev/null.

usage: bench/guests/profile_live_save.py [--mem 1G] [--tools build/tools] [--runs N] [--json FILE]

Boots the test guest with memsim (zipf over 384 MiB, 10% writes; it prints its rate every 100 ms), then, for each
run, saves it live twice: once with `hlt-save qemu --live` (the stream into hlt-save, then compression while the
guest runs) and once with QEMU alone (`migrate exec:cat > /dev/null` with background-snapshot: the baseline, what
QEMU's write-protection costs without any reader). For each it samples the CPU time of every thread of QEMU and
hlt-save every 0.5 s and reads the guest's rate from its serial console, and prints:

  - the guest's throughput during the save, as a % of its rate in the 5 s before, in total and per phase (the
    stream, then compression for hlt-save);
  - the CPU each process used per 0.5 s step (100% = one CPU).

TCG only here (this machine's KVM cannot run the guest). Needs nothing but the built tools and the test guest.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402
from hltharness.qmp import Qmp  # noqa: E402

RATE_RX = re.compile(r"memsim t_ms=\d+ .*ops_per_s=(\d+)")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User+system CPU seconds of process `pid`, its exited threads included (0 when it is gone). The
    process-wide /proc/PID/stat keeps what exited threads used; summing /proc/PID/task/* would lose it when QEMU's
    migration thread ends, and a step would come out negative."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


class SerialRates(threading.Thread):
    """memsim's rate lines, stamped with the host's clock as they appear in the serial log (the guest's own clock
    comes from the RTC, whole seconds at boot: not comparable to the host's to the tenth of a second)."""

    def __init__(self, serial):
        super().__init__(daemon=True)
        self.serial, self.rates, self.stop = serial, [], False

    def run(self):
        with open(self.serial, errors="replace") as f:
            partial = ""
            while not self.stop:
                chunk = f.read()
                now = time.time()
                if not chunk:
                    time.sleep(0.01)
                    continue
                lines = (partial + chunk).split("\n")
                partial = lines.pop()
                for line in lines:
                    m = RATE_RX.search(line)
                    if m:
                        self.rates.append((now, int(m.group(1))))


def mean_rate(rates, t0, t1):
    vals = [v for t, v in rates if t0 <= t < t1]
    return sum(vals) / len(vals) if vals else 0.0


def sample(procs, until):
    """CPU % of each process per 0.5 s step until `until()` is true; returns [(t, {name: %})]."""
    last = {n: cpu_seconds(p) for n, p in procs.items()}
    steps, t_start = [], time.time()
    while not until():
        time.sleep(0.5)
        now = {n: cpu_seconds(p) for n, p in procs.items()}
        steps.append((time.time() - t_start, {n: (now[n] - last[n]) / 0.5 * 100 for n in procs}))
        last = now
    return steps


def run_hlt_save(a, g, qmp_path, work):
    out_path = os.path.join(work, "save.log")
    t0 = time.time()
    with open(out_path, "wb") as out:
        p = subprocess.Popen([os.path.join(a.tools, "hlt-save"), "qemu", "--qmp", qmp_path, "-o",
                              os.path.join(work, "live.hlt"), "--live"], stdout=out, stderr=subprocess.STDOUT)
        steps = sample({"qemu": g.proc.pid, "hlt-save": p.pid}, lambda: p.poll() is not None)
    t1 = time.time()
    text = open(out_path).read()
    if p.returncode != 0:
        raise SystemExit(f"hlt-save exited {p.returncode}:\n{text}")
    m = re.search(r"stream \S+ \S+ in ([\d.]+) s", text)
    stream_s = float(m.group(1)) if m else None
    return {"t0": t0, "t1": t1, "stream_s": stream_s, "steps": steps, "summary": text}


def run_qemu_only(g, qmp):
    qmp.command("migrate-set-capabilities", capabilities=[{"capability": "background-snapshot", "state": True}])
    qmp.command("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
    t0 = time.time()
    qmp.command("migrate", uri="exec:cat > /dev/null")

    def done():
        st = qmp.command("query-migrate").get("status")
        if st in ("failed", "cancelled"):
            raise SystemExit(f"QEMU's own background snapshot: {st}")
        return st == "completed"

    steps = sample({"qemu": g.proc.pid}, done)
    t1 = time.time()
    qmp.command("migrate-set-capabilities", capabilities=[{"capability": "background-snapshot", "state": False}])
    return {"t0": t0, "t1": t1, "stream_s": t1 - t0, "steps": steps}


def pct(v):
    return "–" if v is None else f"{v:.0f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mem", default="1G")
    ap.add_argument("--tools", default=os.path.join(REPO, "build", "tools"))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="hlt-live-profile-")
    serial, qmp_a, qmp_b = (os.path.join(work, n) for n in ("serial.log", "qmp-a.sock", "qmp-b.sock"))
    g = launch.Guest.start(serial, stderr_path=os.path.join(work, "qemu.err"), mem=a.mem, workload="memsim",
                           workload_args=["--mib", "384", "--pattern", "zipf", "--write-pct", "10"], qmp=qmp_a,
                           extra=["-qmp", f"unix:{qmp_b},server=on,wait=off"])
    results = []
    reader = SerialRates(serial)
    try:
        g.wait_for(r"memsim .*ops_per_s", count=40, timeout=600)
        reader.start()
        own = Qmp.connect(qmp_b)
        for run in range(a.runs):
            for what in ("hlt-save --live", "QEMU alone"):
                time.sleep(5)  # the baseline window
                r = run_hlt_save(a, g, qmp_a, work) if what == "hlt-save --live" else run_qemu_only(g, own)
                time.sleep(1.5)
                rates = list(reader.rates)
                base = mean_rate(rates, r["t0"] - 5, r["t0"])
                during = mean_rate(rates, r["t0"], r["t1"])
                stream_end = r["t0"] + (r["stream_s"] or 0)
                row = {"run": run, "what": what, "seconds": r["t1"] - r["t0"], "stream_s": r["stream_s"],
                       "guest_pct": 100 * during / base if base else 0,
                       "guest_pct_stream": 100 * mean_rate(rates, r["t0"], stream_end) / base if base else 0,
                       # None: the save ended with its stream (QEMU alone), there is no after.
                       "guest_pct_after_stream": (100 * mean_rate(rates, stream_end, r["t1"]) / base if base else 0)
                       if r["t1"] - stream_end >= 0.2 else None,
                       "cpu_steps": r["steps"]}
                results.append(row)
                print(f"\n{what} (run {run}): {row['seconds']:.2f} s, stream {row['stream_s'] or 0:.2f} s; guest "
                      f"{row['guest_pct']:.0f}% of its rate during the save ({row['guest_pct_stream']:.0f}% during "
                      f"the stream, {pct(row['guest_pct_after_stream'])} after it)", flush=True)
                for t, cpu in r["steps"]:
                    print(f"  {t:5.1f} s  " + "  ".join(f"{n} {v:4.0f}%" for n, v in cpu.items()), flush=True)
    finally:
        reader.stop = True
        g.proc.kill()
    print("\n| save | seconds | stream s | guest % (whole save) | guest % (stream) | guest % (after the stream) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['what']} | {r['seconds']:.2f} | {r['stream_s'] or 0:.2f} | {r['guest_pct']:.0f} | "
              f"{r['guest_pct_stream']:.0f} | {pct(r['guest_pct_after_stream'])} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
