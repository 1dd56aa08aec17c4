#!/usr/bin/python3
"""QEMU 7.2's background snapshot against split huge pages (issue 27 item 7: a live save's pause).

A live save pauses the guest for QEMU's setup of its background snapshot (query-migrate's setup-time: it reads a
byte of every guest page and write-protects all of them) and its capture (downtime). A first snapshot leaves the
guest's RAM split into 4 KiB pages (QEMU lifts the write protection page by page), and every later setup walks
512 times as many page-table entries. hlt-save gathers them back first (halite/qemu/qemu_thp_regather.h); this
bench shows what that is worth to QEMU itself, without hlt-save: the project's test guest (memage holding
--resident-mib of long-lived memory, memcheck running), then --snapshots background snapshots one after the
other to /dev/null, each with the guest stopped from `stop` to `cont` as a live save does. Baseline: the same
snapshot with the RAM as the previous one left it (split); gathered: process_madvise(MADV_COLLAPSE) over the whole
RAM block first (the bench's own, coarser than hlt-save's, which skips never-written ranges). Rows alternate.

usage: bench/qemu/bench_snapshot_thp.py [--mem 2G] [--resident-mib 900] [--snapshots 6] [--json FILE]
Needs root (process_madvise needs CAP_SYS_NICE over QEMU), THP enabled (always or madvise), Linux >= 6.1.
"""

import argparse
import ctypes
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402

SYS_PIDFD_OPEN, SYS_PROCESS_MADVISE, MADV_COLLAPSE = 434, 440, 25


class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.f = self.sock.makefile("rwb")
        self.f.readline()  # greeting
        self.run("qmp_capabilities")

    def run(self, command, **arguments):
        self.f.write(json.dumps({"execute": command, "arguments": arguments}).encode() + b"\n")
        self.f.flush()
        while True:
            reply = json.loads(self.f.readline())
            if "event" in reply:
                continue
            if "error" in reply:
                raise RuntimeError(f"{command}: {reply['error']}")
            return reply["return"]


def anon_huge_kb(pid):
    text = open(f"/proc/{pid}/smaps_rollup").read()
    return int(re.search(r"AnonHugePages:\s+(\d+)", text).group(1))


def gather(qmp, pid, size):
    """MADV_COLLAPSE over pc.ram, 2 MiB at a time; seconds taken."""
    answer = qmp.run("human-monitor-command", **{"command-line": "gpa2hva 0"})
    hva = int(re.search(r"is (0x[0-9a-f]+)", answer).group(1), 16)
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    t = time.monotonic()
    for offset in range(0, size, 2 << 20):
        vec = IoVec(hva + offset, 2 << 20)
        libc.syscall(SYS_PROCESS_MADVISE, pidfd, ctypes.byref(vec), 1, MADV_COLLAPSE, 0)  # a busy range stays
    os.close(pidfd)
    return time.monotonic() - t


def snapshot(qmp):
    """stop, background snapshot to /dev/null until QEMU has captured the guest (status active: setup done),
    cont; then until completed. The pause as a live save has it, and QEMU's own setup-time and downtime."""
    t0 = time.monotonic()
    qmp.run("stop")
    qmp.run("migrate", uri="exec:cat > /dev/null")
    while qmp.run("query-migrate").get("status") not in ("active", "completed", "failed"):
        time.sleep(0.002)
    qmp.run("cont")
    pause_ms = (time.monotonic() - t0) * 1e3
    while True:
        r = qmp.run("query-migrate")
        if r.get("status") in ("completed", "failed"):
            break
        time.sleep(0.05)
    if r["status"] != "completed":
        raise RuntimeError(f"snapshot {r['status']}")
    return pause_ms, r.get("setup-time", -1), r.get("downtime", -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mem", default="2G")
    ap.add_argument("--resident-mib", type=int, default=900)
    ap.add_argument("--snapshots", type=int, default=6)
    ap.add_argument("--json")
    a = ap.parse_args()
    size = int(a.mem[:-1]) << {"M": 20, "G": 30}[a.mem[-1]]
    work = tempfile.mkdtemp(prefix="hlt-bench-thp-", dir="/var/tmp")
    qmp_path = os.path.join(work, "qmp.sock")
    guest = launch.Guest.start(os.path.join(work, "serial.log"), mem=a.mem, workload="memcheck",
                               workload_args=["--mib", "64"], qmp=qmp_path,
                               append=f"hlt.age=2 hlt.age_args=--resident-mib,{a.resident_mib},--procs,4")
    rows = []
    try:
        guest.wait_for(r"memcheck pass=\d+ .* OK", count=2, timeout=900)
        qmp = Qmp(qmp_path)
        qmp.run("migrate-set-capabilities", capabilities=[{"capability": "background-snapshot", "state": True}])
        for i in range(a.snapshots):
            # The first finds the RAM as the guest's boot left it; after it, odd rows gather first, even ones don't.
            kind = "first" if i == 0 else ("gathered" if i % 2 == 1 else "split")
            gather_s = gather(qmp, guest.proc.pid, size) if kind == "gathered" else 0.0
            huge_mib = anon_huge_kb(guest.proc.pid) // 1024
            pause_ms, setup_ms, down_ms = snapshot(qmp)
            rows.append({"snapshot": i, "ram": kind, "thp_mib_before": huge_mib, "gather_s": round(gather_s, 3),
                         "pause_ms": round(pause_ms, 1), "qemu_setup_ms": setup_ms, "qemu_downtime_ms": down_ms,
                         "load": os.getloadavg()[0]})
            r = rows[-1]
            print(f"{i:>2} {kind:>8}  THP {huge_mib:>5} MiB  gather {gather_s:6.3f} s  pause {pause_ms:7.1f} ms  "
                  f"setup {setup_ms:>4} ms  downtime {down_ms:>3} ms  load {r['load']:.1f}", flush=True)
    finally:
        guest.stop()
    text = open(os.path.join(work, "serial.log"), errors="replace").read()
    if "BAD" in text:
        raise SystemExit("the guest's memcheck reported a failure")
    for kind in ("split", "gathered"):
        sel = [r for r in rows if r["ram"] == kind]
        if sel:
            print(f"{kind:>8}: median pause {statistics.median(r['pause_ms'] for r in sel):.1f} ms, setup "
                  f"{statistics.median(r['qemu_setup_ms'] for r in sel)} ms, downtime "
                  f"{statistics.median(r['qemu_downtime_ms'] for r in sel)} ms ({len(sel)} snapshots)")
    split = [r["pause_ms"] for r in rows if r["ram"] == "split"]
    gathered = [r["pause_ms"] for r in rows if r["ram"] == "gathered"]
    if split and gathered:
        print(f"gathered / split pause: {statistics.median(gathered) / statistics.median(split):.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    for name in os.listdir(work):
        os.unlink(os.path.join(work, name))
    os.rmdir(work)


if __name__ == "__main__":
    main()
