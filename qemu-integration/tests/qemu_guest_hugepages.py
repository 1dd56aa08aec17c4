"""A guest whose RAM is on hugetlbfs (2 MiB pages): saved, restored lazily, eagerly and resumed.
"""

import json
import os
import re
import shutil
import signal
import time

from qemu_guest_common import MIB, guest_argv, wait_for_line
import launch  # noqa: E402
import hugepages_host  # noqa: E402
from hltharness.guesttest import FAIL_RX, Fail, OK_RX, Skip, log  # noqa: E402
from hltharness.proc import run_tool, start_logged  # noqa: E402
from hltharness.wait import read_text as read  # noqa: E402


HUGE_MEM_MIB = 512
HUGE_PAGE = 2 << 20


def hugepage_memory(mount):
    """QEMU options that put the guest's RAM (still named pc.ram) on hugetlbfs, 2 MiB pages, no preallocation."""
    return ["-object", f"memory-backend-file,id=pc.ram,size={HUGE_MEM_MIB}M,mem-path={mount},share=on,prealloc=off",
            "-machine", "memory-backend=pc.ram"]


def ram_on_huge_pages(pid):
    """True when QEMU `pid` maps a guest-RAM-sized region with 2 MiB kernel pages (its smaps)."""
    size_kb, text = None, read(f"/proc/{pid}/smaps")
    for line in text.splitlines():
        if line.startswith("Size:"):
            size_kb = int(line.split()[1])
        elif line.startswith("KernelPageSize:") and size_kb == HUGE_MEM_MIB * 1024:
            if int(line.split()[1]) == HUGE_PAGE // 1024:
                return True
    return False


def restore_hugepage_guest(env, ckpt, name, flags, placement, extra, last):
    """One lazy restore of the hugetlbfs checkpoint with `flags`, expected to use `placement`; the guest must
    continue."""
    rc, out, err, serial = env.restore(ckpt, name, flags, mem=f"{HUGE_MEM_MIB}M", qemu_extra=extra)
    if rc != 0:
        raise Fail(f"hlt-restore qemu {' '.join(flags)} of the hugetlbfs guest exited {rc}")
    m = re.search(r"QEMU \(pid (\d+)\)", out)
    if not m or not ram_on_huge_pages(int(m.group(1))):
        raise Fail("the restored QEMU's guest RAM is not mapped with 2 MiB pages")
    with open(env.path(name + ".stats.json")) as f:
        st = json.load(f)
    sizes = {int(k): v for k, v in st["request_sizes"].items()}
    if "--eager" in flags:
        # Every page in before the guest runs; QEMU asks only for what its device state load reads (maybe
        # nothing), and then whole host pages.
        if not 0 < st["start_to_loaded_us"] <= st["start_to_running_us"]:
            raise Fail(f"eager: the guest ran at {st['start_to_running_us']} us, before every page was in "
                       f"({st['start_to_loaded_us']} us)")
        if set(sizes) - {HUGE_PAGE}:
            raise Fail(f"QEMU asked for pages that are not whole 2 MiB host pages: request sizes {sizes}")
    elif sizes.get(HUGE_PAGE, 0) == 0:
        raise Fail(f"QEMU asked for no 2 MiB host page: request sizes {sizes}")
    if st["host_pages_installed"] == 0:
        raise Fail("the engine installed no whole host page")
    if st["placement"] != placement:
        raise Fail(f"placement {st['placement']!r} ({st['placement_reason']}), expected {placement!r}")
    unit = HUGE_PAGE // 4096
    if placement == "direct":
        # Every huge page in one UFFDIO_COPY (zero ones copied from zeros: hugetlbfs has no UFFDIO_ZEROPAGE).
        if st["direct_pages_copied"] == 0 or st["direct_pages_copied"] != unit * st["direct_copy_ioctls"] or \
                st["direct_zero_ioctls"] != 0:
            raise Fail(f"direct placement did not place whole 2 MiB pages: {st['direct_pages_copied']} pages in "
                       f"{st['direct_copy_ioctls']} copies, {st['direct_zero_ioctls']} zero-page ioctls")
    env.expect_continues(serial, last)
    qdir = env.path(name + ".qemu")
    stderr_text = "".join(read(os.path.join(qdir, f)) for f in os.listdir(qdir) if f.endswith(".log"))
    for bad in ("Non-same host page", "postcopy_place_page", "File exists"):
        if bad in stderr_text:
            raise Fail(f"QEMU reports {bad!r}: {stderr_text[-800:]}")
    log(f"hugepages, {name}, {placement}: running {st['tool_to_running_us'] / 1e3:.1f} ms after hlt-restore "
        f"started, all pages in at {st['start_to_loaded_us'] / 1e3:.0f} ms; {st['requests']} requests "
        f"({sizes.get(HUGE_PAGE, 0)} of 2 MiB, {sizes.get(4096, 0)} of 4 KiB) answered in p50 {st['request_latency_p50_us'] / 1e3:.2f} ms, "
        f"p99 {st['request_latency_p99_us'] / 1e3:.2f} ms; {st['faults_blocking']} blocking faults (p50 "
        f"{st['blocking_p50_us']:.0f} us); {st['host_pages_installed']} host pages installed whole; "
        f"{st['direct_copy_ioctls']} UFFDIO_COPYs of 2 MiB")
    env.cleanup()
    env.pids = []


