#!/usr/bin/python3
"""bench/desktop (issue 27 items 3-5): the project's Debian desktop (scripts/build-desktop-guest --variant desktop:
Xfce, Firefox on the counter page, 2 GiB, 2 vCPUs, UEFI, TPM 2.0) as a libvirt domain (guest/desktop/domain.xml)
under libvirt's embedded QEMU driver (TCG), saved once the page shows, restored in one run by

  virsh-restore        `virsh restore` of `virsh save`'s file of the same paused state (the baseline)
  hlt-lazy-halite      hlt-restore libvirt CKPT                 (halite layout: working set, then locality blocks)
  hlt-eager-halite     hlt-restore libvirt CKPT --eager
  hlt-lazy-physical    hlt-restore libvirt CKPT.physical        (hlt-save --policy physical)
  hlt-eager-physical   hlt-restore libvirt CKPT.physical --eager
  hlt-lazy-learn-first hlt-restore libvirt CKPT --learn-layout  (the first restore of the golden: a halite lazy
                       restore that then writes CKPT.learned from the blocks its guest waited for)
  hlt-lazy-learned     hlt-restore libvirt CKPT --learn-layout  (the second: restored from CKPT.learned)
  hlt-lazy-learned-preload  the same with --preload-ws: the learned hot blocks are in before the guest runs
  hlt-lazy-halite-warm as hlt-lazy-halite with --warm-mib 64 (read-ahead while libvirt starts QEMU)
  with --objstore s3,rados (objstore_leg.py), per store:
  virsh-restore-STORE  a plain parallel download of virsh's save file from the store, then `virsh restore` of it,
                       timed from the download's start (the baseline of the STORE rows)
  hlt-lazy-halite-STORE[-warm]   hlt-restore libvirt STORE://... --block-cache DIR (emptied before each run)

each from a cold page cache (`echo 3 > /proc/sys/vm/drop_caches` first), timed from the command's start: to the
guest running, to the first new frame (the page's timer counter past the saved value in a screendump), to
interactive (a key sent with QMP send-key counted by the page), to every page in (hlt-restore's exit; virsh
restore's return); hlt-restore's blocking faults and stall. Sizes: each checkpoint, virsh's save file and
`zstd -3` of the raw memory (hlt-restore raw). Then storms of N clones (`--clone --memory shared`) started one
after the other: each clone's time to running and to interactive, host memory; a contact sheet of every clone's
screen; and issue 27 item 5's checks from inside each clone (clone_checks.py).

usage: bench/desktop/bench_desktop.py --tools build/tools [--out DIR] [--work DIR] [--clones 1,4,8] [--no-tpm]
                                      [--timeout S] [--seed CKPT | --save-seed DIR] [--age-rounds N]
                                      [--access-window S] [--keep-raw FILE] [--no-sizes] [--only LABELS]
                                      [--runs N] [--objstore s3,rados [--ceph-env FILE]]
With --runs N every restore is done N times, in rounds; ratios are against the baseline of the same round and store,
and each row gets the restore's own cost to interactive (interactive minus the local virsh restore's floor).
With --age-rounds N the desktop is used for N rounds before the saves (age.py: the aged desktop of item 4). Each
lazy restore writes the pages its guest asked for into OUT/LABEL.trace (hlt-restore libvirt --record-trace);
fault_analysis.py replays them against both layouts.
Needs root (drop_caches; the embedded driver runs QEMU as root), python3-pil. Writes desktop.csv, desktop.json,
clones.csv, checks.csv, contact-N.png, desktop.png and the logs into --out. The screen is read through a QMP
monitor of the bench's own (domain.render(qmp_socket=...)): hlt-restore holds the embedded libvirt meanwhile.
"""

import argparse
import csv
import re
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "guest"))
sys.path.insert(0, HERE)
from hltharness import domain, realguest  # noqa: E402
from hltharness.libvirt import EmbeddedLibvirt  # noqa: E402
from hltharness.qga import VirshAgent  # noqa: E402
import age  # noqa: E402
import objstore_leg  # noqa: E402
import clone_checks  # noqa: E402
import measure  # noqa: E402
import storm  # noqa: E402

NAME = "desk"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')} load {measure.load_average()}] {msg}", flush=True)


