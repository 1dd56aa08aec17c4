"""The two guest workloads as the harness sees them: how to boot them, when they are ready, and their progress as
host-timed intervals (start, end, operations) from which every throughput figure is computed.

memsim: the guest prints `memsim t_ms=.. rt=.. ops=<total> dt_ms=.. ops_per_s=..` every 100 ms on the serial
console; each line closes an interval that ends when the line reaches the host.
redis: the host's own client (redisdrv.Driver) records every reply; intervals are 100 ms bins of replies.
"""

import re
import socket
import time

from . import redisdrv

MEMSIM_RX = re.compile(r"memsim t_ms=(\d+) rt=[\d.]+ ops=(\d+) dt_ms=(\d+) ops_per_s=(\d+)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mem_bytes(mem):
    m = re.fullmatch(r"(\d+)([MG])", mem)
    return int(m.group(1)) << (20 if m.group(2) == "M" else 30)


class Memsim:
    name = "memsim"
    unit = "ops/s"

    def __init__(self, mem, quick, pattern="zipf", write_pct=10, mib=None, procs=1, active=None):
        # Working set: half the guest's RAM (the rest is free memory the guest never touched: zero pages).
        self.mib = mib or mem_bytes(mem) // 2 // (1 << 20)
        if quick and not mib:
            self.mib = min(self.mib, 384)
        self.pattern = pattern
        self.write_pct = write_pct
        # A desktop: `procs` processes share the working set, the first `active` run operations, the others idle.
        self.procs = procs or 1
        self.active = active

    def describe(self):
        return (f"memsim {' '.join(self.guest()[1])} "
                f"(one operation = read or write one word of a page; rate reported every 100 ms)")

    def guest(self):
        # "zipf-noscatter": zipf with the hot pages at the start of the working set (rank r at page r), so what the
        # guest touches is contiguous in its virtual memory, as a program's hot data mostly is; plain "zipf"
        # scatters the hot pages over the working set by a permutation (no locality for any layout to find).
        pattern, extra = self.pattern, []
        if pattern.endswith("-noscatter"):
            pattern, extra = pattern[:-len("-noscatter")], ["--no-scatter"]
        if self.procs > 1:
            extra += ["--procs", str(self.procs)] + (["--active", str(self.active)] if self.active else [])
        # --frames: one line saying how scattered the working set is in the guest's physical memory (pagemap).
        return "memsim", ["--mib", str(self.mib), "--pattern", pattern, "--write-pct", str(self.write_pct)] + extra + \
            ["--frames"]

    def qemu_extra(self, port):
        return []

    def wait_ready(self, serial, log):
        i = serial.wait_for(lambda line: MEMSIM_RX.search(line) is not None, timeout=600)
        log(f"memsim running (first report {serial.lines[i][0]:.3f})")

    # Source side: the serial lines are the record; nothing to start or stop.
    def start_source_load(self, port):
        pass

    def stop_source_load(self):
        pass

    def source_intervals(self, serial):
        return memsim_intervals(serial.snapshot())

    def source_record(self, serial):
        return {"source_serial": serial.snapshot()}

    # Restore side.
    def start_restore_load(self, port):
        return None

    def restore_result(self, handle, serial, t0, t_run, baseline_rate):
        lines = serial.snapshot()
        ivs, first = memsim_restore_intervals(lines, t_run, baseline_rate)
        # The serial lines are kept so that the report can recompute everything from the record.
        return {"intervals": ivs, "first_response": first, "latency_bins": None, "serial": lines}


def _memsim_points(lines, t_min=None):
    """(host time, guest t_ms, ops, dt_ms, ops_per_s) of each memsim line arriving at or after t_min. The host time
    is the guest's own timestamp moved onto the host clock: serial lines reach the host in bursts, the guest's
    CLOCK_MONOTONIC does not (it runs at host speed while the VM runs)."""
    pts = []
    for t, text in lines:
        m = MEMSIM_RX.search(text)
        if m and (t_min is None or t >= t_min):
            pts.append([t, int(m.group(1)) / 1e3, int(m.group(2)), int(m.group(3)) / 1e3, int(m.group(4))])
    # The offset host - guest grows by the length of every pause (the guest clock stops with the VM), so each line
    # takes the smallest offset among itself and the next lines within a second: the least-delayed arrival after
    # it and before any later pause.
    delays = [p[0] - p[1] for p in pts]
    for i, p in enumerate(pts):
        p[0] = p[1] + min(delays[i:i + 10])
    return pts


def memsim_intervals(lines):
    """(start, end, ops) between consecutive memsim lines, host time."""
    out = []
    prev = None
    for t, g, ops, dt, rate in _memsim_points(lines):
        if prev is not None and ops >= prev[1] and t > prev[0]:
            out.append((prev[0], t, ops - prev[1]))
        prev = (t, ops)
    return out


def memsim_restore_intervals(lines, t_run, baseline_rate):
    """Intervals of work done after the restore. The first report after the restore closes an interval that began
    before the checkpoint (the guest's clock is paused while the VM is stopped and continues on restore), so its
    operations are split: the part done before the checkpoint ran at the baseline rate for the guest time between
    the interval start and the checkpoint, i.e. dt - (report time - t_run) seconds."""
    if t_run is None:
        return [], None
    out = []
    pts = _memsim_points(lines, t_run)
    if not pts:
        return [], None
    # First line: its arrival is the first response; its guest-clock position is at most that.
    first = lines[[i for i, (t, text) in enumerate(lines) if t >= t_run and MEMSIM_RX.search(text)][0]][0]
    prev = None
    for t, g, ops, dt, rate in pts:
        if prev is None:
            t = max(t, t_run)
            pre = max(0.0, dt - (t - t_run)) * baseline_rate
            done_after = max(0.0, rate * dt - pre)
            out.append((t_run, t, done_after))
        elif t > prev[0]:
            out.append((prev[0], t, max(0, ops - prev[1])))
        prev = (t, ops)
    return out, first


class Redis:
    name = "redis"
    unit = "requests/s"

    def __init__(self, mem, quick, value_size=1024, conns=8, depth=2, fraction=None):
        self.value_size = value_size
        frac = fraction or (0.25 if quick else 0.4)
        # ~100 bytes of redis overhead per key on top of the value.
        self.keys = int(mem_bytes(mem) * frac / (value_size + 100))
        self.conns, self.depth = conns, depth
        self.source_driver = None
        self.load_seconds = None

    def describe(self):
        return (f"redis-server (Debian) with {self.keys} keys of {self.value_size} random bytes loaded before the "
                f"checkpoint; host client: GET of uniformly random keys, {self.conns} connections x {self.depth} "
                f"outstanding, through QEMU user-mode networking (virtio-net, hostfwd)")

    def guest(self):
        return "redis", []

    def qemu_extra(self, port):
        return ["-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:6379",
                "-device", "virtio-net-pci,netdev=n0,romfile="]

    def wait_ready(self, serial, log):
        serial.wait_for(lambda line: "Ready to accept connections" in line, timeout=600)

    def start_source_load(self, port, log=print):
        last = [0.0]

        def progress(done, total):
            if time.monotonic() - last[0] > 10:
                last[0] = time.monotonic()
                log(f"redis load: {done}/{total} keys (connection 0)")

        self.load_seconds = redisdrv.load_dataset("127.0.0.1", port, self.keys, self.value_size, progress=progress)
        log(f"redis: loaded {self.keys} keys x {self.value_size} B in {self.load_seconds:.1f} s; "
            f"{redisdrv.command('127.0.0.1', port, 'DBSIZE').strip().decode()}")
        self.source_driver = redisdrv.Driver("127.0.0.1", port, self.keys, self.conns, self.depth)

    def stop_source_load(self):
        if self.source_driver:
            self.source_driver.stop()

    def source_intervals(self, serial):
        done, _ = self.source_driver.completions()
        return bins(done, done[0] if done else 0, 0.1)

    def source_record(self, serial):
        return {}

    def start_restore_load(self, port):
        return redisdrv.Driver("127.0.0.1", port, self.keys, self.conns, self.depth)

    def restore_result(self, drv, serial, t0, t_run, baseline_rate):
        drv.stop()
        done, lat = drv.completions()
        return {"intervals": bins(done, t0, 0.1), "first_response": done[0] if done else None,
                "latency_bins": latency_bins(done, lat, t0, 0.1), "errors": drv.errors,
                "reconnects": drv.reconnects, "first_connect": drv.first_connect}


def bins(times, t0, width):
    """(start, end, count) per `width` s bin from t0 to the last completion."""
    if not times:
        return []
    n = int((times[-1] - t0) / width) + 1
    counts = [0] * n
    for t in times:
        i = int((t - t0) / width)
        if 0 <= i < n:
            counts[i] += 1
    return [(t0 + i * width, t0 + (i + 1) * width, c) for i, c in enumerate(counts)]


def latency_bins(times, lat, t0, width):
    """(bin start relative to t0, p50 s, p99 s, count) for each non-empty bin."""
    groups = {}
    for t, l in zip(times, lat):
        groups.setdefault(int((t - t0) / width), []).append(l)
    out = []
    for i in sorted(groups):
        v = sorted(groups[i])
        out.append((i * width, v[len(v) // 2], v[min(len(v) - 1, int(len(v) * 0.99))], len(v)))
    return out
