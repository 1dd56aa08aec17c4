#!/usr/bin/python3
"""bench/desktop's memory churn, run in the aged desktop: allocates chunks of random sizes (64 KiB to 8 MiB, every
page written) up to TARGET MiB, frees every other one, allocates again up to the target, holds them HOLD seconds
and exits. The target is capped at a quarter of MemAvailable when it starts (the guest's own programs, Firefox
first, must not meet the OOM killer). Its pages come from the guest kernel's free lists in whatever order they are
at the time, interleaved with the page cache and the other programs' allocations, and go back at its exit:
physical memory fragmented as a used desktop's is.

usage: churn.py TARGET_MIB HOLD_S SEED
"""
import random
import sys
import time


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    return 0


target = min(int(sys.argv[1]) << 20, mem_available() // 4)
hold = float(sys.argv[2])
rng = random.Random(sys.argv[3])
chunks, total = [], 0


def fill():
    global total
    while total < target:
        size = rng.choice((64, 128, 256, 512, 1024, 2048, 4096, 8192)) << 10
        chunks.append(bytes([rng.randrange(1, 256)]) * size)  # written, not lazily mapped zero pages
        total += size


fill()
for i in range(len(chunks) - 1, -1, -2):
    total -= len(chunks[i])
    chunks[i] = b""
fill()
time.sleep(hold)
