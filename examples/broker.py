#!/usr/bin/env python3
"""An example VDI broker on libhalite's Python bindings (package `halite`).

It keeps one golden checkpoint (a desktop saved once, e.g. with `hlt-save qemu` or `halite.qemu.save`) and, for
each request that comes in, restores a clone of it lazily into a QEMU of its own: the clone runs as soon as
`halite.qemu.restore` returns, and its pages follow in the background. For every clone it reports what a user
waits for (the request to the clone running) and when all of its memory was in.

    examples/broker.py GOLDEN.hlt --clones 4 --work /run/broker -- -machine pc -m 2G ... -name desktop-{clone}
    printf 'alice\\nbob\\n' | examples/broker.py GOLDEN.hlt --requests - --work /run/broker -- ...
    examples/broker.py GOLDEN.hlt --libvirt qemu:///system --memory shared --clones 8 --work /run/broker

The QEMU arguments are those the golden desktop was saved with. `{clone}` in them becomes the clone's name, and
`{overlay}` its own copy-on-write disk over --overlay BASE.qcow2 (created with qemu-img in the clone's directory),
so that clones never share a writable file. The clones run until the broker ends (--keep S seconds after the last
one is complete), and are stopped then, unless --detach leaves them running.

With --libvirt URI the golden checkpoint is a libvirt domain's (hlt-save libvirt, halite.libvirt.save) and each
clone is a libvirt domain of its own (halite.libvirt.restore with clone=True: new name, UUID, MACs, generation ID,
disk overlays, per-domain files), its RAM copied or (--memory shared) mapped from the host's image server, so that
clones share the golden image's pages. The domains are libvirt's: they keep running when the broker ends.

Output: one line per clone as it starts, a table at the end, and with --json FILE the same figures as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import halite


@dataclass
class Clone:
    name: str
    requested: float  # time.monotonic() of the request
    restore: Optional[halite.qemu.Restore] = None
    qemu_pid: int = 0
    domain: str = ""  # --libvirt: the clone's libvirt domain
    to_running_ms: float = 0.0  # the request to the clone running, as the broker saw it
    library_running_ms: float = 0.0  # the restore call to the guest running, as libhalite measured it
    all_in_ms: float = 0.0  # the request to every page in
    state: str = "requested"
    error: str = ""
    stats: dict[str, object] = field(default_factory=dict)
    waiter: Optional[threading.Thread] = None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="broker.py GOLDEN (--clones N | --requests FILE) [options] -- QEMU_ARGS...")
    p.add_argument("golden", help="the golden checkpoint: a path, s3:// or rados://")
    p.add_argument("--clones", type=int, default=0, help="restore N clones, one request after another")
    p.add_argument("--requests", help="read requests from FILE ('-': stdin), one per line: the clone's name, or "
                   "empty for a generated one")
    p.add_argument("--interval", type=float, default=0.0, help="seconds between generated requests (--clones)")
    p.add_argument("--work", required=True, type=Path, help="directory for each clone's QMP socket, logs and disk")
    p.add_argument("--overlay", type=Path, help="base disk image: each clone gets its own qcow2 overlay ({overlay})")
    p.add_argument("--qemu", help="QEMU binary (default: $HALITE_QEMU or qemu-system-x86_64)")
    p.add_argument("--libvirt", metavar="URI", help="clones as libvirt domains of this libvirt (no QEMU arguments)")
    p.add_argument("--memory", choices=("copy", "shared"), default="copy",
                   help="--libvirt: each clone's RAM its own copy, or mapped from the host image server (shared)")
    p.add_argument("--image-dir", type=Path, help="--libvirt --memory shared: the image server's directory")
    p.add_argument("--loader-rate", type=int, default=0, help="background loader bytes/s per clone (0: unlimited)")
    p.add_argument("--keep", type=float, default=0.0, help="seconds the clones keep running once all are complete")
    p.add_argument("--detach", action="store_true", help="leave the clones running when the broker ends")
    p.add_argument("--json", type=Path, help="write the figures as JSON to this file")
    # Everything after "--" is QEMU's (its flags look like ours: split before argparse sees them).
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.qemu_args = argv[cut + 1:]
    if args.libvirt is None and not args.qemu_args:
        p.error("the golden desktop's QEMU arguments are missing (after --)")
    if args.libvirt is not None and (args.qemu_args or args.overlay is not None):
        p.error("--libvirt clones take their devices and disks from the checkpoint: no QEMU arguments, no --overlay")
    if (args.clones > 0) == (args.requests is not None):
        p.error("give either --clones N or --requests FILE")
    return args


def requests(args: argparse.Namespace) -> Iterator[str]:
    """Clone names, as the requests come in."""
    if args.requests is None:
        for i in range(args.clones):
            if i and args.interval > 0:
                time.sleep(args.interval)
            yield f"clone{i + 1}"
        return
    source = sys.stdin if args.requests == "-" else open(args.requests)
    with source:
        for n, line in enumerate(source, 1):
            yield line.strip() or f"clone{n}"


def qemu_args_for(clone: Clone, args: argparse.Namespace, clone_dir: Path) -> list[str]:
    overlay = ""
    if args.overlay is not None:
        overlay = str(clone_dir / "disk.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
                        str(args.overlay.resolve()), overlay], check=True, capture_output=True, text=True)
    return [a.replace("{clone}", clone.name).replace("{overlay}", overlay) for a in args.qemu_args]


def wait_until_complete(clone: Clone) -> None:
    """On a thread of its own: halite's wait releases the GIL, so every clone's wait runs at once."""
    assert clone.restore is not None
    try:
        clone.restore.wait()
        clone.all_in_ms = (time.monotonic() - clone.requested) * 1000
        clone.state = "complete"
    except halite.HaliteError as e:
        clone.state, clone.error = "failed", str(e)
    clone.stats = asdict(clone.restore.stats())


def start_clone(name: str, args: argparse.Namespace) -> Clone:
    clone = Clone(name=name, requested=time.monotonic())
    clone_dir = args.work / name
    try:
        clone_dir.mkdir(parents=True, exist_ok=False)
        if args.libvirt is not None:
            clone.restore = halite.libvirt.restore(args.golden, connect=args.libvirt, clone=True, name=name,
                                                   memory=args.memory, disk_dir=clone_dir, image_dir=args.image_dir,
                                                   loader_rate=args.loader_rate,
                                                   status_file=clone_dir / "status.json")
        else:
            qemu_args = qemu_args_for(clone, args, clone_dir)
            clone.restore = halite.qemu.restore(args.golden, qemu_args, qemu_dir=clone_dir / "qemu",
                                                qemu_binary=args.qemu, loader_rate=args.loader_rate)
    except FileExistsError:
        clone.state, clone.error = "failed", f"{clone_dir} exists: a clone of that name was started before"
        return clone
    except subprocess.CalledProcessError as e:
        clone.state, clone.error = "failed", f"qemu-img create: {e.stderr.strip()}"
        return clone
    except halite.HaliteError as e:
        clone.state, clone.error = "failed", str(e)
        return clone
    clone.to_running_ms = (time.monotonic() - clone.requested) * 1000
    stats = clone.restore.stats()
    clone.qemu_pid, clone.library_running_ms, clone.state = stats.qemu_pid, stats.running_seconds * 1000, "running"
    if isinstance(clone.restore, halite.libvirt.DomainRestore):
        clone.domain = clone.restore.domain
    clone.waiter = threading.Thread(target=wait_until_complete, args=(clone,), name=f"wait-{name}")
    clone.waiter.start()
    return clone


def report(clones: list[Clone], out: Optional[Path]) -> None:
    print(f"{'clone':<16} {'state':<9} {'qemu pid':>8} {'to running ms':>13} {'libhalite ms':>12} "
          f"{'all in ms':>10} {'faults':>7} {'MiB read':>9}")
    for c in clones:
        read = int(c.stats.get("bytes_read", 0)) / (1 << 20)
        print(f"{c.name:<16} {c.state:<9} {c.qemu_pid:>8} {c.to_running_ms:>13.1f} {c.library_running_ms:>12.1f} "
              f"{c.all_in_ms:>10.1f} {int(c.stats.get('faults', 0)):>7} {read:>9.1f}")
        if c.error:
            print(f"  {c.name}: {c.error}")
    if out is not None:
        fields = ("name", "state", "qemu_pid", "domain", "to_running_ms", "library_running_ms", "all_in_ms", "error",
                  "stats")
        doc = {"clones": [{k: getattr(c, k) for k in fields} for c in clones]}
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, out)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    clones: list[Clone] = []
    try:
        for name in requests(args):
            clone = start_clone(name, args)
            clones.append(clone)
            if clone.state == "failed":
                print(f"{name}: failed: {clone.error}", file=sys.stderr, flush=True)
            else:
                where = f"domain {clone.domain}" if clone.domain else f"QEMU pid {clone.qemu_pid}"
                print(f"{name}: running {clone.to_running_ms:.1f} ms after its request ({where})", flush=True)
        for c in clones:
            if c.waiter is not None:
                c.waiter.join()
        if args.keep > 0:
            time.sleep(args.keep)
        report(clones, args.json)
        if args.detach:
            for c in clones:
                if c.restore is not None and c.state == "complete":
                    c.restore.detach()
    finally:
        for c in clones:
            if c.restore is None:
                continue
            if c.waiter is not None and c.waiter.is_alive():
                # Interrupted while its wait runs: closing the handle under the waiting thread is not allowed.
                print(f"{c.name}: left running (QEMU pid {c.qemu_pid}): interrupted before it was complete",
                      file=sys.stderr)
                continue
            c.restore.close()  # stops the clone's QEMU unless detached
    return 0 if clones and all(c.state == "complete" for c in clones) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
