#!/usr/bin/env python3
"""Medians of the window-* runs (raw/window-{main,branch}-{1,2}.csv) as the markdown table of medians.md."""
import csv
import statistics
import sys

raw = sys.argv[1] if len(sys.argv) > 1 else "raw"


def load(names):
    rows = {}
    for n in names:
        for r in csv.DictReader(open(f"{raw}/{n}.csv")):
            rows.setdefault((r["image"], r["setting"]), []).append(r)
    return rows


main = load(["window-main-1", "window-main-2"])
win = load(["window-branch-1", "window-branch-2"])
print("| image | setting | zstd -3 bytes | file bytes | x zstd | coding | page cpu p50 main | page cpu p50 branch |"
      " page wall p50 main | page wall p50 branch | blk wall p50 main | blk wall p50 branch | blk ratio |")
print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for i in ["repeats", "mixed", "sources", "generated", "random", "zero"]:
    for s in ["defaults", "f0+dict"]:
        a, b = main[(i, s)], win[(i, s)]
        assert all(r["file_bytes"] == a[0]["file_bytes"] and r["coding"] == a[0]["coding"] for r in a + b)

        def med(rs, k):
            return statistics.median(float(r[k]) for r in rs)

        print(f"| {i} | {s} | {int(a[0]['zstd3_bytes']):,} | {int(a[0]['file_bytes']):,} | {float(a[0]['ratio']):.5f} "
              f"| {a[0]['coding']} | {med(a, 'page_cpu_p50_us'):.1f} | {med(b, 'page_cpu_p50_us'):.1f} "
              f"| {med(a, 'page_p50_us'):.1f} | {med(b, 'page_p50_us'):.1f} | {med(a, 'block_p50_us'):.1f} "
              f"| {med(b, 'block_p50_us'):.1f} | {med(b, 'block_p50_us') / med(a, 'block_p50_us'):.3f} |")
