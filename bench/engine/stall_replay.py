#!/usr/bin/env python3
"""What a lazy restore's faults cost the guest, with independent frames (format 1.3) and without (issue 28 item 4).

    bench/engine/stall_replay.py --trace RESTORE_TRACE (--image IMAGE [--access-trace T] [--va-hints H]
        | --checkpoint NAME=CKPT ...) [--tools build/tools] [--runs 7] [--threads 1] [--loader off]
        [--csv F] [--json F]

With --image, saves IMAGE twice with the given hints, at the defaults (16-page frames) and with --frame-pages 0
(one zstd frame a block, as before format 1.3; the baseline), in the same run; --whole-blocks adds the frames-off
checkpoint replayed with --stream-faults off (the whole block decoded and installed before the thread goes on). With --checkpoint, replays the
given checkpoints (e.g. a real desktop's, saved both ways; its trace recorded by `hlt-restore qemu
--record-trace`). Each is replayed --runs times with `hlt-restore replay --json`, alternating, and the table shows
per checkpoint the median and range of: blocks read by faults, blocking faults and those that joined a block in
flight, the engine's stall (per fault from its arrival until its page was installed, summed over all faults /
blocking faults / joined faults), the touching threads' own stall (time spent in touches of pages not yet
installed, userfaultfd round trips included: what the guest feels), and the replay's total time; then each
stall's ratio against the first checkpoint (the baseline).

Guest model: tests/engine/fragmented-guest DIR --pages 65536 --seed S writes DIR/image, save.trace, va.hints and
restore.trace.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = ("blocks_read_demand", "faults_blocking", "faults_joined", "stall_seconds", "stall_blocking_seconds",
        "stall_joined_seconds", "touch_stall_seconds", "touches_missing", "seconds")


def replay(tools, ckpt, a, extra=()):
    cmd = [f"{tools}/hlt-restore", "replay", ckpt, "--trace", a.trace, "--json", "--loader", a.loader,
           "--threads", str(a.threads), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"stall_replay: {' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    j = json.loads(out.stdout)
    if j["mismatches"]:
        sys.exit(f"stall_replay: {ckpt}: {j['mismatches']} touched pages differ from the checkpoint")
    missing = [k for k in KEYS if k not in j]
    if missing:
        sys.exit(f"stall_replay: {tools}/hlt-restore replay --json lacks {missing} (a build before the stall figures?)")
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default=f"{ROOT}/build/tools")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--image")
    ap.add_argument("--access-trace")
    ap.add_argument("--va-hints")
    ap.add_argument("--checkpoint", action="append", default=[], help="NAME=CKPT; the first is the baseline")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loader", choices=("on", "off"), default="off")
    ap.add_argument("--whole-blocks", action="store_true",
                    help="with --image, also the frames-off checkpoint with --stream-faults off (the whole block in "
                         "before the faulting thread goes on: no joins)")
    ap.add_argument("--csv")
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="stall-replay.")
    try:
        ckpts = []
        if a.image:
            hints = []
            if a.access_trace:
                hints += ["--access-trace", a.access_trace]
            if a.va_hints:
                hints += ["--va-hints", a.va_hints]
            for name, extra in (("frames off (before 1.3)", ["--frame-pages", "0"]), ("16-page frames (default)", [])):
                path = os.path.join(tmp, f"{len(ckpts)}.hlt")
                subprocess.run([f"{a.tools}/hlt-save", "raw", a.image, "-o", path, "--no-sync", *hints, *extra],
                               check=True, stdout=subprocess.DEVNULL)
                ckpts.append((name, path, []))
            if a.whole_blocks:
                ckpts.append(("frames off, whole-block faults", ckpts[0][1], ["--stream-faults", "off"]))
        for spec in a.checkpoint:
            name, _, path = spec.partition("=")
            ckpts.append((name, path or name, []))
        if not ckpts:
            sys.exit("stall_replay: give --image or --checkpoint")
        for _, path, extra in ckpts:  # warm the page cache: the runs compare fault paths, not disks
            replay(a.tools, path, a, extra)
        rows = []
        for run in range(a.runs):
            for name, path, extra in ckpts:
                rows.append({"checkpoint": name, "run": run, **{k: replay(a.tools, path, a, extra)[k] for k in KEYS}})
        print(f"{a.trace}: loader {a.loader}, {a.threads} touching thread(s), {a.runs} runs each (median [min-max]); "
              "stall in ms")
        hdr = ["checkpoint", "blocks by faults", "blocking faults", "joined", "stall all", "stall blocking",
               "stall joined", "thread stall", "total ms", "thread stall vs first"]
        print("| " + " | ".join(hdr) + " |")
        print("|" + " --- |" * len(hdr))
        base = None
        summary = {}
        for name, _, _ in ckpts:
            rs = [r for r in rows if r["checkpoint"] == name]

            def cell(k, scale=1.0, fmt="{:.0f}"):
                v = sorted(r[k] * scale for r in rs)
                return (fmt.format(statistics.median(v)) + " [" + fmt.format(v[0]) + "-" + fmt.format(v[-1]) + "]",
                        statistics.median(v))
            cells = {k: cell(k) for k in ("blocks_read_demand", "faults_blocking", "faults_joined")}
            for k in ("stall_seconds", "stall_blocking_seconds", "stall_joined_seconds", "touch_stall_seconds",
                      "seconds"):
                cells[k] = cell(k, 1e3, "{:.2f}")
            thread = cells["touch_stall_seconds"][1]
            base = thread if base is None else base
            summary[name] = {k: v[1] for k, v in cells.items()}
            print(f"| {name} | " + " | ".join(cells[k][0] for k in (
                "blocks_read_demand", "faults_blocking", "faults_joined", "stall_seconds", "stall_blocking_seconds",
                "stall_joined_seconds", "touch_stall_seconds", "seconds")) + f" | {thread / base:.2f}x |")
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"trace": a.trace, "loader": a.loader, "threads": a.threads, "runs": rows,
                           "medians": summary}, f, indent=1)
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
