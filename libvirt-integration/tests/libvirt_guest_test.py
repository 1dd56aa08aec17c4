#!/usr/bin/env python3
"""hlt-save libvirt / hlt-restore libvirt against the project's test guest under libvirt's embedded QEMU driver
(qemu:///embed?root=DIR: libvirt runs inside each process that connects; no daemon), TCG.

usage: libvirt_guest_test.py --tools DIR --work DIR SCENARIO

  clones   a domain with a virtio disk and a NIC runs memcheck with its journal on the disk (memory and disk
           checked against each other every pass); hlt-save libvirt (--then destroy) freezes its disk;
           hlt-restore libvirt brings it back as itself, then as two clones (one --detach, its outcome read from
           the status file): each continues memcheck with no fresh boot and no BAD, has its own name, UUID, MAC,
           VM generation ID, serial log and disk overlay; the frozen base image is unchanged at the end
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
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402

MIB = "64"
OK_RX = re.compile(r"memcheck pass=(\d+) .* OK")
MAC_RX = re.compile(r"HLT-GUEST MAC eth0 ([0-9a-f:]{17})")
FAIL_RX = re.compile(r" BAD |Kernel panic|HLT-GUEST EXIT")


class Skip(Exception):
    pass


class Fail(Exception):
    pass


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Env:
    def __init__(self, tools, work, memory_mib=256, memcheck_mib=MIB):
        self.memory_mib = memory_mib
        self.memcheck_mib = str(memcheck_mib)
        self.save_bin = os.path.join(tools, "hlt-save")
        self.restore_bin = os.path.join(tools, "hlt-restore")
        self.work = work
        # Short: libvirt puts unix sockets under the root (108 bytes at most).
        self.root = f"/tmp/hlt-lv-{os.getpid()}"
        self.uri = f"qemu:///embed?root={self.root}"

    def path(self, name):
        return os.path.join(self.work, name)

    def setup(self):
        if shutil.which("virsh") is None:
            raise Skip("virsh is not installed (scripts/install-deps: libvirt-clients)")
        if not os.path.exists("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so"):
            raise Skip("libvirt's QEMU driver is not installed (scripts/install-deps: libvirt-daemon-driver-qemu)")
        if not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
            raise Skip("qemu-system-x86_64 or qemu-img is not installed (scripts/install-deps)")
        out = subprocess.run([os.path.join(REPO, "scripts", "build-guest")], capture_output=True, text=True)
        if out.returncode != 0:
            raise Skip("the test guest could not be built (scripts/build-guest):\n" + (out.stdout + out.stderr)[-2000:])
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(323, os.O_CLOEXEC | os.O_NONBLOCK)  # userfaultfd(2)
        if fd < 0:
            raise Skip("userfaultfd is not available to this user: QEMU's postcopy needs it (run as root or set "
                       "vm.unprivileged_userfaultfd=1)")
        os.close(fd)
        if os.path.exists(self.work):
            shutil.rmtree(self.work)
        os.makedirs(self.work)
        os.makedirs(os.path.join(self.root, "etc"), exist_ok=True)
        # The embedded driver runs QEMU as this (root) user, logs QEMU's output itself (no virtlogd) and labels
        # nothing (no AppArmor/SELinux here).
        with open(os.path.join(self.root, "etc", "qemu.conf"), "w") as f:
            f.write('user = "root"\ngroup = "root"\ndynamic_ownership = 0\nremember_owner = 0\n'
                    'security_driver = "none"\nstdio_handler = "file"\n')
        # libvirt changes the ownership of what it boots: give it copies.
        gdir = launch.guest_dir()
        for src, dst in ((launch.kernel_path(gdir), "vmlinux"), (launch.initrd_path(gdir), "initramfs.cpio")):
            shutil.copy(src, self.path(dst))
        subprocess.run(["qemu-img", "create", "-q", "-f", "raw", self.path("desk.img"), "32M"], check=True)

    def virsh(self, *cmd, check=True):
        p = subprocess.run(["virsh", "-q", "-c", self.uri, *cmd], capture_output=True, text=True, timeout=180)
        if check and p.returncode != 0:
            raise Fail(f"virsh {' '.join(cmd)} failed: {p.stderr.strip()}")
        return p.stdout

    def destroy(self, name):
        # The embedded driver (libvirt 9.0) kills a transient domain another process started but then reports
        # "Domain not found": what counts is that it is gone.
        self.virsh("destroy", name, check=False)
        if name in self.domains():
            raise Fail(f"virsh destroy {name} left it running")

    def domains(self):
        return sorted(line.split()[1] for line in self.virsh("list", "--all").splitlines() if line.strip())

    def tool(self, argv, name, timeout=300, expect_ok=True):
        with open(self.path(name + ".out"), "wb") as out, open(self.path(name + ".err"), "wb") as err:
            p = subprocess.run(argv, stdout=out, stderr=err, timeout=timeout)
        text, errtext = read(self.path(name + ".out")), read(self.path(name + ".err"))
        log(f"$ {' '.join(argv)} -> exit {p.returncode}")
        if expect_ok and p.returncode != 0:
            raise Fail(f"{name}: exit {p.returncode}\n{text}\n{errtext[-3000:]}")
        return p.returncode, text, errtext

    def source_xml(self):
        # The virtio drivers, and memcheck's journal on the disk: a restore that pairs the memory with another
        # disk state than the saved one turns the pass lines BAD.
        cmdline = launch.kernel_cmdline("memcheck", ["--mib", self.memcheck_mib, "--disk", "/dev/vda"],
                                        append="hlt.virtio=1")
        serial = self.path("desk.serial.log")
        return f"""<domain type='qemu'>
  <name>desk</name>
  <memory unit='MiB'>{self.memory_mib}</memory>
  <vcpu>1</vcpu>
  <genid/>
  <os><type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{self.path('vmlinux')}</kernel><initrd>{self.path('initramfs.cpio')}</initrd>
    <cmdline>{cmdline}</cmdline></os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model></cpu>
  <on_reboot>destroy</on_reboot>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{self.path('desk.img')}'/>
      <target dev='vda' bus='virtio'/></disk>
    <interface type='user'><model type='virtio'/></interface>
    <serial type='file'><source path='{serial}'/><target port='0'/></serial>
    <console type='file'><source path='{serial}'/><target type='serial' port='0'/></console>
  </devices>
