"""What bench_desktop.py measures on one restored desktop: from the restoring command's start, the time to the guest
running, to the first new frame (the page's timer counter past the value saved), to interactive (a key sent with
QMP send-key counted by the page), and to every page in (the command's exit); and what hlt-restore says about its
faults. The screen is read through a QMP monitor of the bench's own (domain.render(qmp_socket=...)): libvirt's
embedded driver is busy inside the restoring command meanwhile.
"""

import os
import re
import subprocess
import threading
import time

from hltharness import realguest, screen as screenmod
from hltharness.qmp import Qmp, QmpError

RUNNING_LINE = re.compile(r"^running (\S+) ([\d.]+) ms after hlt-restore started", re.M)
TIME_LINE = re.compile(r"time\s+([\d.]+) ms to guest running .*?all pages sent at ([\d.]+) ms, completed at ([\d.]+) ms")
FAULT_LINE = re.compile(r"faults\s+(\d+) blocking \((\d+) joined a read in flight\), (\d+) zero, (\d+) present; "
                        r"blocking p50 ([\d.]+) us, p99 ([\d.]+) us; stall ([\d.]+) ms")
BLOCKS_LINE = re.compile(r"blocks read\s+(\d+) of (\d+)")
CLOCK_LINE = re.compile(r"clock\s+set to the host's through the guest agent(?: \(it was ([-\d.]+) s behind\))?")


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def load_average():
    return round(os.getloadavg()[0], 2)


class Command:
    """A restoring command run in the background; the time each output line came, from `t0`."""

    def __init__(self, argv, t0, log_path):
        self.t0 = t0
        self.lines = []  # (seconds since t0, line)
        self.log_path = log_path
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.exit_s = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with open(self.log_path, "w") as log:
            for line in self.proc.stdout:
                self.lines.append((time.monotonic() - self.t0, line.rstrip("\n")))
                log.write(line)
        self.proc.wait()
        self.exit_s = time.monotonic() - self.t0

    def wait(self, timeout):
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.proc.kill()
            self.thread.join()
            raise RuntimeError(f"{self.log_path}: the command did not finish within {timeout:.0f} s")
        return self.proc.returncode

    def text(self):
        return "\n".join(line for _, line in self.lines)

    def line_time(self, pattern):
        for t, line in self.lines:
            if pattern.search(line):
                return t
        return None


def hlt_restore_figures(text):
    """The figures hlt-restore libvirt prints in its summary."""
    out = {}
    m = RUNNING_LINE.search(text)
    if m:
        out["tool_running_ms"] = float(m.group(2))
    m = TIME_LINE.search(text)
    if m:
        out.update(tool_all_sent_ms=float(m.group(2)), tool_completed_ms=float(m.group(3)))
    m = FAULT_LINE.search(text)
    if m:
        out.update(faults_blocking=int(m.group(1)), faults_joined=int(m.group(2)), faults_zero=int(m.group(3)),
                   blocking_p50_us=float(m.group(5)), blocking_p99_us=float(m.group(6)), stall_ms=float(m.group(7)))
    m = BLOCKS_LINE.search(text)
    if m:
        out.update(blocks_read=int(m.group(1)), blocks_total=int(m.group(2)))
    m = CLOCK_LINE.search(text)
    if m:
        out["clock_synced"] = True
        if m.group(1):
            out["clock_was_behind_s"] = float(m.group(1))
    return out


class Screen:
    """Screendumps and keys through a QMP socket of the bench's own."""

    def __init__(self, path, work, name):
        self.path = path
        self.dump = os.path.join(work, f"{name}.ppm")
        self.qmp = None

    def connect(self, timeout, alive=None):
        self.qmp = Qmp.connect(self.path, timeout=timeout, poll=0.005, alive=alive)

    def counters(self):
        self.qmp.command("screendump", filename=self.dump)
        return screenmod.read_counters(screenmod.load_image(self.dump))

    def png(self, path):
        self.qmp.command("screendump", filename=path, format="png")

    def key(self, qcode="a"):
        self.qmp.command("send-key", keys=[{"type": "qcode", "data": qcode}])

    def close(self):
        if self.qmp:
            self.qmp.close()
            self.qmp = None


def watch_screen(scr, t0, saved, timeout, interval=0.05):
    """From t0: seconds to the first screendump whose timer is past saved.timer (a new frame), then seconds to the
    key counter passing its value after a send-key (interactive). The screen is connected to already."""
    out = {}
    deadline = t0 + timeout
    while True:
        try:
            c = scr.counters()
        except (QmpError, OSError, screenmod.ImageError):
            c = None
        if c is not None and c.timer is not None and c.timer > saved.timer:
            out["frame_s"] = time.monotonic() - t0
            keys_before = c.keys
            break
        if time.monotonic() > deadline:
            raise realguest.PageTimeout(f"no new frame within {timeout:.0f} s (timer saved at {saved.timer}; last "
                                        f"{c})")
        time.sleep(interval)
    while keys_before is None:
        keys_before = scr.counters().keys
        if time.monotonic() > deadline:
            raise realguest.PageTimeout("no key counter on the screen")
    out["key_sent_s"] = time.monotonic() - t0
    scr.key()
    while True:
        try:
            c = scr.counters()
        except (QmpError, OSError, screenmod.ImageError):
            c = None
        if c is not None and c.keys is not None and c.keys > keys_before:
            out["interactive_s"] = time.monotonic() - t0
            out["keys"] = c.keys
            out["timer"] = c.timer
            return out
        if time.monotonic() > deadline:
            raise realguest.PageTimeout(f"the key counter stayed at {keys_before} (last {c})")
        time.sleep(interval)


def restore_run(label, argv, qmp_path, saved, work, timeout=600, is_hlt=True):
    """Drops the page cache, runs `argv` (a restoring command), watches the screen. Returns a dict of figures."""
    if os.path.exists(qmp_path):
        os.unlink(qmp_path)
    drop_caches()
    row = {"run": label, "load_before": load_average()}
    t0 = time.monotonic()
    cmd = Command(argv, t0, os.path.join(work, f"{label}.log"))
    scr = Screen(qmp_path, work, label)
    try:
        scr.connect(timeout=120, alive=lambda: cmd.proc.poll() is None or os.path.exists(qmp_path))
        row.update(watch_screen(scr, t0, saved, timeout))
        rc = cmd.wait(timeout)
    finally:
        scr.close()
        if cmd.proc.poll() is None:
            cmd.proc.kill()
    if rc != 0:
        raise RuntimeError(f"{label}: {' '.join(argv)} exited {rc}:\n{cmd.text()[-2000:]}")
    row["exit_s"] = cmd.exit_s
    if is_hlt:
        row["running_s"] = cmd.line_time(RUNNING_LINE)
        row.update(hlt_restore_figures(cmd.text()))
        row["all_in_s"] = cmd.exit_s  # hlt-restore exits once every page is in and QEMU completed
    else:
        row["running_s"] = cmd.exit_s  # virsh restore returns with the guest running, every page loaded
        row["all_in_s"] = cmd.exit_s
    row["load_after"] = load_average()
    return row
