#!/usr/bin/env python3
"""The driver of capi_libvirt_session_test (C99, HLT_SESSION_LIBVIRT): the libvirt guest tests' harness boots the
test guest as domain "desk" under libvirt's embedded QEMU driver (TCG); the C program saves it
(hlt_libvirt_save_create, --then destroy), then restores clone cs1 with shared memory and clone cr1 lazily, killed and resumed (its own checks and figures
in its output). Then, here: both clones continue memcheck from where the save left it (no fresh boot, no BAD), and
cs1's QEMU maps the image server's image privately as its RAM; the servers the session started are libhalite's
daemon (found beside libhalite.so; hlt-restore and halite-image-server on PATH are tripwires that must not run:
no tool is called); they are stopped.

usage: capi_libvirt_session_test.py --tools DIR --work DIR --test PROGRAM

Exit 0 pass, 1 fail, 77 skipped (as libvirt_guest_test.py: libvirt's QEMU driver, QEMU, the guest build,
userfaultfd or /dev/fuse unavailable; the reason is printed loudly)."""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "libvirt-integration", "tests"))
from libvirt_guest_test import (OK_RX, Env, Fail, Skip, expect_daemon, find_pids, log, maps_of, read,  # noqa: E402
                               stop_server, tool_tripwire, tripped)
from hltharness.scratch import Scratch  # noqa: E402


def run(env, test):
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server and the RAM directory server are FUSE file systems")
    env.boot_source()
    ckpt = env.path("desk.hlt")
    # The save through the C API too (hlt_libvirt_save_create), in a process of its own (libvirt's embedded driver
    # holds its root while a process that connected lives).
    env.tool([test, "save", env.uri, ckpt, "desk"], "save")
    if "capi libvirt save: OK" not in read(env.path("save.out")) or env.domains():
        raise Fail(f"the save did not finish or left the domain: {read(env.path('save.out'))} {env.domains()}")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    dirs = {d: env.path(d) for d in ("disks", "images", "status", "restores")}
    for d in dirs.values():
        os.makedirs(d)
    # The session finds the image server's daemon itself, beside libhalite.so; the tools and a daemon on PATH are
    # tripwires.
    wire = tool_tripwire(env.path("tripwire"))
    run_env = dict(os.environ, HALITE_RUN_DIR=dirs["restores"], PATH=wire + os.pathsep + os.environ.get("PATH", ""))
    servers = []
    try:
        argv = [test, env.uri, ckpt, dirs["disks"], dirs["images"], dirs["status"]]
        log("$ " + " ".join(argv))
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env,
                           timeout=900)
        print(p.stdout, flush=True)
        stats = [os.path.join(dirs["images"], d, ".stats") for d in os.listdir(dirs["images"])
                 if os.path.exists(os.path.join(dirs["images"], d, ".stats"))]
        for s in stats:
            with open(s) as f:
                servers.append((json.load(f)["pid"], "image server"))
        servers += [(pid, "RAM directory server") for pid in find_pids("serve-ram-dir")
                    if env.root in read(f"/proc/{pid}/cmdline").replace("\0", " ")]
        if p.returncode != 0 or "capi libvirt session: OK" not in p.stdout:
            raise Fail(f"{test} exited {p.returncode}")
        if len(stats) != 1:
            raise Fail(f"expected the one image server the session started under {dirs['images']}: {stats}")
        # The servers the session started are libhalite's daemon; nothing ran a tool.
        if tripped(wire):
            raise Fail(f"a restore through the C API ran from PATH: {tripped(wire)}")
        if len(servers) != 2:
            raise Fail(f"expected the image server and the RAM directory server: {servers}")
        expect_daemon(servers, env.daemon_bin)
        server_argv = read(f"/proc/{servers[0][0]}/cmdline").split("\0")
        if server_argv[1] != "serve":
            raise Fail(f"the image server runs {server_argv[:3]}, not {env.daemon_bin} serve")
        image = os.path.join(os.path.dirname(stats[0]), "ckpt.pc.ram")
        pids = find_pids("qemu-system", "guest=cs1,", env.root)
        if len(pids) != 1:
            raise Fail(f"cs1: expected one QEMU, found {pids}")
        m = maps_of(pids[0], image)
        if not m or m[0][1] != "rw-p":
            raise Fail(f"cs1: QEMU {pids[0]} does not map {image} privately: {m}")
        for name in ("cs1", "cr1"):
            passes = env.wait_passes(env.path("desk.serial.log." + name), 2, after=saved_after)
            log(f"{name} continues memcheck: passes {passes[:3]}... (the save was after pass {saved_after})")
        log("PASS capi libvirt session: a shared clone, a lazy clone killed and resumed, through the C API")
    finally:
        for name in env.domains():
            env.virsh("destroy", name, check=False)
        for pid, what in servers:
            stop_server(pid, what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--test", required=True)
    a = ap.parse_args()
    env = Env(a.tools, a.work)
    scratch, passed = Scratch(a.work, whole=True, log=log), False
    try:
        env.setup()
        run(env, a.test)
        passed = True
        return 0
    except Skip as e:
        passed = True
        print("*" * 70 + f"\ncapi_libvirt_session_test: SKIPPED: {e}\n" + "*" * 70, flush=True)
        return 77
    except Fail as e:
        print(f"FAIL: {e}", flush=True)
        return 1
    finally:
        env.cleanup()
        scratch.finish(passed)


if __name__ == "__main__":
    sys.exit(main())
