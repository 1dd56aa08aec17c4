#!/usr/bin/env python3
"""hlt-save qemu / hlt-restore qemu against the project's test guest (Linux + memcheck, guest/), under TCG.

usage: qemu_guest_test.py --tools DIR --work DIR [--ceph-env FILE] SCENARIO

  lazy                boot (1 GiB, memcheck 256 MiB), hlt-save qemu, kill the source, hlt-restore qemu -- ARGS;
                      the restored memcheck must continue (no fresh boot) with >= 2 OK passes and no BAD
  live                the same with hlt-save --live (background snapshot; the guest never stops)
  live_failed         hlt-save --live onto a full file system (a 1 MiB tmpfs; needs root): the save fails once the
                      stream runs; the rest of the stream is read and dropped so that QEMU 7.2's background snapshot
                      completes (a failed or cancelled one leaves the guest's RAM write-protected for good and
                      the guest hangs); memcheck goes on, nothing is left on the file system
  access_window       the accessed bits sampled before a stopped-guest save give a working set of memcheck's
                      pages; the restored guest continues; --access-window 0 gives none
  learn_layout        --learn-layout: the first restore of a golden writes GOLDEN.learned, the second restores
                      from it
  eager               hlt-restore --eager: pc.ram placed through QEMU's userfaultfd while the guest is held
                      paused; it runs only after the last page
  eager_channel       hlt-restore --eager --placement channel: a precopy load in QEMU's stream
  attach              hlt-restore --qmp into a QEMU started by the test with -incoming defer; --record-trace
  size_mismatch       the destination has 512 MiB: a clear error before the guest runs, exit 2
  killed_mid_restore  QEMU is SIGKILLed while pages are still being pushed: a message and exit 3, promptly
  corrupt_block       a byte of a block flipped: that block is never sent, QEMU's postcopy pauses, exit 4
  shared_service      the image server as halite-image-server@.service runs it (serve --image-dir), started first:
                      a --memory shared restore uses it; a second server is refused; it unmounts on SIGTERM
  incremental         restore, run, hlt-save --parent (an incremental child), restore the child lazily
  incremental_shared  the same from a --memory shared clone: its unwritten pages come from QEMU's page map
  resume              20 SIGKILLs of hlt-restore at random moments of one lazy restore (before RUN, requests,
                      loader, late), each followed by --resume --qemu-dir: memcheck continues, no page twice
  resume_storage      the checkpoint on a FUSE file whose reads fail on command: a transient failure is retried,
                      a lasting one leaves QEMU waiting with a message saying how to resume; --resume after the fix
  shared_rados        hlt-save qemu -o rados://..., two --memory shared clones from that URI through one image
                      server and the host block cache (issue 28)
  s3                  hlt-save qemu -o s3://... (radosgw of --ceph-env's cluster), lazy restore from it through a
                      --block-cache: memcheck continues; a second restore takes every block from the cache; a
                      third, --eager without the cache, fetches in batches of many blocks a request
  placement_channel   lazy with --placement channel: every page in QEMU's stream, the summary says so
  placement_fallback  hlt-restore --qmp as another user (nobody) than QEMU's (root): no ptrace permission, so
                      pidfd_getfd is refused and --placement auto falls back to the channel, saying why, lazy
                      and --eager
  hugepages           a 512 MiB guest whose RAM is on hugetlbfs (2 MiB pages; the test reserves them and gives them
                      back): saved, restored lazily twice, placed directly (a 2 MiB UFFDIO_COPY per host page) and
                      through QEMU's stream, then eagerly (directly); QEMU asks for whole 2 MiB host pages,
                      memcheck continues

The lazy scenarios check which placement was used (--stats-json): directly through QEMU's userfaultfd when
hlt-restore may take it (it launched QEMU as the same user), else the channel.

Exit 0 pass, 1 fail, 77 skipped (QEMU, the guest build or userfaultfd unavailable; the reason is printed loudly).
The stopped-guest checkpoint is made once per work directory and reused by the scenarios that need one (it is
remade when hlt-save or the guest changes; the ctest fixture qemu_guest_checkpoint removes it after the last
scenario). A scenario that passes removes its own large outputs (checkpoints, block caches); one that fails keeps
them and says where.

The scenarios live in qemu_guest_<family>.py beside this file (lazy, live, eager, errors, resume, shared,
incremental, hugepages, objstore; qemu_guest_common.py holds Env and the shared checks); the harness they use
(waiting, processes, scratch outputs, QMP) is guest/hltharness, which bench/ imports too.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qemu_guest_common import Env, check_prerequisites  # noqa: E402  (puts the harness on sys.path)
from qemu_guest_lazy import (  # noqa: E402
    scenario_access_window,
    scenario_attach,
    scenario_lazy,
    scenario_learn_layout,
    scenario_placement_channel,
    scenario_placement_fallback)
from qemu_guest_live import scenario_live, scenario_live_failed  # noqa: E402
from qemu_guest_eager import scenario_eager, scenario_eager_channel  # noqa: E402
from qemu_guest_errors import scenario_corrupt_block, scenario_killed_mid_restore, scenario_size_mismatch  # noqa: E402
from qemu_guest_resume import scenario_resume, scenario_resume_storage  # noqa: E402
from qemu_guest_shared import scenario_shared, scenario_shared_corrupt_block, scenario_shared_service  # noqa: E402
from qemu_guest_incremental import scenario_incremental, scenario_incremental_shared  # noqa: E402
from qemu_guest_hugepages import scenario_hugepages  # noqa: E402
from qemu_guest_objstore import scenario_s3, scenario_shared_rados  # noqa: E402
import launch  # noqa: E402
from hltharness.guesttest import log, run_scenario  # noqa: E402


SCENARIOS = {
    "lazy": (scenario_lazy, True),
    "live": (scenario_live, True),
    "live_failed": (scenario_live_failed, False),
    "access_window": (scenario_access_window, True),
    "learn_layout": (scenario_learn_layout, True),
    "eager": (scenario_eager, False),
    "eager_channel": (scenario_eager_channel, False),
    "attach": (scenario_attach, True),
    "size_mismatch": (scenario_size_mismatch, False),
    "killed_mid_restore": (scenario_killed_mid_restore, True),
    "corrupt_block": (scenario_corrupt_block, True),
    "placement_channel": (scenario_placement_channel, True),
    "placement_fallback": (scenario_placement_fallback, True),
    "shared": (scenario_shared, False),
    "shared_service": (scenario_shared_service, False),
    "shared_corrupt_block": (scenario_shared_corrupt_block, False),
    "incremental": (scenario_incremental, True),
    "incremental_shared": (scenario_incremental_shared, True),
    "resume": (scenario_resume, True),
    "resume_storage": (scenario_resume_storage, True),
    "hugepages": (scenario_hugepages, True),
    "s3": (scenario_s3, True),
    "shared_rados": (scenario_shared_rados, False),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", required=True, help="directory with hlt-save and hlt-restore")
    ap.add_argument("--work", required=True, help="scratch directory (checkpoints, logs)")
    ap.add_argument("--ceph-env", help="the env file of a cluster started by scripts/ceph-up (scenario s3)")
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    fn, need_uffd = SCENARIOS[a.scenario]
    env = Env(a.tools, a.work)
    env.ceph_env = a.ceph_env

    def body():
        check_prerequisites(need_uffd)
        fn(env)
        log(f"accel {launch.default_accel()}")
    return run_scenario("qemu_guest_test", a.scenario, body, env.scratch, env.cleanup)


if __name__ == "__main__":
    sys.exit(main())
