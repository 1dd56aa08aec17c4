"""What test_libvirt.py runs as processes of their own (libvirt's embedded driver, once a process connected,
holds its root's lock until that process exits, so each step that talks to libvirt is a process):

    libvirt_script.py save URI CKPT                   saves domain "desk" (then destroy); prints the figures
    libvirt_script.py lazy URI CKPT DISK_DIR STATUS   a lazy clone "pr1" slowed to 2 MiB/s, then sleeps (killed)
    libvirt_script.py main URI CKPT DISK_DIR STATUS IMAGE_DIR [SERVER_PROGRAM]   (default: libhalite's daemon)
                                                      resumes pr1, then restores clone "ps1" with memory shared;
                                                      prints each one's stats, domain and events as JSON lines"""
from __future__ import annotations

import dataclasses
import json
import sys
import time

import halite


def report(what: str, r: halite.libvirt.DomainRestore) -> None:
    events = [dataclasses.asdict(e) for e in r.events()]
    print(json.dumps({"what": what, "domain": r.domain, "uuid": r.uuid, "stats": dataclasses.asdict(r.stats()),
                      "events": events}), flush=True)


def main(argv: list[str]) -> int:
    if argv[0] == "save":
        result = halite.libvirt.save("desk", argv[2], connect=argv[1], then="destroy", block_pages=64)
        print(json.dumps({"what": "save", "data_pages": result.data_pages, "zero_pages": result.zero_pages,
                          "checkpoint_bytes": result.checkpoint.file_bytes}), flush=True)
        return 0
    mode, uri, ckpt, disks, status = argv[:5]
    if mode == "lazy":
        r = halite.libvirt.restore(ckpt, connect=uri, clone=True, name="pr1", disk_dir=disks, loader_rate=2 << 20,
                                   status_file=status + "/pr1")
        print(f"pr1 running: {r.stats().running_seconds:.3f} s", flush=True)
        time.sleep(600)  # killed here, mid-restore
        return 1
    image_dir, server_program = argv[5], (argv[6] if len(argv) > 6 else None)
    with halite.libvirt.restore(ckpt, connect=uri, resume="pr1") as r:
        if not r.wait(300):
            raise SystemExit("the resume did not end within 300 s")
        report("resume", r)
    with halite.libvirt.restore(ckpt, connect=uri, clone=True, name="ps1", memory="shared", disk_dir=disks,
                                image_dir=image_dir, server_program=server_program,
                                status_file=status + "/ps1") as r:
        if not r.wait(300):
            raise SystemExit("the shared clone did not end within 300 s")
        report("shared", r)
        r.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
