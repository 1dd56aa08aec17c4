#!/usr/bin/python3
"""How well one lazy restore's fault trace predicts another's: an offline estimate of a learned layout
(hlt-restore --learn-layout, REAP's record and relayout) from traces recorded by bench_desktop.py
(hlt-restore libvirt --record-trace), with `hlt-restore replay --loader off` (every block a trace touches is one
blocking fault: the layout's own count, without the live restore's race against its loader).

For every ordered pair of traces (LEARN, NEXT) of restores of the same desktop state:

  pages / in LEARN      NEXT's pages, and how many of them LEARN asked for too
  halite                blocks NEXT touches in the halite layout (CKPT): blocks read on demand with the loader off
  halite outside WS     the same with the working-set blocks loaded first (--preload-ws)
  learned               NEXT's blocks outside the working set AND outside the blocks LEARN touched: what is left
                        when a layout learned from LEARN (its hot blocks = the working set, then LEARN's blocks)
                        had brought its hot blocks in before NEXT's guest asked. Computed as
                        faults(LEARN then NEXT) - faults(LEARN), both with --preload-ws.
  physical              blocks NEXT touches in physical order (CKPT.physical)

A learned layout keeps each demanded block whole (learned_layout.cc), so the block sets of the halite layout are
the learned file's too; the estimate assumes its hot blocks are in before they are needed (an upper bound of
what learning gives; a live restore races its loader). --learned CKPT.learned adds NEXT replayed against a real
learned file with its hot blocks preloaded and the loader on (learned_file_loader_on: blocking faults).

usage: learn_predict.py --tools build/tools --halite CKPT --physical CKPT.physical TRACE... [--json OUT]
"""

import argparse
import itertools
import os
import sys
import tempfile

from fault_analysis import print_rows, read_trace, replay  # same directory: the trace and replay helpers


def write_trace(pages, directory):
    fd, path = tempfile.mkstemp(suffix=".trace", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(pages) + "\n")
    return path


def blocks(tools, ckpt, trace, preload_ws=False):
    """The blocks read on demand: with the loader off, every block the trace touches outside the preloaded ones
    (faults_blocking also counts a second page of a block still being decoded)."""
    r = replay(tools, ckpt, trace, "--loader", "off", *(["--preload-ws"] if preload_ws else []))
    return r["blocks_read_demand"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default="build/tools")
    ap.add_argument("--halite", required=True)
    ap.add_argument("--physical", required=True)
    ap.add_argument("--learned", help="a learned layout of --halite: NEXT replayed against it with the loader on")
    ap.add_argument("--json")
    ap.add_argument("traces", nargs="+", help="NAME=PATH or PATH")
    a = ap.parse_args()
    traces = {}
    for t in a.traces:
        name, _, path = t.rpartition("=")
        traces[name or os.path.basename(path).removesuffix(".trace")] = read_trace(path)
    tmp = tempfile.mkdtemp(prefix="learn-predict-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    rows = []
    try:
        paths = {k: write_trace(v, tmp) for k, v in traces.items()}
        alone_ws = {k: blocks(a.tools, a.halite, p, True) for k, p in paths.items()}
        for learn, nxt in itertools.permutations(traces, 2):
            seen = set(traces[learn])
            both = write_trace(traces[learn] + [p for p in traces[nxt] if p not in seen], tmp)
            row = {"learn": learn, "next": nxt, "pages": len(traces[nxt]),
                   "in_learn": sum(1 for p in traces[nxt] if p in seen),
                   "halite": blocks(a.tools, a.halite, paths[nxt]),
                   "halite_outside_ws": alone_ws[nxt],
                   "learned": blocks(a.tools, a.halite, both, True) - alone_ws[learn],
                   "physical": blocks(a.tools, a.physical, paths[nxt])}
            os.unlink(both)
            for k in ("halite", "halite_outside_ws", "learned"):
                row[f"{k}_vs_physical"] = round(row[k] / max(1, row["physical"]), 3)
            if a.learned:
                r = replay(a.tools, a.learned, paths[nxt], "--preload-ws")
                row["learned_file_loader_on"] = r["faults_blocking"]
            rows.append(row)
    finally:
        for n in os.listdir(tmp):
            os.unlink(os.path.join(tmp, n))
        os.rmdir(tmp)
    print_rows(rows, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