def boot(a, lv, image, work):
    """Boots the desktop as domain NAME and waits until its page shows, moving, and counts a key."""
    # With --save-seed the disk lives in that directory: the seed checkpoint's frozen disk stays there.
    overlay = os.path.join(a.save_seed or work, f"{NAME}.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", image.disk, "-F", "qcow2", overlay], check=True)
    nvram = os.path.join(work, f"{NAME}.vars.fd")
    xml = os.path.join(work, f"{NAME}.xml")
    with open(xml, "w") as f:
        f.write(domain.render(NAME, image, overlay, nvram, os.path.join(work, f"{NAME}.serial.log"), tpm=a.tpm,
                              qmp_socket=a.qmp))
    t = time.monotonic()
    lv.virsh("create", xml)
    agent = VirshAgent(lv.uri, NAME)
    st = realguest.wait_system_running(agent, a.timeout)
    result = {"boot_running_s": time.monotonic() - t, "state": st.state}
    result = wait_page(a, work, t, result)
    if a.save_seed:
        seed = os.path.join(a.save_seed, "desk.hlt")
        out = lv_tool(a, [os.path.join(a.tools, "hlt-save"), "libvirt", NAME, "--connect", lv.uri, "-o", seed,
                          "--then", "cont"], work, "save-seed")
        log(f"seed saved as {seed} (for --seed: keep {a.save_seed}, its frozen disk is there):\n{out.strip()}")
        result["seed_saved"] = seed
    return result


def from_seed(a, lv, work):
    """The desktop as it was saved in a checkpoint of an earlier run (--seed): restored lazily as domain NAME
    instead of booted, which takes 5-20 minutes under TCG on a loaded machine. Restored as a clone (a UUID of its
    own): another bench on this host may run the same seed, and hlt-save libvirt finds a domain's QEMU and swtpm
    among the host's processes by UUID (LibvirtQmpClient::PeerPid, domain_state_files.cc), so two domains with
    one UUID read each other's memory in the access window and save each other's TPM state."""
    seed_dir = os.path.join(work, "seed")
    os.makedirs(seed_dir)
    made = seed_log_dirs(a)
    t = time.monotonic()
    lv_tool(a, [os.path.join(a.tools, "hlt-restore"), "libvirt", a.seed, "--connect", lv.uri, "--disk-dir",
                seed_dir, "--clone", "--name", NAME], work, "seed-restore")
    for d in made:
        log(f"made {d} for the seed's serial log (its run's work directory is gone); remove it when done")
    xml = lv.virsh("dumpxml", NAME)
    a.qmp = re.search(r"<qemu:arg value='unix:([^,']+),server=on", xml).group(1)
    return wait_page(a, work, t, {"seed": a.seed, "seed_restore_s": time.monotonic() - t})


def seed_log_dirs(a):
    """The seed's domain restores as it was saved, serial log files included (libvirt.domain.xml in the
    checkpoint); they were in the work directory of the run that saved it, which may be gone. Creates the missing
    directories (read through the Python binding of the build beside --tools) and returns them."""
    os.environ.setdefault("HALITE_LIBRARY", os.path.join(os.path.dirname(a.tools), "libhalite", "libhalite.so"))
    sys.path.insert(0, os.path.join(REPO, "python"))
    import halite
    with halite.Checkpoint(a.seed) as c:
        xml = c.read_blob("libvirt.domain.xml").decode()
    made = []
    for path in sorted(set(re.findall(r"<log file='([^']+)'", xml))):
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            os.makedirs(d)
            made.append(d)
    return made


def wait_page(a, work, t, result):
    scr = realguest.QmpScreen(a.qmp)
    shown = realguest.wait_for_page(scr, a.timeout, work, serial_log=os.path.join(work, f"{NAME}.serial.log"))
    result["page_moving_s"] = time.monotonic() - t
    result["key_s"] = realguest.wait_key_counted(scr, work)
    scr.close()
    log(f"desktop up: {result}, timer {shown.timer}")
    return result


def saved_screen(a, work, label):
    scr = measure.Screen(a.qmp, work, label)
    scr.connect(30)
    c = scr.counters()
    scr.png(os.path.join(a.out, f"{label}-screen.png"))
    scr.close()
    if c.timer is None or c.keys is None:
        raise RuntimeError(f"the saved screen ({label}) shows no counters: {c}")
    return c