</domain>
"""

    def boot_source(self, passes=2):
        xml = self.path("desk.xml")
        with open(xml, "w") as f:
            f.write(self.source_xml())
        self.virsh("create", xml)
        return self.wait_passes(self.path("desk.serial.log"), passes, fresh=True)

    def wait_passes(self, serial, count, timeout=240, fresh=False, after=None):
        """Waits for `count` OK passes in `serial`; returns their numbers. A restored guest continues: its first
        pass number is above `after` (a fresh boot would start at 1)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = read(serial)
            if FAIL_RX.search(text):
                raise Fail(f"{serial}: {FAIL_RX.search(text).group(0)!r}:\n{text[-2000:]}")
            passes = [int(m.group(1)) for m in OK_RX.finditer(text)]
            if passes and "disk=" not in text:
                raise Fail(f"{serial}: memcheck does not check the disk (no disk= in its lines):\n{text[-1500:]}")
            if len(passes) >= count:
                if after is not None and passes[0] <= after:
                    raise Fail(f"{serial}: the guest started over (first pass {passes[0]}, the save was after "
                               f"pass {after}): not a restore")
                return passes
            time.sleep(0.5)
        raise Fail(f"{serial}: fewer than {count} memcheck passes within {timeout} s:\n{read(serial)[-2000:]}")

    def identity(self, name):
        xml = self.virsh("dumpxml", name)
        uuid = re.search(r"<uuid>([^<]+)</uuid>", xml).group(1)
        genid = re.search(r"<genid>([^<]+)</genid>", xml)
        mac = re.search(r"<mac address='([^']+)'", xml).group(1)
        disk = re.search(r"<source file='([^']+)'", xml).group(1)
        return {"uuid": uuid, "genid": genid.group(1) if genid else None, "mac": mac, "disk": disk}

    def cleanup(self):
        if not os.path.exists(self.root):
            return
        for name in self.domains():
            self.virsh("destroy", name, check=False)
        # QEMU's logs (command line, errors) outlive the root, for a failure's post-mortem.
        logs = os.path.join(self.root, "log", "qemu")
        for f in os.listdir(logs) if os.path.isdir(logs) else []:
            shutil.copy(os.path.join(logs, f), self.path("qemu-" + f))
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
    _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--disk-dir", env.path("disks")],
                         "restore_self")
    if not re.search(r"^running desk [\d.]+ ms", out, re.M):
        raise Fail("no 'running' line:\n" + out)
    env.wait_passes(env.path("desk.serial.log"), 2, after=saved_after)
    me = env.identity("desk")
    if me["uuid"] != source["uuid"] or me["disk"] != env.path("disks/desk-vda.qcow2"):
        raise Fail(f"restored as itself: {me} (source {source})")
    env.destroy("desk")

    # Two clones: one waited for, one detached.
    env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c1",
              "--disk-dir", env.path("disks")], "restore_c1")
    status = env.path("c2.status")
    _, out, _ = env.tool([env.restore_bin, "libvirt", ckpt, "--connect", env.uri, "--clone", "--name", "c2",
                          "--disk-dir", env.path("disks"), "--detach", "--status-file", status], "restore_c2")
    if "running c2" not in out or "detached" not in out:
        raise Fail("--detach did not report running:\n" + out)
    deadline = time.time() + 120
    state = {}
    while time.time() < deadline:
        try:
            state = json.loads(read(status) or "{}")
        except json.JSONDecodeError as e:
            raise Fail(f"{status} is not JSON (a torn write?): {e}")
        if state.get("state") in ("completed", "failed"):
            break
        time.sleep(0.5)
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
        deadline = time.time() + 60
        while want not in MAC_RX.findall(read(serial)) and time.time() < deadline:
            time.sleep(0.5)
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
    ap.add_argument("scenario", choices=["clones", "errors"])
    a = ap.parse_args()
    env = Env(a.tools, os.path.join(a.work, a.scenario))
    try:
        env.setup()
        {"clones": scenario_clones, "errors": scenario_errors}[a.scenario](env)
        return 0
    except Skip as e:
        print("*" * 70 + f"\nlibvirt_guest_test: SKIPPED: {e}\n" + "*" * 70, flush=True)
        return 77
    except Fail as e:
        print(f"FAIL {a.scenario}: {e}", flush=True)
        return 1
    finally:
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())
