"""Demand faults during a lazy restore from the object store (issue 28 item 7: "demand faults still go first"), in
one run: bench_objstore.py --fault-priority runs it.

Per run, in turn, the same random trace (and with --sequential-mib N a second one: the first N MiB of memory touched
page after page, as a guest reading its memory in restore order does) is replayed (`hlt-restore replay --json
--timeline`, one touching thread) against the local file (page cache dropped first: cold), s3:// (radosgw) and
rados://, each with the loader off, with the loader on (`--wait-loader`: until every block is in), and with the loader
on and the demand gate off (HALITE_DEMAND_GATE=off: background reads as before the gate, same build); with
--baseline-tools also the loader-on replays by those tools (another build). A plain download of each object (boto3,
python3-rados: restore_all.py) runs in every run too. The order of the cases rotates from run to run so that no case
always follows the same other one on a loaded machine.

Reported per case: blocking-fault latency (a fault whose page was not in: it read its block, or waited for a read
in flight) p50, p99 and max pooled over every fault of every run (from the timelines), with ratios to the loader-off
case of the same store; the median over runs of each run's p50 and p99; the faults' total stall; and for the
loader-on cases the time until every block was in ("every page in") against issue 28 item 7's goal: 1.3 x the local
file's every-page-in time + the plain download time (medians of the same run).
"""
import csv
import json
import os
import statistics
import subprocess
import sys

from restore_all import rados_download, s3_download

FIELDS = ("seconds", "loader_done_seconds", "faults_blocking", "faults_joined", "blocking_p50_us", "blocking_p99_us",
          "stall_seconds", "touch_stall_seconds", "storage_requests", "storage_bytes", "loader_batches",
          "blocks_read_demand", "mismatches")


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def fault_latencies_us(timeline):
    with open(timeline) as f:
        return [float(r["latency_us"]) for r in csv.DictReader(f) if r["kind"] == "blocking"]


