#!/usr/bin/env python3
"""Launch the libhalite test guest under QEMU: the one place that defines its machine options.

Checkpoint and migration tests need the source and the destination QEMU to have exactly the same machine (type,
CPU model, RAM size, devices, and even the boot ROMs that -kernel adds), so every caller builds its command line
here, from Python (import this file) or from any language through the CLI.

Library (sys.path.insert(0, "<repo>/guest"); import launch):
    launch.qemu_argv(mem="1G", workload="memcheck", workload_args=["--mib", "256"],
                     serial_log="/tmp/s.log", qmp="/tmp/q.sock", incoming=None, extra=[]) -> list[str]
    g = launch.Guest.start(...same keywords...)  # Popen plus the serial log
    g.wait_for(r"memcheck pass=\\d+ .* OK", count=2, timeout=300) -> seconds since start
    g.stop()
The destination of a migration passes incoming="defer" (then QMP migrate-incoming), everything else equal.

CLI:
    launch.py argv [options] [-- extra QEMU args]   print the command line, shell-quoted (--nul: NUL-separated)
    launch.py boot [options] [--wait REGEX] [--count N] [--timeout S] [--print-lines REGEX] [--fail REGEX]
                                                    boot, wait for READY then N serial lines matching REGEX,
                                                    print timings (ready_s=, first_match_s=, matchN_s=), stop
                                                    QEMU; exit 0 on success, 1 on timeout, QEMU exit or --fail
    launch.py machine [--mem 1G] [--accel A]        print only the machine options
Options (a value starting with "-" needs "=", e.g. --args=--mib,256):
    --mem SIZE        guest RAM (default 1G)
    --workload W      memcheck | memsim | shell | idle | poweroff (default memcheck)
    --args A,B,...    workload arguments, comma-separated
    --serial PATH     serial console log (default: stdio for argv, a temp file for boot)
    --qmp PATH        adds -qmp unix:PATH,server=on,wait=off
    --incoming URI    adds -incoming URI (e.g. defer)
    --accel tcg|kvm   default: the answer of scripts/guest-accel in <guest dir>/accel.txt, else tcg
    --kernel K        vmlinux | vmlinuz | PATH (default: vmlinux if built, else vmlinuz)
    --guest-dir DIR   default: $HLT_GUEST_DIR, else <repo>/build/guest
    --append STR      more kernel command line
    --qemu BIN        default: $HLT_QEMU, else qemu-system-x86_64
"""

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MEM = "1G"
READY_LINE = "HLT-GUEST READY"
# The raw ELF kernel boots faster under TCG than the bzImage (no in-guest xz decompression); see guest/README.md.
KERNEL_PREFERENCE = ("vmlinux", "vmlinuz")
# Kernel command line shared by every boot. quiet: the serial console is slow under TCG; panic=-1 with QEMU's
# -no-reboot turns a guest panic into a QEMU exit instead of a hang.
BASE_CMDLINE = "console=ttyS0 quiet panic=-1"


def guest_dir(override=None):
    return override or os.environ.get("HLT_GUEST_DIR") or os.path.join(REPO, "build", "guest")


def default_accel(gdir=None):
    try:
        with open(os.path.join(guest_dir(gdir), "accel.txt")) as f:
            word = f.read().split()[0]
        return word if word in ("kvm", "tcg") else "tcg"
    except (OSError, IndexError):
        return "tcg"


def machine_args(mem=DEFAULT_MEM, accel="tcg"):
    """The machine itself: identical on the source and the destination of a migration."""
    if accel not in ("kvm", "tcg"):
        raise ValueError(f"unknown accelerator {accel!r}")
    # One named CPU model for both accelerators: migratable, and the guest sees the same CPU either way
    # (-cpu host also trips a QEMU assertion on a nested PVM /dev/kvm).
    return ["-accel", accel, "-cpu", "qemu64"] + [
        "-machine", "pc",
        "-m", str(mem),
        "-smp", "1",
        "-nodefaults",
        "-no-user-config",
        "-display", "none",
        "-no-reboot",
    ]


