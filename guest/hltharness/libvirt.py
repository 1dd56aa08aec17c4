"""A libvirt of the harness's own: the QEMU driver embedded in every process that connects
(qemu:///embed?root=ROOT), so no daemon is needed and several harnesses on one machine never meet. QEMU runs as
root, unconfined, with its output in files under ROOT/log/qemu; libvirt manages the domains as on any host.

    lv = EmbeddedLibvirt()          # root /tmp/hlt-lv-<pid> (short: libvirt puts unix sockets under it)
    lv.setup()
    lv.virsh("create", "domain.xml")
    lv.cleanup(keep_logs_in=work)   # destroys what is left, keeps QEMU's logs, removes the root
"""

import os
import re
import shutil
import subprocess
import time

DRIVER = "/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so"
# libvirt's own log lines that the embedded driver prints on stderr ("2026-11-26 17:28:07.470+0000: 4538: info :
# ..."); what is left is the command's error message.
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\+\d{4}: \d+: (debug|info|warning) : ")


class LibvirtError(RuntimeError):
    pass


def error_message(stderr):
    return "\n".join(line for line in stderr.splitlines() if line.strip() and not _LOG_LINE.match(line))


def missing_prerequisite():
    """Why libvirt cannot be used here (a sentence), or None."""
    if shutil.which("virsh") is None:
        return "virsh is not installed (Debian package libvirt-clients; scripts/install-deps)"
    if not os.path.exists(DRIVER):
        return "libvirt's QEMU driver is not installed (Debian package libvirt-daemon-driver-qemu)"
    return None


class EmbeddedLibvirt:
    def __init__(self, root=None):
        self.root = root or f"/tmp/hlt-lv-{os.getpid()}"
        self.uri = f"qemu:///embed?root={self.root}"

    def setup(self):
        why = missing_prerequisite()
        if why:
            raise LibvirtError(why)
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        os.makedirs(os.path.join(self.root, "etc"))
        # QEMU and swtpm as root, no ownership changes or labels (no AppArmor/SELinux here), QEMU's output logged by
        # libvirt itself (no virtlogd).
        with open(os.path.join(self.root, "etc", "qemu.conf"), "w") as f:
            f.write('user = "root"\ngroup = "root"\ndynamic_ownership = 0\nremember_owner = 0\n'
                    'security_driver = "none"\nstdio_handler = "file"\n'
                    'swtpm_user = "root"\nswtpm_group = "root"\n')

    def virsh(self, *cmd, check=True, timeout=300):
        for _ in range(5):
            p = subprocess.run(["virsh", "-q", "-c", self.uri, *cmd], capture_output=True, text=True,
                               timeout=timeout)
            # The embedded driver has been seen to exit 1 with only its start-up log lines on stderr (see
            # libvirt-integration/tests/libvirt_guest_test.py); an error with a message is never retried.
            if p.returncode == 0 or error_message(p.stderr) or not check:
                break
            time.sleep(1)
        if check and p.returncode != 0:
            raise LibvirtError(f"virsh {' '.join(cmd)}: {error_message(p.stderr) or 'exit %d' % p.returncode}")
        return p.stdout

    def domains(self):
        return sorted(line.split()[1] for line in self.virsh("list", "--all").splitlines() if line.strip())

    def destroy(self, name):
        self.virsh("destroy", name, check=False)

    def qemu_log(self, name):
        return os.path.join(self.root, "log", "qemu", f"{name}.log")

    def cleanup(self, keep_logs_in=None):
        if not os.path.exists(self.root):
            return
        try:
            for name in self.domains():
                self.destroy(name)
        except (LibvirtError, subprocess.TimeoutExpired):
            pass
        logs = os.path.join(self.root, "log")
        if keep_logs_in and os.path.isdir(logs):
            for d, _, files in os.walk(logs):
                for f in files:
                    shutil.copy(os.path.join(d, f), os.path.join(keep_logs_in, "libvirt-" + f))
        shutil.rmtree(self.root, ignore_errors=True)
