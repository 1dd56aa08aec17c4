"""What the QEMU guest scenarios share: prerequisites, the guest's command line, Env (the tools, the work
directory, the shared stopped-guest checkpoint, restores and the checks that the restored guest continues), the
placement and eager checks, and stopping image servers.
"""

import ctypes
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))

import launch  # noqa: E402
from hltharness.guesttest import FAIL_RX, Fail, OK_RX, Skip, log, pass_numbers  # noqa: E402
from hltharness.proc import kill_pid, run_tool, stop_pid, wait_gone  # noqa: E402
from hltharness.scratch import Scratch  # noqa: E402
from hltharness.wait import read_text as read, wait_for_match, wait_until  # noqa: E402


MEM = "1G"
MIB = "256"


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


def stop_server_pid(pid):
    """Its clones are gone: it stops on the first SIGTERM and unmounts. SIGKILL and fail after 30 s."""
    if not stop_pid(pid, 30, "the image server"):
        raise Fail(f"the image server (pid {pid}) did not stop once its clones were gone")


class Env:
    def __init__(self, tools, work):
        self.save_bin = os.path.join(tools, "hlt-save")
        self.restore_bin = os.path.join(tools, "hlt-restore")
        self.work = work
        self.pids = []  # QEMUs to kill at the end
        self.ceph_env = None  # --ceph-env (scenario s3)
        # This scenario's outputs: their large part goes when it passes. The shared stopped-guest checkpoint is
        # not one of them (the ctest fixture qemu_guest_checkpoint removes it after the last scenario).
        self.scratch = Scratch(work, log=log)

    def path(self, name):
        return self.scratch.path(name)

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
        ckpt, meta = os.path.join(self.work, "stopped.hlt"), os.path.join(self.work, "stopped.json")
        inputs = [self.save_bin, launch.kernel_path(), launch.initrd_path()]
        with open(os.path.join(self.work, "stopped.lock"), "w") as lock:
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
        def enough_passes():
            text = read(serial)
            if re.search(FAIL_RX, text):
                raise Fail("the restored guest printed: " + re.search(r".*(" + FAIL_RX + r").*", text).group(0))
            if launch.READY_LINE in text or "memcheck start" in text:
                raise Fail("the restored guest booted afresh instead of continuing")
            nums = pass_numbers(text)
            return nums if len(nums) >= passes else None
        try:
            nums = wait_until(enough_passes, timeout, f"{passes} OK passes from the restored guest", poll=0.1)
        except TimeoutError as e:
            raise Fail(f"{e}; only {len(pass_numbers(read(serial)))} so far:\n{read(serial)[-1500:]}")
        if nums[0] < last_saved_pass:
            raise Fail(f"restored guest's first pass {nums[0]} is before the source's last {last_saved_pass}")
        log(f"restored guest continues: passes {nums[:4]} OK (the source had done {last_saved_pass}), no BAD")

    def cleanup(self):
        """Kills the scenario's QEMUs and waits until they are gone (their memory, huge pages included, is
        back once they are zombies)."""
        for pid in self.pids:
            kill_pid(pid)
        wait_gone(self.pids, 30)


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


def wait_for_line(p, out_path, pattern, timeout):
    """Waits until hlt-restore's output matches `pattern` (returns the match) or it exits (returns None)."""
    exited = []

    def ended():
        if p.poll() is not None:
            exited.append(p.returncode)
            return f"it exited {p.returncode}"
        return None
    try:
        return wait_for_match(out_path, pattern, timeout, give_up=ended)
    except TimeoutError:
        if exited:
            return re.search(pattern, read(out_path))
        raise Fail(f"no line matching {pattern!r} within {timeout} s:\n{read(out_path)[-1500:]}")


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
        stop_pid(pid, 30, "the image server")


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
