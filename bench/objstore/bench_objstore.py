#!/usr/bin/env python3
"""Lazy restore from an object store vs a local file (issue 13), in one run.

    bench/objstore/bench_objstore.py --tools build/tools --mkimage build/tests/hlt-mkimage [--mib 256]
        [--accesses 3000] [--runs 3] [--ceph-env DIR/env] [--baseline-tools DIR] [--csv F] [--json F]

Saves one synthetic image to a local file (the baseline), s3:// (radosgw) and rados://, then replays the same
random access trace with `hlt-restore replay --json` (userfaultfd, one locality block per fault, background
loader on: from an object store it fetches the restore order in batches) against each, and prints time to first
access, total time, blocking faults, blocking-fault p50/p99, blocks read, requests sent to storage after open and
the bytes they brought, and block-cache hits. The local file is replayed cold (page cache dropped) and warm.
The object stores are replayed without a block cache, with an empty one (cold: every block fetched and written
to it), and with one a previous restore filled (warm; once more with the page cache dropped, as a restore on the
same host much later would find it). With --baseline-tools, the local cases are replayed by those tools too (the
same run: a build of the previous commit), so that a change to the local path shows.
Without --ceph-env a cluster is started with scripts/ceph-up and stopped after the run.

    bench/objstore/bench_objstore.py --restore-all [--mib 1024] [--accesses 300] [--runs 3] ...

Every page in (restore_all.py): eager and lazy (loader) restores from s3:// and rados:// against a plain parallel
download of the object and the local file, in the same run.

    bench/objstore/bench_objstore.py --fault-priority [--mib 1024] [--accesses 300] [--sequential-mib 256]
        [--runs 5] ...

Demand faults while the loader streams (fault_priority.py): blocking-fault p50/p99/max with the loader on against the
loader off and against the loader on with the demand gate off (HALITE_DEMAND_GATE=off), from s3://, rados:// and the
local file, and the time to every page in against 1.3 x local + a plain download, in the same run. Needs the system
python3 (python3-rados, python3-boto3 of scripts/install-deps --bench).
"""
import argparse
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIELDS = ("time_to_first_access_us", "seconds", "open_seconds", "faults_blocking", "blocking_p50_us",
          "blocking_p99_us", "blocks_read", "blocks_read_demand", "bytes_read", "mismatches")
NEW_FIELDS = ("storage_requests", "storage_bytes", "blocks_fetched", "cache_hits", "loader_batches",
              "loader_fetched_unused")


def load_env(path):
    env = dict(os.environ)
    for line in open(path):
        if line.startswith("export "):
            k, v = line[len("export "):].strip().split("=", 1)
            env[k] = v
    return env


