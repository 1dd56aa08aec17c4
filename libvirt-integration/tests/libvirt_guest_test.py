#!/usr/bin/env python3
"""hlt-save libvirt / hlt-restore libvirt against the project's test guest under libvirt's embedded QEMU driver
(qemu:///embed?root=DIR: libvirt runs inside each process that connects; no daemon), TCG.

usage: libvirt_guest_test.py --tools DIR --work DIR SCENARIO

  clones   a domain with a virtio disk and a NIC runs memcheck with its journal on the disk (memory and disk
           checked against each other every pass); hlt-save libvirt (--then destroy) freezes its disk;
           hlt-restore libvirt brings it back as itself, then as two clones (one --eager, placed through QEMU's
           userfaultfd while libvirt's QEMU is held paused; one --detach, its outcome read from the status
           file): each continues memcheck with no fresh boot and no BAD, has its own name, UUID, MAC,
           VM generation ID, serial log and disk overlay; the frozen base image is unchanged at the end
  daemon   under a libvirtd of the test's own (a session instance run as nobody: QEMU is unprivileged, as under
           qemu:///system): a lazy restore is refused up front while vm.unprivileged_userfaultfd=0; two clones
           restored at the same time both continue; while their pages are served, virsh save, snapshot-create
           --memspec and migrate are refused at once by the restore's migration blocker; afterwards save works
  shared   hlt-restore libvirt --clone --memory shared twice: both clones run side by side with their guest RAM a
           private mapping of the one checkpoint image (libvirt's memory backing directory served by the RAM
           directory server), each continues memcheck, the second decodes no block again; an unregistered domain
           with file-backed RAM fails to start; virsh destroy cleans the domain's RAM directory entry
  daemon_shared  two --clone --memory shared restores started at once under the daemon scenario's libvirtd:
           QEMU runs as nobody, libvirtd makes its RAM directory entries as nobody, the session's memory backing
           directory is found, one RAM directory server serves both
  devices  issue 28: a domain with UEFI (OVMF) and its NVRAM, a TPM 2.0 (swtpm), a pty serial console with a log, a
           file serial port, a guest agent unix channel (the guest runs hltagent), a VNC unix socket, a disk and a
           NIC, saved, then restored as three clones (lazy, --eager, --no-sync-time): each has its own console log
           receiving its own output, serial file, agent socket answering, VNC socket answering RFB, NVRAM copy,
           TPM state copy under its new UUID with its swtpm on it (the guest reads the saved PCR 0); the synced
           clones' clocks are the host's, the unsynced one's lags by the time since the save
  resume   a clone's lazy restore (slowed by --rate-limit) is SIGKILLed while its pages are served, then taken over
           with `hlt-restore libvirt CKPT --resume DOMAIN`; that resume is killed too and resumed again: the guest
           continues memcheck with no fresh boot and no BAD, QEMU never saw a page twice, the restore's record and
           private monitor are gone at the end and libvirt can save the domain again (the blocker was removed);
           a --detach restore whose worker is SIGKILLed is resumed by its supervisor and completes; so is a
           --supervise one (halite-restore@.service's command), whose supervisor then exits 0
  daemon_devices  the devices scenario under a session libvirtd of the test's own whose character device logs go
           through its own virtlogd (libvirt's default), as nobody; c1 and c2 restored at the same moment (a shared
           console log made the second fail: "Cannot open log file: ...: Device or resource busy")
  shared_s3  (label ceph) hlt-save libvirt -o s3://..., two --clone --memory shared --block-cache clones from that
           URI: one image server through the block cache, both continue, no block decoded twice; without --disk-dir
           the restore from the store is refused
  errors   libvirt not reachable, an unknown domain, a checkpoint not from libvirt, a name in use, a frozen disk that changed: each a clear
           message and a non-zero exit, with no domain or overlay left behind

Exit 0 pass, 1 fail, 77 skipped (libvirt's QEMU driver, QEMU, the guest build or userfaultfd unavailable; the
reason is printed loudly). The test user does the broker's part with virsh; the tools use libvirt's C API.
"""

import argparse
import ctypes
import hashlib
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
from hltharness.guesttest import Fail, Skip, log  # noqa: E402
from hltharness.libvirt import error_message  # noqa: E402,F401  (libvirt_live_test uses it through here)
from hltharness.testguest_libvirt import FAIL_RX, MIB, OK_RX, Env  # noqa: E402,F401
from hltharness.proc import stop_pid  # noqa: E402
from hltharness.scratch import Scratch  # noqa: E402
from hltharness.wait import poll_until, wait_for_path, wait_until  # noqa: E402
from hltharness.wait import read_text as read  # noqa: E402

# hlt-restore libvirt's "before the call" line: how many blocks of the restore order it read ahead meanwhile.
WARM_RX = re.compile(r"^  before the call  .*; meanwhile (\d+) blocks of the restore order read ahead", re.M)

# The daemon scenario's restores are slowed to this (bytes/s): a broker's operations meet them serving.
RESTORE_RATE = 4 << 20
MAC_RX = re.compile(r"HLT-GUEST MAC eth0 ([0-9a-f:]{17})")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class DaemonEnv(Env):
    """A libvirt daemon of the test's own, as a broker's host has one: a session libvirtd started by the test as
    an unprivileged user (nobody) with its own sockets, configuration and state under one directory, reached
    through its socket (qemu:///session?socket=...). The tools run as root and connect to it like any client;
    QEMU runs as nobody, so clone overlays must be handed to it and postcopy needs vm.unprivileged_userfaultfd."""

    USER = "nobody"

    def __init__(self, tools, work, logd=False, **kw):
        super().__init__(tools, work, **kw)
        self.logd = logd  # QEMU's output and character device logs through virtlogd (libvirt's default)
        self.root = f"/tmp/hlt-lvd-{os.getpid()}"
        self.logs = work  # the tools' output stays in the build tree; the guest's files live under the root
        self.work = os.path.join(self.root, "work")
        self.uri = f"qemu:///session?socket={self.root}/run/libvirt/libvirt-sock"
        self.daemon = None
        self.sysctl_before = None

    def setup(self):
        if os.geteuid() != 0:
            raise Skip("the daemon scenario starts libvirtd as another user and sets vm.unprivileged_userfaultfd: "
                       "it needs root")
        for tool in ("libvirtd", "setpriv"):
            if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
                raise Skip(f"{tool} is not installed (scripts/install-deps: libvirt-daemon, util-linux)")
        import pwd
        pw = pwd.getpwnam(self.USER)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        super().setup()
        if os.path.exists(self.logs):
            shutil.rmtree(self.logs)
        os.makedirs(self.logs)
        config = os.path.join(self.root, "config", "libvirt")
        os.makedirs(config)
        with open(os.path.join(config, "qemu.conf"), "w") as f:
            # QEMU's own log in a file: no virtlogd to start; with logd, the session libvirtd starts its own
            # virtlogd, which refuses to open one log file for two domains ("Device or resource busy").
            f.write("" if self.logd else 'stdio_handler = "file"\n')
        os.makedirs(os.path.join(self.root, "run"), mode=0o700)
        for d, _, files in os.walk(self.root):
            os.chown(d, self.uid, self.gid)
            for f in files:
                os.chown(os.path.join(d, f), self.uid, self.gid)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": self.root,
               "XDG_RUNTIME_DIR": os.path.join(self.root, "run"),
               "XDG_CONFIG_HOME": os.path.join(self.root, "config"),
               "XDG_CACHE_HOME": os.path.join(self.root, "cache"),
               "LIBVIRT_LOG_OUTPUTS": "1:file:" + os.path.join(self.root, "libvirtd.log")}
        self.daemon = subprocess.Popen(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "libvirtd", "--timeout", "0"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.logs, "libvirtd.err"), "wb"),
            start_new_session=True)
        sock = os.path.join(self.root, "run", "libvirt", "libvirt-sock")
        try:
            wait_for_path(sock, 30, give_up=lambda: self.daemon.poll() is not None and "libvirtd exited")
        except TimeoutError as e:
            raise Fail(f"libvirtd did not start ({e}): {read(os.path.join(self.logs, 'libvirtd.err'))[-2000:]}")
        with open("/proc/sys/vm/unprivileged_userfaultfd") as f:
            self.sysctl_before = f.read().strip()

    def set_unprivileged_userfaultfd(self, value):
        with open("/proc/sys/vm/unprivileged_userfaultfd", "w") as f:
            f.write(str(value))

    def chown(self, path):
        os.chown(path, self.uid, self.gid)

    def swtpm_storage(self):
        return os.path.join(self.root, "config", "libvirt", "qemu", "swtpm")  # a session instance's

    def tool(self, argv, name, **kw):
        saved, self.work = self.work, self.logs
        try:
            return super().tool(argv, name, **kw)
        finally:
            self.work = saved

    def cleanup(self):
        try:
            if self.daemon is not None and self.daemon.poll() is None:
                for name in self.domains():
                    self.virsh("destroy", name, check=False)
        finally:
            if self.daemon is not None and self.daemon.poll() is None:
                os.killpg(self.daemon.pid, 15)
                try:
                    self.daemon.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.daemon.pid, 9)
            if self.sysctl_before is not None:
                self.set_unprivileged_userfaultfd(self.sysctl_before)
            logs = os.path.join(self.root, "cache", "libvirt", "qemu", "log")
            for f in os.listdir(logs) if os.path.isdir(logs) else []:
                shutil.copy(os.path.join(logs, f), os.path.join(self.logs, "qemu-" + f))
            for f in ("libvirtd.log",) + tuple(x for x in os.listdir(self.work) if x.endswith(".log")) \
                    if os.path.isdir(self.work) else ():
                src = os.path.join(self.root, f) if f == "libvirtd.log" else os.path.join(self.work, f)
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(self.logs, f))
            shutil.rmtree(self.root, ignore_errors=True)