def save_all(a, lv, work):
    """hlt-save libvirt (halite layout, its access window on the running guest; the guest left paused), then
    hlt-save --policy physical and virsh save. QEMU refuses a second migration of a guest paused by a migration,
    so before each later save the guest is resumed and paused again in one virsh command (a few ms of guest time);
    each save's screen is read while it is paused, and its restores are timed against its own counters."""
    agent = VirshAgent(lv.uri, NAME)
    time.sleep(a.settle)  # the session as a user would leave it: the page drawn, nothing starting up
    source = clone_checks.domain_facts(lv, NAME)
    source.update(clone_checks.guest_facts(agent))
    source["macs"] = clone_checks.guest_macs(agent)
    ckpt = os.path.join(work, "desk.hlt")
    saves, saved = {}, {}
    t = time.monotonic()
    window = ["--access-window", str(a.access_window)] if a.access_window is not None else []
    out = lv_tool(a, [os.path.join(a.tools, "hlt-save"), "libvirt", NAME, "--connect", lv.uri, "-o", ckpt, "--then",
                      "stop", *window], work, "save-halite")
    saves.update(hlt_save_halite_s=time.monotonic() - t, save_halite_load=measure.load_average())
    log(f"hlt-save libvirt (halite) in {saves['hlt_save_halite_s']:.1f} s:\n{out.strip()}")
    with open(source["nvram"], "rb") as f:
        source["nvram_bytes"] = f.read()
    saved["halite"] = saved_screen(a, work, "saved-halite")
    lv.virsh(f"resume {NAME}; suspend {NAME}")
    saved["physical"] = saved_screen(a, work, "saved-physical")
    t = time.monotonic()
    lv_tool(a, [os.path.join(a.tools, "hlt-save"), "libvirt", NAME, "--connect", lv.uri, "-o", ckpt + ".physical",
                "--policy", "physical", "--access-window", "0", "--then", "stop"], work, "save-physical")
    saves["hlt_save_physical_s"] = time.monotonic() - t
    lv.virsh(f"resume {NAME}; suspend {NAME}")
    saved["virsh"] = saved_screen(a, work, "saved-virsh")
    t = time.monotonic()
    lv.virsh("save", NAME, os.path.join(work, "desk.virsh-save"))
    saves["virsh_save_s"] = time.monotonic() - t
    if a.seed:
        drop_hlt_restore_args(lv, os.path.join(work, "desk.virsh-save"))
    log(f"hlt-save --policy physical {saves['hlt_save_physical_s']:.1f} s, virsh save {saves['virsh_save_s']:.1f} s; "
        "saved screens: " + ", ".join(f"{k} timer {v.timer} keys {v.keys}" for k, v in saved.items()))
    saves["saved_timers"] = {k: v.timer for k, v in saved.items()}
    return saves, saved, source, ckpt


def drop_hlt_restore_args(lv, image):
    """A domain restored by hlt-restore libvirt keeps hlt-restore's own QEMU arguments (-incoming defer, -qmp on its
    private socket, gone once the restore ended) in its live XML, and `virsh save` records them: `virsh restore`
    then fails ("Failed to bind socket ... No such file or directory"). The seeded desktop was restored so; its save
    image gets its XML without them (virsh save-image-define)."""
    xml = lv.virsh("save-image-dumpxml", image, "--security-info")
    clean = re.sub(r"\s*<qemu:arg value='-incoming'/>\s*<qemu:arg value='defer'/>", "", xml)
    clean = re.sub(r"\s*<qemu:arg value='-qmp'/>\s*<qemu:arg value='unix:[^']*/hlt-libvirt-[^']*'/>", "", clean)
    path = image + ".xml"
    with open(path, "w") as f:
        f.write(clean)
    lv.virsh("save-image-define", image, path)