def drop_caches():
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def replay(tools, ckpt, trace, env, extra=()):
    out = subprocess.run([f"{tools}/hlt-restore", "replay", ckpt, "--trace", trace, "--json", *extra], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"replay of {ckpt} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", default=f"{ROOT}/build/tools")
    ap.add_argument("--baseline-tools", help="tools of another build: its local replays are a row of their own")
    ap.add_argument("--mkimage", default=f"{ROOT}/build/tests/hlt-mkimage")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--accesses", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ceph-env")
    ap.add_argument("--csv")
    ap.add_argument("--json")
    ap.add_argument("--restore-all", action="store_true", help="every page in: eager and loader vs a download")
    ap.add_argument("--fault-priority", action="store_true",
                    help="demand-fault latency with the loader on against off, and every page in")
    ap.add_argument("--sequential-mib", type=int, default=0,
                    help="--fault-priority: also a trace touching the first N MiB page after page")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="objstore-bench.")
    ceph_dir = None
    bringup = None
    if a.ceph_env:
        env = load_env(a.ceph_env)
    else:
        ceph_dir = os.path.join(tmp, "ceph")
        t0 = time.time()
        subprocess.run([f"{ROOT}/scripts/ceph-up", ceph_dir], check=True)
        bringup = time.time() - t0
        print(f"ceph-up: {bringup:.1f} s")
        env = load_env(os.path.join(ceph_dir, "env"))
    try:
        if a.restore_all or a.fault_priority:
            if a.restore_all:
                import restore_all as mode
            else:
                import fault_priority as mode
            rows, extra = mode.run(a, env, tmp, replay, drop_caches)
            if a.csv:
                with open(a.csv, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
                    w.writeheader()
                    w.writerows(rows)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"ceph_up_seconds": bringup, **extra, "runs": rows}, f, indent=1)
            return
        img = os.path.join(tmp, "img")
        subprocess.run([a.mkimage, img, str(a.mib), "7"], check=True, stdout=subprocess.DEVNULL)
        pages = a.mib * 256
        rng = random.Random(3)
        trace = os.path.join(tmp, "trace")
        with open(trace, "w") as f:
            f.write("\n".join(str(rng.randrange(pages)) for _ in range(a.accesses)) + "\n")
        tag = f"bench-{os.getpid()}"
        local = os.path.join(tmp, "c.hlt")
        s3 = f"s3://{env['HALITE_TEST_S3_BUCKET']}/{tag}.hlt"
        rados = f"rados://{env['HALITE_TEST_RADOS_POOL']}/{tag}"
        saves = {}
        for name, uri in (("local", local), ("s3", s3), ("rados", rados)):
            t0 = time.time()
            subprocess.run([f"{a.tools}/hlt-save", "raw", img, "-o", uri, "--no-sync"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            saves[name] = time.time() - t0
        warm_cache = {"s3": os.path.join(tmp, "cache-s3"), "rados": os.path.join(tmp, "cache-rados")}
        cold_cache = os.path.join(tmp, "cache-cold")
        # The warm caches hold every block: a full (raw) restore through them, as a first restore that ran to the
        # end leaves them.
        for name, uri in (("s3", s3), ("rados", rados)):
            subprocess.run([f"{a.tools}/hlt-restore", "raw", uri, "-o", os.path.join(tmp, "fill.img"), "--no-sync",
                            "--block-cache", warm_cache[name]], env=env, check=True, stdout=subprocess.DEVNULL)
            os.unlink(os.path.join(tmp, "fill.img"))

        def fresh_cold_cache():
            shutil.rmtree(cold_cache, ignore_errors=True)
            return ["--block-cache", cold_cache]

        # (name, tools, checkpoint, drop page cache first, extra arguments (a callable: evaluated per run))
        cases = [("local cold", a.tools, local, True, lambda: []),
                 ("local warm", a.tools, local, False, lambda: [])]
        if a.baseline_tools:
            cases += [("local cold (baseline build)", a.baseline_tools, local, True, lambda: []),
                      ("local warm (baseline build)", a.baseline_tools, local, False, lambda: [])]
        cases += [("s3 (radosgw)", a.tools, s3, False, lambda: []),
                  ("s3, cold block cache", a.tools, s3, False, fresh_cold_cache),
                  ("s3, warm block cache", a.tools, s3, False, lambda: ["--block-cache", warm_cache["s3"]]),
                  ("s3, warm block cache, cold disk", a.tools, s3, True,
                   lambda: ["--block-cache", warm_cache["s3"]]),
                  ("rados", a.tools, rados, False, lambda: []),
                  ("rados, warm block cache", a.tools, rados, False, lambda: ["--block-cache", warm_cache["rados"]])]
        rows = []
        dropped = True
        for run in range(a.runs):
            for name, tools, uri, cold, extra in cases:
                args = extra()
                if cold:
                    dropped = drop_caches() and dropped
                r = replay(tools, uri, trace, env, args)
                rows.append({"case": name, "run": run, **{k: r[k] for k in FIELDS},
                             **{k: r.get(k, "") for k in NEW_FIELDS}})
        print(f"\n{a.mib} MiB image, {a.accesses} random accesses, 1 thread, loader on; median of {a.runs} runs"
              f"{'' if dropped else ' (page cache could not be dropped: the cold cases are warm)'}")
        print("save seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in saves.items()))
        hdr = ["case", "first access ms", "total s", "open ms", "blocking faults", "blocking p50 ms",
               "blocking p99 ms", "blocks read", "requests", "MiB fetched", "cache hits", "loader batches",
               "vs local cold"]
        print("| " + " | ".join(hdr) + " |")
        print("|" + " --- |" * len(hdr))
        med = {}
        for name, *_ in cases:
            rs = sorted((r for r in rows if r["case"] == name), key=lambda r: r["seconds"])
            med[name] = rs[len(rs) // 2]
        base = med["local cold"]["seconds"]

        def num(v, scale=1.0, fmt="{:.1f}"):
            return "-" if v == "" else fmt.format(v / scale)

        for name, *_ in cases:
            m = med[name]
            print(f"| {name} | {m['time_to_first_access_us'] / 1000:.2f} | {m['seconds']:.2f} | "
                  f"{m['open_seconds'] * 1000:.1f} | {m['faults_blocking']} | {m['blocking_p50_us'] / 1000:.2f} | "
                  f"{m['blocking_p99_us'] / 1000:.2f} | {m['blocks_read']} | {num(m['storage_requests'], 1, '{:.0f}')} | "
                  f"{num(m['storage_bytes'], 2**20)} | {num(m['cache_hits'], 1, '{:.0f}')} | "
                  f"{num(m['loader_batches'], 1, '{:.0f}')} | {m['seconds'] / base:.2f}x |")
        if any(r["mismatches"] for r in rows):
            sys.exit("MISMATCH: a replay saw a wrong page")
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"saves": saves, "ceph_up_seconds": bringup, "runs": rows}, f, indent=1)
    finally:
        if ceph_dir:
            subprocess.run([f"{ROOT}/scripts/ceph-down", ceph_dir])
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
