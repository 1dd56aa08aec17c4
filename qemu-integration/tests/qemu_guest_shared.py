"""--memory shared: clones over one image server, the server run as its service, damaged blocks.
"""

import json
import os
import re
import shutil
import subprocess

from qemu_guest_common import stop_server_pid
from hltharness.guesttest import FAIL_RX, Fail, Skip, log, pass_numbers  # noqa: E402
from hltharness.proc import run_tool, start_logged, stop_pid, stop_popen  # noqa: E402
from hltharness.wait import read_text as read, wait_until  # noqa: E402


def scenario_shared(env):
    """Two clones of one checkpoint with --memory shared run side by side from one image server: both continue
    memcheck with their memory verified, and the second decodes no block the first already brought in."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server behind --memory shared is a FUSE file system")
    ckpt, last = env.stopped_checkpoint()
    images = env.path("images")
    os.makedirs(images, exist_ok=True)

    def stats():
        found = [os.path.join(images, d, ".stats") for d in os.listdir(images)
                 if os.path.isdir(os.path.join(images, d)) and os.path.exists(os.path.join(images, d, ".stats"))]
        if len(found) != 1:
            raise Fail(f"expected one image server under {images}, found {found}")
        with open(found[0]) as f:
            j = json.load(f)
        ram = [x for x in j["files"] if x["name"].endswith(".pc.ram")][0]
        return j, ram

    server_pid = None
    try:
        extra = ["--memory", "shared", "--image-dir", images]
        rc, out, err, serial1 = env.restore(ckpt, "shared1", extra)
        if rc != 0 or "image server started" not in out:
            raise Fail(f"the first --memory shared restore (exit {rc}) did not start the image server:\n{out}{err}")
        j, _ = stats()
        server_pid = j["pid"]
        env.expect_continues(serial1, last)
        _, first = stats()
        log(f"clone 1: {first['blocks_decoded']} blocks decoded ({first['distinct_blocks']} distinct), "
            f"{first['pages_stored']} pages stored in the page cache, {first['reads']} reads, "
            f"{first['blocks_to_store']} blocks still to store, {first['store_errors']} store errors")
        rc, out, err, serial2 = env.restore(ckpt, "shared2", extra)
        if rc != 0 or "image server already serving" not in out:
            raise Fail(f"the second --memory shared restore (exit {rc}) did not use the running server:\n{out}{err}")
        env.expect_continues(serial2, last)
        n1 = len(pass_numbers(read(serial1)))
        try:  # the first clone goes on beside the second
            wait_until(lambda: len(pass_numbers(read(serial1))) >= n1 + 2, 60, "two more passes of the first clone",
                       poll=0.2, give_up=lambda: re.search(FAIL_RX, read(serial1)) and "it printed a failure")
        except TimeoutError as e:
            raise Fail(f"the first clone stopped passing while the second ran ({e}):\n" + read(serial1)[-1000:])
        _, second = stats()
        again = (second["blocks_decoded"] - first["blocks_decoded"]) - \
                (second["distinct_blocks"] - first["distinct_blocks"])
        log(f"clone 2: {second['blocks_decoded'] - first['blocks_decoded']} more blocks decoded "
            f"({second['distinct_blocks'] - first['distinct_blocks']} new), {again} decoded again; "
            f"open files {second['open_handles']}, refused writes {second['refused_writes']}")
        # 0: the server locks the pages it stores (page_cache_pin.h), so proactive reclaim (this machine runs a
        # DAMON "pageout" scheme) cannot drop a page no clone maps yet and make the next touch decode it again.
        if again != 0:
            raise Fail(f"the second clone decoded {again} blocks the first had already brought in")
        if second["pin_errors"] != 0 or second["pages_pinned"] == 0:
            raise Fail(f"the server did not pin the pages it stored: {second}")
        if second["open_handles"] != 2 or second["read_errors"] != 0:
            raise Fail(f"image server state: {second}")
        log("PASS shared: two clones side by side over one image server")
    finally:
        env.cleanup()
        env.pids = []
        if server_pid:
            stop_server_pid(server_pid)


def scenario_shared_service(env):
    """The image server as halite-image-server@.service runs it, `hlt-restore serve --image-dir DIR CKPT`, started
    before any restore: a --memory shared restore with the same --image-dir finds it at DIR/FILE_ID and uses it
    instead of starting its own; the guest continues, reading through that server; a second server of the
    checkpoint is refused; once the clone is gone the server stops on SIGTERM and unmounts."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server behind --memory shared is a FUSE file system")
    ckpt, last = env.stopped_checkpoint()
    images = env.path("images-service")
    os.makedirs(images, exist_ok=True)
    out_path = env.path("service-server.out")
    serve = [env.restore_bin, "serve", "--image-dir", images, ckpt]
    log("$ " + " ".join(serve))
    server = start_logged(serve, out_path, dict(os.environ))
    try:
        try:
            mounts = wait_until(lambda: [d for d in os.listdir(images)
                                         if os.path.exists(os.path.join(images, d, "ckpt.pc.ram"))],
                                30, f"the image server's mount under {images}", poll=0.1,
                                give_up=lambda: server.poll() is not None and f"serve exited {server.returncode}")
        except TimeoutError:
            mounts = []
        if not mounts:
            raise Fail(f"serve --image-dir mounted no ckpt.pc.ram under {images}:\n{read(out_path)}"
                       f"{read(out_path + '.err')}")
        rc, out, err, serial = env.restore(ckpt, "shared-service", ["--memory", "shared", "--image-dir", images])
        if rc != 0 or "image server already serving" not in out:
            raise Fail(f"the --memory shared restore (exit {rc}) did not use the running server:\n{out}{err}")
        env.expect_continues(serial, last)
        with open(os.path.join(images, mounts[0], ".stats")) as f:
            j = json.load(f)
        ram = [x for x in j["files"] if x["name"] == "ckpt.pc.ram"][0]
        if j["pid"] != server.pid or ram["reads"] == 0 or ram["open_handles"] != 1:
            raise Fail(f"the clone does not read through the server started first (pid {server.pid}): {j}")
        rc, _, err = run_tool(serve, env.path("service-second.out"), 60)
        if rc == 0 or "already serves" not in err:
            raise Fail(f"a second server of the checkpoint: exit {rc}: {err}")
        log(f"clone reads through the server started first ({ram['reads']} reads, {ram['blocks_decoded']} blocks "
            f"decoded); a second server refused: {err.strip().splitlines()[0]}")
    finally:
        env.cleanup()
        env.pids = []
        # SIGTERM is refused while a clone maps the image; cleanup ended the clone.
        if not stop_popen(server, 30):
            raise Fail("the image server did not stop on SIGTERM once its clone was gone")
    if any(os.path.exists(os.path.join(images, d, "ckpt.pc.ram")) for d in os.listdir(images)):
        raise Fail(f"the image server's mount is still there after it stopped: {os.listdir(images)}")
    log("PASS shared_service: a restore used the image server started as the service does; it unmounted on SIGTERM")


