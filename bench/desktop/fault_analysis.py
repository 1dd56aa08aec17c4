#!/usr/bin/python3
"""Why a layout needs the faults it needs: the pages a desktop's lazy restores asked for (hlt-restore libvirt
--record-trace, one trace per restore) replayed offline with `hlt-restore replay` against each checkpoint of the
same state, with no loader (so every block the trace touches is one blocking fault: the layout's own count,
without the race against the loader that a live restore has):

  blocks touched      the blocks the trace needs (= blocking faults with the loader off)
  outside the WS      the same with the working-set (HOT) blocks loaded first (--preload-ws): the faults on pages
                      the save's access window did not see
  hot blocks          the checkpoint's working-set blocks (read by that preload)

The traces are a lower bound of what each guest accessed: a page the loader had pushed before the guest touched
it is not asked for, so each trace is biased by its own layout's restore order; the union of the traces of one
state is the closest to what the guest touched early on.

usage: fault_analysis.py --tools build/tools --halite CKPT --physical CKPT.physical TRACE... [--json OUT]
"""

import argparse
import json
import os
import subprocess
import sys


def read_trace(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def replay(tools, ckpt, trace, *flags):
    """`hlt-restore replay --json` of `trace` against `ckpt` with extra `flags`; its JSON as a dict."""
    argv = [os.path.join(tools, "hlt-restore"), "replay", ckpt, "--trace", trace, "--json", *flags]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {(p.stdout + p.stderr)[-1000:]}")
    return json.loads(p.stdout)


def print_rows(rows, json_path=None):
    """The rows as a markdown table on stdout (the first row's keys as columns), and as JSON into json_path."""
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + " --- |" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default="build/tools")
    ap.add_argument("--halite", required=True)
    ap.add_argument("--physical", required=True)
    ap.add_argument("--json")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    traces = {os.path.basename(t).removesuffix(".trace"): read_trace(t) for t in a.traces}
    union, seen = [], set()
    for pages in traces.values():
        for p in pages:
            if p not in seen:
                seen.add(p)
                union.append(p)
    work = os.path.dirname(os.path.abspath(a.traces[0]))
    union_path = os.path.join(work, "union.trace.tmp")
    with open(union_path, "w") as f:
        f.write("\n".join(union) + "\n")
    paths = {**{k: v for k, v in zip(traces, a.traces)}, "union": union_path}
    rows = []
    try:
        for name, path in paths.items():
            row = {"trace": name, "pages": len(union) if name == "union" else len(traces[name])}
            for layout, ckpt in (("halite", a.halite), ("physical", a.physical)):
                r = replay(a.tools, ckpt, path, "--loader", "off")
                row[f"{layout}_blocks_touched"] = r["faults_blocking"]
                row[f"{layout}_zero_faults"] = r["faults_zero"]
                w = replay(a.tools, ckpt, path, "--loader", "off", "--preload-ws")
                row[f"{layout}_outside_ws"] = w["faults_blocking"]
                row[f"{layout}_hot_blocks"] = w["blocks_read_preload"]
            row["halite_vs_physical"] = round(row["halite_blocks_touched"] / max(1, row["physical_blocks_touched"]), 3)
            rows.append(row)
    finally:
        os.unlink(union_path)
    print_rows(rows, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
