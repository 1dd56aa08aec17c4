"""Storms of N desktop clones sharing memory (`hlt-restore libvirt CKPT --clone --memory shared`), as a VDI broker
would start them: one restore after the other, each clone watched from the moment its restore returns (a thread
per clone: first new frame, then a key counted), host memory once every clone is interactive, a contact sheet of
every clone's screen, and issue 27 item 5's checks inside each clone.

Every clone's QEMU opens the bench's QMP socket at the saved domain's path (the path is in the saved XML); the
socket is renamed to PATH.NAME as soon as its restore returns, before the next clone starts.
"""

import os
import threading
import time

import clone_checks
import measure


def meminfo_kib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def smaps_rollup(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1].isdigit():
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return out


def qemu_pids(names):
    """QEMU processes of the named domains (libvirt names them guest=NAME)."""
    pids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == b"-name" and argv[i + 1].startswith(b"guest="):
                name = argv[i + 1][6:].split(b",")[0].decode()
                if name in names:
                    pids[name] = int(pid)
    return pids


def watch(clone, scr, saved, timeout):
    try:
        scr.connect(30)
        clone.update(measure.watch_screen(scr, clone["t_restore"], saved, timeout))
    except Exception as e:  # noqa: BLE001 - recorded per clone, the storm goes on
        clone["error"] = str(e)


def run_storm(a, lv, ckpt, saved, n, log):
    names = [f"s{n}c{i}" for i in range(1, n + 1)]
    disk_dir = os.path.join(a.work, f"storm{n}")
    os.makedirs(disk_dir, exist_ok=True)
    measure.drop_caches()
    avail_before = meminfo_kib("MemAvailable")
    t_storm = time.monotonic()
    clones, threads = [], []
    for name in names:
        if os.path.exists(a.qmp):
            os.unlink(a.qmp)
        c = {"storm": n, "clone": name, "load_before": measure.load_average()}
        c["t_restore"] = time.monotonic()
        c["restore_started_s"] = c["t_restore"] - t_storm
        cmd = measure.Command([os.path.join(a.tools, "hlt-restore"), "libvirt", ckpt, "--connect", lv.uri, "--clone",
                               "--name", name, "--memory", "shared", "--disk-dir", disk_dir], c["t_restore"],
                              os.path.join(a.work, f"storm{n}-{name}.log"))
        rc = cmd.wait(a.timeout)
        if rc != 0:
            raise RuntimeError(f"clone {name}: hlt-restore exited {rc}:\n{cmd.text()[-2000:]}")
        c["running_s"] = cmd.line_time(measure.RUNNING_LINE)
        c["restore_exit_s"] = cmd.exit_s
        c.update({k: v for k, v in measure.hlt_restore_figures(cmd.text()).items() if k.startswith("clock")})
        path = f"{a.qmp}.{name}"
        os.rename(a.qmp, path)
        scr = measure.Screen(path, a.work, f"storm{n}-{name}")
        c["screen"] = scr
        th = threading.Thread(target=watch, args=(c, scr, saved, a.timeout), daemon=True)
        th.start()
        clones.append(c)
        threads.append(th)
    for th in threads:
        th.join(a.timeout + 60)
    for c in clones:
        if "interactive_s" in c:
            c["interactive_from_storm_s"] = c["t_restore"] - t_storm + c["interactive_s"]
    pids = qemu_pids(set(names))
    mem = {"storm": n, "mem_available_drop_mib": (avail_before - meminfo_kib("MemAvailable")) / 1024,
           "qemu_pss_mib": sum(smaps_rollup(p).get("Pss", 0) for p in pids.values()) / 1024,
           "qemu_private_dirty_mib": sum(smaps_rollup(p).get("Private_Dirty", 0) for p in pids.values()) / 1024,
           "qemu_rss_mib": sum(smaps_rollup(p).get("Rss", 0) for p in pids.values()) / 1024,
           "clones_interactive": sum(1 for c in clones if "interactive_s" in c), "load": measure.load_average()}
    log(f"storm of {n}: " + ", ".join(f"{c['clone']} running {c.get('running_s') or 0:.2f} s, interactive "
                                      f"{c.get('interactive_s', float('nan')):.2f} s {c.get('error', '')}"
                                      for c in clones) + f"; memory {mem}")
    return clones, mem


def contact_sheet(clones, path, n):
    from PIL import Image, ImageDraw
    shots = []
    for c in clones:
        png = path.replace(".png", f"-{c['clone']}.png")
        try:
            c["screen"].png(png)
            shots.append((c["clone"], Image.open(png).convert("RGB")))
            os.unlink(png)
        except Exception as e:  # noqa: BLE001
            c.setdefault("error", f"no screendump: {e}")
    if not shots:
        return None
    cols = min(4, len(shots))
    w, h = 320, 200
    sheet = Image.new("RGB", (cols * w, ((len(shots) + cols - 1) // cols) * (h + 16)), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (name, img) in enumerate(shots):
        x, y = (i % cols) * w, (i // cols) * (h + 16)
        sheet.paste(img.resize((w, h)), (x, y + 16))
        draw.text((x + 4, y + 2), f"{name} (storm of {n})", fill="black")
    sheet.save(path)
    return path


def screen_ok(c):
    """Not a black display: the clone's screen showed the page and counted a key."""
    if "interactive_s" in c:
        return True, f"page shown, timer {c.get('timer')}, keys {c.get('keys')}"
    return False, c.get("error", "no key counted")


def run_storms(a, lv, ckpt, saved, source, log, storms, checks):
    """Appends to `storms` and `checks` as it goes (the caller keeps what was measured if a later storm fails)."""
    for n in [int(x) for x in a.clones.split(",") if x]:
        need_mib = 1024 * n  # each clone's writes and QEMU; the image itself is shared through the page cache
        if meminfo_kib("MemAvailable") / 1024 < need_mib + 4096:
            log(f"storm of {n}: skipped, MemAvailable {meminfo_kib('MemAvailable') // 1024} MiB < {need_mib + 4096}")
            continue
        clones, mem = run_storm(a, lv, ckpt, saved, n, log)
        sheet = contact_sheet(clones, os.path.join(a.out, f"contact-{n}.png"), n)
        for c in clones:
            c["screen"].close()
        names = [c["clone"] for c in clones]
        clone_checks.write_tokens(lv, names)
        swtpm_dir = os.path.join(lv.root, "lib", "swtpm")
        for c in clones:
            rows = clone_checks.check_clone(lv, c["clone"], source, source["nvram_bytes"], swtpm_dir, screen_ok(c),
                                            a.tpm)
            checks += rows
            for r in rows:
                log(f"  {r['clone']}: {'ok  ' if r['ok'] else 'FAIL'} {r['check']}: {r['detail']}")
        for c in clones:
            c.pop("screen", None)
            c.pop("t_restore", None)
            lv.destroy(c["clone"])
        storms.append({"n": n, "clones": clones, "memory": mem, "contact_sheet": sheet})