def scenario_clones(env):
    passes = env.boot_source()
    source = env.identity("desk")
    log(f"source running: passes {passes[:3]}..., {source}")
    ckpt = env.path("desk.hlt")
    _, out, _ = env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--then", "destroy"],
                         "save")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    m = re.search(r"disk vda\s+frozen (\S+) .* goes on on (\S+)", out)
    if not m or m.group(1) != env.path("desk.img"):
        raise Fail("hlt-save did not report the frozen disk:\n" + out)
    base_hash = sha256(env.path("desk.img"))
    if env.domains():
        raise Fail(f"--then destroy left {env.domains()}")

    # As itself: same name and UUID, a disk overlay of its own over the frozen image.
    os.makedirs(env.path("disks"))
    trace = env.path("restore_self.trace")
    _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--disk-dir", env.path("disks"),
                          "--record-trace", trace, "--warm-mib", "64"], "restore_self")
    if not re.search(r"^running desk [\d.]+ ms", out, re.M):
        raise Fail("no 'running' line:\n" + out)
    # While libvirt started QEMU the head of the restore order was read ahead (--warm-mib; off by default).
    warm = WARM_RX.search(out)
    if not warm or int(warm.group(1)) < 1:
        raise Fail("no blocks read ahead while libvirt started QEMU:\n" + out)
    # --record-trace: the pages the guest asked for, as an access trace that replays against the checkpoint.
    lines = read(trace).splitlines()
    asked = [x for x in lines if not x.startswith("#")]
    if not lines or not lines[0].startswith("# libhalite access trace") or not asked or \
            not all(re.fullmatch(r"[^:]+:\d+", x) for x in asked):
        raise Fail(f"--record-trace wrote {len(lines)} lines: {lines[:3]}")
    env.tool([env.restore_bin, "replay", ckpt, "--trace", trace, "--loader", "off"], "replay_self_trace")
    env.wait_passes(env.path("desk.serial.log"), 2, after=saved_after)
    me = env.identity("desk")
    if me["uuid"] != source["uuid"] or me["disk"] != env.path("disks/desk-vda.qcow2"):
        raise Fail(f"restored as itself: {me} (source {source})")
    env.destroy("desk")

    # Two clones: one waited for, restored eagerly (every page placed through QEMU's userfaultfd before its
    # guest runs: hlt-restore holds libvirt's QEMU paused, then `cont`), one detached (lazy).
    _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c1",
                          "--disk-dir", env.path("disks"), "--eager"], "restore_c1")
    if not re.search(r"^running c1 [\d.]+ ms", out, re.M) or "placement        direct through QEMU's userfaultfd" \
            not in out:
        raise Fail("the eager clone c1 did not run with its pages placed directly:\n" + out)
    warm = WARM_RX.search(out)
    if not warm or warm.group(1) != "0":
        raise Fail("without --warm-mib blocks were read ahead:\n" + out)
    status = env.path("c2.status")
    _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c2",
                          "--disk-dir", env.path("disks"), "--detach", "--status-file", status], "restore_c2")
    if "running c2" not in out or "detached" not in out:
        raise Fail("--detach did not report running:\n" + out)
    def status_state():
        try:
            return json.loads(read(status) or "{}")
        except json.JSONDecodeError as e:
            raise Fail(f"{status} is not JSON (a torn write?): {e}")
    poll_until(lambda: status_state().get("state") in ("completed", "failed"), 120, poll=0.5)
    state = status_state()
    if state.get("state") != "completed" or state.get("domain") != "c2":
        raise Fail(f"detached restore: {state}")
    ids = {"desk": source}
    for name in ("c1", "c2"):
        env.wait_passes(env.path(f"desk.serial.log.{name}"), 2, after=saved_after)
        ids[name] = env.identity(name)
    log(f"identities: {json.dumps(ids, indent=1)}")
    # Each clone's guest sees its own new MAC (its NIC was unplugged and plugged again).
    for name in ("c1", "c2"):
        serial, want = env.path(f"desk.serial.log.{name}"), ids[name]["mac"]
        poll_until(lambda: want in MAC_RX.findall(read(serial)), 60, poll=0.5)
        if want not in MAC_RX.findall(read(serial)):
            raise Fail(f"{name}: the guest never reported its new MAC {want} (saw {MAC_RX.findall(read(serial))})")
    for key in ("uuid", "mac", "genid", "disk"):
        values = [ids[n][key] for n in ids]
        if None in values or len(set(values)) != len(values):
            raise Fail(f"{key} not distinct: {values}")
    if set(env.domains()) != {"c1", "c2"}:
        raise Fail(f"domains: {env.domains()}")
    if sha256(env.path("desk.img")) != base_hash:
        raise Fail("the frozen base image changed")
    log("PASS clones: the domain restored as itself and as two clones; the frozen base is unchanged")