def kernel_path(gdir=None, kernel=None):
    gdir = guest_dir(gdir)
    names = KERNEL_PREFERENCE if kernel is None else (kernel,)
    for name in names:
        path = name if os.sep in name else os.path.join(gdir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no guest kernel ({', '.join(names)}) in {gdir}: run scripts/build-guest")


def initrd_path(gdir=None):
    gdir = guest_dir(gdir)
    for name in ("initramfs.cpio", "initramfs.cpio.gz"):
        path = os.path.join(gdir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no guest initramfs in {gdir}: run scripts/build-guest")


def kernel_cmdline(workload="memcheck", workload_args=(), append=""):
    for a in workload_args:
        if not a or any(c in a for c in ", \t\n\""):
            raise ValueError(f"workload argument {a!r} must be non-empty without commas, spaces or quotes")
    parts = [BASE_CMDLINE, f"hlt.workload={workload}"]
    if workload_args:
        parts.append("hlt.args=" + ",".join(workload_args))
    if append:
        parts.append(append)
    return " ".join(parts)


def qemu_argv(mem=DEFAULT_MEM, workload="memcheck", workload_args=(), serial_log=None, qmp=None, incoming=None,
              accel=None, kernel=None, gdir=None, append="", extra=(), qemu=None):
    """The full QEMU command line. Only serial_log, qmp, incoming and extra may differ between the source and the
    destination of a migration; the workload and its arguments change the kernel command line, which lives in
    fw_cfg and is not migrated, so they may differ too but normally should not."""
    accel = accel or default_accel(gdir)
    argv = [qemu or os.environ.get("HLT_QEMU") or "qemu-system-x86_64"]
    argv += machine_args(mem, accel)
    argv += ["-kernel", kernel_path(gdir, kernel), "-initrd", initrd_path(gdir),
             "-append", kernel_cmdline(workload, workload_args, append)]
    argv += ["-serial", f"file:{serial_log}" if serial_log else "stdio"]
    if qmp:
        argv += ["-qmp", f"unix:{qmp},server=on,wait=off"]
    if incoming:
        argv += ["-incoming", incoming]
    argv += list(extra)
    return argv


class Guest:
    """A running QEMU and its serial log. Not thread-safe; stop() it (or use it as a context manager)."""

    def __init__(self, proc, serial_log, argv, started):
        self.proc = proc
        self.serial_log = serial_log
        self.argv = argv
        self.started = started  # time.monotonic() just before QEMU was started
        self._offset = 0
        self._partial = b""
        self._pending = []  # lines read from the log but not yet examined by wait_for

    @classmethod
    def start(cls, serial_log, stderr_path=None, **kw):
        argv = qemu_argv(serial_log=serial_log, **kw)
        open(serial_log, "wb").close()
        err = open(stderr_path or os.devnull, "wb")
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
        err.close()
        return cls(proc, serial_log, argv, started)

    def _read_log(self):
        with open(self.serial_log, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        *done, self._partial = data.split(b"\n")
        self._pending += [d.rstrip(b"\r").decode(errors="replace") for d in done]

    def lines(self):
        """Complete serial lines (CR stripped) not yet returned here nor examined by wait_for."""
        self._read_log()
        out, self._pending = self._pending, []
        return out

    def wait_for(self, pattern, count=1, timeout=300.0, on_line=None, fail=None):
        """Waits until `count` new serial lines match `pattern` (re.search). Returns seconds since start of the
        count-th match; raises TimeoutError, or RuntimeError if QEMU exits first or a line matches `fail`."""
        rx = re.compile(pattern)
        fail_rx = re.compile(fail) if fail else None
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            exited = self.proc.poll() is not None
            self._read_log()
            while self._pending:
                line = self._pending.pop(0)
                if on_line:
                    on_line(line)
                if fail_rx and fail_rx.search(line):
                    raise RuntimeError(f"serial line matched {fail!r}: {line}")
                if rx.search(line):
                    seen += 1
                    if seen >= count:
                        return time.monotonic() - self.started
            if exited:
                raise RuntimeError(f"QEMU exited with status {self.proc.returncode} after {seen}/{count} "
                                   f"lines matching {pattern!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{seen}/{count} lines matching {pattern!r} within {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self, grace=5.0):
        """SIGTERM, then SIGKILL after `grace` s (a postcopy-paused QEMU ignores SIGTERM). Returns the status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _add_common(ap):
    ap.add_argument("--mem", default=DEFAULT_MEM)
    ap.add_argument("--accel", choices=("tcg", "kvm"))
    ap.add_argument("--workload", default="memcheck")
    ap.add_argument("--args", default="", help="workload arguments, comma-separated")
    ap.add_argument("--serial")
    ap.add_argument("--qmp")
    ap.add_argument("--incoming")
    ap.add_argument("--kernel")
    ap.add_argument("--guest-dir")
    ap.add_argument("--append", default="")
    ap.add_argument("--qemu")
    ap.add_argument("extra", nargs="*", help="extra QEMU arguments (after --)")


def _kwargs(a):
    return dict(mem=a.mem, workload=a.workload, workload_args=[x for x in a.args.split(",") if x], qmp=a.qmp,
                incoming=a.incoming, accel=a.accel, kernel=a.kernel, gdir=a.guest_dir, append=a.append,
                extra=a.extra, qemu=a.qemu)


def _boot(a):
    logdir = None
    serial = a.serial
    if not serial:
        logdir = tempfile.mkdtemp(prefix="hlt-guest-")
        serial = os.path.join(logdir, "serial.log")
    stderr_path = serial + ".qemu-stderr"
    echo = re.compile(a.print_lines) if a.print_lines else None

    def on_line(line):
        if echo and echo.search(line):
            print(line, flush=True)

    ok = False
    guest = Guest.start(serial, stderr_path=stderr_path, **_kwargs(a))
    try:
        print("qemu: " + shlex.join(guest.argv), file=sys.stderr, flush=True)
        t_ready = guest.wait_for(re.escape(READY_LINE), 1, a.timeout, on_line, a.fail)
        print(f"ready_s={t_ready:.2f}", flush=True)
        if a.wait:
            t_first = guest.wait_for(a.wait, 1, a.timeout - t_ready, on_line, a.fail)
            print(f"first_match_s={t_first:.2f}", flush=True)
            if a.count > 1:
                t_last = guest.wait_for(a.wait, a.count - 1, a.timeout - t_first, on_line, a.fail)
                print(f"match{a.count}_s={t_last:.2f}", flush=True)
        ok = True
    except (TimeoutError, RuntimeError) as e:
        print(f"launch.py boot: FAILED: {e}", file=sys.stderr)
    finally:
        guest.stop()
        if not ok:
            for path, what in ((serial, "serial log"), (stderr_path, "QEMU stderr")):
                try:
                    with open(path, "rb") as f:
                        tail = f.read()[-3000:].decode(errors="replace")
                    print(f"--- last lines of {what} ({path}) ---\n{tail}", file=sys.stderr)
                except OSError:
                    pass
        elif logdir:
            for name in os.listdir(logdir):
                os.unlink(os.path.join(logdir, name))
            os.rmdir(logdir)
    return 0 if ok else 1


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_argv = sub.add_parser("argv", help="print the QEMU command line")
    _add_common(p_argv)
    p_argv.add_argument("--nul", action="store_true", help="NUL-separated, for bash: mapfile -d ''")
    p_boot = sub.add_parser("boot", help="boot, wait for serial lines, stop")
    _add_common(p_boot)
    p_boot.add_argument("--wait", help="regex for the serial lines to wait for after READY")
    p_boot.add_argument("--count", type=int, default=1)
    p_boot.add_argument("--timeout", type=float, default=300.0, help="seconds, for everything")
    p_boot.add_argument("--print-lines", help="echo serial lines matching this regex")
    p_boot.add_argument("--fail", help="fail at once on a serial line matching this regex")
    p_mach = sub.add_parser("machine", help="print the machine options only")
    p_mach.add_argument("--mem", default=DEFAULT_MEM)
    p_mach.add_argument("--accel", choices=("tcg", "kvm"))
    p_mach.add_argument("--guest-dir")
    a = ap.parse_args(argv)
    # A SIGTERM (e.g. from timeout(1)) unwinds through Guest.stop() instead of leaving QEMU behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if a.cmd == "machine":
            print(shlex.join(machine_args(a.mem, a.accel or default_accel(a.guest_dir))))
            return 0
        if a.cmd == "argv":
            args = qemu_argv(serial_log=a.serial, **_kwargs(a))
            if a.nul:
                sys.stdout.write("".join(x + "\0" for x in args))
            else:
                print(shlex.join(args))
            return 0
        return _boot(a)
    except (FileNotFoundError, ValueError) as e:
        print(f"launch.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
