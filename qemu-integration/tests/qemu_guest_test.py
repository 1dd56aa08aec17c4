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
remade when hlt-save or the guest changes).
"""

import argparse
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hugepages_host  # noqa: E402

MEM = "1G"
MIB = "256"
OK_RX = r"memcheck pass=\d+ .* OK"
FAIL_RX = r" BAD |Kernel panic|HLT-GUEST EXIT"


class Skip(Exception):
    pass


class Fail(Exception):
    pass


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def skip_loudly(why):
    print("*" * 70 + f"\nqemu_guest_test: SKIPPED: {why}\n" + "*" * 70, flush=True)
    sys.exit(77)


def check_prerequisites(need_uffd):
    qemu = os.environ.get("HLT_QEMU") or shutil.which("qemu-system-x86_64")
    if not qemu:
        raise Skip("qemu-system-x86_64 is not installed (scripts/install-deps)")
    out = subprocess.run([os.path.join(REPO, "scripts", "build-guest")], capture_output=True, text=True)
    if out.returncode != 0:
        raise Skip("the test guest could not be built (scripts/build-guest):\n" + (out.stdout + out.stderr)[-2000:])
    if need_uffd:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(323, os.O_CLOEXEC | os.O_NONBLOCK)  # userfaultfd(2)
        if fd < 0:
            err = ctypes.get_errno()
            raise Skip(f"userfaultfd is not available to this user ({os.strerror(err)}): QEMU's postcopy needs it "
                       "(run as root or set vm.unprivileged_userfaultfd=1)")
        os.close(fd)


def guest_argv(serial, mem=MEM, qmp=None, incoming=None, extra=()):
    return launch.qemu_argv(mem=mem, workload="memcheck", workload_args=["--mib", MIB], serial_log=serial, qmp=qmp,
                            incoming=incoming, extra=extra)


def run_tool(cmd, out_path, timeout):
    """Runs a tool with stdout/stderr to files (a QEMU it launches inherits nothing we wait on)."""
    with open(out_path, "wb") as out, open(out_path + ".err", "wb") as err:
        p = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout)
    return p.returncode, read(out_path), read(out_path + ".err")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def pid_alive(pid):
    """False once it has exited, also while it waits to be reaped (a process reparented to a PID 1 that does not
    reap, as in some containers, stays a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_server_pid(pid):
    """Its clones are gone: it stops on the first SIGTERM and unmounts. SIGKILL and fail after 30 s."""
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    if pid_alive(pid):
        kill_pid(pid)
        raise Fail(f"the image server (pid {pid}) did not stop once its clones were gone")


def kill_pid(pid):
    if pid and pid > 0 and pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pass_numbers(text):
    return [int(m.group(1)) for m in re.finditer(r"memcheck pass=(\d+) .* OK", text)]


class Env:
    def __init__(self, tools, work):
        self.save_bin = os.path.join(tools, "hlt-save")
        self.restore_bin = os.path.join(tools, "hlt-restore")
        self.work = work
        self.pids = []  # QEMUs to kill at the end
        self.ceph_env = None  # --ceph-env (scenario s3)

    def path(self, name):
        return os.path.join(self.work, name)

    def boot_source(self, name):
        serial, qmp = self.path(name + ".serial.log"), self.path(name + ".qmp")
        for p in (serial, qmp):
            if os.path.exists(p):
                os.unlink(p)
        g = launch.Guest.start(serial, stderr_path=self.path(name + ".qemu-stderr.log"), mem=MEM,
                               workload="memcheck", workload_args=["--mib", MIB], qmp=qmp)
        self.pids.append(g.proc.pid)
        log(f"source QEMU pid {g.proc.pid} ({launch.default_accel()}), waiting for memcheck's first OK")
        t = g.wait_for(OK_RX, 1, 150, fail=FAIL_RX)
        log(f"source: first OK after {t:.1f} s")
        return g, qmp

    def save_from(self, g, qmp, ckpt, extra=()):
        rc, out, err = run_tool([self.save_bin, "qemu", "--qmp", qmp, "-o", ckpt, "--then", "stop", *extra],
                                ckpt + ".save.log", 300)
        print(out + err, flush=True)
        if rc != 0:
            raise Fail(f"hlt-save qemu exited {rc}")
        last = pass_numbers(read(g.serial_log))
        g.proc.kill()  # the source dies; only the checkpoint is left
        g.proc.wait()
        return out, (last[-1] if last else 0)

    def stopped_checkpoint(self):
        """The shared stopped-guest checkpoint: made under a lock unless one newer than its inputs exists."""
        ckpt, meta = self.path("stopped.hlt"), self.path("stopped.json")
        inputs = [self.save_bin, launch.kernel_path(), launch.initrd_path()]
        with open(self.path("stopped.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(ckpt) and os.path.exists(meta) and \
                    os.path.getmtime(ckpt) > max(os.path.getmtime(p) for p in inputs):
                log(f"reusing {ckpt}")
                with open(meta) as f:
                    return ckpt, json.load(f)["last_pass"]
            g, qmp = self.boot_source("stopped-src")
            try:
                out, last = self.save_from(g, qmp, ckpt + ".tmp")
            finally:
                g.stop()
            if "va coverage" not in out:
                raise Fail("hlt-save did not walk the guest's page tables")
            os.replace(ckpt + ".tmp", ckpt)
            with open(meta, "w") as f:
                json.dump({"last_pass": last}, f)
            return ckpt, last

    def restore(self, ckpt, name, extra=(), mem=MEM, timeout=120, qmp=None, qemu_extra=()):
        serial = self.path(name + ".serial.log")
        for p in (serial, qmp):
            if p and os.path.exists(p):
                os.unlink(p)
        stats = self.path(name + ".stats.json")
        if os.path.exists(stats):
            os.unlink(stats)
        argv = guest_argv(serial, mem=mem, qmp=qmp, extra=qemu_extra)
        cmd = [self.restore_bin, "qemu", ckpt, "--stats-json", stats, *extra, "--qemu", argv[0],
               "--qemu-dir", self.path(name + ".qemu"), "--", *argv[1:]]
        log("$ " + " ".join(cmd))
        rc, out, err = run_tool(cmd, self.path(name + ".restore.log"), timeout)
        print(out + err, flush=True)
        m = re.search(r"QEMU \(pid (\d+)\)", out)
        if m:
            self.pids.append(int(m.group(1)))
        return rc, out, err, serial

    def expect_continues(self, serial, last_saved_pass, passes=2, timeout=60):
        """The restored guest prints `passes` new OK lines, no BAD, and did not boot afresh."""
        deadline = time.monotonic() + timeout
        while True:
            text = read(serial)
            if re.search(FAIL_RX, text):
                raise Fail("the restored guest printed: " + re.search(r".*(" + FAIL_RX + r").*", text).group(0))
            if launch.READY_LINE in text or "memcheck start" in text:
                raise Fail("the restored guest booted afresh instead of continuing")
            nums = pass_numbers(text)
            if len(nums) >= passes:
                break
            if time.monotonic() > deadline:
                raise Fail(f"only {len(nums)} OK passes from the restored guest within {timeout} s:\n{text[-1500:]}")
            time.sleep(0.1)
        if nums[0] < last_saved_pass:
            raise Fail(f"restored guest's first pass {nums[0]} is before the source's last {last_saved_pass}")
        log(f"restored guest continues: passes {nums[:4]} OK (the source had done {last_saved_pass}), no BAD")

    def cleanup(self):
        for pid in self.pids:
            kill_pid(pid)


def check_placement(stats_path, out, expected):
    """--stats-json and the summary say which placement was used; direct placed pc.ram's pages itself."""
    with open(stats_path) as f:
        st = json.load(f)
    if st.get("placement") != expected:
        raise Fail(f"placement {st.get('placement')!r} ({st.get('placement_reason')}), expected {expected!r}")
    if expected == "direct":
        if "pc.ram" not in st["direct_blocks"] or st["direct_pages_copied"] == 0:
            raise Fail(f"direct placement placed nothing of pc.ram: {st}")
        if not re.search(r"placement        direct (through QEMU's userfaultfd|with process_vm_writev) \(pc\.ram\)",
                         out):
            raise Fail("the summary does not say that pages were placed directly")
    elif "placement        channel (" not in out:
        raise Fail("the summary does not say that every page went on the channel")
    log(f"placement {expected}: {st.get('direct_pages_copied', 0)} pages copied directly in "
        f"{st.get('direct_copy_ioctls', 0)} ioctls; {st['request_pages']} answering requests and "
        f"{st['pushed_pages']} pushed on the channel ({st.get('placement_reason') or 'no fallback'})")
    return st


def scenario_lazy(env, extra=(), placement="direct", name="lazy"):
    ckpt, last = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, name, extra)
    if rc != 0:
        raise Fail(f"hlt-restore qemu exited {rc}")
    if "to guest running" not in out or "bytes read" not in out:
        raise Fail("hlt-restore did not print the time to running and the engine statistics")
    check_placement(env.path(name + ".stats.json"), out, placement)
    env.expect_continues(serial, last)


def scenario_placement_channel(env):
    scenario_lazy(env, ["--placement", "channel"], "channel", "channel")


def scenario_placement_fallback(env):
    """A QEMU of root restored by hlt-restore running as nobody: pidfd_getfd is not permitted (a real refusal,
    not a simulated one), so --placement auto uses the channel, lazy (postcopy) and --eager (a precopy load);
    --placement direct refuses before sending."""
    if os.geteuid() != 0:
        raise Skip("needs root, to run QEMU as root and hlt-restore as nobody (no ptrace permission over QEMU)")
    if not shutil.which("setpriv"):
        raise Skip("setpriv (util-linux) is missing")
    ckpt, last = env.stopped_checkpoint()
    os.chmod(ckpt, 0o644)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    for name, flags in (("fallback", []), ("fallback-eager", ["--eager"])):
        serial, qmp = env.path(name + ".serial.log"), env.path(name + ".qmp")
        stats = "/tmp/halite-%s-%d.stats.json" % (name, os.getpid())  # nobody must be able to write it
        for p in (serial, qmp, stats):
            if os.path.exists(p):
                os.unlink(p)
        g = launch.Guest.start(serial, stderr_path=env.path(name + ".qemu-stderr.log"), mem=MEM, workload="memcheck",
                               workload_args=["--mib", MIB], qmp=qmp, incoming="defer")
        env.pids.append(g.proc.pid)
        try:
            for _ in range(100):
                if os.path.exists(qmp):
                    break
                time.sleep(0.05)
            os.chmod(qmp, 0o666)  # nobody may talk to QEMU's monitor, but not ptrace it
            if not flags:
                rc, out, err = run_tool(nobody + [env.restore_bin, "qemu", ckpt, "--qmp", qmp, "--placement", "direct"],
                                        env.path("fallback-direct.restore.log"), 60)
                print(out + err, flush=True)
                if rc == 0 or "ptrace permission" not in err:
                    raise Fail(f"--placement direct without ptrace permission: exit {rc}, expected a refusal naming it")
            rc, out, err = run_tool(nobody + [env.restore_bin, "qemu", ckpt, "--qmp", qmp, "--stats-json", stats,
                                              *flags], env.path(name + ".restore.log"), 120)
            print(out + err, flush=True)
            if rc != 0:
                raise Fail(f"hlt-restore qemu --qmp {' '.join(flags)} as nobody exited {rc}")
            st = check_eager(stats, out, "channel") if flags else check_placement(stats, out, "channel")
            if "ptrace permission" not in st["placement_reason"]:
                raise Fail("the fallback does not say why: " + st["placement_reason"])
            env.expect_continues(serial, last)
        finally:
            g.stop()
            if os.path.exists(stats):
                os.unlink(stats)


def scenario_live(env):
    g, qmp = env.boot_source("live-src")
    try:
        ckpt = env.path("live.hlt")
        # The guest must keep running during a live save: its serial log keeps growing.
        before = len(pass_numbers(read(g.serial_log)))
        out, last = env.save_from(g, qmp, ckpt, ["--live"])
    finally:
        g.stop()
    m = re.search(r"working set\s+(\d+) pages written by the guest during the save", out)
    if not m or int(m.group(1)) == 0:
        raise Fail("a live save of a guest running memcheck saw no page written during the save")
    log(f"live save: {m.group(1)} pages in the save-time working set; source passes {before} -> {last}")
    rc, out, err, serial = env.restore(ckpt, "live")
    if rc != 0:
        raise Fail(f"hlt-restore qemu exited {rc}")
    env.expect_continues(serial, 0)


def scenario_live_failed(env):
    if os.geteuid() != 0:
        raise Skip("live_failed mounts a small tmpfs (a file system too small for the checkpoint): needs root")
    g, qmp = env.boot_source("live-failed-src")
    full = env.path("full")
    os.makedirs(full, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "hlt-live-failed", full], check=True)
    try:
        rc, out, err = run_tool([env.save_bin, "qemu", "--qmp", qmp, "-o", os.path.join(full, "x.hlt"), "--live"],
                                env.path("live-failed.save.log"), 300)
        left = os.listdir(full)
        before = len(pass_numbers(read(g.serial_log)))
        # The guest goes on: memcheck writes all of its memory every pass, so a page still write-protected by QEMU
        # would stop it at once.
        g.wait_for(re.compile(r"memcheck pass=%d .* OK" % (before + 3)), 1, 60, fail=FAIL_RX)
    finally:
        subprocess.run(["umount", full], check=True)
        g.stop()
    if rc == 0 or "No space left on device" not in err or "read and dropped" not in err or left:
        raise Fail(f"hlt-save --live onto a full file system: exit {rc}, left {left}: {err}")
    log(f"the failed live save said: {err.strip()[-200:]}; the guest went on past pass {before + 3}")


def working_set_blocks(env, ckpt):
    out = subprocess.run([env.restore_bin, "info", ckpt, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["working_set_blocks"]


def scenario_access_window(env):
    """A stopped-guest save of a running guest samples its page tables' accessed bits first (the default): the
    pages memcheck keeps touching become the working set; the guest, whose page tables were written, continues
    correctly from the checkpoint. With --access-window 0 there is no working set."""
    g, qmp = env.boot_source("window-src")
    try:
        ckpt = env.path("window.hlt")
        out, last = env.save_from(g, qmp, ckpt, ["--access-window", "1.5", "--access-interval", "150"])
    finally:
        g.stop()
    m = re.search(r"access window\s+(\d+) samples in [\d.]+ s \(paused ([\d.]+) ms in all, at most ([\d.]+) ms\), "
                  r"(\d+) address spaces seen, (\d+) measured; (\d+) pages touched, (\d+) given", out)
    if not m:
        raise Fail("hlt-save printed no access window line")
    samples, paused, max_pause, spaces, measured, touched, given = (float(x) for x in m.groups())
    if samples < 8 or measured < 1 or given < 1000:
        raise Fail(f"the access window saw too little of memcheck's {MIB} MiB: {m.group(0)}")
    blocks = working_set_blocks(env, ckpt)
    if blocks < given / 64:
        raise Fail(f"{int(given)} pages given as the working set but only {blocks} working-set blocks")
    log(f"access window: {int(samples)} samples, paused {paused:.1f} ms in all (max {max_pause:.1f} ms), "
        f"{int(spaces)} address spaces, {int(touched)} pages touched, {int(given)} given, {blocks} hot blocks")
    rc, out, err, serial = env.restore(ckpt, "window")
    if rc != 0:
        raise Fail(f"hlt-restore qemu exited {rc}")
    env.expect_continues(serial, last)

    g, qmp = env.boot_source("window-off-src")
    try:
        off = env.path("window-off.hlt")
        out, _ = env.save_from(g, qmp, off, ["--access-window", "0"])
    finally:
        g.stop()
    if "access window    skipped: off" not in out:
        raise Fail("--access-window 0 did not say the window was off")
    if working_set_blocks(env, off) != 0:
        raise Fail("a stopped-guest save without the access window has a working set")


def scenario_learn_layout(env):
    """--learn-layout: the first restore of a golden checkpoint writes GOLDEN.learned from the blocks its guest
    waited for; the next restore finds it and restores from it; both guests continue. (A learned file of another
    golden under the same name is refused: tests/core/learned_layout_test.cc.)"""
    ckpt, last = env.stopped_checkpoint()
    golden = env.path("golden.hlt")
    for p in (golden, golden + ".learned"):
        if os.path.exists(p):
            os.unlink(p)
    os.link(ckpt, golden)
    rc, out, err, serial = env.restore(golden, "learn1", ["--learn-layout"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --learn-layout exited {rc}")
    env.expect_continues(serial, last)
    if "learned layout   none used: no learned layout yet" not in out:
        raise Fail("the first restore did not say it found no learned layout")
    m = re.search(r"learned layout   (\S+) written in [\d.]+ s: (\d+) working-set blocks, then (\d+) blocks", out)
    if not m or m.group(1) != golden + ".learned" or not os.path.exists(golden + ".learned"):
        raise Fail("the first restore wrote no learned layout:\n" + out[-2000:])
    log(f"learned: {m.group(2)} working-set blocks, then {m.group(3)} blocks the first restore waited for")
    rc, out, err, serial = env.restore(golden, "learn2", ["--learn-layout"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --learn-layout (second) exited {rc}")
    env.expect_continues(serial, last)
    if f"learned layout   restoring from {golden}.learned" not in out or " written in " in out:
        raise Fail("the second restore did not restore from the learned layout (or learned again):\n" + out[-2000:])


def check_eager(stats_path, out, placement):
    """An eager restore used `placement`, and its guest ran only after every page was in: the first RESUME
    comes after the last page (QEMU stamps it), and the engine preloaded every block itself."""
    st = check_placement(stats_path, out, placement)
    if st["lazy"]:
        raise Fail("an eager restore reports itself as lazy")
    if not 0 < st["start_to_loaded_us"] <= st["start_to_running_us"]:
        raise Fail(f"the guest ran at {st['start_to_running_us']} us, before every page was in "
                   f"({st['start_to_loaded_us']} us)")
    if st["blocks_read_preload"] == 0 or st["blocks_read_loader"] != 0:
        raise Fail(f"an eager restore loads every block before the guest runs: preload "
                   f"{st['blocks_read_preload']}, loader {st['blocks_read_loader']}")
    log(f"eager ({placement}): every page in at {st['start_to_loaded_us'] / 1e3:.1f} ms, guest running at "
        f"{st['start_to_running_us'] / 1e3:.1f} ms; {st['requests']} requests from QEMU meanwhile")
    return st


def scenario_eager(env):
    # --placement auto: the pages go straight into QEMU's memory through its userfaultfd, the guest held paused
    # until the last one is in.
    ckpt, last = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, "eager", ["--eager"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --eager exited {rc}")
    check_eager(env.path("eager.stats.json"), out, "direct")
    env.expect_continues(serial, last)


def scenario_eager_channel(env):
    # The fallback: a precopy load in QEMU's migration stream, zero pages included.
    ckpt, last = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, "eager-channel", ["--eager", "--placement", "channel"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --eager --placement channel exited {rc}")
    st = check_eager(env.path("eager-channel.stats.json"), out, "channel")
    if st["requests"] != 0:
        raise Fail(f"a precopy load has no page requests, got {st['requests']}")
    env.expect_continues(serial, last)


def scenario_attach(env):
    ckpt, last = env.stopped_checkpoint()
    serial, qmp = env.path("attach.serial.log"), env.path("attach.qmp")
    for p in (serial, qmp):
        if os.path.exists(p):
            os.unlink(p)
    g = launch.Guest.start(serial, stderr_path=env.path("attach.qemu-stderr.log"), mem=MEM, workload="memcheck",
                           workload_args=["--mib", MIB], qmp=qmp, incoming="defer")
    env.pids.append(g.proc.pid)
    try:
        trace = env.path("attach.trace")
        for _ in range(100):
            if os.path.exists(qmp):
                break
            time.sleep(0.05)
        stats = env.path("attach.stats.json")
        rc, out, err = run_tool([env.restore_bin, "qemu", ckpt, "--qmp", qmp, "--record-trace", trace,
                                 "--stats-json", stats], env.path("attach.restore.log"), 120)
        print(out + err, flush=True)
        if rc != 0:
            raise Fail(f"hlt-restore qemu --qmp exited {rc}")
        check_placement(stats, out, "direct")  # QEMU's pid from the QMP socket's peer
        env.expect_continues(serial, last)
        lines = [l for l in read(trace).splitlines() if l and not l.startswith("#")]
        if not lines:
            raise Fail("--record-trace wrote no page")
        log(f"recorded trace: {len(lines)} requested pages")
    finally:
        g.stop()


def scenario_size_mismatch(env):
    ckpt, _ = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, "mismatch", mem="512M", timeout=60)
    if rc != 2:
        raise Fail(f"expected exit 2 for a RAM size mismatch, got {rc}")
    if "RAMBlock pc.ram" not in err or "-m" not in err:
        raise Fail("the error does not name the RAMBlock and the fix: " + err)
    time.sleep(1)
    if pass_numbers(read(serial)):
        raise Fail("the mismatched guest ran")
    m = re.search(r"QEMU \(pid (\d+)\)", out)
    if m and pid_alive(int(m.group(1))):
        raise Fail("hlt-restore left its QEMU running after the error")


def scenario_killed_mid_restore(env):
    ckpt, _ = env.stopped_checkpoint()
    serial = env.path("killed.serial.log")
    if os.path.exists(serial):
        os.unlink(serial)
    argv = guest_argv(serial)
    out_path = env.path("killed.restore.log")
    # A slow loader keeps the restore going long enough to kill QEMU in the middle of it.
    cmd = [env.restore_bin, "qemu", ckpt, "--rate-limit", "1M", "--qemu", argv[0], "--qemu-dir",
           env.path("killed.qemu"), "--", *argv[1:]]
    with open(out_path, "wb") as out, open(out_path + ".err", "wb") as errf:
        p = subprocess.Popen(cmd, stdout=out, stderr=errf)
    try:
        pid, deadline = None, time.monotonic() + 30
        while time.monotonic() < deadline:
            text = read(out_path)
            m = re.search(r"QEMU \(pid (\d+)\)", text)
            if m:
                pid = int(m.group(1))
                env.pids.append(pid)
            if pid and "guest running" in text:
                break
            if p.poll() is not None:
                raise Fail(f"hlt-restore ended ({p.returncode}) before the guest ran:\n" + read(out_path + ".err"))
            time.sleep(0.05)
        else:
            raise Fail("the guest did not start running within 30 s")
        time.sleep(1.0)
        if p.poll() is not None:
            raise Fail("the restore finished before QEMU could be killed (is --rate-limit honoured?)")
        log(f"killing QEMU pid {pid} mid-restore")
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        rc = p.wait(30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = read(out_path + ".err")
    print(read(out_path) + err, flush=True)
    if rc != 3:
        raise Fail(f"expected exit 3 after QEMU died, got {rc}")
    if "killed by signal 9" not in err:
        raise Fail("the error does not say that QEMU was killed: " + err)
    log(f"hlt-restore noticed in {took:.2f} s and exited {rc}")


def start_logged(cmd, out_path, env_vars):
    out, err = open(out_path, "wb"), open(out_path + ".err", "wb")
    p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env_vars)
    out.close()
    err.close()
    return p


def wait_for_line(p, out_path, pattern, timeout):
    """Waits until hlt-restore's output matches `pattern` (returns the match) or it exits (returns None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, read(out_path))
        if m:
            return m
        if p.poll() is not None:
            return re.search(pattern, read(out_path))
        time.sleep(0.01)
    raise Fail(f"no line matching {pattern!r} within {timeout} s:\n{read(out_path)[-1500:]}")


def resume_cycle(env, ckpt, last, name, kills, rng, env_vars, moments, resume_ms):
    """One lazy restore, SIGKILLed up to `kills` times at random moments, each time resumed with --resume
    --qemu-dir; then the guest must continue. Returns the number of kills that landed."""
    serial, qdir = env.path(name + ".serial.log"), env.path(name + ".qemu")
    shutil.rmtree(qdir, ignore_errors=True)
    if os.path.exists(serial):
        os.unlink(serial)
    argv = guest_argv(serial)
    # A slow loader (2 MiB/s) keeps the restore going after the guest's own requests (never throttled) have
    # brought in its working set.
    common = [env.restore_bin, "qemu", ckpt, "--rate-limit", "2M"]
    stats = env.path(name + ".stats.json")
    first = common + ["--qemu", argv[0], "--qemu-dir", qdir, "--", *argv[1:]]
    again = common + ["--resume", "--qemu-dir", qdir, "--stats-json", stats]
    landed, pids = 0, set()
    for k in range(kills + 1):
        out_path = env.path(f"{name}.{k}.log")
        p = start_logged(first if k == 0 else again, out_path, env_vars)
        try:
            # Ready to be killed: the restore record is written ("restoring"/"resuming" is printed after it),
            # and a resume has passed its handshake (QEMU 7.2 cannot recover a recovery killed inside it).
            wait_for_line(p, out_path, r"restoring .* into QEMU|resuming the restore", 60)
            if "resuming the restore" in read(out_path):
                m = wait_for_line(p, out_path, r"guest resumed: .* \(([\d.]+) ms after hlt-restore started\)", 60)
                if m:
                    resume_ms.append(float(m.group(1)))
            for m in re.finditer(r"QEMU \(pid (\d+)\)|into QEMU pid (\d+)", read(out_path)):
                pid = int(m.group(1) or m.group(2))
                if pid not in pids:
                    pids.add(pid)
                    env.pids.append(pid)
            if k == kills:
                rc = p.wait(300)
                if rc != 0:
                    raise Fail(f"the last --resume exited {rc}:\n{read(out_path)}{read(out_path + '.err')}")
                break
            if k == 0 and rng.random() < 0.4:
                moment, delay = "before RUN", 0.0
            else:
                moment = rng.choice(["requests", "loader", "loader", "late"])
                delay = {"requests": rng.uniform(0.0, 0.3), "loader": rng.uniform(0.3, 2.5),
                         "late": rng.uniform(2.5, 6.0)}[moment]
            time.sleep(delay)
            if p.poll() is not None:
                if p.returncode != 0:
                    raise Fail(f"hlt-restore run {k} exited {p.returncode} before its kill:\n{read(out_path)}"
                               f"{read(out_path + '.err')}")
                log(f"{name}: run {k} completed the restore before its kill ({moment} +{delay:.2f} s)")
                break
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            # The kill can come after the restore completed and removed its record but before the process was
            # gone (seen under ASan, whose exit checks for leaks): nothing is left to resume then.
            if p.returncode == 0 or not os.path.exists(os.path.join(qdir, "halite-restore.json")):
                log(f"{name}: run {k} completed the restore before its kill landed ({moment} +{delay:.2f} s, "
                    f"exit {p.returncode})")
                break
            landed += 1
            moments.append(f"{moment} +{delay:.2f}s")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        print(read(out_path) + read(out_path + ".err"), flush=True)
    stderr_text = "".join(read(os.path.join(qdir, f)) for f in os.listdir(qdir) if f.endswith(".log"))
    if "File exists" in stderr_text or "postcopy_place_page" in stderr_text:
        raise Fail("QEMU reports a page placed twice: " + stderr_text[-800:])
    if os.path.exists(stats):
        with open(stats) as f:
            st = json.load(f)
        log(f"{name}: last resume found {st['resume_present_pages']} pages in QEMU, "
            f"{st['engine_blocks_present_at_start']} blocks not read again")
    if os.path.exists(os.path.join(qdir, "halite-restore.json")):
        raise Fail("the restore record was left behind after the restore completed")
    env.expect_continues(serial, last, passes=2, timeout=120)
    env.cleanup()
    env.pids = []
    return landed


def resume_refusals(env, ckpt, env_vars):
    """--resume with another checkpoint is refused and leaves QEMU waiting; a QEMU that dies while a resume serves
    it ends that resume promptly with exit 3; a later --resume then says the guest's memory is gone."""
    name = "resume-refusals"
    serial, qdir = env.path(name + ".serial.log"), env.path(name + ".qemu")
    shutil.rmtree(qdir, ignore_errors=True)
    other = env.path("other.hlt")
    if not os.path.exists(other) or os.path.getmtime(other) < os.path.getmtime(ckpt):
        rc, out, err = run_tool([env.save_bin, "flatten", ckpt, "-o", other], other + ".log", 120)
        if rc != 0:
            raise Fail(f"hlt-save flatten exited {rc}: {err}")
    argv = guest_argv(serial)
    common = [env.restore_bin, "qemu"]
    out_path = env.path(name + ".0.log")
    p = start_logged(common + [ckpt, "--rate-limit", "2M", "--qemu", argv[0], "--qemu-dir", qdir, "--", *argv[1:]],
                     out_path, env_vars)
    try:
        wait_for_line(p, out_path, r"guest running", 60)
        env.pids.append(int(re.search(r"QEMU \(pid (\d+)\)", read(out_path)).group(1)))
        time.sleep(0.3)
    finally:
        p.kill()
        p.wait()
    qemu_pid = env.pids[-1]
    rc, out, err = run_tool(common + [other, "--resume", "--qemu-dir", qdir], env.path(name + ".other.log"), 60)
    if rc != 2 or "file_id" not in err:
        raise Fail(f"--resume with another checkpoint: exit {rc}, expected 2 and a message naming file_id: {out}{err}")
    log("--resume with another checkpoint (same content, another file_id) refused: " + err.strip().splitlines()[-1])
    out_path = env.path(name + ".1.log")
    p = start_logged(common + [ckpt, "--rate-limit", "1M", "--resume", "--qemu-dir", qdir], out_path, env_vars)
    try:
        if not wait_for_line(p, out_path, r"guest resumed", 60):
            raise Fail("the resume after the refusal did not resume:\n" + read(out_path) + read(out_path + ".err"))
        time.sleep(0.2)
        if p.poll() is not None:
            raise Fail("the resume completed before QEMU could be killed")
        os.kill(qemu_pid, signal.SIGKILL)
        t0 = time.monotonic()
        rc = p.wait(30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = read(out_path + ".err")
    if rc != 3:
        raise Fail(f"QEMU killed during a resume: exit {rc}, expected 3: {read(out_path)}{err}")
    log(f"QEMU killed while a resume served it: hlt-restore exited {rc} after {took:.2f} s: "
        + err.strip().splitlines()[0][:200])
    rc, out, err = run_tool(common + [ckpt, "--resume", "--qemu-dir", qdir], env.path(name + ".2.log"), 60)
    if rc == 0 or "memory" not in err:
        raise Fail(f"--resume of a QEMU gone after its guest ran: exit {rc}: {out}{err}")
    log("--resume after QEMU died with a running guest: " + err.strip().splitlines()[-1][:200])
    env.cleanup()
    env.pids = []


def scenario_resume(env, kills=None, seed=None):
    """Issue 15: SIGKILL hlt-restore at random moments of lazy restores (before RUN, while requests are served,
    while the loader streams, late), each time followed by `hlt-restore qemu --resume --qemu-dir`, until `kills`
    kills landed. Every guest must continue with every memory check OK and no reboot; no page may go twice
    (QEMU would pause on "File exists", and the next resume would fail)."""
    import random
    kills = int(os.environ.get("HALITE_RESUME_KILLS", 20)) if kills is None else kills
    seed = int(os.environ.get("HALITE_RESUME_SEED", time.time_ns() % 100000)) if seed is None else seed
    rng = random.Random(seed)
    ckpt, last = env.stopped_checkpoint()
    run_dir = env.path("resume.run")
    shutil.rmtree(run_dir, ignore_errors=True)
    env_vars = dict(os.environ, HALITE_RUN_DIR=run_dir)
    log(f"seed {seed}: {kills} SIGKILLs of hlt-restore across restores, each followed by --resume")
    moments, resume_ms, landed, cycle = [], [], 0, 0
    while landed < kills:
        if cycle >= kills:
            raise Fail(f"only {landed} of {kills} kills landed in {cycle} restores")
        want = min(kills - landed, rng.randint(3, 8))
        landed += resume_cycle(env, ckpt, last, f"resume{cycle}", want, rng, env_vars, moments, resume_ms)
        cycle += 1
    log(f"{landed} kills in {cycle} restores: {', '.join(moments)}")
    resume_refusals(env, ckpt, env_vars)
    if resume_ms:
        srt = sorted(resume_ms)
        log(f"--resume start to QEMU's RESUME_ACK over {len(srt)} resumes: median {srt[len(srt) // 2]:.1f} ms, "
            f"min {srt[0]:.1f} ms, max {srt[-1]:.1f} ms")


class FlakyStorage:
    """The checkpoint behind flaky-fs (tests/support/flaky_fs.cc): a FUSE file whose reads fail on command."""

    def __init__(self, env, ckpt):
        self.binary = os.path.join(os.path.dirname(env.save_bin), os.pardir, "tests", "flaky-fs")
        if not os.path.exists(self.binary):
            raise Skip("flaky-fs was not built (the image server, and with it FUSE, is off in this build)")
        if not os.path.exists("/dev/fuse"):
            raise Skip("no /dev/fuse: the failing storage of this test is a FUSE file system")
        # Absolute: fuse_main may change its working directory.
        self.mnt, self.control = os.path.abspath(env.path("flaky.mnt")), os.path.abspath(env.path("flaky.control"))
        subprocess.run(["fusermount3", "-u", "-q", self.mnt], check=False)
        os.makedirs(self.mnt, exist_ok=True)
        self.set("ok")
        self.proc = subprocess.Popen([self.binary, os.path.abspath(ckpt), self.mnt, self.control], stderr=open(env.path("flaky.log"), "wb"))
        self.path = os.path.join(self.mnt, os.path.basename(ckpt))
        deadline = time.monotonic() + 10
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Fail("flaky-fs did not come up: " + read(env.path("flaky.log")))
            time.sleep(0.05)

    def set(self, how):
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            f.write(how + "\n")
        os.replace(tmp, self.control)
        time.sleep(0.02)  # a new modification time, even on a coarse clock

    def stop(self):
        subprocess.run(["fusermount3", "-u", "-q", self.mnt], check=False)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def scenario_resume_storage(env):
    """Issue 15 item 2: the checkpoint's storage fails under a lazy restore. A transient failure (a few reads)
    is retried and pauses nothing; a lasting one stops hlt-restore with a message naming the checkpoint and what
    to run once it is fixed, QEMU stays up with its guest waiting, and --resume after the fix completes it."""
    ckpt, last = env.stopped_checkpoint()
    storage = FlakyStorage(env, ckpt)
    try:
        for phase in ("transient", "lasting"):
            name = "storage-" + phase
            serial, qdir, stats = env.path(name + ".serial.log"), env.path(name + ".qemu"), env.path(name + ".stats.json")
            shutil.rmtree(qdir, ignore_errors=True)
            for f in (serial, stats):
                if os.path.exists(f):
                    os.unlink(f)
            argv = guest_argv(serial)
            out_path = env.path(name + ".restore.log")
            run_dir = env.path(name + ".run")
            env_vars = dict(os.environ, HALITE_RUN_DIR=run_dir)
            p = start_logged([env.restore_bin, "qemu", storage.path, "--rate-limit", "2M", "--stats-json", stats,
                              "--qemu", argv[0], "--qemu-dir", qdir, "--", *argv[1:]], out_path, env_vars)
            try:
                if not wait_for_line(p, out_path, r"guest running", 60):
                    raise Fail(f"{phase}: the guest never ran:\n{read(out_path)}{read(out_path + '.err')}")
                m = re.search(r"QEMU \(pid (\d+)\)", read(out_path))
                qemu_pid = int(m.group(1))
                env.pids.append(qemu_pid)
                time.sleep(0.5)
                if p.poll() is not None:
                    raise Fail(f"{phase}: the restore ended before the storage failed (is --rate-limit honoured?)")
                storage.set("fail-next 2" if phase == "transient" else "fail")
                rc = p.wait(120)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            out, err = read(out_path), read(out_path + ".err")
            print(out + err, flush=True)
            if phase == "transient":
                if rc != 0:
                    raise Fail(f"a transient storage failure stopped the restore ({rc})")
                with open(stats) as f:
                    retries = json.load(f)["read_retries"]
                if retries < 1:
                    raise Fail("the transient failure was never retried (read_retries 0): did it reach a read?")
                log(f"transient: {retries} reads retried, the restore completed")
            else:
                if rc == 0:
                    raise Fail("the restore completed although its storage failed for good")
                if storage.path not in err or "--resume" not in err or "postcopy-paused" not in err:
                    raise Fail("the error does not name the checkpoint, QEMU's state and how to resume: " + err)
                if not pid_alive(qemu_pid):
                    raise Fail("QEMU did not stay up after the storage failure")
                log(f"lasting: hlt-restore exited {rc}, QEMU pid {qemu_pid} waits; fixing the storage and resuming")
                storage.set("ok")
                rout = env.path(name + ".resume.log")
                rp = start_logged([env.restore_bin, "qemu", storage.path, "--resume", "--qemu-dir", qdir], rout,
                                  env_vars)
                rrc = rp.wait(300)
                print(read(rout) + read(rout + ".err"), flush=True)
                if rrc != 0:
                    raise Fail(f"--resume after the fix exited {rrc}")
            env.expect_continues(serial, last, passes=2, timeout=120)
            env.cleanup()
            env.pids = []
    finally:
        storage.stop()


def scenario_corrupt_block(env):
    ckpt, _ = env.stopped_checkpoint()
    bad = env.path("corrupt.hlt")
    shutil.copyfile(ckpt, bad)
    size = os.path.getsize(bad)
    with open(bad, "r+b") as f:  # the middle of the file is block payload (the index is at the end)
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    rc, out, err, serial = env.restore(bad, "corrupt", timeout=90)
    if rc != 4:
        raise Fail(f"expected exit 4 for a damaged block, got {rc}")
    if "checksum mismatch" not in err or "postcopy-paused" not in err:
        raise Fail("the error does not name the damaged block and QEMU's paused postcopy: " + err)
    if re.search(r" BAD ", read(serial)):
        raise Fail("the guest ran on wrong memory")
    log("damaged block refused; QEMU's postcopy paused instead of running on wrong memory")


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
        deadline = time.monotonic() + 60
        while len(pass_numbers(read(serial1))) < n1 + 2:  # the first clone goes on beside the second
            if time.monotonic() > deadline or re.search(FAIL_RX, read(serial1)):
                raise Fail("the first clone stopped passing while the second ran:\n" + read(serial1)[-1000:])
            time.sleep(0.2)
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
        mounts, deadline = [], time.monotonic() + 30
        while not mounts and server.poll() is None and time.monotonic() < deadline:
            mounts = [d for d in os.listdir(images) if os.path.exists(os.path.join(images, d, "ckpt.pc.ram"))]
            time.sleep(0.1)
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
        deadline = time.monotonic() + 30
        while server.poll() is None and time.monotonic() < deadline:
            server.send_signal(signal.SIGTERM)  # refused while a clone maps the image, which cleanup ended
            time.sleep(0.5)
        if server.poll() is None:
            server.kill()
            server.wait()
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
            deadline = time.monotonic() + 30
            while pid_alive(server_pid) and time.monotonic() < deadline:
                os.kill(server_pid, signal.SIGTERM)
                time.sleep(0.5)
            if pid_alive(server_pid):
                kill_pid(server_pid)


def stop_image_server(images):
    """SIGTERM the image server(s) under `images` (they refuse while a clone maps a file: kill the clones first)."""
    for d in os.listdir(images) if os.path.isdir(images) else []:
        stats = os.path.join(images, d, ".stats")
        if not os.path.exists(stats):
            continue
        try:
            with open(stats) as f:
                pid = json.load(f)["pid"]
        except (OSError, ValueError, KeyError):
            continue
        deadline = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < deadline:
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.5)
        kill_pid(pid)


def incremental(env, name, restore_extra, expect_unwritten):
    """Issue 12: the stopped-guest checkpoint is restored and runs on; it is saved again with --parent (an
    incremental child), the QEMU dies, and the child alone (a chain of two files) is restored lazily: memcheck
    continues with every page verified, no reboot. `restore_extra` chooses how the first restore maps memory."""
    base, last = env.stopped_checkpoint()
    qmp = env.path(name + "1.qmp")
    rc, out, err, serial = env.restore(base, name + "1", restore_extra, qmp=qmp)
    if rc != 0:
        raise Fail(f"hlt-restore qemu of the parent exited {rc}")
    env.expect_continues(serial, last)
    child = env.path(name + "-child.hlt")
    if os.path.exists(child):
        os.unlink(child)
    rc, save_out, save_err = run_tool([env.save_bin, "qemu", "--qmp", qmp, "-o", child, "--parent", base,
                                       "--then", "stop"], child + ".save.log", 300)
    print(save_out + save_err, flush=True)
    if rc != 0:
        raise Fail(f"hlt-save qemu --parent exited {rc}")
    last_child = pass_numbers(read(serial))[-1]
    env.cleanup()  # the source QEMU dies: only the chain is left
    env.pids = []
    m = re.search(r"in parent\s+(\d+) pages .*?(\d+) parent blocks decoded", save_out)
    if not m or int(m.group(1)) == 0:
        raise Fail("the child stores no page as a reference into its parent")
    in_parent, decoded = int(m.group(1)), int(m.group(2))
    child_bytes, base_bytes = os.path.getsize(child), os.path.getsize(base)
    log(f"child: {child_bytes} bytes ({child_bytes / base_bytes:.2f}x the parent's {base_bytes}), {in_parent} pages "
        f"in the parent, {decoded} parent blocks decoded to compare")
    if child_bytes >= base_bytes:
        raise Fail("the child is not smaller than its parent")
    u = re.search(r"parent's image\s+QEMU maps (\S+): (\d+) pages never written", save_out)
    if expect_unwritten:
        if not u or int(u.group(2)) == 0:
            raise Fail("the save did not use the clone's page map of the parent's image")
        unwritten = int(u.group(2))
        log(f"page map: {unwritten} pages of pc.ram never written by the clone, declared in the parent unread")
        if unwritten > in_parent:
            raise Fail(f"{unwritten} unwritten pages but only {in_parent} in the parent")
    elif u:
        raise Fail("a copy restore's QEMU maps no image of the parent, yet the save says it does")
    info = subprocess.run([env.restore_bin, "info", child], capture_output=True, text=True)
    if info.returncode != 0 or "chain        2 files" not in info.stdout:
        raise Fail("hlt-restore info does not show a chain of two files:\n" + info.stdout + info.stderr)
    rc, out, err, serial2 = env.restore(child, name + "2")
    if rc != 0:
        raise Fail(f"hlt-restore qemu of the child exited {rc}")
    env.expect_continues(serial2, last_child)
    log(f"PASS {name}: the child restored lazily through its parent; memcheck continues")


def scenario_incremental(env):
    incremental(env, "incremental", [], expect_unwritten=False)


def scenario_incremental_shared(env):
    """The same from a --memory shared clone: the pages it never wrote are known from QEMU's page map (they still
    read from the parent's image) and go into the child as references without being read or compared."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server behind --memory shared is a FUSE file system")
    images = env.path("images-incremental")
    os.makedirs(images, exist_ok=True)
    try:
        incremental(env, "incremental-shared", ["--memory", "shared", "--image-dir", images], expect_unwritten=True)
    finally:
        env.cleanup()
        env.pids = []
        stop_image_server(images)


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
        env.cleanup()
        env.pids = []
        time.sleep(0.5)  # the killed QEMUs' huge pages go back before the pool shrinks
        reservation.__exit__(None, None, None)


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


def load_ceph_env(env):
    if not env.ceph_env:
        raise Skip("no Ceph cluster: run through ctest (the objstore/ceph-up fixture) or give --ceph-env DIR/env")
    if not os.path.exists(env.ceph_env):
        raise Skip(f"no Ceph cluster at {env.ceph_env} (objstore/ceph-up could not start one: see its output)")
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server behind --memory shared is a FUSE file system")
    for line in open(env.ceph_env):
        if line.startswith("export "):
            k, v = line[len("export "):].strip().split("=", 1)
            os.environ[k] = v


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
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ctest's timeout: unwind and kill our QEMUs
    try:
        check_prerequisites(need_uffd)
        t0 = time.monotonic()
        fn(env)
        log(f"PASS {a.scenario} ({time.monotonic() - t0:.1f} s, accel {launch.default_accel()})")
        return 0
    except Skip as e:
        skip_loudly(str(e))
    except (Fail, TimeoutError, RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"FAIL {a.scenario}: {e}")
        return 1
    finally:
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())
