"""hlt-restore killed and resumed (--resume --qemu-dir), and a checkpoint whose storage fails under a restore.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time

from qemu_guest_common import guest_argv, wait_for_line
from hltharness.guesttest import Fail, Skip, log  # noqa: E402
from hltharness.proc import pid_alive, run_tool, start_logged  # noqa: E402
from hltharness.wait import read_text as read, wait_for_path  # noqa: E402


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
        try:
            wait_for_path(self.path, 10, give_up=lambda: self.proc.poll() is not None and "flaky-fs exited")
        except TimeoutError as e:
            raise Fail(f"flaky-fs did not come up ({e}): " + read(env.path("flaky.log")))

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