def run_case(tools, uri, trace, env, loader, timeline, gate=True):
    cmd = [f"{tools}/hlt-restore", "replay", uri, "--trace", trace, "--json", "--timeline", timeline,
           "--loader", "on" if loader else "off"]
    if loader:
        cmd.append("--wait-loader")
    if not gate:
        env = {**env, "HALITE_DEMAND_GATE": "off"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fault_priority: {' '.join(cmd)} failed: {out.stderr.strip()}")
    r = json.loads(out.stdout)
    row = {k: r.get(k, "") for k in FIELDS}
    row["latencies_us"] = fault_latencies_us(timeline)
    return row


def run(a, env, tmp, replay, drop_caches):
    del replay  # this mode needs the timeline of each replay: run_case calls hlt-restore itself
    import random
    img = os.path.join(tmp, "img")
    subprocess.run([a.mkimage, img, str(a.mib), "7"], check=True, stdout=subprocess.DEVNULL)
    pages = a.mib * 256
    rng = random.Random(3)
    traces = {"random": os.path.join(tmp, "trace")}
    with open(traces["random"], "w") as f:
        f.write("\n".join(str(rng.randrange(pages)) for _ in range(a.accesses)) + "\n")
    if a.sequential_mib:
        traces["sequential"] = os.path.join(tmp, "trace-seq")
        with open(traces["sequential"], "w") as f:
            f.write("\n".join(str(p) for p in range(min(pages, a.sequential_mib * 256))) + "\n")
    tag = f"bench-faults-{os.getpid()}"
    bucket, pool = env["HALITE_TEST_S3_BUCKET"], env["HALITE_TEST_RADOS_POOL"]
    uris = {"local": os.path.join(tmp, "c.hlt"), "s3": f"s3://{bucket}/{tag}.hlt", "rados": f"rados://{pool}/{tag}"}
    for uri in uris.values():
        subprocess.run([f"{a.tools}/hlt-save", "raw", img, "-o", uri, "--no-sync"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    os.unlink(img)
    size = os.path.getsize(uris["local"])
    info = json.loads(subprocess.run([f"{a.tools}/hlt-restore", "info", uris["local"], "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    cases = []  # (trace, store, label, tools, loader, gate)
    for trace in traces:
        for store in ("local", "s3", "rados"):
            cases.append((trace, store, "loader off", a.tools, False, True))
            cases.append((trace, store, "loader on", a.tools, True, True))
            if store != "local":
                cases.append((trace, store, "loader on, gate off", a.tools, True, False))
            if a.baseline_tools:
                cases.append((trace, store, "loader on, baseline build", a.baseline_tools, True, True))
    rows = []
    downloads = {"s3": [], "rados": []}
    timeline = os.path.join(tmp, "timeline.csv")
    dest = os.path.join(tmp, "download")
    for run_ in range(a.runs):
        downloads["s3"].append(s3_download(env, bucket, f"{tag}.hlt", dest))
        downloads["rados"].append(rados_download(env, pool, tag, dest))
        os.unlink(dest)
        k = run_ % len(cases)
        for trace, store, label, tools, loader, gate in cases[k:] + cases[:k]:
            if store == "local":
                drop_caches()
            r = run_case(tools, uris[store], traces[trace], env, loader, timeline, gate)
            rows.append({"trace": trace, "store": store, "case": label, "run": run_, **r})
    if any(r["mismatches"] for r in rows):
        sys.exit("MISMATCH: a replay saw a wrong page")
    download_s = {store: statistics.median(v) for store, v in downloads.items()}
    summary = summarize(rows, cases, download_s)
    for trace in traces:
        print_table(a, size, info.get("blocks", "?"), trace, [s for s in summary if s["trace"] == trace])
    print(f"\nplain download (median of {a.runs}): s3 {download_s['s3']:.2f} s, rados {download_s['rados']:.2f} s")
    for r in rows:
        r["latencies_us"] = json.dumps(r["latencies_us"])
    for store, v in downloads.items():
        rows += [{"trace": "-", "store": store, "case": "plain download", "run": i, "seconds": t}
                 for i, t in enumerate(v)]
    return rows, {"checkpoint_bytes": size, "blocks": info.get("blocks"), "download_seconds": download_s,
                  "summary": summary}


def summarize(rows, cases, download_s):
    out = []
    for trace, store, label, _, loader, _ in cases:
        rs = [r for r in rows if r["trace"] == trace and r["store"] == store and r["case"] == label]
        pooled = [x for r in rs for x in r["latencies_us"]]
        s = {"trace": trace, "store": store, "case": label, "runs": len(rs), "faults": len(pooled),
             "p50_ms": pct(pooled, 0.5) / 1000, "p99_ms": pct(pooled, 0.99) / 1000,
             "max_ms": max(pooled, default=float("nan")) / 1000,
             "run_p50_ms": statistics.median(pct(r["latencies_us"], 0.5) for r in rs) / 1000,
             "run_p99_ms": statistics.median(pct(r["latencies_us"], 0.99) for r in rs) / 1000,
             "stall_s": statistics.median(r["stall_seconds"] for r in rs),
             "trace_s": statistics.median(r["seconds"] for r in rs)}
        if loader:
            s["all_in_s"] = statistics.median(r["loader_done_seconds"] for r in rs)
            s["requests"] = statistics.median(r["storage_requests"] for r in rs)
        out.append(s)
    for s in out:  # ratios to loader off, and every page in against the goal
        same = [o for o in out if o["trace"] == s["trace"]]
        off = next(o for o in same if o["store"] == s["store"] and o["case"] == "loader off")
        s["p50_vs_off"] = s["p50_ms"] / off["p50_ms"]
        s["p99_vs_off"] = s["p99_ms"] / off["p99_ms"]
        s["max_vs_off"] = s["max_ms"] / off["max_ms"]
        local = next(o for o in same if o["store"] == "local" and o["case"] == "loader on")
        if "all_in_s" in s and s["store"] in download_s:
            s["all_in_goal_s"] = 1.3 * local["all_in_s"] + download_s[s["store"]]
            s["all_in_vs_goal"] = s["all_in_s"] / s["all_in_goal_s"]
    return out


def print_table(a, size, blocks, trace, summary):
    what = (f"{a.accesses} random accesses" if trace == "random"
            else f"the first {a.sequential_mib} MiB touched page after page")
    print(f"\nDemand faults during a lazy restore: {a.mib} MiB image (hlt-mkimage seed 7), checkpoint "
          f"{size / 2**20:.0f} MiB, {blocks} blocks; {what}, one thread; {a.runs} runs")
    print("| store | case | faults | p50 ms | p99 ms | max ms | vs loader off p50 / p99 / max | run p50 / p99 ms "
          "(median) | stall s | trace s | every page in s | goal s (1.3 x local + download) | requests |")
    print("|" + " --- |" * 13)
    for s in summary:
        ratio = "-" if s["case"] == "loader off" else \
            f"{s['p50_vs_off']:.2f}x / {s['p99_vs_off']:.2f}x / {s['max_vs_off']:.2f}x"
        all_in = f"{s['all_in_s']:.2f}" if "all_in_s" in s else "-"
        goal = f"{s['all_in_goal_s']:.2f} ({s['all_in_vs_goal']:.2f}x)" if "all_in_goal_s" in s else "-"
        req = f"{s['requests']:.0f}" if "requests" in s else "-"
        print(f"| {s['store']} | {s['case']} | {s['faults']} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | "
              f"{s['max_ms']:.2f} | {ratio} | {s['run_p50_ms']:.2f} / {s['run_p99_ms']:.2f} | {s['stall_s']:.3f} | "
              f"{s['trace_s']:.2f} | {all_in} | {goal} | {req} |")
