"""The aged desktop of issue 27 item 4: before its saves, bench_desktop.py --age-rounds N uses the desktop for a
while, as its user would, so that its physical memory is fragmented: each round (aging/age-round.sh, run in the
guest through the guest agent) opens tabs of a page shipped with the bench in the running Firefox (they stay open),
starts and closes a second Firefox, a terminal, the file manager and the application finder, runs memory churns
in processes that exit, reads random files of /usr into the page cache and, every other round, drops it. Then the
counter page is opened again in a new tab in front (the first counter tab stays behind the aging tabs) and the
bench waits until its timer moves and a key is counted, as after a boot. Not reliable yet: in one run of two the
new tab stayed white (bench/results/2026-11-28-desktop-aged/README.md).

The guest's /proc/buddyinfo and /proc/meminfo before and after are kept: free memory in blocks of each order,
the fragmentation the rounds left.
"""

import os
import time

from hltharness import realguest
from hltharness.qga import VirshAgent

HERE = os.path.dirname(os.path.abspath(__file__))
GUEST_DIR = "/var/tmp/halite-aging"  # in the guest; readable by its user (the pages are opened by its Firefox)
SHIPPED = ("page.html", "churn.py", "age-round.sh")


def ship(agent):
    agent.shell(f"rm -rf {GUEST_DIR}; mkdir -p {GUEST_DIR}; chmod 755 {GUEST_DIR}", timeout=120)
    for name in SHIPPED:
        with open(os.path.join(HERE, "aging", name), "rb") as f:
            data = f.read()
        r = agent.exec(["/bin/sh", "-c", f"cat > {GUEST_DIR}/{name} && chmod 644 {GUEST_DIR}/{name}"], timeout=120,
                       input_data=data)
        if r.exitcode != 0:
            raise RuntimeError(f"could not copy {name} into the guest: {r}")


def guest_memory(agent):
    """The guest's free blocks by order (buddyinfo, zones summed) and its meminfo figures in MiB."""
    r = agent.shell("cat /proc/buddyinfo; echo ---; cat /proc/meminfo", timeout=120)
    buddy_text, _, mem_text = r.stdout.partition("---")
    free_by_order = []
    for line in buddy_text.splitlines():
        counts = [int(x) for x in line.split()[4:]]
        free_by_order = [a + b for a, b in zip(counts, free_by_order)] if free_by_order else counts
    mem = {}
    for line in mem_text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            mem[parts[0].rstrip(":")] = int(parts[1])
    pages_free = sum(n << order for order, n in enumerate(free_by_order))
    return {"free_blocks_by_order": free_by_order,
            "free_mib_in_blocks_of_order_9_up": sum(n << order for order, n in enumerate(free_by_order)
                                                    if order >= 9) * 4 // 1024,
            "free_mib": pages_free * 4 // 1024,
            **{f"{k}_mib": mem.get(k, 0) // 1024 for k in ("MemFree", "MemAvailable", "Cached", "AnonPages",
                                                           "Shmem", "Slab")}}


def age(a, lv, name, work, log):
    """Runs a.age_rounds rounds of use in domain `name`; returns what was done and the guest's memory around it."""
    agent = VirshAgent(lv.uri, name)
    agent.wait_ready(180)
    ship(agent)
    out = {"rounds": a.age_rounds, "pages_per_round": a.age_pages, "files_per_round": a.age_files,
           "churn_mib": a.age_churn_mib, "hold_s": a.age_hold, "before": guest_memory(agent), "round_s": []}
    log(f"aging: before {out['before']}")
    t_all = time.monotonic()
    for r in range(a.age_rounds):
        t = time.monotonic()
        res = agent.exec(["/bin/sh", f"{GUEST_DIR}/age-round.sh", GUEST_DIR, str(r), str(a.age_pages),
                          str(a.age_files), str(a.age_churn_mib), str(a.age_hold)], timeout=a.timeout)
        out["round_s"].append(round(time.monotonic() - t, 1))
        if res.exitcode != 0:
            raise RuntimeError(f"aging round {r} failed in the guest: {res}")
        log(f"aging: round {r} in {out['round_s'][-1]} s")
    out["aging_s"] = round(time.monotonic() - t_all, 1)
    out["after"] = guest_memory(agent)
    out["apps_log"] = agent.shell(f"tail -c 4000 {GUEST_DIR}/apps.log", timeout=120).stdout
    with open(os.path.join(work, "aging-apps.log"), "w") as f:
        f.write(out["apps_log"])
    log(f"aging: after {out['after']}")
    # The counter page opened again in a new tab in front (the first counter tab stays open behind the aging
    # tabs). Ctrl+1 through send-key was tried first in run 1 and did not bring the first tab back: after the
    # round's windows closed, the keyboard focus was not Firefox's.
    r = agent.exec(["/bin/sh", f"{GUEST_DIR}/age-round.sh", "--open-counters"], timeout=300)
    if r.exitcode != 0:
        raise RuntimeError(f"could not open the counter page again: {r}")
    scr = realguest.QmpScreen(a.qmp)
    try:
        shown = realguest.wait_for_page(scr, a.timeout, work, name="aged-page")
        out["key_s"] = realguest.wait_key_counted(scr, work, name="aged-key")
    finally:
        scr.close()
    log(f"aging: the counter page is back in front ({shown}), a key counted in {out['key_s']:.1f} s")
    return out
