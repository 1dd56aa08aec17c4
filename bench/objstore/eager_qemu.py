#!/usr/bin/env python3
"""Issue 28 item 7's own path: `hlt-restore qemu s3://... --eager` of a real QEMU guest, against the same restore from
a local copy of the checkpoint and a plain download of the object, in one run.

    bench/objstore/eager_qemu.py --ceph-env DIR/env [--tools build/tools] [--baseline-tools DIR] [--mem 2G]
        [--mib 1536] [--runs 2] [--lazy] [--json F]

Boots the project's test guest (guest/: memcheck over --mib MiB of a --mem guest, TCG), saves it with
`hlt-save qemu -o s3://BUCKET/...` once it has passed once, then per run, page cache dropped before each restore:
the eager restore from s3:// (and with --baseline-tools, the same by those tools), a plain download of the object
(boto3, 8 MiB parts, 10 in flight) to a local file, and the eager restore from that file; with --lazy, lazy restores
from both too. Prints the time from starting hlt-restore to the guest running (QEMU's RESUME event) and to every
page in (start_to_loaded_us of --stats-json), and the storage requests.
Run it with Debian's python3 (python3-boto3: scripts/install-deps --bench).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "guest"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402
import restore_all  # noqa: E402


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def restore(tools, ckpt, env, work, a, tag, lazy=False):
    stats = os.path.join(work, f"{tag}.stats.json")
    if os.path.exists(stats):
        os.unlink(stats)
    argv = launch.qemu_argv(mem=a.mem, workload="memcheck", workload_args=["--mib", str(a.mib)],
                            serial_log=os.path.join(work, f"{tag}.serial"))
    cmd = [f"{tools}/hlt-restore", "qemu", ckpt, *([] if lazy else ["--eager"]), "--stats-json", stats, "--quiet",
           "--qemu-dir", os.path.join(work, f"{tag}.qemu"), "--", *argv]
    drop_caches()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"eager_qemu: {' '.join(cmd[:4])} exited {r.returncode}: {r.stderr[-1000:]}")
    with open(stats) as f:
        st = json.load(f)
    os.kill(int(st["qemu_pid"]), 9)  # the restored guest: only its restore is measured
    time.sleep(1)
    return {"running_s": st["start_to_running_us"] / 1e6, "all_in_s": st["start_to_loaded_us"] / 1e6,
            "storage_requests": st.get("storage_requests"), "loader_batches": st.get("loader_batches", 0),
            "preload_batches": st.get("preload_batches", 0), "blocks": st.get("blocks_total")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ceph-env", required=True)
    ap.add_argument("--tools", default=f"{ROOT}/build/tools")
    ap.add_argument("--baseline-tools")
    ap.add_argument("--mem", default="2G")
    ap.add_argument("--mib", type=int, default=1536)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--lazy", action="store_true", help="also lazy restores (the loader streams every page in)")
    ap.add_argument("--json")
    a = ap.parse_args()
    env = restore_all_env(a.ceph_env)
    work = tempfile.mkdtemp(prefix="eager-qemu.")
    bucket = env["HALITE_TEST_S3_BUCKET"]
    key = f"eager-qemu-{os.getpid()}.hlt"
    uri = f"s3://{bucket}/{key}"
    serial, qmp = os.path.join(work, "src.serial"), os.path.join(work, "src.qmp")
    g = launch.Guest.start(serial, stderr_path=os.path.join(work, "src.err"), mem=a.mem, workload="memcheck",
                           workload_args=["--mib", str(a.mib)], qmp=qmp)
    try:
        g.wait_for(r"memcheck pass=(\d+) .* OK", 1, 1200, fail=r" BAD |Kernel panic")
        subprocess.run([f"{a.tools}/hlt-save", "qemu", "--qmp", qmp, "-o", uri, "--then", "quit"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    finally:
        g.stop()
    rows = []
    local = os.path.join(work, "local.hlt")
    try:
        for run in range(a.runs):
            if a.baseline_tools:
                rows.append({"case": "s3 eager (baseline build)", "run": run,
                             **restore(a.baseline_tools, uri, env, work, a, "base")})
            rows.append({"case": "s3 eager", "run": run, **restore(a.tools, uri, env, work, a, "s3")})
            if a.lazy:
                rows.append({"case": "s3 lazy", "run": run, **restore(a.tools, uri, env, work, a, "s3l", True)})
            d = restore_all.s3_download(env, bucket, key, local)
            rows.append({"case": "download", "run": run, "running_s": d, "all_in_s": d})
            rows.append({"case": "local eager", "run": run, **restore(a.tools, local, env, work, a, "local")})
            if a.lazy:
                rows.append({"case": "local lazy", "run": run,
                             **restore(a.tools, local, env, work, a, "locall", True)})
            os.unlink(local)
    finally:
        subprocess.run(["rm", "-rf", work])
    print(f"\n{a.mem} guest, memcheck {a.mib} MiB; per run: time to running, to every page in (s), storage requests")
    print("| restore | to running | all in | requests |\n| --- | --- | --- | --- |")
    for case in dict.fromkeys(r["case"] for r in rows):
        rs = [r for r in rows if r["case"] == case]
        print(f"| {case} | " + ", ".join(f"{r['running_s']:.2f}" for r in rs) + " | " +
              ", ".join(f"{r['all_in_s']:.2f}" for r in rs) + " | " +
              ", ".join(str(r.get("storage_requests", "")) for r in rs) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def restore_all_env(path):
    env = dict(os.environ)
    for line in open(path):
        if line.startswith("export "):
            k, v = line[len("export "):].strip().split("=", 1)
            env[k] = v
    return env


if __name__ == "__main__":
    main()
