#!/usr/bin/env python3
"""Boot storm: N clones of one 1 GiB guest restored from one checkpoint at the same moment, three ways, one run.

usage: bench_storm.py --tools DIR [--counts 1,5,10,20] [--mem 1G] [--hold 30] [--out DIR] [--work DIR]

The guest runs a light "desktop" workload: memcheck over a small working set (--mib 64) every second
(--interval-ms 1000), verifying it each time, idle in between. It is booted once, saved with `hlt-save qemu`
(the checkpoint) and with QEMU's own `migrate "exec:cat > FILE"` (the baseline's file). Then for each N and each
method, with the page cache dropped first, N restores start at once:

  shared      hlt-restore qemu CKPT --memory shared: every QEMU maps the guest RAM privately from the image
              server's file (one server for the host, started by the first restore); pages shared through the
              page cache, each block decoded once for the host
  copy        hlt-restore qemu CKPT (lazy postcopy, the default): each QEMU gets its own copy of every page
  qemu-eager  qemu-system-x86_64 -incoming "exec:cat FILE" N times, `cont` when loaded (QEMU's own restore)

Per clone: time from the storm's start to the guest running (QEMU's RESUME) and to its first verified memcheck
OK. For the host, HOLD seconds after the start: the sum of the processes' PSS (QEMUs, hlt-restore, the image
server; also split into anonymous pages, i.e. what the guests wrote plus QEMU's own heap, and file pages, i.e. the
shared image and the binaries), the drop in MemAvailable since just before the storm, checkpoint bytes read, blocks decoded, and the CPU
seconds the processes used. Prints a table with ratios against qemu-eager, writes storm-clones.csv,
storm-summary.csv, storm.json and plots (storm-running.png, storm-memory.png) into --out. Needs root (drop_caches,
FUSE).
"""

import argparse
import csv
import glob
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
sys.path.insert(0, os.path.join(REPO, "bench", "qemu"))
import launch  # noqa: E402
from bench_qemu import drop_caches, kill, resume_us  # noqa: E402
from hltharness.qmp import Qmp  # noqa: E402

OK_RX = re.compile(r"memcheck pass=(\d+) .* OK")
WORKLOAD = ["--mib", "64", "--interval-ms", "1000"]
TICKS = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def mem_available_kib():
    for line in read("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def pss_kib(pid, kind="Pss"):
    """A process's proportional set size (kind "Pss"), or its part: "Pss_Anon" (pages it wrote, its heap),
    "Pss_File" (file pages: the shared image, binaries)."""
    for line in read(f"/proc/{pid}/smaps_rollup").splitlines():
        if line.startswith(kind + ":"):
            return int(line.split()[1])
    return 0


def guest_ram_kib(pid, mem_bytes):
    """The guest RAM mapping of a QEMU (the image file's mapping, or QEMU's anonymous RAM of the guest's size), or
    the image server's pin mapping of the image: (Pss, Anonymous, Rss) in KiB. Anonymous is what the guest wrote
    (a private copy); the rest of its Pss is its share of the image in the page cache."""
    pss = anon = rss = 0
    current = False
    for line in read(f"/proc/{pid}/smaps").splitlines():
        head = line.split()
        if head and re.match(r"^[0-9a-f]+-[0-9a-f]+$", head[0]):
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            path = head[5] if len(head) > 5 else ""
            current = path.endswith(".pc.ram") or (path == "" and hi - lo == mem_bytes)
        elif current and head:
            if head[0] == "Pss:":
                pss += int(head[1])
            elif head[0] == "Anonymous:":
                anon += int(head[1])
            elif head[0] == "Rss:":
                rss += int(head[1])
    return pss, anon, rss


def cpu_s(pid):
    fields = read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS if len(fields) > 12 else 0.0


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, TypeError):
        return False