def scenario_daemon(env):
    """Under a daemon of the test's own (DaemonEnv): the up-front userfaultfd check, two clones restored at the same
    time, and libvirt operations that would break a restore refused while it serves pages."""
    env.chown(env.path("desk.img"))
    for f in ("vmlinux", "initramfs.cpio"):
        env.chown(env.path(f))
    env.boot_source()
    ckpt = env.path("desk.hlt")
    env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--then", "destroy"], "save")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    base_hash = sha256(env.path("desk.img"))
    disks = env.path("disks")
    os.makedirs(disks)
    env.chown(disks)

    # QEMU runs as nobody: with vm.unprivileged_userfaultfd=0 a lazy restore is refused up front, nothing left.
    env.set_unprivileged_userfaultfd(0)
    rc, out, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c0",
                             "--disk-dir", disks], "restore_c0", expect_ok=False)
    if rc == 0 or "vm.unprivileged_userfaultfd" not in err or f"uid {env.uid}" not in err:
        raise Fail(f"a QEMU that cannot use userfaultfd was not refused up front (exit {rc}):\n{out}\n{err}")
    if env.domains() or os.listdir(disks):
        raise Fail(f"the refused restore left {env.domains()} / {os.listdir(disks)}")
    log("refused up front: " + err.strip().splitlines()[-1][:200])
    env.set_unprivileged_userfaultfd(1)

    # Two clones at once, each served slowly enough (--rate-limit) that the broker's operations below meet a
    # restore still in progress.
    procs = {}
    for name in ("c1", "c2"):
        status = env.path(f"{name}.status")
        argv = [env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", name,
                "--disk-dir", disks, "--rate-limit", str(RESTORE_RATE), "--status-file", status]
        out = open(os.path.join(env.logs, f"restore_{name}.out"), "wb")
        procs[name] = (subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT), status)
        log(f"$ {' '.join(argv)} &")

    def state(name):
        try:
            return json.loads(read(procs[name][1]) or "{}").get("state")
        except json.JSONDecodeError as e:
            raise Fail(f"{procs[name][1]} is not JSON (a torn write?): {e}")

    try:
        wait_until(lambda: {state(n) for n in procs} == {"running"}, 120, "both clones running", poll=0.2,
                   give_up=lambda: any(p.poll() is not None for p, _ in procs.values()) and "a restore exited")
    except TimeoutError:
        raise Fail(f"the clones did not both reach running together: { {n: state(n) for n in procs} }")
    log("both clones running while their pages are still served")

    # While c1's pages are still being served, a save, a snapshot with memory and a migration are refused at
    # once, not left hanging.
    probes = {
        "save": ["save", "c1", env.path("c1.libvirt-save")],
        "snapshot": ["snapshot-create-as", "c1", "s1", "--memspec", env.path("c1.snap-mem")],
        # Peer to peer, to this same daemon: the source side checks what blocks a migration before it learns
        # that the destination is itself.
        "migrate": ["migrate", "c1", env.uri.replace("qemu://", "qemu+unix://"), "--live", "--p2p"],
    }
    for what, cmd in probes.items():
        t = time.time()
        try:
            p = subprocess.run(["virsh", "-q", "-c", env.uri, *cmd], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            raise Fail(f"virsh {what} during the restore hung for 60 s")
        log(f"virsh {what} during the restore: exit {p.returncode} after {time.time() - t:.1f} s: "
            f"{(p.stderr or p.stdout).strip()[:300]}")
        if state("c1") != "running":
            raise Fail(f"c1's restore ended before virsh {what} could meet it: make RESTORE_RATE smaller")
        if p.returncode == 0 or "hlt-restore-in-progress" not in p.stderr:
            raise Fail(f"virsh {what} during the restore was not refused by the restore's migration blocker "
                       f"(exit {p.returncode}): {p.stderr.strip()}")

    for name, (p, status) in procs.items():
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            raise Fail(f"the restore of {name} did not finish")
        if p.returncode != 0 or state(name) != "completed":
            raise Fail(f"{name}: exit {p.returncode}, state {state(name)}:\n"
                       + read(os.path.join(env.logs, f"restore_{name}.out"))[-3000:])
    ids = {}
    for name in procs:
        env.wait_passes(env.path(f"desk.serial.log.{name}"), 2, after=saved_after)
        ids[name] = env.identity(name)
    for key in ("uuid", "mac", "genid", "disk"):
        if len({ids[n][key] for n in ids}) != len(ids):
            raise Fail(f"{key} not distinct: {ids}")
    # Each guest sees its clone's new MAC (its NIC was unplugged and plugged again once every page was in).
    for name in procs:
        serial, want = env.path(f"desk.serial.log.{name}"), ids[name]["mac"]
        poll_until(lambda: want in MAC_RX.findall(read(serial)), 60, poll=0.5)
        if want not in MAC_RX.findall(read(serial)):
            raise Fail(f"{name}: the guest never reported its new MAC {want} (saw {MAC_RX.findall(read(serial))})")
    for name in procs:
        overlay = os.stat(ids[name]["disk"])
        if overlay.st_uid != env.uid:
            raise Fail(f"{ids[name]['disk']} belongs to uid {overlay.st_uid}, not QEMU's ({env.uid})")
    if sha256(env.path("desk.img")) != base_hash:
        raise Fail("the frozen base image changed")
    # Once every page is in the blocker is gone: the broker may save the clone.
    env.virsh("save", "c2", env.path("c2.libvirt-save"))
    # libvirt starts the saved domain again from the XML in its save image: nothing the restore added to start its
    # QEMU (-incoming defer, its private QMP socket, whose directory is gone) may stop that.
    env.virsh("restore", env.path("c2.libvirt-save"))
    state = env.virsh("domstate", "c2").strip()
    if state != "running":
        raise Fail(f"virsh restore of the saved clone c2: its state is {state!r}, not running")
    env.destroy("c2")
    os.remove(env.path("c2.libvirt-save"))
    log("PASS daemon: refused up front without userfaultfd; two clones restored at once under a private libvirtd; "
        "save/snapshot/migrate refused during the restore, save accepted after it, and virsh restore of that save "
        "runs the clone again")


def find_pids(*needles):
    """Processes whose command line holds every needle."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if all(any(n in a for a in argv) for n in needles):
            pids.append(int(d))
    return pids


def maps_of(pid, path):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return [line.split() for line in f if line.rstrip().endswith(" " + path)]
    except OSError:
        return []


def tool_tripwire(directory):
    """A directory for the front of PATH in which `hlt-restore` and `halite-image-server` only record that they ran
    (in DIRECTORY/tripped) and fail: a restore through the library must run neither (the library starts its own
    daemon, found beside libhalite.so). tripped(DIRECTORY) lists what ran."""
    os.makedirs(directory, exist_ok=True)
    for name in ("hlt-restore", "halite-image-server"):
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\necho "{name} $*" >>"{directory}/tripped"\nexit 1\n')
        os.chmod(path, 0o755)
    return directory


def tripped(directory):
    return read(os.path.join(directory, "tripped")).splitlines()


def program_of(pid):
    """The executable a process runs (/proc/PID/exe), or "" when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def expect_daemon(pids, daemon):
    """Every server process runs libhalite's daemon `daemon` (no hlt-restore among them)."""
    for pid, what in pids:
        exe = program_of(pid)
        if os.path.realpath(exe) != os.path.realpath(daemon):
            raise Fail(f"the {what} (pid {pid}) runs {exe or '(gone)'}, not libhalite's daemon {daemon}")
        log(f"the {what} (pid {pid}) runs {exe}")


def stop_server(pid, what):
    """SIGTERM until it is gone (a server refuses the first signal while it is in use; a zombie, which its parent
    (not this test) has not reaped yet, counts as gone); SIGKILL and fail after 30 s."""
    if not stop_pid(pid, 30, f"the {what}"):
        raise Fail(f"the {what} (pid {pid}) did not stop on SIGTERM")


def scenario_shared(env):
    """hlt-restore libvirt --clone --memory shared: two clones of one checkpoint run side by side, their guest RAM a
    private mapping of the one image the image server exports (libvirt's memory backing directory served by the
    RAM directory server); each continues memcheck with its memory verified; the second decodes no block again."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server and the RAM directory server are FUSE file systems")
    env.boot_source()
    ckpt = env.path("desk.hlt")
    env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--then", "destroy"], "save")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    disks, images = env.path("disks"), env.path("images")
    os.makedirs(disks)
    os.makedirs(images)
    ram_dir = os.path.join(env.root, "lib", "qemu", "ram")
    servers = []

    def stats():
        found = [os.path.join(images, d, ".stats") for d in os.listdir(images)
                 if os.path.exists(os.path.join(images, d, ".stats"))]
        if len(found) != 1:
            raise Fail(f"expected one image server under {images}, found {found}")
        with open(found[0]) as f:
            j = json.load(f)
        return j, [x for x in j["files"] if x["name"].endswith(".pc.ram")][0], os.path.dirname(found[0])

    def restore(name):
        try:
            _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", name,
                                  "--disk-dir", disks, "--memory", "shared", "--image-dir", images], "restore_" + name)
        except Fail as e:
            # The servers' own words: the embedded driver's root (and these logs with it) is gone after the test.
            raise Fail(f"{e}\nRAM directory server log ({ram_dir}.halite.log):\n{read(ram_dir + '.halite.log')[-3000:]}"
                       f"\nimage server logs:\n" + "".join(read(os.path.join(images, f))[-12000:]
                                                       for f in os.listdir(images) if f.endswith(".log")))
        m = re.search(rf"^running {name} ([\d.]+) ms", out, re.M)
        if not m or "maps" not in out:
            raise Fail(f"{name}: no 'running' line or no mapping check:\n{out}")
        return float(m.group(1)), out

    try:
        # Refused up front: a RAM directory holding another domain's files (not ours to mount over), and a name
        # whose 20-byte short name another image holds.
        os.makedirs(os.path.join(ram_dir, "9-other"))
        rc, _, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c0",
                               "--disk-dir", disks, "--memory", "shared", "--image-dir", images], "restore_foreign",
                              expect_ok=False)
        os.rmdir(os.path.join(ram_dir, "9-other"))
        if rc == 0 or "holds 9-other" not in err or env.domains():
            raise Fail(f"a RAM directory with another domain's files was not refused (exit {rc}): {err}")
        ms1, out1 = restore("c1")
        if "RAM directory server started" not in out1:
            raise Fail("the first --memory shared restore did not start the RAM directory server:\n" + out1)
        j, _, mount = stats()
        servers.append((j["pid"], "image server"))
        servers += [(p, "RAM directory server") for p in find_pids("serve-ram-dir", ram_dir)]
        env.wait_passes(env.path("desk.serial.log.c1"), 2, after=saved_after)
        _, first, _ = stats()
        ms2, out2 = restore("c2")
        if "image server already serving" not in out2 or "RAM directory server started" in out2:
            raise Fail("the second restore did not use the running servers:\n" + out2)
        env.wait_passes(env.path("desk.serial.log.c2"), 2, after=saved_after)
        n1 = len(OK_RX.findall(read(env.path("desk.serial.log.c1"))))
        env.wait_passes(env.path("desk.serial.log.c1"), n1 + 2, after=saved_after)  # c1 goes on beside c2
        _, second, _ = stats()
        again = (second["blocks_decoded"] - first["blocks_decoded"]) - \
                (second["distinct_blocks"] - first["distinct_blocks"])
        log(f"clone c1: running {ms1:.0f} ms after hlt-restore started; {first['blocks_decoded']} blocks decoded "
            f"({first['distinct_blocks']} distinct)")
        log(f"clone c2: running {ms2:.0f} ms after hlt-restore started; "
            f"{second['blocks_decoded'] - first['blocks_decoded']} more blocks decoded "
            f"({second['distinct_blocks'] - first['distinct_blocks']} new), {again} decoded again; "
            f"open files {second['open_handles']}")
        if again != 0:
            raise Fail(f"the second clone decoded {again} blocks the first had already brought in")
        if second["open_handles"] != 2 or second["read_errors"] != 0:
            raise Fail(f"image server state: {second}")
        # Both QEMUs map the one image privately as their guest RAM.
        image = os.path.join(mount, "ckpt.pc.ram")
        for name in ("c1", "c2"):
            pids = find_pids("qemu-system", f"guest={name},", env.root)
            if len(pids) != 1:
                raise Fail(f"{name}: expected one QEMU, found {pids}")
            m = maps_of(pids[0], image)
            if not m or m[0][1] != "rw-p":
                raise Fail(f"{name}: QEMU {pids[0]} does not map {image} privately: {m}")
        entries = sorted(os.listdir(ram_dir))
        if os.listdir(os.path.join(ram_dir, ".halite")) or len(entries) != 3 or \
                not all(re.fullmatch(r"\d+-c[12]", e) for e in entries if e != ".halite"):
            raise Fail(f"{ram_dir}: {entries}, registry {os.listdir(os.path.join(ram_dir, '.halite'))}")
        for e in entries:
            if e != ".halite" and os.readlink(os.path.join(ram_dir, e, "pc.ram")) != image:
                raise Fail(f"{ram_dir}/{e}/pc.ram does not point at {image}")
        long_name = "c3-a-name-longer-than-20-bytes"
        os.symlink("/elsewhere/ckpt.pc.ram", os.path.join(ram_dir, ".halite", long_name[:20]))
        rc, _, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", long_name,
                               "--disk-dir", disks, "--memory", "shared", "--image-dir", images], "restore_taken",
                              expect_ok=False)
        os.unlink(os.path.join(ram_dir, ".halite", long_name[:20]))
        if rc == 0 or "give --name" not in err or long_name in env.domains():
            raise Fail(f"a short name registered to another image was not refused (exit {rc}): {err}")
        # A domain with file-backed RAM that nobody registered does not start on empty memory.
        xml = env.source_xml().replace("<name>desk</name>", "<name>stray</name>").replace(
            "<vcpu>", "<memoryBacking><source type='file'/><access mode='private'/></memoryBacking><vcpu>")
        with open(env.path("stray.xml"), "w") as f:
            f.write(xml)
        p = subprocess.run(["virsh", "-q", "-c", env.uri, "create", env.path("stray.xml")], capture_output=True,
                           text=True, timeout=180)
        # QEMU's own words go to its log; libvirt repeats them unless QEMU died before libvirt reached its monitor
        # ("failed to connect to monitor socket"), which happens when the machine is busy.
        said = p.stderr + read(os.path.join(env.root, "log", "qemu", "stray.log"))
        if p.returncode == 0 or "backing store" not in said:
            raise Fail(f"an unregistered domain with file-backed RAM: exit {p.returncode}: {p.stderr.strip()}")
        log("unregistered domain refused: " + p.stderr.strip().splitlines()[-1][:200])
        # An incremental save of clone c2 with the checkpoint it came from as parent (issue 12): the pages c2
        # never wrote still read from the parent's image, and QEMU's page map says which; they go into the child as
        # references without being read. The child then restores (lazily, as a copy) as clone c4 and continues.
        child = env.path("c2-child.hlt")
        _, out, _ = env.tool([env.save_bin, "libvirt", "c2", "-o", child, "--connect", env.uri, "--parent", ckpt,
                              "--then", "cont"], "save_child")
        m = re.search(r"parent's image\s+QEMU maps (\S+): (\d+) pages never written", out)
        if not m or m.group(1) != image or int(m.group(2)) == 0:
            raise Fail("hlt-save libvirt --parent of a --memory shared clone did not use QEMU's page map:\n" + out)
        log(f"child of c2: {m.group(2)} pages never written, declared in the parent unread; "
            f"{os.path.getsize(child)} bytes against the parent's {os.path.getsize(ckpt)}")
        saved_c2 = max(int(x.group(1)) for x in OK_RX.finditer(read(env.path("desk.serial.log.c2"))))
        env.tool([env.restore_bin, "libvirt", child, "--connect", env.uri, "--clone", "--name", "c4",
                  "--disk-dir", disks], "restore_c4")
        env.wait_passes(env.path("desk.serial.log.c2.c4"), 2, after=min(saved_c2, saved_after))
        env.destroy("c4")
        # libvirt's cleanup removes a destroyed domain's directory from the RAM directory.
        env.destroy("c1")
        poll_until(lambda: not any(e.endswith("-c1") for e in os.listdir(ram_dir)), 30, poll=0.2)
        left = sorted(os.listdir(ram_dir))
        if any(e.endswith("-c1") for e in left):
            raise Fail(f"virsh destroy c1 left its RAM directory entry: {left}")
        env.wait_passes(env.path("desk.serial.log.c2"), len(OK_RX.findall(read(env.path("desk.serial.log.c2")))) + 1,
                        after=saved_after)
        env.destroy("c2")
        log(f"after destroying both: {ram_dir} holds {sorted(os.listdir(ram_dir))}")
        log("PASS shared: two clones over one image under libvirt; no block decoded twice; cleanup by libvirt")
    finally:
        for name in env.domains():
            env.virsh("destroy", name, check=False)
        for pid, what in servers:
            stop_server(pid, what)


def scenario_daemon_shared(env):
    """--clone --memory shared under a daemon of the test's own (DaemonEnv), two clones started at the same moment:
    QEMU runs as nobody, libvirtd makes its RAM directory entries as nobody, hlt-restore finds the session daemon's
    memory backing directory itself, and one RAM directory server serves both."""
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server and the RAM directory server are FUSE file systems")
    env.chown(env.path("desk.img"))
    for f in ("vmlinux", "initramfs.cpio"):
        env.chown(env.path(f))
    env.boot_source()
    ckpt = env.path("desk.hlt")
    env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--then", "destroy"], "save")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    disks, images = env.path("disks"), os.path.join(env.root, "images")
    os.makedirs(disks)
    env.chown(disks)
    os.makedirs(images)
    config = os.path.join(env.root, "config")
    ram_dir = os.path.join(config, "libvirt", "qemu", "ram")
    servers = []
    saved_xdg = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = config  # the daemon's: hlt-restore's default for a session URI follows it
    try:
        # Two clones started at the same moment: one of them starts the servers, the other finds them.
        procs = {}
        for name in ("c1", "c2"):
            argv = [env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", name,
                    "--disk-dir", disks, "--memory", "shared", "--image-dir", images]
            procs[name] = subprocess.Popen(argv, stdout=open(os.path.join(env.logs, f"restore_{name}.out"), "wb"),
                                           stderr=subprocess.STDOUT)
            log(f"$ {' '.join(argv)} &")
        started = 0
        for name, p in procs.items():
            p.wait(timeout=300)
            out = read(os.path.join(env.logs, f"restore_{name}.out"))
            m = re.search(rf"^running {name} ([\d.]+) ms", out, re.M)
            if p.returncode != 0 or "RAM directory " + ram_dir not in out or not m:
                raise Fail(f"{name} (exit {p.returncode}) did not run from {ram_dir}:\n{out}")
            started += out.count("RAM directory server started")
            log(f"{name}: running {float(m.group(1)):.0f} ms after hlt-restore started")
        if started != 1:
            raise Fail(f"{started} RAM directory servers started for two clones at once (expected 1)")
        stats = [os.path.join(images, d, ".stats") for d in os.listdir(images)
                 if os.path.exists(os.path.join(images, d, ".stats"))]
        with open(stats[0]) as f:
            servers.append((json.load(f)["pid"], "image server"))
        servers += [(p, "RAM directory server") for p in find_pids("serve-ram-dir", ram_dir)]
        image = os.path.join(os.path.dirname(stats[0]), "ckpt.pc.ram")
        for name in ("c1", "c2"):
            env.wait_passes(env.path(f"desk.serial.log.{name}"), 2, after=saved_after)
            pids = find_pids("qemu-system", f"guest={name},", env.root)
            if len(pids) != 1 or os.stat(f"/proc/{pids[0]}").st_uid != env.uid:
                raise Fail(f"{name}: expected one QEMU run as {env.USER}: {pids}")
            if [m[1] for m in maps_of(pids[0], image)] != ["rw-p"]:
                raise Fail(f"QEMU {pids[0]} does not map {image} privately: {maps_of(pids[0], image)}")
            dirs = [e for e in os.listdir(ram_dir) if e.endswith("-" + name)]
            if len(dirs) != 1 or os.stat(os.path.join(ram_dir, dirs[0])).st_uid != env.uid:
                raise Fail(f"{ram_dir}: expected a directory of {env.USER}'s for {name}: {os.listdir(ram_dir)}")
            log(f"{name} runs as {env.USER} on {image}; {ram_dir}/{dirs[0]} belongs to {env.USER}")
        for name in ("c1", "c2"):
            env.destroy(name)
        poll_until(lambda: len(os.listdir(ram_dir)) <= 1, 30, poll=0.2)
        if os.listdir(ram_dir) != [".halite"]:
            raise Fail(f"virsh destroy left RAM directory entries: {os.listdir(ram_dir)}")
        log("PASS daemon_shared: two --memory shared clones started at once under a session libvirtd, QEMU "
            "unprivileged")
    finally:
        if saved_xdg is None:
            os.environ.pop("XDG_CONFIG_HOME", None)
        else:
            os.environ["XDG_CONFIG_HOME"] = saved_xdg
        for name in env.domains():
            env.virsh("destroy", name, check=False)
        for pid, what in servers:
            stop_server(pid, what)


def scenario_resume(env):
    """Issue 15 under libvirt: hlt-restore killed during a clone's lazy restore, and again during its resume; each
    time `hlt-restore libvirt --resume` takes over and the guest continues."""
    env.boot_source()
    ckpt = env.path("desk.hlt")
    env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri, "--then", "destroy"], "save")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    disks, run_dir = env.path("disks"), env.path("restores")
    os.makedirs(disks)
    os.environ["HALITE_RUN_DIR"] = run_dir  # env.tool's runs too
    env_vars = dict(os.environ)
    # 2 MiB/s: the loader is still streaming seconds after the guest runs, so every kill lands mid-restore.
    first = [env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c1", "--disk-dir", disks,
             "--rate-limit", "2M"]
    resume = [env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--resume", "c1", "--rate-limit", "2M"]
    resume_ms = []
    for k, (argv, ready, delay) in enumerate(((first, r"^running c1 ", 1.0),
                                              (resume, r"guest resumed: .* ([\d.]+) ms after", 0.8),
                                              (resume, None, None))):
        out_path = env.path(f"resume.{k}.out")
        log(f"$ {' '.join(argv)}")
        p = subprocess.Popen(argv, stdout=open(out_path, "wb"), stderr=subprocess.STDOUT, env=env_vars)
        try:
            if ready is None:
                rc = p.wait(timeout=300)
                out = read(out_path)
                print(out, flush=True)
                if rc != 0 or "resumed the restore of domain c1" not in out:
                    raise Fail(f"the last --resume exited {rc}:\n{out}")
                m = re.search(r"guest resumed: .* ([\d.]+) ms after", out)
                resume_ms.append(float(m.group(1)))
                break
            try:
                wait_until(lambda: re.search(ready, read(out_path), re.M), 120, f"{ready!r}",
                           give_up=lambda: p.poll() is not None and "it exited")
            except TimeoutError:
                raise Fail(f"run {k} (exit {p.poll()}) never printed {ready!r}:\n{read(out_path)}")
            m = re.search(ready, read(out_path), re.M)
            if m.groups():
                resume_ms.append(float(m.group(1)))
            time.sleep(delay)
            if p.poll() is not None:
                raise Fail(f"run {k} ended (exit {p.returncode}) before its kill: make the rate smaller\n"
                           f"{read(out_path)}")
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            log(f"run {k}: SIGKILL {delay} s after {'the guest ran' if k == 0 else 'the resume took over'}")
            print(read(out_path), flush=True)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if "c1" not in env.domains():
            raise Fail(f"the domain went away with its restorer: {env.domains()}")
    env.wait_passes(env.path("desk.serial.log.c1"), 2, after=saved_after)
    qemu_log = read(os.path.join(env.root, "log", "qemu", "c1.log"))
    if "File exists" in qemu_log or "postcopy_place_page" in qemu_log:
        raise Fail("QEMU reports a page placed twice:\n" + qemu_log[-1500:])
    if os.path.isdir(run_dir) and os.listdir(run_dir):
        raise Fail(f"the restore record was left behind: {os.listdir(run_dir)}")
    # A detached restore supervises its worker: the worker killed after its guest ran is replaced by a resume.
    status = env.path("c2.status")
    _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c2",
                          "--disk-dir", disks, "--rate-limit", "2M", "--detach", "--status-file", status],
                         "restore_c2_detached")
    worker = json.loads(read(status))["pid"]
    time.sleep(0.8)  # a moment into the (rate-limited) restore: --detach returned once it ran
    state = json.loads(read(status))
    if state.get("state") != "running":
        raise Fail(f"the detached restore was not running when its worker was to be killed: {state}")
    os.kill(worker, signal.SIGKILL)
    log(f"detached restore of c2: its worker (pid {worker}) SIGKILLed")
    poll_until(lambda: json.loads(read(status) or "{}").get("state") in ("completed", "failed"), 180, poll=0.3)
    state = json.loads(read(status) or "{}")
    detached_log = read(status + ".log")
    print(detached_log, flush=True)
    if state.get("state") != "completed" or state.get("note") != "resumed" or state.get("pid") == worker:
        raise Fail(f"the detached restore did not complete through a resume: {state}")
    if f"worker (pid {worker}) died of signal 9" not in detached_log or "guest resumed" not in detached_log:
        raise Fail("the detached restore's log does not tell the worker's death and the resume:\n" + detached_log)
    env.wait_passes(env.path("desk.serial.log.c2"), 2, after=saved_after)
    m = re.search(r"guest resumed: .* ([\d.]+) ms after", detached_log)
    resume_ms.append(float(m.group(1)))
    resume_ms.append(supervised_restore_resumes(env, ckpt, disks, saved_after))
    # A third resume finds nothing to take over: the restore is complete.
    rc, _, err = env.tool(resume, "resume_done", expect_ok=False)
    if rc == 0:
        raise Fail("--resume of a domain whose restore completed succeeded")
    log("--resume after completion refused: " + err.strip().splitlines()[-1][:200])
    # The resumed restore removed the migration blocker it inherited: libvirt saves the domain.
    env.virsh("save", "c1", env.path("c1.libvirt-save"))
    log(f"--resume start to guest running again: {', '.join(f'{x:.0f} ms' for x in resume_ms)}")
    log("PASS resume: killed during the restore and during its resume, taken over each time; the guest continues")


def supervised_restore_resumes(env, ckpt, disks, saved_after):
    """`hlt-restore libvirt --supervise`, the command halite-restore@.service runs: --detach's supervisor in the
    foreground. Its worker SIGKILLed after the guest ran is replaced by a resume; the supervisor itself returns 0
    once the restore completes, its output (the journal's, under systemd) telling the death and the resume.
    Returns the resume's time to the guest running again (ms)."""
    status = env.path("c3.status")
    out_path = env.path("c3.supervise.out")
    argv = [env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c3", "--disk-dir", disks,
            "--rate-limit", "2M", "--supervise", "--status-file", status]
    log("$ " + " ".join(argv))
    with open(out_path, "wb") as out:
        sup = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: sup.poll() is not None or json.loads(read(status) or "{}").get("state") == "running",
                   120, poll=0.1)
        state = json.loads(read(status) or "{}")
        if state.get("state") != "running":
            raise Fail(f"--supervise: the restore did not reach running: {state}\n{read(out_path)}")
        worker = state["pid"]
        if worker == sup.pid:
            raise Fail("--supervise: the status file names the supervisor, not its worker")
        time.sleep(0.5)
        os.kill(worker, signal.SIGKILL)
        log(f"supervised restore of c3: its worker (pid {worker}) SIGKILLed")
        rc = sup.wait(timeout=240)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
    text = read(out_path)
    print(text, flush=True)
    state = json.loads(read(status) or "{}")
    if rc != 0 or state.get("state") != "completed" or state.get("note") != "resumed":
        raise Fail(f"--supervise: exit {rc}, status {state}: not completed through a resume")
    if not re.search(r"^running c3 ", text, re.M):
        raise Fail("--supervise: the first worker's 'running' line is not in the supervisor's output")
    if f"worker (pid {worker}) died of signal 9" not in text or "guest resumed" not in text:
        raise Fail("--supervise: its output does not tell the worker's death and the resume:\n" + text)
    env.wait_passes(env.path("desk.serial.log.c3"), 2, after=saved_after)
    m = re.search(r"guest resumed: .* ([\d.]+) ms after", text)
    log(f"PASS --supervise: worker killed, resumed ({m.group(1)} ms), supervisor exit 0, the guest continues")
    return float(m.group(1))


def scenario_shared_s3(env):
    """Issue 28 item 6: a golden checkpoint on the object store backs shared-memory clones under libvirt.
    hlt-save libvirt -o s3://... (the radosgw of the ceph-labelled tests), then two hlt-restore libvirt --clone
    --memory shared --block-cache DIR from that URI: one image server (named by the checkpoint's file id) fed
    through the block cache; both clones continue memcheck with their RAM a private mapping of its image; the
    second decodes no block again. Without --disk-dir the restore from the store is refused, saying why."""
    if not env.ceph_env or not os.path.exists(env.ceph_env):
        raise Skip(f"no Ceph cluster ({env.ceph_env or 'no --ceph-env'}): run through ctest (objstore/ceph-up)")
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse: the image server and the RAM directory server are FUSE file systems")
    for line in open(env.ceph_env):
        if line.startswith("export "):
            k, v = line[len("export "):].strip().split("=", 1)
            os.environ[k] = v
    uri = f"s3://{os.environ['HALITE_TEST_S3_BUCKET']}/golden-libvirt-{os.getpid()}.hlt"
    env.boot_source()
    env.tool([env.save_bin, "libvirt", "desk", "-o", uri, "--connect", env.uri, "--then", "destroy"], "save")
    saved_after = max(int(m.group(1)) for m in OK_RX.finditer(read(env.path("desk.serial.log"))))
    disks, images, cache = env.path("disks"), env.path("images"), env.path("block-cache")
    os.makedirs(images)
    ram_dir = os.path.join(env.root, "lib", "qemu", "ram")
    rc, _, err = env.tool([env.restore_bin, "libvirt", uri, "--connect", env.uri, "--clone", "--name", "c0"],
                          "restore_no_disk_dir", expect_ok=False)
    if rc == 0 or "--disk-dir" not in err or env.domains():
        raise Fail(f"a restore from {uri} without --disk-dir: exit {rc}: {err}")
    servers, seen = [], []
    try:
        for name in ("c1", "c2"):
            _, out, _ = env.tool([env.restore_bin, "libvirt", uri, "--connect", env.uri, "--clone", "--name", name,
                                  "--disk-dir", disks, "--memory", "shared", "--image-dir", images,
                                  "--block-cache", cache], "restore_" + name)
            if not re.search(rf"^running {name} ", out, re.M) or "maps" not in out:
                raise Fail(f"{name}: not running from the image of {uri}:\n{out}")
            if name == "c1":
                stats = [os.path.join(images, d, ".stats") for d in os.listdir(images)
                         if os.path.exists(os.path.join(images, d, ".stats"))]
                with open(stats[0]) as f:
                    servers.append((json.load(f)["pid"], "image server"))
                servers += [(p, "RAM directory server") for p in find_pids("serve-ram-dir", ram_dir)]
            elif "image server already serving" not in out:
                raise Fail(f"the second clone did not use the running image server:\n{out}")
            env.wait_passes(env.path(f"desk.serial.log.{name}"), 2, after=saved_after)
            with open(stats[0]) as f:
                seen.append([x for x in json.load(f)["files"] if x["name"].endswith(".pc.ram")][0])
        first, ram = seen
        again = (ram["blocks_decoded"] - first["blocks_decoded"]) - (ram["distinct_blocks"] - first["distinct_blocks"])
        cached = len([f for _, _, fs in os.walk(cache) for f in fs])
        log(f"two clones from {uri}: {ram['blocks_decoded']} blocks decoded ({ram['distinct_blocks']} distinct), "
            f"the second clone decoded {again} the first had brought in; {ram['read_errors']} read errors, "
            f"{ram['open_handles']} open; block cache: {cached} files")
        if again != 0 or ram["read_errors"] or ram["open_handles"] != 2:
            raise Fail(f"image server state: {ram}")
        if cached < ram["distinct_blocks"]:
            raise Fail(f"the image server did not fetch through the block cache: {cached} files in {cache}")
        for name in ("c1", "c2"):
            env.destroy(name)
        log("PASS shared_s3: two --memory shared clones under libvirt from a golden checkpoint on s3://")
    finally:
        for name in env.domains():
            env.virsh("destroy", name, check=False)
        for pid, what in servers:
            stop_server(pid, what)


OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd"
PCR_RX = re.compile(r"HLT-GUEST TPM pcr-sha256/0 ([0-9A-Fa-f]{64})")
SET_TIME_RX = re.compile(r"HLT-GUEST AGENT set-time (\d+)\.(\d+)")


def devices_xml(env):
    """A domain with every per-domain file at once: UEFI (OVMF) with its NVRAM, a TPM 2.0 emulator (swtpm), a pty
    serial console with a log, a file serial port, a guest agent channel on a unix socket, a VNC unix socket, a
    disk, a NIC and a VM generation ID. OVMF boots Debian's kernel through its EFI stub (vmlinuz)."""
    cmdline = launch.kernel_cmdline("memcheck", ["--mib", "32", "--disk", "/dev/vda", "--interval-ms", "200"],
                                    append="hlt.virtio=1")
    w = env.path
    return f"""<domain type='qemu'>
  <name>uefi</name>
  <memory unit='MiB'>{env.memory_mib}</memory>
  <vcpu>1</vcpu>
  <genid/>
  <os><type arch='x86_64' machine='pc'>hvm</type>
    <loader readonly='yes' type='pflash'>{OVMF_CODE}</loader>
    <nvram template='{OVMF_VARS}'>{w('uefi_VARS.fd')}</nvram>
    <kernel>{w('vmlinuz')}</kernel><initrd>{w('initramfs.cpio')}</initrd>
    <cmdline>{cmdline}</cmdline></os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model></cpu>
  <on_reboot>destroy</on_reboot>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{w('desk.img')}'/>
      <target dev='vda' bus='virtio'/></disk>
    <interface type='user'><model type='virtio'/></interface>
    <serial type='pty'><log file='{w('console.log')}'/><target port='0'/></serial>
    <console type='pty'><log file='{w('console.log')}'/><target type='serial' port='0'/></console>
    <serial type='file'><source path='{w('ttyS1.log')}'/><target port='1'/></serial>
    <channel type='unix'><source mode='bind' path='{w('agent.sock')}'/>
      <target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <graphics type='vnc' socket='{w('vnc.sock')}'/>
    <video><model type='vga'/></video>
    <tpm model='tpm-tis'><backend type='emulator' version='2.0'/></tpm>
  </devices>
</domain>
"""


def agent_call(sock_path, *commands, timeout=10):
    """QEMU guest agent commands sent straight to a channel's unix socket (the clone's own): one reply each."""
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(sock_path)
    try:
        s.sendall(b"".join(json.dumps(c).encode() + b"\n" for c in commands))
        data, replies = b"", []
        deadline = time.time() + timeout
        while len(replies) < len(commands) and time.time() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
            *lines, data = data.split(b"\n")
            replies += [json.loads(x) for x in lines if x.strip()]
        return replies
    finally:
        s.close()


def vnc_banner(sock_path):
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(sock_path)
    try:
        return s.recv(12)
    finally:
        s.close()


def tree_hashes(path):
    return {f: sha256(os.path.join(path, f)) for f in sorted(os.listdir(path)) if not f.startswith(".")}


def restore_device_clones(env, ckpt, disks, clones, daemon):
    """scenario_devices' clones (name: extra flags) restored from ckpt with their disks under disks; returns each
    one's hlt-restore output."""
    outs = {}
    if daemon:
        # Two clones at once under the daemon (the embedded driver runs one restore at a time): the second of
        # them is where a shared console log failed to open.
        procs = {}
        # Again: the sysctl is global, and another test on this machine may have put it back meanwhile.
        env.set_unprivileged_userfaultfd(1)
        for name in ("c1", "c2"):
            argv = [env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", name,
                    "--disk-dir", disks, *clones[name]]
            log(f"$ {' '.join(argv)} &")
            procs[name] = subprocess.Popen(argv, stdout=open(os.path.join(env.logs, f"restore_{name}.out"), "wb"),
                                           stderr=subprocess.STDOUT)
        for name, p in procs.items():
            rc = p.wait(timeout=300)
            outs[name] = read(os.path.join(env.logs, f"restore_{name}.out"))
            if rc != 0:
                raise Fail(f"{name}: exit {rc}\n{outs[name]}")
        clones = {n: extra for n, extra in clones.items() if n not in procs}
    for name, extra in clones.items():
        _, outs[name], _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name",
                                     name, "--disk-dir", disks, *extra], "restore_" + name)
    return outs


