"""The project's real Debian guest (scripts/build-desktop-guest, guest/desktop/): its image, the one definition of its
QEMU machine, booting it, waiting until it is up, and what is kept when it does not come up.

    image = realguest.build_image("minimal")                 # cached by its recipe hash; BuildError names the step
    inst = realguest.Instance(work_dir, "src", image)        # its files: overlay, NVRAM, serial log, sockets
    inst.prepare()                                           # a qcow2 overlay on the image, a copy of OVMF_VARS
    guest = inst.start()                                     # launch.Guest: Popen + serial log
    state = realguest.wait_system_running(inst.agent(), 300, alive=inst.alive)
    shown = realguest.wait_for_page(realguest.QmpScreen(inst.qmp_path), 300, work_dir)   # desktop variant

The machine (Instance.qemu_argv) mirrors guest/desktop/domain.xml: q35, UEFI (OVMF, pflash code + the instance's
own NVRAM), a named CPU model every feature of which TCG implements (migratable, unlike -cpu max), virtio disk,
NIC (no option ROM), RNG and serial port (the guest agent's channel), standard VGA, a USB tablet, optionally a
TPM 2.0 (swtpm). A restore must use the same options: pass qemu_argv() to `hlt-restore qemu -- ...` (it adds
-incoming itself) with the source's overlay and NVRAM (the source is gone by then) or copies of them.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402  (launch.Guest: a QEMU process and its serial log)

from . import screen as screenmod  # noqa: E402
from .qga import AgentError, SocketAgent  # noqa: E402
from .qmp import Qmp, QmpError  # noqa: E402

BUILD_SCRIPT = os.path.join(REPO, "scripts", "build-desktop-guest")
# Debian's ovmf package: the 4 MiB flash layout (the default since bookworm), without Secure Boot.
FIRMWARE_CODE = os.environ.get("HLT_OVMF_CODE", "/usr/share/OVMF/OVMF_CODE_4M.fd")
FIRMWARE_VARS = os.environ.get("HLT_OVMF_VARS", "/usr/share/OVMF/OVMF_VARS_4M.fd")
# The newest named x86 model whose every feature QEMU 7.2's TCG implements (no "TCG doesn't support requested
# feature" warning; SandyBridge and later ask for x2apic and tsc-deadline): SSE4.2, POPCNT, AES for the guest's
# programs, and a fixed, migratable CPUID (-cpu max is neither).
CPU_MODEL = "Westmere"
# What the guest prints on its serial console once boot has finished (halite-report-state in the image).
SYSTEM_LINE = re.compile(r"HLT-GUEST SYSTEM (\S+) uptime=([\d.]+)")


class Variant:
    def __init__(self, name, mem_mib, vcpus):
        self.name = name
        self.mem_mib = mem_mib
        self.vcpus = vcpus


VARIANTS = {
    "minimal": Variant("minimal", 1024, 1),
    "desktop": Variant("desktop", 2048, 2),
}


class BuildError(RuntimeError):
    pass


class MissingFile(RuntimeError):
    """A file or program the guest needs (firmware, swtpm, QEMU) is not on this machine."""


class PageTimeout(RuntimeError):
    pass


class ScreenGone(RuntimeError):
    """The machine whose screen was asked for is not running any more."""


class GuestImage:
    def __init__(self, variant, image_dir, disk, recipe_hash, cached):
        self.variant = VARIANTS[variant]
        self.dir = image_dir
        self.disk = disk
        self.recipe_hash = recipe_hash
        self.cached = cached
        self.manifest = {}
        with open(os.path.join(image_dir, "manifest.txt")) as f:
            for line in f:
                if "=" in line and not line.startswith("#"):
                    k, v = line.rstrip("\n").split("=", 1)
                    self.manifest[k] = v


def build_image(variant, log_path=None, timeout=1500, extra_args=()):
    """Runs scripts/build-desktop-guest (returns at once when the recipe's image is cached). The script's progress
    goes to log_path (or to this process's stderr). Raises BuildError with the script's own messages."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (expected {' or '.join(VARIANTS)})")
    cmd = [BUILD_SCRIPT, "--variant", variant, *extra_args]
    err = open(log_path, "w") if log_path else None
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(cmd)} did not finish within {timeout} s")
    finally:
        if err:
            err.close()
    if p.returncode != 0:
        detail = ""
        if log_path:
            with open(log_path, errors="replace") as f:
                detail = "".join(f.readlines()[-30:])
        raise BuildError(f"{' '.join(cmd)} exited {p.returncode}" + (f":\n{detail}" if detail else ""))
    out = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    for key in ("image_dir", "disk", "recipe_hash", "cached"):
        if key not in out:
            raise BuildError(f"{' '.join(cmd)} printed no {key}= line: {p.stdout[-500:]!r}")
    return GuestImage(variant, out["image_dir"], out["disk"], out["recipe_hash"], out["cached"] == "yes")


