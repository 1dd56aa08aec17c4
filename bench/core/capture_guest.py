#!/usr/bin/env python3
"""Capture the memory of one of the project's guests as a raw image for the compression corpus (bench_corpus).

The guest (guest/, built by scripts/build-guest) boots under QEMU with a workload, runs until the workload is
settled, is saved with `hlt-save qemu` and quit, and the checkpoint is exported with `hlt-restore raw`: the image
is the guest's RAM as a restore would give it back (every RAMBlock, in order).

    capture_guest.py --tools build/tools --out IMAGE [--guest-dir DIR] [--mem 1G]
                     (--memcheck MIB | --memsim MIB [--age S] | --redis KEYS)

  --memcheck MIB   memcheck over MIB (its pages are hashes: incompressible), after 2 verified passes
  --memsim MIB     memsim over MIB, 8 processes of which 2 active (a desktop), after 5 s of operations; --age S
                   runs memage for S seconds first (long-lived residents holding 40 % of memory, the rest churned)
  --redis KEYS     redis-server (a --with-redis guest) loaded with KEYS records: JSON-like documents of a few
                   hundred bytes made of words, numbers and ids, as a cache or session store holds them

IMAGE.manifest records the command, the guest's manifest and the QEMU version.
"""

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402

WORDS = ("user session cart item price quantity total order status shipped pending account email name city "
         "country street phone created updated token device browser locale currency discount coupon review "
         "rating product category brand color size stock warehouse delivery invoice payment method card").split()


def redis_record(rng, i):
    fields = [f'"id":{i}', f'"user":"u{rng.randrange(50000)}"', f'"ts":{1700000000 + rng.randrange(10**7)}']
    for _ in range(rng.randrange(4, 14)):
        k = rng.choice(WORDS)
        if rng.random() < 0.5:
            v = f'"{" ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 6)))}"'
        else:
            v = str(rng.randrange(10**rng.randrange(1, 7)))
        fields.append(f'"{k}":{v}')
    return "{" + ",".join(fields) + "}"


def resp(*parts):
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        p = p.encode() if isinstance(p, str) else p
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


def load_redis(port, keys, seed=1):
    rng = random.Random(seed)
    deadline = time.monotonic() + 60
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    batch = 1000
    for start in range(0, keys, batch):
        n = min(batch, keys - start)
        s.sendall(b"".join(resp("SET", f"session:{start + j}", redis_record(rng, start + j)) for j in range(n)))
        got = b""
        while got.count(b"\r\n") < n:
            chunk = s.recv(1 << 16)
            if not chunk:
                raise RuntimeError("redis closed the connection")
            got += chunk
        if b"-" in got[:1]:
            raise RuntimeError(f"redis: {got[:200]!r}")
    s.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--guest-dir")
    ap.add_argument("--mem", default="1G")
    kind = ap.add_mutually_exclusive_group(required=True)
    kind.add_argument("--memcheck", type=int, metavar="MIB")
    kind.add_argument("--memsim", type=int, metavar="MIB")
    kind.add_argument("--redis", type=int, metavar="KEYS")
    ap.add_argument("--age", type=int, default=0, metavar="S")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="capture-", dir=os.path.dirname(os.path.abspath(a.out)))
    serial, qmp, ckpt = (os.path.join(work, n) for n in ("serial.log", "qmp.sock", "guest.hlt"))
    extra, append = [], ""
    if a.memcheck:
        workload, args, settled = "memcheck", ["--mib", str(a.memcheck)], (r"memcheck pass=\d+ .* OK", 2)
    elif a.memsim:
        workload = "memsim"
        args = ["--mib", str(a.memsim), "--procs", "8", "--active", "2", "--pattern", "zipf", "--write-pct", "20"]
        settled = (r"memsim t_ms=", 50)  # 5 s of operations at the 100 ms report interval
        if a.age:
            append = f"hlt.age={a.age}"
    else:
        port = free_port()
        workload, args, settled = "redis", [], (r"HLT-GUEST NET", 1)
        extra = ["-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:6379",
                 "-device", "virtio-net-pci,netdev=n0,romfile="]
    kw = dict(mem=a.mem, workload=workload, workload_args=args, qmp=qmp, gdir=a.guest_dir, append=append, extra=extra)
    g = launch.Guest.start(serial, stderr_path=os.path.join(work, "qemu.err"), **kw)
    try:
        g.wait_for(launch.READY_LINE, timeout=600 + a.age)
        g.wait_for(settled[0], count=settled[1], timeout=900, fail=r" BAD ")
        if a.redis:
            time.sleep(3)  # the server answers about 2 s after NET
            load_redis(port, a.redis)
        subprocess.run([os.path.join(a.tools, "hlt-save"), "qemu", "--qmp", qmp, "-o", ckpt, "--then", "quit"],
                       check=True, stdout=subprocess.DEVNULL)
        g.proc.wait(60)
    finally:
        g.stop()
    subprocess.run([os.path.join(a.tools, "hlt-restore"), "raw", ckpt, "-o", a.out], check=True,
                   stdout=subprocess.DEVNULL)
    qemu_version = subprocess.run([g.argv[0], "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    manifest = os.path.join(launch.guest_dir(a.guest_dir), "manifest.txt")
    with open(a.out + ".manifest", "w") as f:
        f.write(f"image {os.path.basename(a.out)}\ncommand {' '.join(sys.argv)}\nqemu {qemu_version}\n")
        f.write(f"qemu_argv {' '.join(g.argv)}\nbytes {os.path.getsize(a.out)}\n")
        if os.path.exists(manifest):
            f.write("guest manifest:\n" + open(manifest).read())
    for n in os.listdir(work):
        os.unlink(os.path.join(work, n))
    os.rmdir(work)
    print(f"{a.out}: {os.path.getsize(a.out)} bytes")


if __name__ == "__main__":
    main()