def scenario_devices(env):
    """Issue 28 item 1: three clones of a domain with every per-domain file at once (devices_xml), restored under
    the embedded driver (c1 lazy, c2 --eager, c3 lazy with --no-sync-time). Each clone runs on, and has its own:
    console log receiving its own output, file serial port, agent socket with the agent answering, VNC socket
    answering RFB, NVRAM file equal to the saved one, TPM state directory (under its new UUID) equal to the saved
    one with its swtpm running on it and the guest reading the saved PCR 0, new VM generation ID seen by the guest
    kernel. The synced clones' clocks are right; the unsynced one's lags by the time since the save."""
    for f, pkg in ((OVMF_CODE, "ovmf"), (OVMF_VARS, "ovmf"), ("/usr/bin/swtpm", "swtpm"),
                   ("/usr/bin/swtpm_setup", "swtpm-tools")):
        if not os.path.exists(f):
            raise Skip(f"{f} is missing (scripts/install-deps: {pkg})")
    shutil.copy(os.path.join(launch.guest_dir(), "vmlinuz"), env.path("vmlinuz"))
    daemon = isinstance(env, DaemonEnv)
    if daemon:
        env.chown(env.path("desk.img"))
        # hlt-restore finds a session instance's swtpm storage through XDG_CONFIG_HOME, as libvirtd does.
        os.environ["XDG_CONFIG_HOME"] = os.path.join(env.root, "config")
        env.set_unprivileged_userfaultfd(1)  # QEMU runs as nobody: the lazy clones' postcopy needs it
    xml = env.path("uefi.xml")
    with open(xml, "w") as f:
        f.write(devices_xml(env))
    env.virsh("create", xml)
    console = env.path("console.log")
    env.wait_passes(console, 2, fresh=True, timeout=300)
    poll_until(lambda: PCR_RX.search(read(console)), 60, poll=0.5)
    if not PCR_RX.search(read(console)):
        raise Fail("the source guest never printed its TPM's PCR 0 (no TPM seen by the kernel?):\n"
                   + read(console)[-2000:])
    source_pcr = PCR_RX.search(read(console)).group(1)
    source_uuid = env.identity("uefi")["uuid"]
    ckpt = env.path("uefi.hlt")
    # libvirt_live_test.py's devices scenario: a live save, the NVRAM and TPM state read inside its pause.
    live = ["--live"] if getattr(env, "live_save", False) else []
    # A live save's guest runs on during the stream: its saved instant is before the passes printed meanwhile.
    before_save = max(int(m.group(1)) for m in OK_RX.finditer(read(console)))
    if live:
        # The NVRAM file read inside the pause is what the clones' flash must hold, not QEMU's flash memory as the
        # stream would carry it (not write-protected during a live save): a mark the guest's flash never saw
        # goes into the file's last bytes (OVMF's spare area, all 0xff), and must reach the clones' NVRAM, which
        # QEMU rewrites from its flash when a clone starts.
        with open(env.path("uefi_VARS.fd"), "r+b") as f:
            f.seek(-16, os.SEEK_END)
            f.write(b"HLT-NVRAM-MARK-1")
    _, out, _ = env.tool([env.save_bin, "libvirt", "uefi", "-o", ckpt, "--connect", env.uri, "--then", "stop", *live],
                         "save")
    if "nvram" not in out or "saved with the memory" not in out or "tpm2-00.permall" not in out:
        raise Fail("hlt-save did not report the NVRAM and the TPM state saved with the memory:\n" + out)
    if live and ("live save" not in out or "at the saved instant" not in out):
        raise Fail("hlt-save --live did not report a live save paused for its saved instant:\n" + out)
    # The source stays paused: what it holds now is what was saved.
    saved_nvram = sha256(env.path("uefi_VARS.fd"))
    saved_tpm = tree_hashes(os.path.join(env.swtpm_storage(), source_uuid, "tpm2"))
    saved_after = before_save if live else max(int(m.group(1)) for m in OK_RX.finditer(read(console)))
    env.destroy("uefi")
    console_size = os.path.getsize(console)
    log(f"saved: NVRAM sha256 {saved_nvram[:16]}, TPM state {list(saved_tpm)}, PCR 0 {source_pcr[:16]}...")
    gap = 6  # seconds between the save and the restores: an unsynced clone's clock lags at least this much
    time.sleep(gap)

    disks = env.path("disks")  # does not exist: hlt-restore creates it
    clones = {"c1": [], "c2": ["--eager"], "c3": ["--no-sync-time"]}
    outs = restore_device_clones(env, ckpt, disks, clones, daemon)
    ids, swtpms = {}, find_pids("swtpm", "--tpmstate")
    for name in clones:
        out, mine = outs[name], env.path("console.log." + name)
        ident = env.identity(name)
        ids[name] = ident
        dom = env.virsh("dumpxml", name)
        for want in (mine, env.path("ttyS1.log." + name), env.path("agent.sock." + name),
                     env.path("vnc.sock." + name), os.path.join(disks, name + "_VARS.fd")):
            if f"'{want}'" not in dom and f">{want}<" not in dom:
                raise Fail(f"{name}: its domain XML does not name its own {want}:\n{dom}")
        env.wait_passes(mine, 2, after=saved_after)
        # Its own files and sockets.
        if not os.path.exists(env.path("ttyS1.log." + name)):
            raise Fail(f"{name}: QEMU did not create its own file serial port")
        banner = vnc_banner(env.path("vnc.sock." + name))
        if not banner.startswith(b"RFB "):
            raise Fail(f"{name}: its VNC socket answered {banner!r}")
        if daemon:
            # libvirtd holds the agent's socket (QEMU serves one client): ask through it.
            replies = [json.loads(env.virsh("qemu-agent-command", name, json.dumps(c)))
                       for c in ({"execute": "guest-ping"}, {"execute": "guest-get-time"})]
            if "agent.sock." + name not in dom or "state='connected'" not in env.virsh("dumpxml", name):
                raise Fail(f"{name}: libvirt does not see its agent channel connected:\n{dom}")
        else:
            # The embedded driver's process is gone: the socket is free, talk to the agent directly.
            replies = agent_call(env.path("agent.sock." + name),
                                 {"execute": "guest-sync", "arguments": {"id": 7}}, {"execute": "guest-get-time"})
            if len(replies) != 2 or replies[0].get("return") != 7:
                raise Fail(f"{name}: the guest agent on its own channel answered {replies}")
        behind = time.time() - replies[1]["return"] / 1e9
        # NVRAM: a copy of the saved one; TPM: the saved state under the clone's UUID, its swtpm on it.
        nvram = os.path.join(disks, name + "_VARS.fd")
        if sha256(nvram) != saved_nvram or f"nvram            {nvram}" not in out:
            raise Fail(f"{name}: {nvram} is not a copy of the saved NVRAM:\n{out}")
        tpm_dir = os.path.join(env.swtpm_storage(), ident["uuid"], "tpm2")
        if not os.path.isdir(tpm_dir) or tree_hashes(tpm_dir) != saved_tpm or f"tpm              {tpm_dir}" not in out:
            raise Fail(f"{name}: {tpm_dir} does not hold a copy of the saved TPM state {saved_tpm}")
        if not any(tpm_dir in " ".join(open(f"/proc/{p}/cmdline").read().split("\0")) for p in swtpms
                   if os.path.exists(f"/proc/{p}")):
            raise Fail(f"{name}: no swtpm runs on {tpm_dir}")
        # From the guest: its new MAC, then its TPM's PCR 0 read afresh (the saved measurements: the TPM is the
        # saved one, not a new one), its clock.
        poll_until(lambda: ident["mac"] in MAC_RX.findall(read(mine)) and len(PCR_RX.findall(read(mine))) >= 1, 60,
                   poll=0.5)
        text = read(mine)
        if ident["mac"] not in MAC_RX.findall(text):
            raise Fail(f"{name}: the guest never reported its new MAC {ident['mac']}:\n{text[-2000:]}")
        pcrs = PCR_RX.findall(text)
        if not pcrs or pcrs[-1] != source_pcr:
            raise Fail(f"{name}: the guest's TPM PCR 0 is {pcrs[-1:]}, the source's was {source_pcr}")
        # Not required (not yet seen here under OVMF with this kernel; see the report of issue 28): the kernel's
        # own note that the VM generation ID changed.
        log(f"{name}: guest kernel's VM generation ID note {'seen' if 'HLT-GUEST VMGENID' in text else 'not seen'}")
        synced = SET_TIME_RX.search(text)
        if name == "c3":
            if synced or "clock set" in out or behind < gap - 1:
                raise Fail(f"{name} (--no-sync-time): clock {behind:.1f} s behind, set-time {bool(synced)}")
        elif not synced or "clock            set to the host's" not in out or abs(behind) > 2:
            raise Fail(f"{name}: the clock was not set through the agent (guest {behind:.1f} s behind):\n{out}")
        log(f"{name}: uuid {ident['uuid']}, own console log/ttyS1/agent/VNC socket/NVRAM/TPM state; "
            f"guest clock {behind:+.2f} s behind the host; PCR 0 as saved")
    for key in ("uuid", "mac", "genid", "disk"):
        values = [ids[n][key] for n in ids]
        if None in values or len(set(values)) != len(values):
            raise Fail(f"{key} not distinct: {values}")
    if os.path.getsize(console) != console_size:
        raise Fail("the saved domain's console log grew after it was destroyed: a clone writes into it")
    log("PASS devices: three clones, each with its own console log, serial file, agent channel, VNC socket, NVRAM "
        "and TPM state; clocks synced through the agent (not for --no-sync-time)")


