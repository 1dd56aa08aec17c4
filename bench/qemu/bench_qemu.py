#!/usr/bin/env python3
"""Restore of a QEMU guest: hlt-restore (lazy and eager) against QEMU's own restore of its own migration file.

usage: bench_qemu.py --tools DIR [--sizes 1G,4G] [--workload-mib M] [--repeat N] [--warm] [--out DIR]
                     [--work DIR] [--variants qemu-file,hlt-lazy,...] [--save-args "--frame-pages 0"] [--encrypt]
                     [--restore-args "--loader-threads 2"]

For each guest size it boots the project's test guest (guest/, memcheck over half of the guest's RAM, or over
--workload-mib M MiB whatever the size: the same working set in ever larger guests shows what RAM size alone
costs the time to running; TCG unless guest/accel.txt says kvm), waits for two OK passes and saves it twice,
stopped: `hlt-save qemu` (a checkpoint), then, after letting it run again for a moment (QEMU refuses to migrate a
VM a migration left paused), QEMU's own `migrate "exec:cat > FILE"` (the baseline, a plain migration stream).
Then, each run with the page cache dropped first (echo 3 > /proc/sys/vm/drop_caches; "warm" runs with --warm),
it restores the guest with the same machine options:

  qemu-file    qemu-system-x86_64 ... -incoming "exec:cat FILE"; `cont` as soon as the load completes (the
               migrated run state is "paused", because the guest was stopped to be saved)
  hlt-lazy     hlt-restore qemu CKPT -- ...   (postcopy: the guest runs at once, pages follow)
  hlt-eager    hlt-restore qemu CKPT --eager -- ...   (precopy from the checkpoint, then cont)
  hlt-attach   hlt-restore qemu CKPT --qmp SOCKET into a QEMU started beforehand with -incoming defer (libvirt's
               way, or a VDI pool's pre-started VMs): t0 is hlt-restore's start, QEMU's own start-up is excluded

With --encrypt (issue 26), also from an encrypted copy of the same checkpoint (`hlt-save rekey --key-file`: the
same blocks, frames and layout, only sealed), so the two differ in encryption alone:

  hlt-lazy-enc, hlt-eager-enc   as hlt-lazy and hlt-eager, with --encrypt-key-file

and measures, from the moment the restoring process is started:
  running_ms   to the guest running (QEMU's RESUME event, stamped by QEMU)
  first_ok_ms  to memcheck's first OK line on the restored guest's serial console (the workload has verified
               every page of its buffer once)
  faults/bytes blocking faults and bytes read from the checkpoint (or the migration file) until that line
  stall        the engine's stall until then: per fault, from its arrival until its page was in, summed
  done_ms      to every page in (hlt-restore: its exit; qemu-file: the load completing)

Prints a table and writes bench_qemu.csv and bench_qemu.json into --out. Needs root for drop_caches (otherwise
the runs are marked warm).
"""

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402
from hltharness.qmp import Qmp  # noqa: E402

# qemu-file is the baseline; hlt-attach restores into a QEMU started beforehand with -incoming defer.
VARIANTS = ("qemu-file", "hlt-lazy", "hlt-attach", "hlt-eager")
ENCRYPTED_VARIANTS = ("hlt-lazy-enc", "hlt-eager-enc")

