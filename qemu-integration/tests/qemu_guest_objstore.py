"""Checkpoints on the object store (the ceph-labelled tests' cluster): s3:// restores through a block cache,
shared-memory clones from rados://.
"""

import json
import os
import shutil

from qemu_guest_common import load_ceph_env, stop_server_pid
from hltharness.guesttest import Fail, Skip, log, pass_numbers  # noqa: E402
from hltharness.proc import run_tool  # noqa: E402
from hltharness.wait import read_text as read  # noqa: E402


def scenario_s3(env):
    """Issue 13: the guest saved with hlt-save qemu straight to s3:// (the radosgw of the ceph-labelled tests'
    cluster, --ceph-env) and restored lazily from it, through a host block cache: memcheck continues. The loader
    fetched in batches; a second restore from the same object (a clone's) reads every block from the cache, none
    from radosgw, and its guest continues too. A third, eager and without the cache, fetches in batches of many
    blocks (issue 28) and its guest continues."""
    if not env.ceph_env:
        raise Skip("no Ceph cluster: run through ctest (the objstore/ceph-up fixture) or give --ceph-env DIR/env")
    if not os.path.exists(env.ceph_env):
        raise Skip(f"no Ceph cluster at {env.ceph_env} (objstore/ceph-up could not start one: see its output)")
    for line in open(env.ceph_env):
        if line.startswith("export "):
            k, v = line[len("export "):].strip().split("=", 1)
            os.environ[k] = v
    uri = f"s3://{os.environ['HALITE_TEST_S3_BUCKET']}/qemu-guest-{os.getpid()}.hlt"
    cache = env.path("s3-block-cache")
    shutil.rmtree(cache, ignore_errors=True)
    g, qmp = env.boot_source("s3-src")
    try:
        rc, out, err = run_tool([env.save_bin, "qemu", "--qmp", qmp, "-o", uri, "--then", "stop"],
                                env.path("s3.save.log"), 300)
        print(out + err, flush=True)
        if rc != 0:
            raise Fail(f"hlt-save qemu -o {uri} exited {rc}")
        last = pass_numbers(read(g.serial_log))
        last = last[-1] if last else 0
    finally:
        g.stop()
    log(f"saved the guest to {uri}; the source QEMU is gone")

    def restore_from_s3(name):
        rc, out, err, serial = env.restore(uri, name, ["--block-cache", cache])
        if rc != 0:
            raise Fail(f"hlt-restore qemu {uri} exited {rc}")
        with open(env.path(name + ".stats.json")) as f:
            st = json.load(f)
        env.expect_continues(serial, last)
        return st

    first = restore_from_s3("s3-1")
    if first["blocks_fetched"] == 0 or first["loader_batches"] == 0:
        raise Fail(f"the restore from {uri} fetched {first['blocks_fetched']} blocks in {first['loader_batches']} "
                   "loader batches: expected the loader to fetch in batches")
    log(f"restore 1 from {uri}: {first['blocks_fetched']} blocks fetched ({first['storage_requests']} requests, "
        f"{first['loader_batches']} loader batches), {first['cache_inserts']} put in the block cache")
    env.cleanup()  # the first restored guest goes: the second is a clone restored after it
    env.pids = []
    second = restore_from_s3("s3-2")
    if second["blocks_fetched"] != 0 or second["cache_hits"] == 0:
        raise Fail(f"the second restore fetched {second['blocks_fetched']} blocks from radosgw and took "
                   f"{second['cache_hits']} from the cache: expected none fetched")
    log(f"restore 2 from {uri}: {second['cache_hits']} blocks from the block cache, 0 fetched, "
        f"{second['storage_requests']} requests after open")
    # Issue 28 item 7: an eager restore from the object store (no cache) read a block per request (3,777 requests
    # and 54 s for a desktop); its preload fetches the restore order in batches of many blocks now.
    env.cleanup()
    env.pids = []
    rc, out, err, serial = env.restore(uri, "s3-eager", ["--eager"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu {uri} --eager exited {rc}")
    with open(env.path("s3-eager.stats.json")) as f:
        eager = json.load(f)
    env.expect_continues(serial, last)
    blocks, requests = eager["blocks_total"], eager["storage_requests"]
    if eager["preload_batches"] == 0 or requests * 4 > blocks:
        raise Fail(f"the eager restore from {uri} sent {requests} requests for {blocks} blocks in "
                   f"{eager['preload_batches']} preload batches: expected batches of many blocks a request")
    log(f"eager restore from {uri}: {blocks} blocks in {eager['preload_batches']} batches, {requests} requests, "
        f"running after {eager['start_to_running_us'] / 1000:.0f} ms")


def scenario_shared_rados(env):
    """Issue 28 item 6: a golden checkpoint on the object store backs shared-memory clones. The guest is saved to
    rados:// (the ceph-labelled tests' cluster), then two clones restore from that URI with --memory shared
    --block-cache DIR: one image server for the checkpoint (named by its file id), fed through the host block
    cache; both continue memcheck; the second clone decodes no block again and the server fetched each block it
    decoded from the store at most once (the rest came from the cache)."""
    load_ceph_env(env)
    uri = f"rados://{os.environ['HALITE_TEST_RADOS_POOL']}/golden-{os.getpid()}"
    cache, images = env.path("rados-block-cache"), env.path("rados-images")
    for d in (cache, images):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(images)
    g, qmp = env.boot_source("rados-src")
    try:
        rc, out, err = run_tool([env.save_bin, "qemu", "--qmp", qmp, "-o", uri, "--then", "stop"],
                                env.path("rados.save.log"), 300)
        print(out + err, flush=True)
        if rc != 0:
            raise Fail(f"hlt-save qemu -o {uri} exited {rc}")
        last = pass_numbers(read(g.serial_log))
        last = last[-1] if last else 0
    finally:
        g.stop()
    server_pid = None
    try:
        extra = ["--memory", "shared", "--image-dir", images, "--block-cache", cache]
        rc, out, err, serial1 = env.restore(uri, "rados1", extra)
        if rc != 0 or "image server started" not in out:
            raise Fail(f"--memory shared from {uri} (exit {rc}) did not start the image server:\n{out}{err}")
        mounts = [d for d in os.listdir(images) if os.path.exists(os.path.join(images, d, ".stats"))]
        if len(mounts) != 1:
            raise Fail(f"expected one image server under {images}: {os.listdir(images)}")
        stats_path = os.path.join(images, mounts[0], ".stats")
        with open(stats_path) as f:
            server_pid = json.load(f)["pid"]
        env.expect_continues(serial1, last)
        with open(stats_path) as f:
            first = [x for x in json.load(f)["files"] if x["name"].endswith(".pc.ram")][0]
        rc, out, err, serial2 = env.restore(uri, "rados2", extra)
        if rc != 0 or "image server already serving" not in out:
            raise Fail(f"the second clone from {uri} (exit {rc}) did not use the running server:\n{out}{err}")
        env.expect_continues(serial2, last)
        with open(stats_path) as f:
            j = json.load(f)
        ram = [x for x in j["files"] if x["name"].endswith(".pc.ram")][0]
        again = (ram["blocks_decoded"] - first["blocks_decoded"]) - (ram["distinct_blocks"] - first["distinct_blocks"])
        cached = len([f for _, _, fs in os.walk(cache) for f in fs])
        log(f"two clones from {uri}: {ram['blocks_decoded']} blocks decoded ({ram['distinct_blocks']} distinct, "
            f"the second clone {again} again), {ram['read_errors']} read errors; block cache holds {cached} files")
        if again != 0 or ram["read_errors"] != 0 or ram["open_handles"] != 2:
            raise Fail(f"image server state: {ram}")
        if cached < ram["distinct_blocks"]:
            raise Fail(f"the image server did not fetch through the block cache {cache}: {cached} files for "
                       f"{ram['distinct_blocks']} blocks decoded")
        log("PASS shared_rados: two --memory shared clones served from a checkpoint on rados://")
    finally:
        env.cleanup()
        env.pids = []
        if server_pid:
            stop_server_pid(server_pid)