def check_firmware():
    for path, what in ((FIRMWARE_CODE, "code"), (FIRMWARE_VARS, "variables template")):
        if not os.path.isfile(path):
            raise MissingFile(f"the UEFI firmware's {what} {path} is missing (Debian package ovmf; HLT_OVMF_CODE / "
                              "HLT_OVMF_VARS choose other files)")


def check_swtpm():
    path = shutil.which("swtpm")
    if not path:
        raise MissingFile("swtpm is not installed: a TPM 2.0 needs it (Debian packages swtpm swtpm-tools)")
    return path


def qemu_binary():
    path = os.environ.get("HLT_QEMU") or shutil.which("qemu-system-x86_64")
    if not path:
        raise MissingFile("qemu-system-x86_64 is not installed (Debian package qemu-system-x86)")
    return path


class Instance:
    """One guest's files in `work`, all named after `name`: its disk overlay, NVRAM, serial log, QMP and agent
    sockets, QEMU's stderr, and the TPM's state when `tpm` is on. The same Instance describes the guest before a
    save and after its restore (same files, same machine)."""

    def __init__(self, work, name, image, tpm=False, vnc=False, mac="52:54:00:48:4c:01"):
        self.work = work
        self.name = name
        self.image = image
        self.variant = image.variant
        self.tpm = tpm
        self.vnc = vnc
        self.mac = mac
        p = lambda suffix: os.path.join(work, f"{name}.{suffix}")  # noqa: E731
        self.overlay = p("qcow2")
        self.nvram = p("vars.fd")
        self.serial_log = p("serial.log")
        self.qemu_log = p("qemu.log")
        self.qmp_path = p("qmp")
        self.agent_path = p("qga")
        self.vnc_path = p("vnc")
        self.tpm_dir = p("tpm")
        self.tpm_sock = p("tpm.sock")
        self.guest = None  # launch.Guest once started here
        self.swtpm = None
        self._agent = None

    def prepare(self):
        """A fresh overlay on the image and a fresh copy of the firmware's variables: a new machine."""
        check_firmware()
        os.makedirs(self.work, exist_ok=True)
        for path in (self.overlay, self.nvram, self.serial_log):
            if os.path.exists(path):
                os.unlink(path)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", self.image.disk, "-F", "qcow2",
                        self.overlay], check=True, capture_output=True)
        shutil.copyfile(FIRMWARE_VARS, self.nvram)
        if self.tpm:
            check_swtpm()
            shutil.rmtree(self.tpm_dir, ignore_errors=True)
            os.makedirs(self.tpm_dir)

    def qemu_argv(self, qmp=True, accel="tcg", extra=()):
        """The full QEMU command line, without -incoming."""
        v = self.variant
        argv = [qemu_binary(), "-name", f"hlt-{self.name}", "-accel", accel, "-cpu", CPU_MODEL, "-machine", "q35",
                "-m", f"{v.mem_mib}M", "-smp", str(v.vcpus), "-nodefaults", "-no-user-config", "-display", "none",
                "-rtc", "base=utc",
                "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={FIRMWARE_CODE}",
                "-drive", f"if=pflash,format=raw,unit=1,file={self.nvram}",
                "-drive", f"file={self.overlay},if=none,id=disk0,format=qcow2,discard=unmap",
                "-device", "virtio-blk-pci,drive=disk0,bootindex=1",
                "-netdev", "user,id=net0",
                "-device", f"virtio-net-pci,netdev=net0,mac={self.mac},romfile=",
                "-device", "virtio-serial-pci,id=vser0",
                "-chardev", f"socket,id=qga0,path={self.agent_path},server=on,wait=off",
                "-device", "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
                "-device", "virtio-rng-pci",
                "-device", "VGA,vgamem_mb=16",
                "-device", "qemu-xhci,id=usb", "-device", "usb-tablet,bus=usb.0",
                "-serial", f"file:{self.serial_log}"]
        if self.tpm:
            argv += ["-chardev", f"socket,id=chrtpm,path={self.tpm_sock}",
                     "-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-crb,tpmdev=tpm0"]
        if self.vnc:
            argv += ["-vnc", f"unix:{self.vnc_path}"]
        if qmp:
            argv += ["-qmp", f"unix:{self.qmp_path},server=on,wait=off"]
        return argv + list(extra)

    def start_swtpm(self):
        """The TPM emulator QEMU connects to (once per QEMU: it exits when QEMU closes the connection)."""
        if os.path.exists(self.tpm_sock):
            os.unlink(self.tpm_sock)
        self.swtpm = subprocess.Popen(
            [check_swtpm(), "socket", "--tpm2", "--tpmstate", f"dir={self.tpm_dir}",
             "--ctrl", f"type=unixio,path={self.tpm_sock}", "--terminate",
             "--log", f"file={os.path.join(self.tpm_dir, 'swtpm.log')},level=1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.tpm_sock):
            if self.swtpm.poll() is not None or time.monotonic() > deadline:
                raise MissingFile(f"swtpm did not start (exit {self.swtpm.poll()}); see {self.tpm_dir}/swtpm.log")
            time.sleep(0.05)

    def start(self, extra=()):
        """Starts QEMU on the prepared files (and swtpm first when `tpm` is on). Returns the launch.Guest."""
        if self.tpm:
            self.start_swtpm()
        for path in (self.qmp_path, self.agent_path):
            if os.path.exists(path):
                os.unlink(path)
        argv = self.qemu_argv(extra=extra)
        open(self.serial_log, "wb").close()
        err = open(self.qemu_log, "wb")
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
        err.close()
        self.guest = launch.Guest(proc, self.serial_log, argv, started)
        return self.guest

    def alive(self):
        return self.guest is None or self.guest.proc.poll() is None

    def agent(self):
        """The guest agent through QEMU's socket. One connection for the Instance: QEMU serves one client at a time
        on a chardev socket (a second one would wait unanswered); it reconnects by itself after a restore."""
        if self._agent is None:
            self._agent = SocketAgent(self.agent_path)
        return self._agent

    def qmp(self, timeout=30.0):
        return Qmp.connect(self.qmp_path, timeout=timeout, alive=self.alive)

    def stop(self):
        if self._agent is not None:
            self._agent.close()
        if self.guest is not None:
            self.guest.stop()
        if self.swtpm is not None and self.swtpm.poll() is None:
            self.swtpm.send_signal(signal.SIGTERM)
            try:
                self.swtpm.wait(5)
            except subprocess.TimeoutExpired:
                self.swtpm.kill()
                self.swtpm.wait()

    def serial_tail(self, n=3000):
        try:
            with open(self.serial_log, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


def serial_system_state(serial_log):
    """(state, guest uptime in s) from the guest's serial console once its boot has finished, else None."""
    try:
        with open(serial_log, errors="replace") as f:
            m = SYSTEM_LINE.search(f.read())
    except OSError:
        return None
    return (m.group(1), float(m.group(2))) if m else None


class SystemState:
    def __init__(self, state, seconds, failed_units):
        self.state = state
        self.seconds = seconds
        self.failed_units = failed_units

    def __repr__(self):
        return f"SystemState({self.state!r} after {self.seconds:.1f} s, failed={self.failed_units})"


def system_state(agent, timeout=30.0):
    """`systemctl is-system-running` in the guest, through its agent: (state, failed units)."""
    r = agent.exec(["systemctl", "is-system-running"], timeout=timeout)
    state = r.stdout.strip() or f"exit {r.exitcode}"
    failed = []
    if state == "degraded":
        f = agent.exec(["systemctl", "list-units", "--failed", "--no-legend", "--plain"], timeout=timeout)
        failed = [line.split()[0] for line in f.stdout.splitlines() if line.strip()]
    return state, failed


def wait_system_running(agent, timeout, alive=None, accept=("running", "degraded")):
    """Waits until the guest's systemd has finished booting (a state in `accept`), asking through the agent.
    Returns a SystemState (seconds: time waited). Raises AgentError on timeout, when QEMU exits, or when the
    system reports a state it will not leave by itself (maintenance, stopping, offline)."""
    start = time.monotonic()
    last = "the agent never answered"
    while True:
        if alive is not None and not alive():
            raise AgentError(f"the guest's QEMU exited before its system was running (last: {last})")
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            raise AgentError(f"the guest's system was not running within {timeout:.0f} s (last: {last})")
        try:
            agent.wait_ready(min(left, 10.0), alive=alive)
            state, failed = system_state(agent, timeout=min(max(left, 5.0), 30.0))
            if state in accept:
                return SystemState(state, time.monotonic() - start, failed)
            if state in ("maintenance", "stopping", "offline"):
                raise AgentError(f"the guest's system is {state}")
            last = f"system {state}"
        except AgentError as e:
            if "the guest's system is" in str(e):
                raise
            last = str(e)
        time.sleep(0.5)


# --- the desktop's page ----------------------------------------------------------------------------------------------

class QmpScreen:
    """Screendumps of a QEMU the harness reaches through a QMP socket of its own."""

    def __init__(self, qmp_path, alive=None):
        self.qmp_path = qmp_path
        self.alive = alive
        self.qmp = None

    def grab(self, path, fmt="ppm"):
        if self.qmp is None:
            self.qmp = Qmp.connect(self.qmp_path, timeout=30, alive=self.alive)
        args = {"filename": path}
        if fmt == "png":
            args["format"] = "png"
        self.qmp.command("screendump", **args)

    def send_key(self, qcode):
        if self.qmp is None:
            self.qmp = Qmp.connect(self.qmp_path, timeout=30, alive=self.alive)
        self.qmp.command("send-key", keys=[{"type": "qcode", "data": qcode}])

    def close(self):
        if self.qmp is not None:
            self.qmp.close()
            self.qmp = None


class VirshScreen:
    """Screendumps of a libvirt domain and its keyboard (`virsh send-key`). The screendump is QEMU's own, through
    libvirt's monitor passthrough (libvirt notes the domain as tainted "custom-monitor"), because `virsh
    screenshot` of libvirt 9.0 writes a PNG, which would need PIL to read and costs QEMU an encoding each time."""

    def __init__(self, uri, domain):
        self.uri = uri
        self.domain = domain

    def grab(self, path, fmt="ppm"):
        args = {"filename": path}
        if fmt == "png":
            args["format"] = "png"
        cmd = json.dumps({"execute": "screendump", "arguments": args})
        p = subprocess.run(["virsh", "-q", "-c", self.uri, "qemu-monitor-command", self.domain, cmd],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0 or '"error"' in p.stdout:
            why = (p.stdout + p.stderr).strip()[-300:]
            if "Domain not found" in why or "domain is not running" in why:
                raise ScreenGone(f"the domain {self.domain} is not running: {why}")
            raise QmpError(f"screendump of {self.domain}: {why}")

    def send_key(self, qcode):
        key = "KEY_" + qcode.upper()
        p = subprocess.run(["virsh", "-q", "-c", self.uri, "send-key", self.domain, key], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise QmpError(f"virsh send-key {self.domain} {key}: {p.stderr.strip()[-300:]}")

    def close(self):
        pass


class PageShown:
    def __init__(self, seconds, moving_seconds, timer, keys, screendump):
        self.seconds = seconds  # first screendump showing the page's counters
        self.moving_seconds = moving_seconds  # first one showing the timer moved since
        self.timer = timer
        self.keys = keys
        self.screendump = screendump

    def __repr__(self):
        return (f"PageShown(at {self.seconds:.1f} s, moving at {self.moving_seconds:.1f} s, timer={self.timer}, "
                f"keys={self.keys})")


def read_screen(screen, path):
    screen.grab(path)
    return screenmod.read_counters(screenmod.load_image(path))


def wait_for_page(screen, timeout, work, alive=None, serial_log=None, interval=0.5, name="page"):
    """Waits until screendumps show the page with its timer counter moving. Returns a PageShown (seconds since
    this call). On timeout (or when QEMU exits) keeps the last screendump as WORK/NAME-timeout.ppm (and a PNG when
    QEMU can write one) and raises PageTimeout naming it and the serial log."""
    start = time.monotonic()
    dump = os.path.join(work, f"{name}.ppm")
    first = None
    last_problems = ["no screendump taken"]
    gone = None
    while True:
        now = time.monotonic() - start
        if (alive is not None and not alive()) or gone or now > timeout:
            why = "QEMU exited" if (alive is not None and not alive()) or gone else f"not within {timeout:.0f} s"
            raise PageTimeout(f"the desktop did not show the counter page ({why}): "
                              f"{'; '.join(last_problems)}. {_keep_last_screen(screen, dump, work, name)}"
                              + (f"; serial log {serial_log}" if serial_log else ""))
        try:
            c = read_screen(screen, dump)
            last_problems = c.problems or [f"timer {c.timer} not moving yet"]
            if c.timer is not None:
                if first is None:
                    first = (now, c.timer)
                elif c.timer != first[1]:
                    return PageShown(first[0], time.monotonic() - start, c.timer, c.keys, dump)
        except ScreenGone as e:
            gone = e
            last_problems = [str(e)]
            continue
        except (QmpError, OSError, screenmod.ImageError, TimeoutError) as e:
            last_problems = [f"screendump failed: {e}"]
        time.sleep(interval)


def _keep_last_screen(screen, dump, work, name):
    kept = os.path.join(work, f"{name}-timeout.ppm")
    notes = []
    if os.path.exists(dump):
        shutil.copyfile(dump, kept)
        notes.append(f"last screendump saved as {kept}")
    else:
        notes.append("no screendump could be taken")
    if isinstance(screen, (QmpScreen, VirshScreen)):
        png = os.path.join(work, f"{name}-timeout.png")
        try:
            screen.grab(png, fmt="png")
            notes.append(f"and {png}")
        except (QmpError, ScreenGone, OSError, TimeoutError):
            pass
    return " ".join(notes)


def wait_key_counted(screen, work, qcode="a", timeout=60.0, interval=0.2, name="key"):
    """Sends one key press and waits until the page's key counter shows it. Returns seconds from the key to the
    screendump showing it (the time to interactive when called right after a restore)."""
    dump = os.path.join(work, f"{name}.ppm")
    before = None
    start = time.monotonic()
    while before is None:
        before = read_screen(screen, dump).keys
        if before is None:
            if time.monotonic() - start > timeout:
                raise PageTimeout(f"no key counter on the screen within {timeout:.0f} s")
            time.sleep(interval)
    sent = time.monotonic()
    screen.send_key(qcode)
    while True:
        keys = read_screen(screen, dump).keys
        if keys is not None and keys > before:
            return time.monotonic() - sent
        if time.monotonic() - sent > timeout:
            raise PageTimeout(f"the key counter stayed at {before} for {timeout:.0f} s after send-key {qcode}")
        time.sleep(interval)
