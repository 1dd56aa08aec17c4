#!/usr/bin/python3
"""Guest restore benchmark: the Halite / Twinkle experiments on this machine. See bench/guests/README.md.

usage: bench/run-guests [--mem 1G|4G|8G] [--workload memsim|redis|both] [--methods M,M,...] [--cold|--warm|--both]
                        [--quick] [options]
"""

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hbench import machine, qemustart, report, runner, workloads  # noqa: E402
from hbench.tools import HaliteTools, parse_size  # noqa: E402

REPO = runner.REPO


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench/run-guests", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mem", default="1G", choices=("1G", "2G", "4G", "8G"), help="guest RAM (default 1G)")
    ap.add_argument("--workload", default="both", choices=("memsim", "redis", "both"))
    ap.add_argument("--methods", default=",".join(runner.METHODS),
                    help="comma-separated, in table order (default all): " + ", ".join(runner.METHODS))
    cache = ap.add_mutually_exclusive_group()
    cache.add_argument("--cold", action="store_const", dest="cache", const="cold", help="drop caches only")
    cache.add_argument("--warm", action="store_const", dest="cache", const="warm", help="warm cache only")
    cache.add_argument("--both", action="store_const", dest="cache", const="both", help="cold and warm (default)")
    ap.add_argument("--quick", action="store_true",
                    help="short observation (12 s), smaller working set and dataset, one limited live save")
    ap.add_argument("--window", type=float, help="seconds each restore is observed (default 30; quick 12)")
    ap.add_argument("--work-seconds", type=float,
                    help="fixed work for the overhead, in seconds of never-suspended guest (default 10; quick 5)")
    ap.add_argument("--baseline-seconds", type=float, help="baseline window before the first save (default 5)")
    ap.add_argument("--live-rates", help="QEMU migration rate limits (max-bandwidth) of the --live saves, the first "
                                         "one gives method halite-live's checkpoint (default 0,256M,64M; quick "
                                         "0,64M; 0 = unlimited)")
    ap.add_argument("--no-save-side", dest="save_side", action="store_false",
                    help="skip the extra rate-limited live saves")
    ap.add_argument("--memsim-pattern", default="zipf", help="memsim access pattern (default zipf)")
    ap.add_argument("--memsim-write-pct", type=int, default=10)
    ap.add_argument("--memsim-mib", type=int, help="memsim working set (default: half the guest RAM)")
    ap.add_argument("--memsim-procs", type=int, default=1,
                    help="memsim as a desktop: N processes of --memsim-mib/N each (default 1)")
    ap.add_argument("--memsim-active", type=int,
                    help="of the --memsim-procs processes, only the first K run operations; the others idle with "
                         "their memory touched once (default: all)")
    ap.add_argument("--loader", choices=("on", "off"),
                    help="hlt-restore's background loader for every lazy method (default: each method's own)")
    ap.add_argument("--age", type=int, default=0, metavar="S",
                    help="an aged guest: S seconds of memage (processes allocating, touching and freeing memory, files "
                         "written and deleted, then long-running processes holding memory with free pages between "
                         "theirs) before the workload, so its memory is scattered physically (default 0)")
    ap.add_argument("--age-args", default="",
                    help="more memage options, comma-separated (e.g. --resident-pct,40; guest/memage.c)")
    ap.add_argument("--redis-fraction", type=float, help="dataset size as a fraction of guest RAM (default 0.4)")
    ap.add_argument("--tools-dir", default=os.environ.get("HLT_TOOLS_DIR", os.path.join(REPO, "build", "tools")),
                    help="directory of hlt-save and hlt-restore (default $HLT_TOOLS_DIR or build/tools)")
    ap.add_argument("--guest-dir", default=os.environ.get("HLT_BENCH_GUEST_DIR",
                                                          os.path.join(REPO, "build", "guest-bench")),
                    help="guest built with --with-redis (default build/guest-bench; built if missing)")
    ap.add_argument("--accel", default="tcg", choices=("tcg", "kvm"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--keep-checkpoints", action="store_true")
    ap.add_argument("--nice", type=int, default=-10,
                    help="niceness of the harness and everything it starts (default -10 when root: TCG guests are "
                         "CPU-bound and other jobs on a 2-core machine make the rates swing; 0 leaves it)")
    ap.add_argument("--report-only", metavar="RAWDIR", help="rebuild the tables and figures from a raw run directory")
    ap.add_argument("--no-start-profile", dest="start_profile", action="store_false",
                    help="skip the measurement of QEMU's own start (cold and warm, with and without -kernel)")
    ap.add_argument("--add-start-profile", action="store_true",
                    help="with --report-only: measure QEMU's start now and add it to RAWDIR's record")
    a = ap.parse_args(argv)
    a.caches = {"cold": ["cold"], "warm": ["warm"]}.get(a.cache, ["cold", "warm"])
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in runner.METHODS]
    if bad:
        ap.error(f"unknown method(s) {', '.join(bad)}; known: {', '.join(runner.METHODS)}")
    a.window = a.window or (12.0 if a.quick else 30.0)
    a.work_seconds = a.work_seconds or (5.0 if a.quick else 10.0)
    a.baseline_seconds = a.baseline_seconds or 5.0
    a.warmup = 3.0 if a.quick else 6.0
    a.settle = 2.0 if a.quick else 4.0
    a.tool_grace = 20.0 if a.quick else 60.0
    a.ref_seconds = 3.0 if a.quick else 5.0
    a.live_rates = [parse_size(x) for x in (a.live_rates or ("0,64M" if a.quick else "0,256M,64M")).split(",")]
    if a.window < 10.5:
        ap.error("--window must be > 10 s (the RSS sample is taken 10 s after the restore starts)")
    if a.work_seconds >= a.window:
        ap.error("--work-seconds must be shorter than --window")
    return a


def main(argv):
    a = parse_args(argv)
    command = "bench/run-guests " + shlex.join(argv) if argv else "bench/run-guests"
    now = datetime.datetime.now()
    date = now.strftime("%Y-%m-%d %H:%M")
    stem = (now.strftime("%Y-%m-%d-%H%M") + f"-guests-{a.mem}" + (f"-aged{a.age}" if a.age else "") +
            ("-quick" if a.quick else ""))

    if a.report_only:
        with open(os.path.join(a.report_only, "run.json")) as f:
            meta = json.load(f)
        results = [json.load(open(os.path.join(a.report_only, w, "result.json"))) for w in meta["workloads"]
                   if os.path.exists(os.path.join(a.report_only, w, "result.json"))]
        saved = argparse.Namespace(**meta["args"])
        saved.quick = meta["args"].get("quick", False)
        if a.add_start_profile:
            if a.nice and os.geteuid() == 0:
                os.setpriority(os.PRIO_PROCESS, 0, a.nice)
            sock_dir = f"/tmp/hbg-{os.getpid()}"
            os.makedirs(sock_dir, exist_ok=True)
            meta["qemu_start"] = qemustart.measure(saved.mem, saved.accel, saved.guest_dir, sock_dir)
            os.rmdir(sock_dir)
            with open(os.path.join(a.report_only, "run.json"), "w") as f:
                json.dump(meta, f, indent=1)
        report.build(results, saved, meta["machine"], a.out, meta["stem"], meta["command"], meta["date"],
                     qemu_start=meta.get("qemu_start"))
        print(os.path.join(a.out, meta["stem"] + ".md"))
        return 0

    if os.geteuid() != 0 and "cold" in a.caches:
        print("run-guests: cold runs drop the page cache and need root (or use --warm)", file=sys.stderr)
        return 2
    if a.nice and os.geteuid() == 0:
        os.setpriority(os.PRIO_PROCESS, 0, a.nice)
    gdir = a.guest_dir
    # Cheap when up to date (a stamp comparison over the guest's sources): a changed guest program is rebuilt.
    subprocess.run([os.path.join(REPO, "scripts", "build-guest"), "--with-redis", "--out", gdir], check=True)
    raw = os.path.join(a.out, "raw", stem)
    os.makedirs(raw, exist_ok=True)
    logf = open(os.path.join(raw, "harness.log"), "a", buffering=1)

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")

    tools = HaliteTools(a.tools_dir)
    ctx = runner.Ctx(a, tools, raw, log)
    ctx.tools_missing = tools.missing()
    if ctx.tools_missing and any(m != "qemu-eager" for m in a.methods):
        log(f"WARNING: {ctx.tools_missing}; only qemu-eager will run")
    mach = machine.describe(a.accel)
    log(f"machine: {mach}")
    names = ["memsim", "redis"] if a.workload == "both" else [a.workload]
    meta = {"args": {k: v for k, v in vars(a).items() if isinstance(v, (str, int, float, list, bool, type(None)))},
            "machine": mach, "stem": stem, "command": command, "date": date, "workloads": names}
    with open(os.path.join(raw, "run.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log(f"run-guests: {command}; raw logs in {raw}")

    results = []
    for name in names:
        if name == "memsim":
            wl = workloads.Memsim(a.mem, a.quick, a.memsim_pattern, a.memsim_write_pct, a.memsim_mib,
                                  procs=a.memsim_procs, active=a.memsim_active)
        else:
            wl = workloads.Redis(a.mem, a.quick, fraction=a.redis_fraction)
        log(f"== {name}: {wl.describe()}")
        try:
            results.append(runner.run_workload(ctx, wl))
        except Exception as e:  # noqa: BLE001  (keep the other workload's results)
            log(f"{name}: FAILED: {e}")
            import traceback
            traceback.print_exc(file=logf)
    if a.start_profile and "cold" in a.caches:
        try:
            meta["qemu_start"] = qemustart.measure(a.mem, a.accel, a.guest_dir, ctx.sock_dir, log=log)
            with open(os.path.join(raw, "run.json"), "w") as f:
                json.dump(meta, f, indent=1)
        except Exception as e:  # noqa: BLE001
            log(f"QEMU start profile: FAILED: {e}")
    rows = report.build(results, a, mach, a.out, stem, command, date, qemu_start=meta.get("qemu_start"))
    log(f"results: {os.path.join(a.out, stem + '.md')} (+ .csv, -saves.csv, .png); {len(rows)} restore rows")
    try:
        os.rmdir(ctx.sock_dir)
    except OSError:
        pass
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