def scenario_errors(env):
    ckpt = env.path("desk.hlt")
    # libvirt not reachable.
    rc, _, err = env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect",
                           "qemu+unix:///system?socket=/nonexistent/libvirt-sock"], "save_unreachable",
                          expect_ok=False)
    if rc == 0 or "cannot connect to qemu+unix:///system" not in err or os.path.exists(ckpt):
        raise Fail(f"unreachable libvirt: exit {rc}: {err}")
    env.boot_source()
    rc, _, err = env.tool([env.save_bin, "libvirt", "nope", "-o", ckpt, "--connect", env.uri], "save_unknown",
                          expect_ok=False)
    if rc == 0 or "domain 'nope'" not in err or os.path.exists(ckpt):
        raise Fail(f"unknown domain: exit {rc}: {err}")
    env.tool([env.save_bin, "libvirt", "desk", "-o", ckpt, "--connect", env.uri], "save")
    os.makedirs(env.path("disks"))
    # The source still runs as "desk": its name is in use.
    rc, _, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--disk-dir", env.path("disks")],
                          "restore_name_in_use", expect_ok=False)
    if rc == 0 or "exists already" not in err or os.listdir(env.path("disks")):
        raise Fail(f"name in use: exit {rc}: {err}")
    # A --disk-dir that cannot be a directory: said, naming it, nothing made.
    not_a_dir = env.path("not-a-dir")
    open(not_a_dir, "w").close()
    rc, _, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c8",
                           "--disk-dir", not_a_dir], "restore_disk_dir_file", expect_ok=False)
    if rc == 0 or not_a_dir not in err or "disk overlays" not in err or env.domains() != ["desk"]:
        raise Fail(f"--disk-dir naming a file: exit {rc}: {err}")
    # A checkpoint not from libvirt.
    raw_img = env.path("raw.img")
    with open(raw_img, "wb") as f:
        f.write(os.urandom(1 << 20))
    env.tool([env.save_bin, "raw", raw_img, "-o", env.path("raw.hlt")], "save_raw")
    rc, _, err = env.tool([env.restore_bin, "libvirt", env.path("raw.hlt"), "--connect", env.uri, "--name", "x"],
                          "restore_raw", expect_ok=False)
    if rc == 0 or "not a checkpoint of a libvirt domain" not in err:
        raise Fail(f"raw checkpoint: exit {rc}: {err}")
    # A frozen disk that changed.
    with open(env.path("desk.img"), "r+b") as f:
        f.seek(4096)
        f.write(b"changed")
    rc, _, err = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c9",
                           "--disk-dir", env.path("disks")], "restore_changed", expect_ok=False)
    if rc == 0 or "changed since the save" not in err:
        raise Fail(f"changed frozen disk: exit {rc}: {err}")
    if env.domains() != ["desk"] or os.listdir(env.path("disks")):
        raise Fail(f"left behind: domains {env.domains()}, overlays {os.listdir(env.path('disks'))}")
    log("PASS errors: each refused with a clear message, nothing left behind")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--ceph-env", help="the env file of a cluster started by scripts/ceph-up (scenario shared_s3)")
    ap.add_argument("scenario", choices=["clones", "errors", "daemon", "shared", "daemon_shared", "resume", "devices",
                                         "daemon_devices", "shared_s3"])
    a = ap.parse_args()
    work = os.path.join(a.work, a.scenario)
    env = DaemonEnv(a.tools, work, logd=a.scenario == "daemon_devices") if a.scenario.startswith("daemon") \
        else Env(a.tools, work)
    env.ceph_env = a.ceph_env
    # The scenario's directory is its own (setup empties it): its disks and checkpoints go when it passes.
    scratch, passed = Scratch(work, whole=True, log=log), False
    try:
        env.setup()
        {"clones": scenario_clones, "errors": scenario_errors, "daemon": scenario_daemon,
         "shared": scenario_shared, "daemon_shared": scenario_daemon_shared,
         "resume": scenario_resume, "devices": scenario_devices, "daemon_devices": scenario_devices,
         "shared_s3": scenario_shared_s3}[a.scenario](env)
        passed = True
        return 0
    except Skip as e:
        passed = True
        print("*" * 70 + f"\nlibvirt_guest_test: SKIPPED: {e}\n" + "*" * 70, flush=True)
        return 77
    except Fail as e:
        print(f"FAIL {a.scenario}: {e}", flush=True)
        return 1
    finally:
        env.cleanup()
        scratch.finish(passed)


if __name__ == "__main__":
    sys.exit(main())