def resume_hugepage_guest(env, ckpt, extra, last):
    """hlt-restore SIGKILLed while it serves the hugetlbfs guest, then --resume: what QEMU holds (its page map of the
    hugetlbfs mapping, where pages were placed directly) is never placed again, the rest comes whole."""
    name = "huge-resume"
    serial, qdir, stats = env.path(name + ".serial.log"), env.path(name + ".qemu"), env.path(name + ".stats.json")
    shutil.rmtree(qdir, ignore_errors=True)
    for p in (serial, stats):
        if os.path.exists(p):
            os.unlink(p)
    env_vars = dict(os.environ, HALITE_RUN_DIR=env.path(name + ".run"))
    argv = guest_argv(serial, mem=f"{HUGE_MEM_MIB}M", extra=extra)
    out_path = env.path(name + ".0.log")
    # The loader at 1 MiB/s: when the restorer dies, QEMU holds what the guest asked for and little else.
    p = start_logged([env.restore_bin, "qemu", ckpt, "--rate-limit", "1M", "--qemu", argv[0], "--qemu-dir", qdir,
                      "--", *argv[1:]], out_path, env_vars)
    try:
        wait_for_line(p, out_path, r"guest running", 60)
        env.pids.append(int(re.search(r"QEMU \(pid (\d+)\)", read(out_path)).group(1)))
        time.sleep(0.3)
        if p.poll() is not None:
            raise Fail(f"the restore ended ({p.returncode}) before it could be killed:\n{read(out_path)}")
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    rc, out, err = run_tool([env.restore_bin, "qemu", ckpt, "--resume", "--qemu-dir", qdir, "--stats-json", stats],
                            env.path(name + ".1.log"), 120)
    print(out + err, flush=True)
    if rc != 0:
        raise Fail(f"hlt-restore --resume of the hugetlbfs guest exited {rc}")
    with open(stats) as f:
        st = json.load(f)
    if st["resume_present_pages"] == 0 or st["resume_present_pages"] % (HUGE_PAGE // 4096) != 0:
        raise Fail(f"the resume found {st['resume_present_pages']} pages in QEMU: expected whole 2 MiB host pages")
    env.expect_continues(serial, last)
    stderr_text = "".join(read(os.path.join(qdir, f)) for f in os.listdir(qdir) if f.endswith(".log"))
    for bad in ("Non-same host page", "postcopy_place_page", "File exists"):
        if bad in stderr_text:
            raise Fail(f"QEMU reports {bad!r} after the resume: {stderr_text[-800:]}")
    log(f"hugepages, resume: hlt-restore killed 0.3 s after the guest ran; --resume found "
        f"{st['resume_present_pages'] // (HUGE_PAGE // 4096)} host pages in QEMU (placement {st['placement']}), "
        f"RESUME_ACK {st['tool_to_resumed_us'] / 1e3:.1f} ms after it started, guest continues")
    env.cleanup()
    env.pids = []


def scenario_hugepages(env):
    """A hugetlbfs-backed guest: hlt-save records pc.ram's 2 MiB host pages; hlt-restore restores it lazily, placing
    whole host pages directly and, the second time, through QEMU's stream (zero pages as ZERO records); each page
    request of QEMU's asks for a whole 2 MiB host page, and the guest continues."""
    pages = HUGE_MEM_MIB * (1 << 20) // HUGE_PAGE + 8
    try:
        reservation = hugepages_host.HugePages(pages, env.work)
        reservation.__enter__()
    except hugepages_host.Unavailable as e:
        raise Skip(f"no huge pages for a {HUGE_MEM_MIB} MiB hugetlbfs guest: {e}")
    try:
        extra = hugepage_memory(reservation.mount)
        log(f"{pages} huge pages of 2 MiB free on hugetlbfs at {reservation.mount}")
        serial, qmp = env.path("huge-src.serial.log"), env.path("huge-src.qmp")
        for p in (serial, qmp):
            if os.path.exists(p):
                os.unlink(p)
        g = launch.Guest.start(serial, stderr_path=env.path("huge-src.qemu-stderr.log"), mem=f"{HUGE_MEM_MIB}M",
                               workload="memcheck", workload_args=["--mib", MIB], qmp=qmp, extra=extra)
        env.pids.append(g.proc.pid)
        ckpt = env.path("huge.hlt")
        try:
            log(f"source QEMU pid {g.proc.pid}, RAM on hugetlbfs, waiting for memcheck's first OK")
            g.wait_for(OK_RX, 1, 150, fail=FAIL_RX)
            if not ram_on_huge_pages(g.proc.pid):
                raise Fail("the source QEMU's guest RAM is not mapped with 2 MiB pages")
            _, last = env.save_from(g, qmp, ckpt)
        finally:
            g.stop()
        rc, out, err = run_tool([env.restore_bin, "info", ckpt, "--json"], ckpt + ".info.json", 60)
        regions = {r["name"]: r for r in json.loads(out)["regions"]}
        if regions["pc.ram"]["host_page_size"] != HUGE_PAGE:
            raise Fail(f"the checkpoint records pc.ram's host page size as {regions['pc.ram']['host_page_size']}")
        # Placed directly by default (a whole 2 MiB page per UFFDIO_COPY through QEMU's userfaultfd), then through
        # QEMU's stream (which gathers the 512 records of a host page and places it whole), then eagerly (directly,
        # the guest held paused until the last host page is in).
        for name, flags, placement in (("huge", [], "direct"), ("huge-channel", ["--placement", "channel"], "channel"),
                                       ("huge-eager", ["--eager"], "direct")):
            restore_hugepage_guest(env, ckpt, name, flags, placement, extra, last)
        resume_hugepage_guest(env, ckpt, extra, last)
    finally:
        env.cleanup()  # returns once the killed QEMUs are gone: their huge pages are back before the pool shrinks
        env.pids = []
        reservation.__exit__(None, None, None)