def scenario_shared_corrupt_block(env):
    """--memory shared from a checkpoint with damaged blocks: the image server fails the read of a page in a
    damaged block, the QEMU that touched it dies of SIGBUS (the clone stops), and the guest never sees wrong
    memory. hlt-restore --wait says so and exits non-zero."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server behind --memory shared is a FUSE file system")
    ckpt, _ = env.stopped_checkpoint()
    bad = env.path("shared-corrupt.hlt")
    shutil.copyfile(ckpt, bad)
    info = json.loads(subprocess.run([env.restore_bin, "info", bad, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    # Block payloads run from offset 64 to the first blob; blobs end where the index begins. One flipped byte
    # every 256 KiB of the first three quarters of the block payload damages most blocks of pc.ram (memcheck's
    # 256 MiB are spread over them), and leaves alone the device state (the blob) and the last blocks, which
    # hold the small RAMBlocks (ROMs, ACPI tables) that travel in the stream: the eager part of the restore
    # checks those itself and refuses them before the guest runs (the corrupt_block scenario's ground).
    blocks_end = info["file_size"] - info["index_bytes"] - sum(b["stored_length"] for b in info["blobs"])
    with open(bad, "r+b") as f:
        for off in range(64 << 10, blocks_end * 3 // 4, 256 << 10):
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0xFF]))
    images = env.path("images-corrupt")
    os.makedirs(images, exist_ok=True)
    server_pid = None
    try:
        rc, out, err, serial = env.restore(bad, "shared-corrupt", ["--memory", "shared", "--image-dir", images,
                                                                    "--wait"], timeout=120)
        stats_files = [os.path.join(images, d, ".stats") for d in os.listdir(images)
                       if os.path.exists(os.path.join(images, d, ".stats"))]
        if len(stats_files) != 1:
            raise Fail(f"expected one image server under {images}, found {stats_files}")
        with open(stats_files[0]) as f:
            j = json.load(f)
        server_pid = j["pid"]
        ram = [x for x in j["files"] if x["name"].endswith(".pc.ram")][0]
        log(f"image server: {ram['read_errors']} reads refused, {ram['blocks_decoded']} blocks decoded; "
            f"hlt-restore exit {rc}")
        if rc != 3 or "killed by signal 7" not in err or "could not be read" not in err:
            raise Fail(f"expected exit 3 naming QEMU's SIGBUS death, got {rc}:\n{out}{err}")
        if ram["read_errors"] == 0:
            raise Fail(f"the image server refused no read, yet QEMU died: {ram}")
        if re.search(r" BAD ", read(serial)):
            raise Fail("the guest ran on wrong memory")
        log("PASS shared_corrupt_block: the clone that touched a damaged block stopped; no wrong memory")
    finally:
        env.cleanup()
        env.pids = []
        if server_pid:
            stop_pid(server_pid, 30, "the image server")
