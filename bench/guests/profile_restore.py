#!/usr/bin/python3
"""Where the time of a lazy restore goes, for a redis checkpoint of bench/run-guests (--keep-checkpoints).

usage: bench/guests/profile_restore.py TOOLS_DIR CKPT_DIR KEYS [NAME ...]

Restores CKPT_DIR/NAME.hlt (default: halite learned) cold and warm into a 4G test guest with the harness's
closed-loop GET load (8 connections x 2, uniform random keys k:0..KEYS-1) and prints, from hlt-restore's
--stats-json: checkpoint open, QEMU start, restore call to running, to all pages in, blocking faults and their
latency, the engine's time in read+verify+decompress and in sending pages to QEMU (its page placement).
"""
import json, os, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hbench import redisdrv  # noqa: E402
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T, R, KEYS = sys.argv[1], sys.argv[2], int(sys.argv[3])
GUEST = os.path.join(REPO, "build", "guest-bench")
for ck in (sys.argv[4:] or ["halite", "learned"]):
    for cache in ("cold", "warm"):
        path = f"{R}/{ck}.hlt"
        if cache == "cold":
            subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
        else:
            subprocess.run(["cat", path], stdout=subprocess.DEVNULL)
        port = 61000 + (os.getpid() % 1000) * 2 + (1 if cache == "warm" else 0)
        stats = f"/tmp/prof-redis-{ck}-{cache}.json"
        if os.path.exists(stats): os.unlink(stats)
        argv = [f"{T}/hlt-restore", "qemu", path, "--quiet", "--stats-json", stats, "--qemu-dir", f"/tmp/profq-{ck}-{cache}", "--",
                "-accel", "tcg", "-cpu", "qemu64", "-machine", "pc", "-m", "4G", "-smp", "1", "-nodefaults", "-no-user-config",
                "-display", "none", "-no-reboot", "-kernel", f"{GUEST}/vmlinux",
                "-initrd", f"{GUEST}/initramfs.cpio", "-append", "console=ttyS0 quiet panic=-1 hlt.workload=redis",
                "-serial", f"file:/tmp/prof-redis-{ck}-{cache}.serial",
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:6379", "-device", "virtio-net-pci,netdev=n0,romfile="]
        t0 = time.time()
        p = subprocess.Popen(argv)
        time.sleep(0.15)
        d = redisdrv.Driver("127.0.0.1", port, KEYS, conns=8, depth=2)
        rc = p.wait()
        t_done = time.time()
        time.sleep(3)
        d.stop()
        st = json.load(open(stats))
        subprocess.run(["kill", str(st["qemu_pid"])])
        done = list(d.done_t)
        after = [t for t in done if t > t_done]
        print(f"{ck} {cache}: rc={rc}")
        print(f"  open {(st['open_done_wall_us'] - st['tool_wall_start_us']) / 1e3:.0f} ms, QEMU start {(st['qemu_ready_wall_us'] - st['open_done_wall_us']) / 1e3:.0f} ms, "
              f"restore call to running {st['start_to_running_us'] / 1e3:.1f} ms, to all pages in {st['start_to_loaded_us'] / 1e3:.0f} ms")
        print(f"  blocking faults {st['faults_blocking']} (p50 {st['blocking_p50_us']:.0f} us, p99 {st['blocking_p99_us']:.0f} us), requests {st['requests']} "
              f"({st['request_pages']} pages), pushed {st['pushed_pages']} pages, {st['bytes_sent'] / 2**20:.0f} MiB sent")
        print(f"  engine read+verify+decompress {st['engine_read_us'] / 1e3:.0f} ms for {st['bytes_read_final'] / 2**20:.0f} MiB read, "
              f"{st['bytes_decompressed'] / 2**20:.0f} MiB out; send to QEMU (install) {st['engine_install_us'] / 1e3:.0f} ms")
        print(f"  GETs answered before all pages were in: {len(done) - len(after)}, rate after: {len(after) / 3:.0f}/s")
