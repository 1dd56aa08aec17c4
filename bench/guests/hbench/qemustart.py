"""Where QEMU's own start goes: exec to QMP answering, for the benchmark's machine, with and without the test
guest's -kernel/-initrd (QEMU reads both files into fw_cfg at start even for an incoming migration), cold and
warm page cache. This is the floor under every restore's time to running."""

import os
import statistics
import subprocess
import time

from hltharness import qmp as qmpmod
from .runner import drop_caches, kill_pid, launch


def _one(argv, sock):
    if os.path.exists(sock):
        os.unlink(sock)
    t0 = time.time()
    p = subprocess.Popen(argv + ["-chardev", f"socket,id=hbq,path={sock},server=on,wait=on",
                                 "-mon", "chardev=hbq,mode=control", "-incoming", "defer"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        q = qmpmod.Qmp.connect(sock, timeout=30, alive=lambda: p.poll() is None)
        t = time.time() - t0
        q.command("quit")
        q.close()
    finally:
        if p.poll() is None:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                kill_pid(p.pid)
                p.wait()
    return t


def measure(mem, accel, gdir, sock_dir, reps=5, log=print):
    variants = {
        "with -kernel/-initrd": launch.qemu_argv(mem=mem, workload="idle", serial_log=None, accel=accel, gdir=gdir),
    }
    bare = list(variants["with -kernel/-initrd"])
    for opt in ("-kernel", "-initrd", "-append"):
        i = bare.index(opt)
        del bare[i:i + 2]
    variants["machine only"] = bare
    for v in variants.values():
        i = v.index("-serial")
        v[i + 1] = "null"
    sock = os.path.join(sock_dir, "qemustart.qmp")
    out = {}
    for name, argv in variants.items():
        for cache in ("cold", "warm"):
            times = []
            for _ in range(reps):
                if cache == "cold":
                    drop_caches()
                times.append(_one(argv, sock))
            out[f"{name}, {cache}"] = {"median_s": statistics.median(times), "min_s": min(times),
                                       "max_s": max(times), "n": reps}
            log(f"QEMU start ({name}, {cache}): median {statistics.median(times) * 1e3:.0f} ms")
    sizes = {os.path.basename(launch.kernel_path(gdir)): os.path.getsize(launch.kernel_path(gdir)),
             os.path.basename(launch.initrd_path(gdir)): os.path.getsize(launch.initrd_path(gdir))}
    return {"mem": mem, "results": out, "files": sizes}


def markdown(m):
    files = ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in m["files"].items())
    out = [f"## QEMU's own start ({m['mem']} guest)", "",
           "QEMU started with the benchmark's machine options, `-incoming defer` and a QMP monitor; time from exec "
           f"to QMP answering (median, min-max of {next(iter(m['results'].values()))['n']}). The test guest boots "
           f"with -kernel/-initrd ({files}), which QEMU reads at start even for an incoming migration.", "",
           "| QEMU | median ms | min-max ms |", "| --- | ---: | ---: |"]
    for k, v in m["results"].items():
        out.append(f"| {k} | {v['median_s'] * 1e3:.0f} | {v['min_s'] * 1e3:.0f}-{v['max_s'] * 1e3:.0f} |")
    return out + [""]
