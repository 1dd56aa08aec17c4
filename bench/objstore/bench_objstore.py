#!/usr/bin/env python3
"""Lazy restore from an object store vs a local file (issue 13), in one run.

    bench/objstore/bench_objstore.py --tools build/tools --mkimage build/tests/hlt-mkimage [--mib 256]
        [--accesses 3000] [--runs 3] [--ceph-env DIR/env] [--csv F] [--json F]

Saves one synthetic image to a local file (the baseline), s3:// (radosgw) and rados://, then replays the same
random access trace with `hlt-restore replay --json` (userfaultfd, one locality block per fault, background
loader on) against each, and prints time to first access, total time, blocking faults, blocking-fault p50/p99,
requests (blocks read) and bytes fetched. The local file is replayed cold (page cache dropped) and warm.
Without --ceph-env a cluster is started with scripts/ceph-up and stopped after the run.
"""
import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def replay(tools, ckpt, trace, env):
    out = subprocess.run([f"{tools}/hlt-restore", "replay", ckpt, "--trace", trace, "--json"], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"replay of {ckpt} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", default=f"{ROOT}/build/tools")
    ap.add_argument("--mkimage", default=f"{ROOT}/build/tests/hlt-mkimage")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--accesses", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ceph-env")
    ap.add_argument("--csv")
    ap.add_argument("--json")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="objstore-bench.")
    ceph_dir = None
    if a.ceph_env:
        env = load_env(a.ceph_env)
    else:
        ceph_dir = os.path.join(tmp, "ceph")
        t0 = time.time()
        subprocess.run([f"{ROOT}/scripts/ceph-up", ceph_dir], check=True)
        print(f"ceph-up: {time.time() - t0:.1f} s")
        env = load_env(os.path.join(ceph_dir, "env"))
    try:
        img = os.path.join(tmp, "img")
        subprocess.run([a.mkimage, img, str(a.mib), "7"], check=True, stdout=subprocess.DEVNULL)
        pages = a.mib * 256
        rng = random.Random(3)
        trace = os.path.join(tmp, "trace")
        with open(trace, "w") as f:
            f.write("\n".join(str(rng.randrange(pages)) for _ in range(a.accesses)) + "\n")
        tag = f"bench-{os.getpid()}"
        targets = [("local", os.path.join(tmp, "c.hlt")),
                   ("s3 (radosgw)", f"s3://{env['HALITE_TEST_S3_BUCKET']}/{tag}.hlt"),
                   ("rados", f"rados://{env['HALITE_TEST_RADOS_POOL']}/{tag}")]
        saves = {}
        for name, uri in targets:
            t0 = time.time()
            subprocess.run([f"{a.tools}/hlt-save", "raw", img, "-o", uri, "--no-sync"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            saves[name] = time.time() - t0
        rows = []
        cases = [("local cold", targets[0][1], True), ("local warm", targets[0][1], False),
                 ("s3 (radosgw)", targets[1][1], False), ("rados", targets[2][1], False)]
        dropped = True
        for run in range(a.runs):
            for name, uri, cold in cases:
                if cold:
                    dropped = drop_caches() and dropped
                r = replay(a.tools, uri, trace, env)
                rows.append({"case": name, "run": run, **{k: r[k] for k in (
                    "time_to_first_access_us", "seconds", "open_seconds", "faults_blocking", "blocking_p50_us",
                    "blocking_p99_us", "blocks_read", "blocks_read_demand", "bytes_read", "mismatches")}})
        print(f"\n{a.mib} MiB image, {a.accesses} random accesses, 1 thread, loader on; median of {a.runs} runs"
              f"{'' if dropped else ' (page cache could not be dropped: local cold is warm)'}")
        print(f"save seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in saves.items()))
        hdr = ["case", "first access ms", "total s", "open ms", "blocking faults", "blocking p50 ms",
               "blocking p99 ms", "requests", "MiB fetched", "vs local cold"]
        print("| " + " | ".join(hdr) + " |")
        print("|" + " --- |" * len(hdr))
        med = {}
        for name, _, _ in cases:
            rs = sorted((r for r in rows if r["case"] == name), key=lambda r: r["seconds"])
            med[name] = rs[len(rs) // 2]
        base = med["local cold"]["seconds"]
        for name, _, _ in cases:
            m = med[name]
            print(f"| {name} | {m['time_to_first_access_us'] / 1000:.2f} | {m['seconds']:.2f} | "
                  f"{m['open_seconds'] * 1000:.1f} | {m['faults_blocking']} | {m['blocking_p50_us'] / 1000:.2f} | "
                  f"{m['blocking_p99_us'] / 1000:.2f} | {m['blocks_read']} | {m['bytes_read'] / 2**20:.1f} | "
                  f"{m['seconds'] / base:.2f}x |")
        if any(r["mismatches"] for r in rows):
            sys.exit("MISMATCH: a replay saw a wrong page")
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"saves": saves, "runs": rows}, f, indent=1)
    finally:
        if ceph_dir:
            subprocess.run([f"{ROOT}/scripts/ceph-down", ceph_dir])
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