OK_RX = re.compile(r"memcheck pass=(\d+) .* OK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now_us():
    return int(time.time() * 1e6)


def resume_us(q):
    """QEMU's own time stamp of the guest's first RESUME (host microseconds), or None before it."""
    t = q.event_time("RESUME")
    return None if t is None else int(t * 1e6)


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def wait_first_ok(serial, deadline):
    """Polls the serial log every 2 ms; returns the wall time (µs) the first OK line was seen."""
    while time.monotonic() < deadline:
        try:
            with open(serial, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        if " BAD " in text:
            raise RuntimeError("the restored guest printed BAD: " + text[-500:])
        if OK_RX.search(text):
            return now_us()
        time.sleep(0.002)
    raise TimeoutError(f"no OK line on {serial}")


def kill(pid):
    try:
        os.kill(pid, 9)
    except (ProcessLookupError, TypeError):
        pass


def progress_at(progress_csv, wall_us):
    """The last progress sample at or before wall_us (faults, bytes read, stall in microseconds)."""
    best = None
    with open(progress_csv) as f:
        for row in csv.DictReader(f):
            if int(row["wall_us"]) <= wall_us:
                best = row
            else:
                break
    if best is None:
        return 0, 0, 0
    return int(best["faults_blocking"]), int(best["bytes_read"]), int(best.get("stall_us") or 0)


class Bench:
    def __init__(self, a):
        self.a = a
        self.save = os.path.join(a.tools, "hlt-save")
        self.restore = os.path.join(a.tools, "hlt-restore")
        self.rows = []
        self.cold_ok = None
        self.key = None

    def machine(self, mem, serial, **kw):
        return launch.qemu_argv(mem=mem, workload="memcheck", workload_args=["--mib", str(self.mib(mem))],
                                serial_log=serial, **kw)

    def mib(self, mem):
        if self.a.workload_mib:
            return self.a.workload_mib
        gib = int(mem.rstrip("G"))
        return gib * 512

    def prepare(self, mem):
        """Boots the source, saves it both ways; returns (checkpoint, migration file)."""
        w = os.path.join(self.a.work, mem)
        os.makedirs(w, exist_ok=True)
        ckpt, mig = os.path.join(w, "guest.hlt"), os.path.join(w, "guest.mig")
        serial, qmp_path = os.path.join(w, "src.serial.log"), os.path.join(w, "src.qmp")
        for p in (serial, qmp_path, ckpt, mig):
            if os.path.exists(p):
                os.unlink(p)
        g = launch.Guest.start(serial, stderr_path=os.path.join(w, "src.stderr.log"), mem=mem, workload="memcheck",
                               workload_args=["--mib", str(self.mib(mem))], qmp=qmp_path)
        try:
            log(f"{mem}: source booting (memcheck {self.mib(mem)} MiB), waiting for 2 OK passes")
            g.wait_for(OK_RX.pattern, 2, 600, fail=r" BAD |Kernel panic")
            # QEMU refuses a second migration from a VM a migration paused ("postmigrate"): let the guest go on
            # after hlt-save, then stop it again for QEMU's own save (a few milliseconds later in the workload).
            out = subprocess.run([self.save, "qemu", "--qmp", qmp_path, "-o", ckpt, "--then", "cont",
                                  *self.a.save_args.split()], capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError("hlt-save failed: " + out.stderr)
            log(f"{mem}: hlt-save done\n" + out.stdout)
            q = Qmp.connect(qmp_path)
            q.command("stop")
            q.command("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
            t0 = time.monotonic()
            q.command("migrate", uri=f"exec:cat > {mig}")
            while q.command("query-migrate").get("status") not in ("completed", "failed"):
                time.sleep(0.05)
            st = q.command("query-migrate")["status"]
            if st != "completed":
                raise RuntimeError("QEMU's migration to a file failed")
            log(f"{mem}: QEMU migrated to {mig} ({os.path.getsize(mig) >> 20} MiB) in {time.monotonic() - t0:.1f} s")
            q.command("quit")
            q.close()
        finally:
            g.stop()
        if self.a.encrypt:
            self.key = os.path.join(w, "guest.key")
            for p in (self.key, ckpt + ".enc"):
                if os.path.exists(p):
                    os.unlink(p)
            subprocess.run([self.save, "keygen", "-o", self.key], check=True, capture_output=True)
            out = subprocess.run([self.save, "rekey", ckpt, "-o", ckpt + ".enc", "--key-file", self.key],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError("hlt-save rekey failed: " + out.stderr)
            log(f"{mem}: encrypted copy {ckpt}.enc\n" + out.stdout)
        return ckpt, mig

    def run_qemu_file(self, mem, mig, cold):
        w = os.path.join(self.a.work, mem)
        serial, qmp_path = os.path.join(w, "qf.serial.log"), os.path.join(w, "qf.qmp")
        for p in (serial, qmp_path):
            if os.path.exists(p):
                os.unlink(p)
        argv = self.machine(mem, serial, qmp=qmp_path, incoming=f"exec:cat {mig}")
        t0 = now_us()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(w, "qf.stderr.log"), "wb"))
        try:
            q = Qmp.connect(qmp_path)
            # The load is done when QEMU leaves "inmigrate"; the migrated run state is "paused": cont at once.
            while True:
                st = q.command("query-status")["status"]
                if st != "inmigrate":
                    break
                time.sleep(0.001)
            done = now_us()
            if st != "running":
                q.command("cont")
            deadline = time.monotonic() + 10
            while resume_us(q) is None and time.monotonic() < deadline:
                q.command("query-status")
                time.sleep(0.001)
            running = resume_us(q)
            ok = wait_first_ok(serial, time.monotonic() + 300)
            q.close()
        finally:
            kill(p.pid)
            p.wait()
        size = os.path.getsize(mig)
        return dict(running_ms=(running - t0) / 1e3, first_ok_ms=(ok - t0) / 1e3, faults=0, stall_ms=0,
                    bytes_read=size, done_ms=(done - t0) / 1e3)

    def run_hlt(self, mem, ckpt, eager, cold, attach=False, key=None):
        w = os.path.join(self.a.work, mem)
        tag = ("eager" if eager else ("attach" if attach else "lazy")) + ("-enc" if key else "")
        serial, stats, prog = (os.path.join(w, f"{tag}.{x}") for x in ("serial.log", "stats.json", "progress.csv"))
        qmp_path = os.path.join(w, f"{tag}.qmp")
        for p in (serial, stats, prog, qmp_path):
            if os.path.exists(p):
                os.unlink(p)
        common = [self.restore, "qemu", ckpt, "--stats-json", stats, "--progress-log", prog, "--quiet",
                  *(["--eager"] if eager else []), *(["--encrypt-key-file", key] if key else []),
                  *self.a.restore_args.split()]
        prestarted = None
        if attach:
            # A QEMU started ahead of time with -incoming defer, as libvirt or a VDI pool does: its start-up is off
            # the restore's critical path, and t0 is when hlt-restore starts.
            argv = self.machine(mem, serial, qmp=qmp_path, incoming="defer")
            prestarted = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=open(os.path.join(w, f"{tag}.stderr.log"), "wb"))
            Qmp.connect(qmp_path).close()  # QEMU is up and its monitor answers
            cmd = [*common, "--qmp", qmp_path]
        else:
            argv = self.machine(mem, serial)
            cmd = [*common, "--qemu", argv[0], "--qemu-dir", os.path.join(w, f"{tag}.qemu"), "--", *argv[1:]]
        out = open(os.path.join(w, f"{tag}.restore.log"), "wb")
        t0 = now_us()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        qpid = prestarted.pid if prestarted else None
        try:
            ok = wait_first_ok(serial, time.monotonic() + 300)
            rc = p.wait(300)
            done = now_us()
            if rc != 0:
                raise RuntimeError(f"hlt-restore exited {rc}: " + open(out.name).read()[-2000:])
            with open(stats) as f:
                st = json.load(f)
            qpid = qpid or st["qemu_pid"]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            kill(qpid)
        if eager:
            faults, read, stall_us = 0, st["bytes_read_final"], st.get("stall_us", 0)
        else:
            faults, read, stall_us = progress_at(prog, ok)  # sampled every 10 ms until every page is in
        return dict(running_ms=(st["running_wall_us"] - t0) / 1e3, first_ok_ms=(ok - t0) / 1e3, faults=faults,
                    stall_ms=stall_us / 1e3, bytes_read=read, done_ms=(done - t0) / 1e3)

    def run(self):
        for mem in self.a.sizes.split(","):
            ckpt, mig = self.prepare(mem)
            sizes = {"checkpoint": os.path.getsize(ckpt), "migration_file": os.path.getsize(mig)}
            modes = [("cold", True)] + ([("warm", False)] if self.a.warm else [])
            variants = tuple(self.a.variants.split(",")) + (ENCRYPTED_VARIANTS if self.a.encrypt else ())
            for rep in range(self.a.repeat):
                for cache, cold in modes:
                    for variant in variants:
                        encrypted = variant.endswith("-enc")
                        file = ckpt + ".enc" if encrypted else ckpt
                        if cold:
                            self.cold_ok = drop_caches()
                        elif variant == "qemu-file":
                            subprocess.run(["cat", mig], stdout=subprocess.DEVNULL)  # warm the cache
                        else:
                            subprocess.run(["cat", file], stdout=subprocess.DEVNULL)
                        if variant == "qemu-file":
                            r = self.run_qemu_file(mem, mig, cold)
                        else:
                            r = self.run_hlt(mem, file, variant.startswith("hlt-eager"), cold,
                                             variant == "hlt-attach", self.key if encrypted else None)
                        r.update(guest=mem, memcheck_mib=self.mib(mem), variant=variant,
                                 cache=cache if (not cold or self.cold_ok) else "warm(no root)", rep=rep,
                                 file_bytes=(os.path.getsize(file) if variant != "qemu-file"
                                             else sizes["migration_file"]),
                                 accel=launch.default_accel())
                        log(f"{mem} {variant} {r['cache']}: running {r['running_ms']:.1f} ms, first OK "
                            f"{r['first_ok_ms']:.1f} ms, {r['faults']} faults, {r['bytes_read'] >> 20} MiB read")
                        self.rows.append(r)
            if not self.a.keep:
                os.unlink(mig)
                os.unlink(ckpt)
                if self.a.encrypt:
                    os.unlink(ckpt + ".enc")

    def report(self):
        cols = ["guest", "memcheck_mib", "variant", "cache", "rep", "running_ms", "first_ok_ms", "faults",
                "stall_ms", "bytes_read", "done_ms", "file_bytes", "accel"]
        os.makedirs(self.a.out, exist_ok=True)
        with open(os.path.join(self.a.out, "bench_qemu.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=cols)
            wr.writeheader()
            for r in self.rows:
                wr.writerow({c: r[c] for c in cols})
        with open(os.path.join(self.a.out, "bench_qemu.json"), "w") as f:
            json.dump({"baseline": "qemu-file (QEMU's own -incoming \"exec:cat FILE\")", "rows": self.rows}, f,
                      indent=1)
        print(f"\nQEMU restore: time from starting the restoring process ({self.rows[0]['accel'] if self.rows else ''})")
        hdr = (f"{'guest':>5} {'variant':<13} {'cache':<5} {'to running':>11} {'to 1st OK':>10} {'faults':>7} "
               f"{'stall':>10} {'read to 1st OK':>15} {'all in':>9} {'file':>9} {'running':>8} {'1st OK':>7}")
        print(hdr)
        print("-" * len(hdr))
        base = {(r["guest"], r["cache"], r["rep"]): r for r in self.rows if r["variant"] == "qemu-file"}
        for r in self.rows:
            b = base.get((r["guest"], r["cache"], r["rep"]))
            ratio = (f"{b['running_ms'] / r['running_ms']:>7.1f}x {b['first_ok_ms'] / r['first_ok_ms']:>6.2f}x"
                     if b else f"{'-':>8} {'-':>7}")
            print(f"{r['guest']:>5} {r['variant']:<13} {r['cache'][:5]:<5} {r['running_ms']:>8.1f} ms "
                  f"{r['first_ok_ms']:>7.0f} ms {r['faults']:>7} {r['stall_ms']:>7.1f} ms "
                  f"{r['bytes_read'] / 2**20:>11.1f} MiB "
                  f"{r['done_ms']:>6.0f} ms {r['file_bytes'] / 2**20:>5.0f} MiB {ratio}")
        print(f"(last two columns: qemu-file's time divided by this one's, same guest, cache and repetition; "
              f"CSV and JSON in {self.a.out}; baseline: qemu-file = QEMU's own -incoming \"exec:cat FILE\")")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", required=True, help="directory with hlt-save and hlt-restore")
    ap.add_argument("--sizes", default="1G,4G", help="guest RAM sizes, GiB (memcheck uses half)")
    ap.add_argument("--workload-mib", type=int, default=0,
                    help="memcheck's buffer in every guest, MiB (default: half of the guest's RAM)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="which restores, comma-separated")
    ap.add_argument("--save-args", default="", help="extra hlt-save options (e.g. \"--frame-pages 0\")")
    ap.add_argument("--restore-args", default="", help="extra hlt-restore qemu options for every hlt variant "
                    "(e.g. \"--loader-threads 2\")")
    ap.add_argument("--warm", action="store_true", help="also runs with the files in the page cache")
    ap.add_argument("--out", default=os.path.join(os.getcwd(), "bench-qemu-results"))
    ap.add_argument("--work", default="/var/tmp/halite-bench-qemu", help="checkpoints, migration files, logs")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints and migration files")
    ap.add_argument("--encrypt", action="store_true",
                    help="also restore an encrypted copy of the checkpoint (hlt-save rekey): hlt-lazy-enc, hlt-eager-enc")
    a = ap.parse_args()
    if not (os.environ.get("HLT_QEMU") or shutil.which("qemu-system-x86_64")):
        print("bench_qemu: qemu-system-x86_64 is not installed", file=sys.stderr)
        return 77
    if subprocess.run([os.path.join(REPO, "scripts", "build-guest")], capture_output=True).returncode != 0:
        print("bench_qemu: scripts/build-guest failed", file=sys.stderr)
        return 77
    os.makedirs(a.work, exist_ok=True)
    b = Bench(a)
    try:
        b.run()
    finally:
        if b.rows:
            b.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
