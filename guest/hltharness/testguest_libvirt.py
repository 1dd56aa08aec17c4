"""The small test guest (guest/launch.py's kernel and initramfs, memcheck with its journal on a virtio disk) as a
libvirt domain of an embedded QEMU driver of its own: what the libvirt guest tests and bench/libvirt share.

    env = Env(tools, work)   # tools: the directory of hlt-save and hlt-restore; work: emptied by setup()
    env.setup()              # Skip (a sentence) when virsh, libvirt's QEMU driver, QEMU or userfaultfd are missing
    env.boot_source()        # domain "desk" booted, its first memcheck passes seen
    ...
    env.cleanup()            # destroys the domains, keeps QEMU's logs in work, removes libvirt's root
"""

import ctypes
import os
import re
import shutil
import subprocess
import time

import launch

from .guesttest import Fail, Skip, log
from .libvirt import error_message
from .wait import read_text as read
from .wait import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = "64"  # memcheck's share of the guest's 256 MiB
OK_RX = re.compile(r"memcheck pass=(\d+) .* OK")
FAIL_RX = re.compile(r" BAD |Kernel panic|HLT-GUEST EXIT")


class Env:
    def __init__(self, tools, work, memory_mib=256, memcheck_mib=MIB):
        self.memory_mib = memory_mib
        self.memcheck_mib = str(memcheck_mib)
        self.save_bin = os.path.join(tools, "hlt-save")
        self.restore_bin = os.path.join(tools, "hlt-restore")
        # libhalite's image server daemon, where the build puts it (as installed: PREFIX/libexec/halite1, named
        # after the library's SONAME version).
        self.daemon_bin = os.path.normpath(os.path.join(tools, os.pardir, "libexec", "halite1", "halite-image-server"))
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
            # An image server that died in an earlier run leaves its mount behind ("transport endpoint is not
            # connected"): detach such mounts first, or nothing under them can be removed.
            with open("/proc/self/mounts") as f:
                for line in f:
                    point = line.split()[1].replace("\\040", " ")
                    if point.startswith(self.work.rstrip("/") + "/"):
                        subprocess.run(["umount", "-l", point], capture_output=True)
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
        for attempt in range(5):
            p = subprocess.run(["virsh", "-q", "-c", self.uri, *cmd], capture_output=True, text=True, timeout=180)
            # Seen once (session 7): `virsh dumpxml` right after a restore exited 1 with nothing on stderr, and
            # passed when run again; seen once in CI (session 9): `virsh list --all` exited 1 with only the
            # embedded driver's start-up log lines ("info :", "warning :") on stderr. An error with a message of
            # its own is never retried.
            if p.returncode == 0 or error_message(p.stderr) or not check:
                break
            log(f"virsh {' '.join(cmd)} exited {p.returncode} with no error message; again in 1 s")
            time.sleep(1)
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
        def counted():
            text = read(serial)
            if FAIL_RX.search(text):
                raise Fail(f"{serial}: {FAIL_RX.search(text).group(0)!r}:\n{text[-2000:]}")
            passes = [int(m.group(1)) for m in OK_RX.finditer(text)]
            if passes and "disk=" not in text:
                raise Fail(f"{serial}: memcheck does not check the disk (no disk= in its lines):\n{text[-1500:]}")
            return passes if len(passes) >= count else None
        try:
            passes = wait_until(counted, timeout, f"{count} memcheck passes in {serial}", poll=0.5)
        except TimeoutError:
            raise Fail(f"{serial}: fewer than {count} memcheck passes within {timeout} s:\n{read(serial)[-2000:]}")
        if after is not None and passes[0] <= after:
            raise Fail(f"{serial}: the guest started over (first pass {passes[0]}, the save was after "
                       f"pass {after}): not a restore")
        return passes

    def swtpm_storage(self):
        return os.path.join(self.root, "lib", "swtpm")  # the embedded driver's (libvirt 9.0)

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
