#!/usr/bin/env python3
"""The README's tables from raw/: saves (ab.sh: CPU s, wall s, file bytes) and faults (bench_corpus: page and block
cost at the defaults), main against this branch, medians over the runs of each."""
import csv
import statistics

IMAGES = ["repeats", "mixed", "sources", "generated", "random", "zero", "desktop"]


def rows(path):
    return list(csv.DictReader(open(path)))


def med(rs, k):
    return statistics.median(float(r[k]) for r in rs)


faults = {}
for name, who in [("defaults-main-1", "main"), ("defaults-main-2", "main"), ("defaults-branch-1", "branch"),
                  ("defaults-branch-2", "branch"), ("desktop-main", "main"), ("desktop-new", "branch")]:
    for r in rows(f"raw/{name}.csv"):
        faults.setdefault((r["image"], who), []).append(r)

print("| image | zstd -3 bytes (library) | file bytes main | x zstd main | file bytes branch | x zstd branch | coding main "
      "| coding branch | page CPU p50 us main -> branch | block wall p50 us main -> branch | runs |")
print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: |")
for i in IMAGES:
    a, b = faults[(i, "main")], faults[(i, "branch")]
    for rs in (a, b):
        assert all(r["file_bytes"] == rs[0]["file_bytes"] and r["coding"] == rs[0]["coding"] for r in rs)
    z = int(a[0]["zstd3_bytes"])
    fa, fb = int(a[0]["file_bytes"]), int(b[0]["file_bytes"])
    print(f"| {i} | {z:,} | {fa:,} | {fa / z:.5f} | {fb:,} | {fb / z:.5f} | {a[0]['coding']} | {b[0]['coding']} "
          f"| {med(a, 'page_cpu_p50_us'):.1f} -> {med(b, 'page_cpu_p50_us'):.1f} "
          f"| {med(a, 'block_p50_us'):.1f} -> {med(b, 'block_p50_us'):.1f} | {len(a)} + {len(b)} |")
print()

saves = rows("raw/saves-defaults.csv") + rows("raw/saves-desktop.csv")
print("| image | raw GB | CPU s main | CPU s branch | ratio | wall s main | wall s branch | GB raw / wall s main -> branch "
      "| file bytes main -> branch | load1 during | runs |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |")
for i in IMAGES:
    img = "desktop-raw" if i == "desktop" else i
    a = [r for r in saves if r["image"] == img and r["binary"] == "hlt-save.main"]
    b = [r for r in saves if r["image"] == img and r["binary"] == "hlt-save.new"]
    gb = int(a[0]["raw_bytes"]) / 1e9
    ca, cb, wa, wb = med(a, "cpu_s"), med(b, "cpu_s"), med(a, "wall_s"), med(b, "wall_s")
    loads = [float(r["load1"]) for r in a + b]
    print(f"| {i} | {gb:.3f} | {ca:.2f} | {cb:.2f} | {cb / ca:.3f} | {wa:.2f} | {wb:.2f} | {gb / wa:.3f} -> {gb / wb:.3f} "
          f"| {int(a[0]['file_bytes']):,} -> {int(b[0]['file_bytes']):,} | {min(loads):.1f}-{max(loads):.1f} "
          f"| {len(a)} + {len(b)} |")