def lv_tool(a, argv, work, label):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=a.timeout)
    with open(os.path.join(work, f"{label}.log"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}:\n{(p.stdout + p.stderr)[-2000:]}")
    return p.stdout


def sizes(a, ckpt, work):
    """Checkpoint sizes against virsh's save file and zstd -3 of the raw memory (every region, as hlt-restore raw
    writes it)."""
    raw = a.keep_raw or os.path.join(a.raw_dir, f"hlt-bench-desktop-{os.getpid()}.raw")
    try:
        t = time.monotonic()
        subprocess.run([os.path.join(a.tools, "hlt-restore"), "raw", ckpt, "-o", raw], check=True,
                       capture_output=True)
        raw_bytes = os.path.getsize(raw)
        t = time.monotonic()
        subprocess.run(["zstd", "-3", "-q", "-f", "-T1", raw, "-o", raw + ".zst"], check=True)
        zstd_s = time.monotonic() - t
        zstd_bytes = os.path.getsize(raw + ".zst")
    finally:
        for p in (raw, raw + ".zst"):
            if os.path.exists(p) and p != a.keep_raw:
                os.unlink(p)
    s = {"raw_memory_bytes": raw_bytes, "zstd3_bytes": zstd_bytes, "zstd3_s": zstd_s,
         "ckpt_halite_bytes": os.path.getsize(ckpt), "ckpt_physical_bytes": os.path.getsize(ckpt + ".physical"),
         "virsh_save_bytes": os.path.getsize(os.path.join(work, "desk.virsh-save"))}
    for k in ("ckpt_halite_bytes", "ckpt_physical_bytes", "virsh_save_bytes"):
        s[k.replace("_bytes", "_vs_zstd3")] = round(s[k] / zstd_bytes, 3)
    s["ckpt_halite_vs_virsh_save"] = round(s["ckpt_halite_bytes"] / s["virsh_save_bytes"], 3)
    return s


def put_into_stores(a, ckpt, result):
    """With --objstore: the halite checkpoint and virsh's save file put into each store, byte for byte."""
    if not a.objstore:
        return {}
    a.cluster = objstore_leg.Cluster(a.ceph_env, os.path.join(a.work, "ceph"))
    names = {"halite": f"desk-{os.getpid()}.hlt", "virsh": f"desk-{os.getpid()}.virsh-save"}
    result["objstore_puts"] = {}
    for store in a.objstore:
        for kind, path in (("halite", ckpt), ("virsh", os.path.join(a.work, "desk.virsh-save"))):
            secs = a.cluster.put(store, path, names[kind])
            result["objstore_puts"][f"{store}-{kind}"] = {"bytes": os.path.getsize(path), "s": round(secs, 2)}
    log(f"put into {a.objstore}: {result['objstore_puts']}")
    return {store: (a.cluster, names) for store in a.objstore}


def restore_runs(a, lv, ckpt, saved, work, stores):
    """(label, argv, is_hlt, saved counters, block cache dir or None) of every restore of one round."""
    runs = [("virsh-restore", ["virsh", "-q", "-c", lv.uri, "restore", os.path.join(work, "desk.virsh-save"),
                               "--running"], False, saved["virsh"], None)]
    for layout, path in (("halite", ckpt), ("physical", ckpt + ".physical")):
        for mode, extra in (("lazy", []), ("eager", ["--eager"])):
            label = f"hlt-{mode}-{layout}"
            # A lazy restore records the pages its guest asked for (fault_analysis.py replays them offline).
            trace = [] if extra else ["--record-trace", os.path.join(a.out, f"{label}.trace")]
            runs.append((label, [os.path.join(a.tools, "hlt-restore"), "libvirt", path, "--connect", lv.uri,
                                 "--disk-dir", os.path.join(work, label), *trace, *extra], True, saved[layout], None))
            if mode == "lazy" and layout == "halite":
                # The same with a read-ahead while libvirt starts QEMU (hlt-restore libvirt --warm-mib 64).
                runs.append((label + "-warm", [os.path.join(a.tools, "hlt-restore"), "libvirt", path, "--connect",
                                               lv.uri, "--disk-dir", os.path.join(work, label + "-warm"),
                                               "--warm-mib", "64"], True, saved[layout], None))
    for store, (cluster, names) in stores.items():
        copy = os.path.join(work, f"desk.virsh-save.from-{store}")
        container = cluster.bucket if store == "s3" else cluster.pool
        runs.append((f"virsh-restore-{store}", objstore_leg.baseline_argv(store, container, names["virsh"], copy,
                                                                          lv.uri), False, saved["virsh"], None))
        for suffix, extra in (("", []), ("-warm", ["--warm-mib", "64"])):
            label = f"hlt-lazy-halite-{store}{suffix}"
            cache = os.path.join(work, f"block-cache-{store}")
            runs.append((label, [os.path.join(a.tools, "hlt-restore"), "libvirt", cluster.uri(store, names["halite"]),
                                 "--connect", lv.uri, "--disk-dir", os.path.join(work, label), "--block-cache", cache,
                                 *extra], True, saved["halite"], cache))
    # REAP's record and relayout as a broker runs it: two restores of the same golden with --learn-layout, the
    # first writes CKPT.learned, the second restores from it. Both from a cold page cache, both traced.
    for label, extra in (("hlt-lazy-learn-first", []), ("hlt-lazy-learned", []),
                         ("hlt-lazy-learned-preload", ["--preload-ws"])):
        runs.append((label, [os.path.join(a.tools, "hlt-restore"), "libvirt", ckpt, "--connect", lv.uri,
                             "--disk-dir", os.path.join(work, label), "--learn-layout", "--record-trace",
                             os.path.join(a.out, f"{label}.trace"), *extra], True, saved["halite"], None))
    if a.only and LEARNERS & set(a.only) and "hlt-lazy-learn-first" not in a.only:
        a.only.append("hlt-lazy-learn-first")  # a learned restore needs its learner
    return [r for r in runs if not a.only or r[0] in a.only]


LEARNERS = {"hlt-lazy-learned", "hlt-lazy-learned-preload"}


def restores(a, lv, ckpt, saved, work, stores):
    rows = []
    learned = ckpt + ".learned"
    for rnd in range(1, a.runs + 1):
        runs = restore_runs(a, lv, ckpt, saved, work, stores)
        if os.path.exists(learned):
            os.unlink(learned)  # each round's learner writes its own
        if rnd % 2 == 0:  # every other round a -warm variant goes first: neither always follows the other
            for i in range(len(runs) - 1):
                if runs[i + 1][0] == runs[i][0] + "-warm":
                    runs[i], runs[i + 1] = runs[i + 1], runs[i]
        for label, argv, is_hlt, saved_counters, cache in runs:
            if is_hlt:
                disk_dir = argv[argv.index("--disk-dir") + 1]
                shutil.rmtree(disk_dir, ignore_errors=True)
                os.makedirs(disk_dir)
            if cache:
                shutil.rmtree(cache, ignore_errors=True)  # an empty block cache: every block from the store
            if label in LEARNERS and not os.path.exists(learned):
                raise RuntimeError(f"hlt-lazy-learn-first wrote no {learned} (see its log in {work})")
            log(f"round {rnd}, {label}: {' '.join(argv)}")
            row = {"round": rnd}
            row.update(measure.restore_run(label, argv, a.qmp, saved_counters, work, timeout=a.timeout,
                                           is_hlt=is_hlt))
            if label.startswith("hlt-lazy-learn"):
                row["learned_layout"] = learned_line(os.path.join(work, f"{label}.log"))
            if label.startswith("virsh-restore-"):
                row.update(download_figures(os.path.join(work, f"{label}.log")))
                os.unlink(argv[argv.index("--then") - 1])  # the downloaded copy
            log("  " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
            rows.append(row)
            lv.destroy(NAME)
            time.sleep(1)
    return rows


def learned_line(log_path):
    """hlt-restore's "learned layout" lines (which file it restored from; what it wrote)."""
    with open(log_path) as f:
        return " / ".join(line.strip() for line in f if line.startswith("learned layout"))


DOWNLOAD_LINE = re.compile(r"downloaded (\d+) bytes of \S+ \S+ in ([\d.]+) s")


def download_figures(log_path):
    with open(log_path) as f:
        m = DOWNLOAD_LINE.search(f.read())
    return {"download_bytes": int(m.group(1)), "download_s": float(m.group(2))} if m else {}


def ratios(rows):
    """Each row against the baseline of its own round and store (virsh-restore for a local file,
    virsh-restore-STORE for a download from STORE); and the restore's own cost to interactive: interactive minus
    the floor, the floor being the local virsh restore's time from every page in to interactive in that round."""
    for r in rows:
        store = next((s for s in ("s3", "rados") if f"-{s}" in r["run"]), None)
        base_label = f"virsh-restore-{store}" if store else "virsh-restore"
        base = next((b for b in rows if b["run"] == base_label and b["round"] == r["round"]), None)
        local = next((b for b in rows if b["run"] == "virsh-restore" and b["round"] == r["round"]), None)
        if base:
            for k in ("running_s", "frame_s", "interactive_s", "all_in_s"):
                if r.get(k) and base.get(k):
                    r[f"{k}_vs_base"] = round(r[k] / base[k], 3)
        if local and r.get("interactive_s"):
            floor = local["interactive_s"] - local["all_in_s"]
            r["floor_s"] = round(floor, 3)
            r["own_cost_s"] = round(r["interactive_s"] - floor, 3)
            if base and base is not r:
                r["own_cost_vs_base"] = round(r["own_cost_s"] / (base["interactive_s"] - floor), 3)
        # Issue 27's layout goal: blocking faults and stall of each lazy restore against physical order's, same
        # round (local files only).
        phys = next((b for b in rows if b["run"] == "hlt-lazy-physical" and b["round"] == r["round"]), None)
        if phys and not store:
            for k in ("faults_blocking", "stall_ms"):
                if r.get(k) is not None and phys.get(k):
                    r[f"{k}_vs_physical"] = round(r[k] / phys[k], 3)


def print_table(rows, title, keys):
    print(f"\n{title}")
    print("| " + " | ".join(keys) + " |")
    print("|" + " --- |" * len(keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")


def write_csv(path, rows):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [("running_s", "running"), ("frame_s", "first new frame"), ("interactive_s", "key shown"),
            ("all_in_s", "every page in")]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(keys)
    for i, (k, name) in enumerate(keys):
        ax.bar([x + i * width for x in range(len(rows))], [r.get(k) or 0 for r in rows], width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], [r["run"] for r in rows], fontsize=8)
    ax.set_ylabel("seconds from the restoring command's start")
    ax.set_title("2 GiB Debian desktop under TCG, cold page cache")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def write_storm_results(a, result):
    clones = [c for s in result["storms"] for c in s["clones"]]
    for c in clones:
        c.pop("screen", None)
        c.pop("t_restore", None)
    write_csv(os.path.join(a.out, "clones.csv"), clones)
    write_csv(os.path.join(a.out, "checks.csv"), result["checks"])
    print_table(clones, "clones (seconds from each clone's restore start)",
                ["storm", "clone", "restore_started_s", "running_s", "restore_exit_s", "frame_s", "interactive_s",
                 "interactive_from_storm_s", "load_before"])
    if result["storms"]:
        print_table([s["memory"] for s in result["storms"]], "storm host memory", list(result["storms"][0]["memory"]))
    print_table(result["checks"], "checks inside each clone (issue 27 item 5)", ["clone", "check", "ok", "detail"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default=os.path.join(REPO, "build", "tools"))
    ap.add_argument("--out", default="bench-desktop-out")
    ap.add_argument("--work", default="/var/tmp/hlt-bench-desktop")
    ap.add_argument("--raw-dir", default="/dev/shm", help="where the raw memory is written for zstd -3")
    ap.add_argument("--clones", default="1,4,8")
    ap.add_argument("--no-tpm", dest="tpm", action="store_false")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--settle", type=float, default=20, help="seconds between the page showing and the save")
    ap.add_argument("--seed", help="start from this checkpoint of the desktop (an earlier run's desk.hlt, kept with "
                    "its frozen disk) instead of booting it")
    ap.add_argument("--save-seed", help="after booting, save the desktop into DIR/desk.hlt (its disk kept in DIR) for "
                    "later runs' --seed")
    ap.add_argument("--age-rounds", type=int, default=0, help="use the desktop for N rounds before the saves (tabs "
                    "opened, programs opened and closed, memory churned, page cache filled and dropped): age.py")
    ap.add_argument("--age-pages", type=int, default=3, help="Firefox tabs opened (and left open) each round")
    ap.add_argument("--age-files", type=int, default=3000, help="random files of /usr read each round")
    ap.add_argument("--age-churn-mib", type=int, default=300, help="MiB each of a round's two memory churns writes")
    ap.add_argument("--age-hold", type=float, default=20, help="seconds a round's programs stay open")
    ap.add_argument("--access-window", type=float, help="seconds of hlt-save's access window for the halite "
                    "layout (default: hlt-save's)")
    ap.add_argument("--keep-raw", help="write the raw memory (hlt-restore raw) here and keep it")
    ap.add_argument("--no-sizes", dest="sizes", action="store_false", help="skip the size comparison (hlt-restore "
                    "raw and zstd -3 of the whole memory)")
    ap.add_argument("--only", default="", help="restore runs to do (comma-separated labels; default all)")
    ap.add_argument("--runs", type=int, default=1, help="rounds of the restores (each round: every restore once)")
    ap.add_argument("--objstore", default="", help="also restore from these stores of a local Ceph (s3, rados; "
                    "comma-separated): objstore_leg.py")
    ap.add_argument("--ceph-env", help="a running Ceph's env file (scripts/ceph-up DIR/env); default: the bench "
                    "starts one in WORK/ceph and stops it at the end")
    a = ap.parse_args()
    a.only = [x for x in a.only.split(",") if x]
    a.objstore = [x for x in a.objstore.split(",") if x]
    if any(x not in ("s3", "rados") for x in a.objstore):
        ap.error("--objstore takes s3 and/or rados")
    a.tools = os.path.abspath(a.tools)
    a.out = os.path.abspath(a.out)
    if a.save_seed:
        a.save_seed = os.path.abspath(a.save_seed)
        if a.seed:
            ap.error("--save-seed saves a booted desktop; --seed restores one")
        os.makedirs(a.save_seed, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    os.makedirs(a.out, exist_ok=True)
    a.qmp = f"/tmp/hbd{os.getpid()}.qmp"
    image = realguest.build_image("desktop", log_path=os.path.join(a.work, "build.log"))
    log(f"image {image.disk} ({'cached' if image.cached else 'built'}), recipe {image.recipe_hash}")
    a.cluster = None
    lv = EmbeddedLibvirt(f"/tmp/hbd-lv-{os.getpid()}")
    lv.setup()
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "image": image.disk, "recipe_hash": image.recipe_hash,
              "tpm": a.tpm, "cpus": os.cpu_count()}
    try:
        result["boot"] = from_seed(a, lv, a.work) if a.seed else boot(a, lv, image, a.work)
        if a.age_rounds:
            result["aging"] = age.age(a, lv, NAME, a.work, log)
        result["saves"], saved, source, ckpt = save_all(a, lv, a.work)
        if a.sizes:
            result["sizes"] = sizes(a, ckpt, a.work)
            log("sizes: " + json.dumps(result["sizes"]))
        stores = put_into_stores(a, ckpt, result)
        rows = restores(a, lv, ckpt, saved, a.work, stores)
        ratios(rows)
        result["restores"] = rows
        write_csv(os.path.join(a.out, "desktop.csv"), rows)
        plot(rows, os.path.join(a.out, "desktop.png"))
        print_table(rows, "restores (seconds from the command's start; cold page cache)",
                    ["round", "run", "download_s", "running_s", "frame_s", "interactive_s", "all_in_s",
                     "faults_blocking", "stall_ms", "faults_blocking_vs_physical", "stall_ms_vs_physical",
                     "interactive_s_vs_base", "all_in_s_vs_base", "floor_s", "own_cost_s", "own_cost_vs_base",
                     "load_before", "load_after"])
        result["storms"], result["checks"] = [], []
        try:
            storm.run_storms(a, lv, ckpt, saved["halite"], source, log, result["storms"], result["checks"])
        finally:
            write_storm_results(a, result)
    finally:
        if a.cluster:
            a.cluster.stop()
        with open(os.path.join(a.out, "desktop.json"), "w") as f:
            json.dump(result, f, indent=1, default=lambda o: None)
        lv.cleanup(keep_logs_in=a.work)
        logs = os.path.join(a.out, "logs")
        os.makedirs(logs, exist_ok=True)
        for n in os.listdir(a.work):
            if n.endswith((".log", ".xml")):
                shutil.copy(os.path.join(a.work, n), logs)
    failed = [c for c in result.get("checks", []) if not c["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