class Storm:
    def __init__(self, a):
        self.a = a
        self.save = os.path.join(a.tools, "hlt-save")
        self.restore = os.path.join(a.tools, "hlt-restore")
        self.clones = []
        self.summary = []

    def argv(self, serial, **kw):
        return launch.qemu_argv(mem=self.a.mem, workload="memcheck", workload_args=WORKLOAD, serial_log=serial, **kw)

    def prepare(self):
        w = self.a.work
        os.makedirs(w, exist_ok=True)
        ckpt, mig = os.path.join(w, "desk.hlt"), os.path.join(w, "desk.mig")
        serial, qmp = os.path.join(w, "src.serial.log"), os.path.join(w, "src.qmp")
        for p in (serial, qmp, ckpt, mig):
            if os.path.exists(p):
                os.unlink(p)
        g = launch.Guest.start(serial, stderr_path=os.path.join(w, "src.stderr.log"), mem=self.a.mem,
                               workload="memcheck", workload_args=WORKLOAD, qmp=qmp)
        try:
            g.wait_for(OK_RX.pattern, 3, 600, fail=r" BAD |Kernel panic")
            out = subprocess.run([self.save, "qemu", "--qmp", qmp, "-o", ckpt, "--then", "cont"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError("hlt-save failed: " + out.stderr)
            q = Qmp.connect(qmp)
            q.command("stop")
            q.command("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
            q.command("migrate", uri=f"exec:cat > {mig}")
            while q.command("query-migrate").get("status") not in ("completed", "failed"):
                time.sleep(0.05)
            if q.command("query-migrate")["status"] != "completed":
                raise RuntimeError("QEMU's migration to a file failed")
            q.command("quit")
            q.close()
        finally:
            g.stop()
        log(f"checkpoint {os.path.getsize(ckpt) >> 20} MiB, QEMU's file {os.path.getsize(mig) >> 20} MiB")
        return ckpt, mig

    # Each start_* launches one clone and returns a dict the wait loop fills in.
    def start_hlt(self, ckpt, d, i, shared):
        serial = os.path.join(d, f"c{i}.serial.log")
        argv = self.argv(serial)
        extra = ["--memory", "shared", "--image-dir", os.path.join(self.a.work, "images")] if shared else []
        cmd = [self.restore, "qemu", ckpt, *extra, "--stats-json", os.path.join(d, f"c{i}.stats.json"),
               "--qemu", argv[0], "--qemu-dir", os.path.join(d, f"c{i}.qemu"), "--", *argv[1:]]
        out = os.path.join(d, f"c{i}.out")
        t = time.time()
        p = subprocess.Popen(cmd, stdout=open(out, "wb"), stderr=subprocess.STDOUT)
        return {"i": i, "serial": serial, "tool": p, "out": out, "t_start": t, "qemu_pid": None, "running": None,
                "first_ok": None, "stats": os.path.join(d, f"c{i}.stats.json")}

    def start_qemu(self, mig, d, i):
        serial, qmp = os.path.join(d, f"c{i}.serial.log"), os.path.join(d, f"c{i}.qmp")
        argv = self.argv(serial, qmp=qmp, incoming=f"exec:cat {mig}")
        t = time.time()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(d, f"c{i}.stderr.log"), "wb"))
        return {"i": i, "serial": serial, "tool": None, "qemu": p, "qmp_path": qmp, "qmp": None, "t_start": t,
                "qemu_pid": p.pid, "running": None, "first_ok": None}

    def poll_clone(self, c, method, t0):
        now = time.time()
        if method == "qemu-eager":
            if c["running"] is None:
                try:
                    if c["qmp"] is None:
                        c["qmp"] = Qmp.connect(c["qmp_path"], timeout=0.05)
                    st = c["qmp"].command("query-status")["status"]
                    if st not in ("inmigrate", "running"):
                        c["qmp"].command("cont")
                    if resume_us(c["qmp"]) is not None:
                        c["running"] = resume_us(c["qmp"]) / 1e6 - t0
                except (OSError, ConnectionError, RuntimeError):
                    pass
        else:
            text = read(c["out"])
            if c["qemu_pid"] is None:
                m = re.search(r"into QEMU \(pid (\d+)\)", text)
                if m:
                    c["qemu_pid"] = int(m.group(1))
            if c["running"] is None:
                m = re.search(r"([\d.]+) ms to guest running", text) or \
                    re.search(r"guest running ([\d.]+) ms after the restore began", text)
                if m and "to guest running" in text:
                    c["running"] = c["t_start"] - t0 + float(m.group(1)) / 1e3
        if c["first_ok"] is None:
            text = read(c["serial"])
            if " BAD " in text:
                raise RuntimeError(f"clone {c['i']} printed BAD: {text[-300:]}")
            if OK_RX.search(text):
                c["first_ok"] = now - t0

    def server_pid_and_stats(self):
        for path in glob.glob(os.path.join(self.a.work, "images", "*", ".stats")):
            try:
                j = json.loads(read(path))
                ram = [f for f in j["files"] if f["name"].endswith(".pc.ram")]
                return j["pid"], (ram[0] if ram else {})
            except (ValueError, KeyError):
                pass
        return None, {}

    def storm(self, method, n, ckpt, mig):
        d = os.path.join(self.a.work, f"{method}-{n}")
        subprocess.run(["rm", "-rf", d])
        os.makedirs(d)
        cold = drop_caches()
        avail_before = mem_available_kib()
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        clones = []
        for i in range(n):
            if method == "qemu-eager":
                clones.append(self.start_qemu(mig, d, i))
            else:
                clones.append(self.start_hlt(ckpt, d, i, method == "shared"))
        hold_until = t0 + self.a.hold
        pss = pss_anon = pss_file = avail_drop = cpu = 0
        server_stats = {}
        while time.time() < hold_until:
            for c in clones:
                self.poll_clone(c, method, t0)
                if c.get("tool") is not None and c["tool"].poll() is not None and c.get("tool_rc") is None:
                    c["tool_rc"] = c["tool"].returncode
                    if c["tool_rc"] != 0:
                        raise RuntimeError(f"{method} clone {c['i']}: hlt-restore exited {c['tool_rc']}:\n"
                                           + read(c["out"])[-1500:])
            time.sleep(0.02)
        # The host at HOLD seconds.
        pids = [c["qemu_pid"] for c in clones if c["qemu_pid"]]
        pids += [c["tool"].pid for c in clones if c.get("tool") is not None and c["tool"].poll() is None]
        server_pid, server_stats = self.server_pid_and_stats() if method == "shared" else (None, {})
        if server_pid:
            pids.append(server_pid)
        pss = sum(pss_kib(p) for p in pids) / 1024
        # Where it goes: guest RAM (the image's pages and the pages the guests wrote) and the rest (the QEMU
        # processes themselves: TCG's code buffer, heap, device RAMBlocks; the tools).
        mem_bytes = parse_size(self.a.mem)
        ram = [guest_ram_kib(p, mem_bytes) for p in pids]
        guest_ram_pss = sum(r[0] for r in ram) / 1024
        written = sum(guest_ram_kib(c["qemu_pid"], mem_bytes)[1] for c in clones if c["qemu_pid"]) / 1024
        image_resident = guest_ram_kib(server_pid, mem_bytes)[2] / 1024 if server_pid else 0
        # The rest by role: the QEMUs', the image server's, the hlt-restore processes' still running.
        qemu_pids = [c["qemu_pid"] for c in clones if c["qemu_pid"]]
        rest = lambda ps: sum(pss_kib(p) - guest_ram_kib(p, mem_bytes)[0] for p in ps) / 1024
        other_qemu, other_server = rest(qemu_pids), rest([server_pid] if server_pid else [])
        other_tools = rest([p for p in pids if p not in qemu_pids and p != server_pid])
        pss_anon = sum(pss_kib(p, "Pss_Anon") for p in pids) / 1024
        pss_file = sum(pss_kib(p, "Pss_File") for p in pids) / 1024
        avail_drop = (avail_before - mem_available_kib()) / 1024
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = sum(cpu_s(p) for p in pids) + (children.ru_utime - children_before.ru_utime) + \
            (children.ru_stime - children_before.ru_stime)
        # What was read from the checkpoint.
        if method == "shared":
            ckpt_bytes = server_stats.get("checkpoint_bytes", 0)
            blocks = server_stats.get("blocks_decoded", 0)
        elif method == "copy":
            ckpt_bytes = blocks = 0
            for c in clones:
                try:
                    j = json.loads(read(c["stats"]))
                    ckpt_bytes += j["bytes_read_final"]
                    blocks += j["blocks_read_demand"] + j["blocks_read_loader"] + j["blocks_read_preload"]
                except (ValueError, KeyError):
                    pass
        else:
            ckpt_bytes, blocks = n * os.path.getsize(mig), 0
        for c in clones:
            self.clones.append({"method": method, "n": n, "clone": c["i"], "cold": cold,
                                "running_s": c["running"], "first_ok_s": c["first_ok"]})
        running = [c["running"] for c in clones if c["running"] is not None]
        oks = [c["first_ok"] for c in clones if c["first_ok"] is not None]
        row = {"method": method, "n": n, "cold": cold, "running": len(running), "verified": len(oks),
               "running_p50_s": statistics.median(running) if running else None,
               "running_max_s": max(running) if running else None,
               "running_within_2s": sum(1 for r in running if r <= 2.0),
               "first_ok_p50_s": statistics.median(oks) if oks else None,
               "first_ok_max_s": max(oks) if oks else None,
               "pss_mib": round(pss, 1), "pss_anon_mib": round(pss_anon, 1), "pss_file_mib": round(pss_file, 1),
               "guest_ram_pss_mib": round(guest_ram_pss, 1), "guest_written_mib": round(written, 1),
               "image_pinned_mib": round(image_resident, 1), "other_pss_mib": round(pss - guest_ram_pss, 1),
               "other_qemu_mib": round(other_qemu, 1), "other_server_mib": round(other_server, 1),
               "other_tools_mib": round(other_tools, 1),
               "memavail_drop_mib": round(avail_drop, 1),
               "ckpt_mib_read": round(ckpt_bytes / 2**20, 1), "blocks_decoded": blocks, "cpu_s": round(cpu, 1)}
        self.summary.append(row)
        log(f"{method} N={n}: {row}")
        # Tear down: the clones, then (shared) the server, which refuses to stop while a clone maps its file.
        for c in clones:
            kill(c["qemu_pid"])
            if c.get("tool") is not None:
                kill(c["tool"].pid)
                c["tool"].wait()
            if c.get("qemu") is not None:
                c["qemu"].wait()
        if server_pid:
            deadline = time.time() + 30
            while alive(server_pid) and time.time() < deadline:
                os.kill(server_pid, signal.SIGTERM)
                time.sleep(0.5)
            kill(server_pid)
        time.sleep(1)

    def report(self):
        out = self.a.out
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "storm-clones.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.clones[0].keys()))
            w.writeheader()
            w.writerows(self.clones)
        with open(os.path.join(out, "storm-summary.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.summary[0].keys()))
            w.writeheader()
            w.writerows(self.summary)
        with open(os.path.join(out, "storm.json"), "w") as f:
            json.dump({"baseline": "qemu-eager (QEMU's own -incoming \"exec:cat FILE\", N at once)",
                       "mem": self.a.mem, "hold_s": self.a.hold, "workload": WORKLOAD,
                       "summary": self.summary, "clones": self.clones}, f, indent=1)
        cols = ["method", "n", "running", "running_within_2s", "running_p50_s", "running_max_s", "first_ok_p50_s",
                "first_ok_max_s", "pss_mib", "guest_ram_pss_mib", "guest_written_mib", "image_pinned_mib",
                "other_pss_mib", "memavail_drop_mib", "ckpt_mib_read", "blocks_decoded", "cpu_s"]
        fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)
        print(" ".join(f"{c:>17}" for c in cols))
        for r in self.summary:
            print(" ".join(f"{fmt(r[c]):>17}" for c in cols))
        print("\nhost memory against the goal (one image plus the pages the clones wrote), MiB:")
        for r in self.summary:
            if r["method"] != "shared":
                continue
            goal = r["image_pinned_mib"] + r["guest_written_mib"]
            print(f"  shared N={r['n']:>2}: guest RAM PSS {r['guest_ram_pss_mib']:.0f} vs image {r['image_pinned_mib']:.0f} "
                  f"+ written {r['guest_written_mib']:.0f} = {goal:.0f}; the rest {r['other_pss_mib']:.0f} is the "
                  f"processes themselves (QEMUs {r['other_qemu_mib']:.0f}, image server {r['other_server_mib']:.0f}, "
                  f"hlt-restore {r['other_tools_mib']:.0f}; qemu-eager's QEMUs at this N: "
                  f"{next((b['other_qemu_mib'] for b in self.summary if b['method'] == 'qemu-eager' and b['n'] == r['n']), float('nan')):.0f})")
        print(f"\nratios against qemu-eager at the same N (below 1: less):")
        base = {r["n"]: r for r in self.summary if r["method"] == "qemu-eager"}
        for r in self.summary:
            b = base.get(r["n"])
            if r["method"] == "qemu-eager" or not b:
                continue
            ratio = lambda k: (f"{r[k] / b[k]:.3f}" if r[k] is not None and b[k] else "n/a")
            print(f"  {r['method']:>7} N={r['n']:>2}: running max {ratio('running_max_s')}, first OK max "
                  f"{ratio('first_ok_max_s')}, PSS {ratio('pss_mib')}, MemAvailable drop "
                  f"{ratio('memavail_drop_mib')}, CPU {ratio('cpu_s')}")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            for key, name, label in (("running_max_s", "storm-running.png", "slowest clone to running (s)"),
                                     ("pss_mib", "storm-memory.png", f"host PSS at {self.a.hold} s (MiB)")):
                plt.figure(figsize=(6, 4))
                for m in ("shared", "copy", "qemu-eager"):
                    rows = [r for r in self.summary if r["method"] == m and r[key] is not None]
                    plt.plot([r["n"] for r in rows], [r[key] for r in rows], marker="o", label=m)
                plt.xlabel("clones started at once (N)")
                plt.ylabel(label)
                plt.legend()
                plt.grid(alpha=0.3)
                plt.tight_layout()
                plt.savefig(os.path.join(out, name), dpi=100)
                plt.close()
        except ImportError:
            log("matplotlib missing: no plots (scripts/install-deps installs python3-matplotlib)")
        print(f"\nCSV, JSON and plots in {out}; baseline: qemu-eager")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--counts", default="1,5,10,20")
    ap.add_argument("--methods", default="shared,copy,qemu-eager")
    ap.add_argument("--mem", default="1G")
    ap.add_argument("--hold", type=float, default=30.0)
    ap.add_argument("--out", default=".")
    ap.add_argument("--work", default="/tmp/hlt-bench-storm")
    a = ap.parse_args()
    s = Storm(a)
    ckpt, mig = s.prepare()
    for n in [int(x) for x in a.counts.split(",")]:
        for m in a.methods.split(","):
            s.storm(m, n, ckpt, mig)
    s.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
