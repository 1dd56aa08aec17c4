"""Orchestration: boot the source guest, take every checkpoint, restore each one with each method, record."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from hltharness import qmp as qmpmod

from . import metrics, serial as serialmod, workloads
from .tools import parse_tool_output, pick

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "guest"))
import launch  # noqa: E402  (the one place that defines the QEMU machine)

UNLIMITED = 1 << 40  # QEMU's max-bandwidth for "no limit"

# name -> (checkpoint it restores, restore flags). Order = table order.
METHODS = {
    "qemu-eager": ("qemu", {}),
    "hlt-eager": ("halite", {"eager": True}),
    "hlt-eager-channel": ("halite", {"eager": True, "placement": "channel"}),
    "demand": ("page", {"loader": "off"}),
    "physical": ("physical", {}),
    "halite-channel": ("halite", {"placement": "channel"}),
    "halite": ("halite", {}),
    "halite-2loaders": ("halite", {"loader_threads": 2}),
    "halite-live": ("live", {}),
    "halite-learned": ("learned", {}),
    "halite-chain": ("child", {}),
}
METHOD_TEXT = {
    "halite-chain": "incremental child of the halite checkpoint (`hlt-save qemu --parent`, saved a few seconds after "
                    "it from the same running guest), lazy restore of the chain of two files",
    "qemu-eager": "QEMU's own restore of its own migration file (`migrate exec:cat>F`, then `-incoming defer` + "
                  "`migrate-incoming exec:cat F` + `cont`)",
    "hlt-eager": "`hlt-restore qemu --eager` of the halite checkpoint (pc.ram placed through QEMU's own "
                 "userfaultfd by several threads while the guest is held paused, then `cont`; `--placement auto`, "
                 "the record says which)",
    "hlt-eager-channel": "`hlt-restore qemu --eager --placement channel` of the halite checkpoint (a precopy load: "
                         "every page in QEMU's stream, then the device state)",
    "demand": "pure demand paging: checkpoint with `--block-pages 1 --policy physical`, restored with `--loader off`",
    "physical": "blocks of pages in physical order (`--policy physical`), lazy restore with the loader",
    "halite-channel": "halite checkpoint, lazy restore with every page in QEMU's migration stream "
                      "(`--placement channel`: QEMU's one thread places them 4 KiB at a time)",
    "halite": "halite layout from a stop-and-save (`hlt-save qemu`), lazy restore (pages placed directly through "
              "QEMU's own userfaultfd when `hlt-restore` may: `--placement auto`; the record says which)",
    "halite-2loaders": "the halite checkpoint restored lazily with `--loader-threads 2` (two threads stream the "
                       "restore order)",
    "halite-live": "halite layout from a `--live` save (background snapshot: save-time write order), lazy restore",
    "halite-learned": "halite checkpoint re-planned by `hlt-save relayout --access-trace` from a trace recorded by "
                      "`hlt-restore qemu --record-trace` on an earlier restore (of the page-granular checkpoint, so "
                      "that every page touched is requested), lazy restore",
}
# checkpoint name -> hlt-save options
HLT_SAVES = {
    "halite": {},
    "physical": {"policy": "physical"},
    "page": {"policy": "physical", "block_pages": 1},
}


class Ctx:
    def __init__(self, a, tools, raw, log):
        self.a = a
        self.tools = tools
        self.raw = raw
        self.log = log
        self.sock_dir = f"/tmp/hbg-{os.getpid()}"
        os.makedirs(self.sock_dir, exist_ok=True)


def qemu_argv(ctx, wl, serial_sock, qmp=None, extra=()):
    workload, args = wl.guest()
    # An aged guest (--age S): memage fragments physical memory before the workload starts (guest/memage.c). The
    # kernel command line is not migrated, so the restores carry it too without running it again.
    append = f"hlt.age={int(ctx.a.age)}" if getattr(ctx.a, "age", 0) else ""
    if append and getattr(ctx.a, "age_args", ""):
        append += f" hlt.age_args={ctx.a.age_args}"
    argv = launch.qemu_argv(mem=ctx.a.mem, workload=workload, workload_args=args, serial_log="unused", qmp=qmp,
                            accel=ctx.a.accel, gdir=ctx.a.guest_dir, extra=list(extra), append=append)
    i = argv.index("-serial")
    argv[i + 1] = serialmod.serial_arg(serial_sock)
    return argv


def drop_caches():
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def warm_file(path):
    with open(path, "rb") as f:
        while f.read(1 << 22):
            pass


def kill_pid(pid, grace=5.0):
    """SIGTERM, then SIGKILL, one process we started (by its id)."""
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_proc(proc, timeout):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def guest_rss(pid, mem):
    """(guest RAM mapping RSS bytes, whole process RSS bytes) from /proc/PID/smaps: the RAM is the largest
    mapping at least as big as the guest's memory."""
    best = (0, 0)
    total = 0
    size = rss = 0
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                    if size >= mem and size > best[0]:
                        best = (size, rss)
                    lo, hi = line.split()[0].split("-")
                    size, rss = int(hi, 16) - int(lo, 16), 0
                elif line.startswith("Rss:"):
                    kb = int(line.split()[1]) * 1024
                    rss += kb
                    total += kb
        if size >= mem and size > best[0]:
            best = (size, rss)
    except OSError:
        return None, None
    return best[1], total


def anon_huge(pid):
    """Bytes of the process in transparent huge pages (QEMU asks for them on guest RAM; postcopy turns them off
    while it places pages, so a lazily restored guest runs on 4 KiB host pages)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def read_pidfile(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    return None


class Source:
    """The never-suspended guest: boots, runs the workload, is checkpointed by every method in turn."""

    def __init__(self, ctx, wl, d):
        self.ctx, self.wl, self.d = ctx, wl, d
        self.port = workloads.free_port()
        self.ser_path = os.path.join(ctx.sock_dir, f"{wl.name}-src.ser")
        self.qmp_path = os.path.join(ctx.sock_dir, f"{wl.name}-src.qmp")
        self.tool_qmp = os.path.join(ctx.sock_dir, f"{wl.name}-src-tool.qmp")
        extra = wl.qemu_extra(self.port) + ["-qmp", f"unix:{self.tool_qmp},server=on,wait=off"]
        self.argv = qemu_argv(ctx, wl, self.ser_path, qmp=self.qmp_path, extra=extra)
        ctx.log("source: " + shlex.join(self.argv))
        self.t_boot = time.time()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=open(os.path.join(d, "src.qemu.log"), "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.serial = serialmod.SerialReader(self.ser_path, os.path.join(d, "src.serial.log"))
        self.q = qmpmod.Qmp.connect(self.qmp_path)

    def start(self):
        self.set_bandwidth(0)
        self.wl.wait_ready(self.serial, self.ctx.log)
        self.ctx.log(f"source: workload ready {time.time() - self.t_boot:.1f} s after QEMU start")
        if self.wl.name == "redis":
            self.wl.start_source_load(self.port, log=self.ctx.log)
        else:
            self.wl.start_source_load(self.port)

    def intervals(self):
        return self.wl.source_intervals(self.serial)

    def set_bandwidth(self, rate):
        """QEMU's migration rate limit (max-bandwidth, bytes/s; 0 = unlimited). QEMU's default is 128 MiB/s, and
        hlt-save does not change it: every stop-and-save here runs unthrottled (as `virsh save` does), the live
        saves at each rate of --live-rates."""
        self.q.command("migrate-set-parameters", **{"max-bandwidth": rate or UNLIMITED})

    def qemu_save(self, path):
        """QEMU's own save: stop, migrate to a file through exec:cat, cont."""
        q = self.q
        t0 = time.time()
        q.command("stop")
        t_stopped = time.time()
        q.command("migrate", uri="exec:cat > " + shlex.quote(path))
        while True:
            st = q.command("query-migrate")
            if st.get("status") in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.01)
        t1 = time.time()
        q.command("cont")
        if st.get("status") != "completed":
            raise RuntimeError(f"QEMU save: migration {st.get('status')}: {st.get('error-desc', '')}")
        return {"path": path, "t_start": t0, "t_end": t1, "seconds": t1 - t0, "bytes": os.path.getsize(path),
                "live": False, "tool": "qemu", "qemu_total_time_ms": st.get("total-time"), "guest_stopped_s": t1 - t0,
                "stop_command_s": t_stopped - t0}

    def hlt_save(self, path, name, live=False, rate_limit=0, **opts):
        self.set_bandwidth(rate_limit)
        cmd = self.ctx.tools.save_cmd(self.tool_qmp, path, live=live, **opts)
        logp = os.path.join(self.d, f"save-{name}.log")
        self.ctx.log("save: " + shlex.join(cmd))
        t0 = time.time()
        with open(logp, "w") as out:
            r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
        t1 = time.time()
        self.set_bandwidth(0)
        text = open(logp).read()
        if r.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}: {text.strip()[-600:]}")
        stats = parse_tool_output(text)
        # The page-table walk's summary (address spaces found, VA coverage), as printed, for the report.
        va_lines = [line.strip() for line in text.splitlines() if line.strip().startswith("va ")]
        return {"va_lines": va_lines,
                "path": path, "t_start": t0, "t_end": t1, "seconds": t1 - t0, "bytes": os.path.getsize(path),
                "live": live, "rate_limit": rate_limit, "tool": "hlt-save", "cmd": shlex.join(cmd), "stats": stats,
                "tool_seconds": pick(stats, "seconds", seconds=True),
                "guest_stopped_s": pick(stats, "guest_stopped", seconds=True)}

    def stop(self):
        try:
            self.wl.stop_source_load()
        finally:
            try:
                self.q.command("quit", timeout=5)
            except (qmpmod.QmpError, OSError, TimeoutError):
                pass
            if wait_proc(self.proc, 10) is None:
                kill_pid(self.proc.pid)
                self.proc.wait()
            self.q.close()
            self.serial.close()


def restore_run(ctx, wl, d, method, ckpt, cache, baseline_rate, label=None, record_trace=None):
    """One restore, observed for ctx.a.window seconds. Returns the run record (also written as JSON)."""
    a = ctx.a
    label = label or f"{method}-{cache}"
    rec = {"method": method, "cache": cache, "label": label, "checkpoint": ckpt, "status": "ok"}
    if cache == "cold":
        drop_caches()
    else:
        warm_file(ckpt)
    port = workloads.free_port()
    ser_path = os.path.join(ctx.sock_dir, f"{wl.name}-{label}.ser")
    my_qmp = os.path.join(ctx.sock_dir, f"{wl.name}-{label}.qmp")
    pidfile = os.path.join(ctx.sock_dir, f"{wl.name}-{label}.pid")
    for p in (ser_path, my_qmp, pidfile):
        if os.path.exists(p):
            os.unlink(p)
    # Our own QMP monitor with wait=on: QEMU waits for us before anything else, so no event can be missed.
    # (-chardev + -mon rather than -qmp: hlt-restore adds a -qmp of its own and refuses the user's.)
    extra = wl.qemu_extra(port) + ["-chardev", f"socket,id=hbqmp,path={my_qmp},server=on,wait=on",
                                   "-mon", "chardev=hbqmp,mode=control", "-pidfile", pidfile]
    base_argv = qemu_argv(ctx, wl, ser_path, extra=extra)
    tool = proc = q = ser = handle = None
    tool_log = os.path.join(d, f"restore-{label}.log")
    stats_path = os.path.join(d, f"restore-{label}.stats.json")
    t_tool_exit = None
    try:
        if method == "qemu-eager":
            argv = base_argv + ["-incoming", "defer"]
            rec["cmd"] = shlex.join(argv)
            t0 = time.time()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(tool_log, "w"),
                                    stderr=subprocess.STDOUT, start_new_session=True)
            ser = serialmod.SerialReader(ser_path, os.path.join(d, f"restore-{label}.serial.log"))
            q = qmpmod.Qmp.connect(my_qmp)
            rec["t_qmp"] = time.time()
            q.command("migrate-set-capabilities", capabilities=[{"capability": "events", "state": True}])
            q.command("migrate-incoming", uri="exec:cat " + shlex.quote(ckpt))
            deadline = time.monotonic() + 1800
            while True:
                q.poll_events(0.2)
                done = [e for _, e in q.events if e["event"] == "MIGRATION"
                        and e["data"]["status"] in ("completed", "failed")]
                if done:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"QEMU incoming migration did not complete (exit {proc.poll()})")
            if done[0]["data"]["status"] != "completed":
                raise RuntimeError("QEMU incoming migration failed")
            rec["t_loaded"] = max(t for t, e in q.events if e["event"] == "MIGRATION")
            q.command("cont")
            t_run = q.wait_event("RESUME", 30)
            qemu_pid = proc.pid
        else:
            flags = METHODS[method][1]
            # --loader off (all lazy methods): only the guest's own faults bring blocks in, so the blocking faults
            # measure the layout alone, not a race with the background loader.
            loader = flags.get("loader") or (None if flags.get("eager") else getattr(ctx.a, "loader", None))
            cmd = ctx.tools.restore_cmd(ckpt, base_argv, eager=flags.get("eager", False), loader=loader,
                                        record_trace=record_trace, stats_json=stats_path,
                                        placement=flags.get("placement"), loader_threads=flags.get("loader_threads"))
            rec["cmd"] = shlex.join(cmd)
            t0 = time.time()
            tool = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(tool_log, "w"),
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, HALITE_QEMU=shutil.which(base_argv[0]) or base_argv[0]))
            ser = serialmod.SerialReader(ser_path, os.path.join(d, f"restore-{label}.serial.log"))
            q = qmpmod.Qmp.connect(my_qmp, timeout=60, alive=lambda: tool.poll() is None)
            rec["t_qmp"] = time.time()
            qemu_pid = read_pidfile(pidfile)
            deadline = time.monotonic() + 1800
            t_run = None
            while t_run is None:
                q.poll_events(0.05)
                t_run = q.event_time("RESUME")
                if t_run is None and tool.poll() is not None:
                    raise RuntimeError(f"hlt-restore exited {tool.returncode} before the guest ran: "
                                       f"{open(tool_log).read().strip()[-800:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError("guest not running after 1800 s")
        # The client starts when the guest runs: connections opened while the VM is still stopped lose their SYN
        # in user-mode networking and wait for a retransmission (0.6 to 6 s measured), which would measure slirp.
        handle = wl.start_restore_load(port)
        rec.update(t0=t0, t_run=t_run, qemu_pid=qemu_pid, t_load_started=time.time())
        ctx.log(f"  {label}: running after {t_run - t0:.3f} s")
        rss_at = t0 + 10.0
        end = t0 + a.window
        # After the window: once the restore is complete (hlt-restore exited: every page is in), the same guest
        # runs for ref_seconds more; its rate then is the reference "never-suspended" rate measured under the same
        # machine load as the restore (the source's rate, minutes earlier, varies by tens of % here).
        ref = None
        while True:
            now = time.time()
            if ref is None and now >= end:
                complete = tool is None or tool.poll() is not None
                if complete or now >= end + a.tool_grace:
                    ref = (now, now + a.ref_seconds)
                    rec["ref_window"] = list(ref)
                    rec["ref_complete"] = complete
            if ref is not None and now >= ref[1]:
                break
            if "rss_guest_bytes" not in rec and now >= rss_at:
                rec["rss_guest_bytes"], rec["rss_total_bytes"] = guest_rss(qemu_pid, workloads.mem_bytes(a.mem))
                rec["anon_huge_bytes"] = anon_huge(qemu_pid)
                rec["rss_at"] = now - t0
            if tool is not None and t_tool_exit is None and tool.poll() is not None:
                t_tool_exit = time.time()
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"QEMU exited {proc.returncode} during the observation")
            try:
                q.poll_events(0.05)
            except qmpmod.QmpError:
                raise RuntimeError("QEMU went away during the observation")
        rec["t_end"] = time.time()
        res = wl.restore_result(handle, ser, t0, t_run, baseline_rate)
        handle = None
        rec.update(res)
    except Exception as e:  # noqa: BLE001  (a failed run is a row in the table, not the end of the benchmark)
        why = str(e)
        if tool is not None and tool.poll() is not None:
            why += f" (hlt-restore exited {tool.returncode}: {open(tool_log).read().strip()[-400:]})"
        rec["status"] = f"failed: {why}"
        ctx.log(f"  {label}: FAILED: {why}")
        if handle is not None and hasattr(handle, "stop"):
            handle.stop()
    finally:
        if tool is not None and tool.poll() is None and rec["status"] == "ok":
            # hlt-restore exits once every page is in; give it time to finish (its statistics come at the end).
            deadline = time.monotonic() + a.tool_grace
            while tool.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if tool.poll() is not None:
                t_tool_exit = time.time()
        if tool is not None and tool.poll() is None:
            rec["tool_still_running"] = True
            # Ask for a clean end first (the tool may print its statistics on the way out).
            tool.send_signal(signal.SIGINT)
            wait_proc(tool, 3)
        if tool is not None and t_tool_exit is None and tool.poll() is not None and not rec.get("tool_still_running"):
            t_tool_exit = time.time()
        if q is not None:
            try:
                q.command("quit", timeout=5)
            except (qmpmod.QmpError, OSError, TimeoutError):
                pass
            q.close()
        qemu_pid = rec.get("qemu_pid") or read_pidfile(pidfile, 0.1)
        if proc is not None and wait_proc(proc, 10) is None:
            kill_pid(proc.pid)
            proc.wait()
        if tool is not None:
            if wait_proc(tool, 10) is None:
                kill_pid(tool.pid)
                tool.wait()
            rec["tool_exit"] = tool.returncode
        if qemu_pid:
            kill_pid(qemu_pid, 2)
        if ser is not None:
            ser.close()
    if tool is not None:
        text = open(tool_log).read()
        rec["tool_stats"] = parse_tool_output(text)
        if os.path.exists(stats_path):
            try:
                with open(stats_path) as f:
                    rec["tool_stats"].update(json.load(f))
            except ValueError as e:
                rec["tool_stats_error"] = str(e)
        rec["tool_exit_after"] = (t_tool_exit - rec["t0"]) if t_tool_exit and "t0" in rec else None
    with open(os.path.join(d, f"run-{label}.json"), "w") as f:
        json.dump(rec, f)
    return rec


def save_window(intervals, s, before=2.0, after=3.0):
    """Throughput around a save: rate points relative to the save start, and the mean during the save."""
    pts = [((a + b) / 2 - s["t_start"], n / (b - a)) for a, b, n in intervals
           if b > a and s["t_start"] - before <= (a + b) / 2 <= s["t_end"] + after]
    during = metrics.rate_over(intervals, s["t_start"], s["t_end"]) if s["t_end"] > s["t_start"] else None
    in_save = [r for t, r in pts if 0 <= t <= s["t_end"] - s["t_start"]]
    return {"points": pts, "mean_during": during, "min_during": min(in_save) if in_save else None}


def run_workload(ctx, wl):
    a = ctx.a
    d = os.path.join(ctx.raw, wl.name)
    ck = os.path.join(d, "ckpt")
    os.makedirs(ck, exist_ok=True)
    methods = a.methods
    needed = {METHODS[m][0] for m in methods}
    result = {"workload": wl.name, "describe": wl.describe(), "mem": a.mem, "saves": {}, "runs": [], "notes": []}
    hlt_ok = ctx.tools_missing is None and any(m != "qemu-eager" for m in methods)
    if not hlt_ok:
        skipped = [m for m in methods if m != "qemu-eager"]
        if skipped:
            result["notes"].append(f"not run ({', '.join(skipped)}): {ctx.tools_missing}")
        methods = [m for m in methods if m == "qemu-eager"]
        needed = {METHODS[m][0] for m in methods}

    src = Source(ctx, wl, d)
    saves = result["saves"]
    try:
        src.start()
        time.sleep(a.warmup + a.baseline_seconds)
        t_base_end = time.time()
        base = metrics.baseline(src.intervals(), t_base_end, a.baseline_seconds)
        result["baseline_rate"] = base
        result["baseline_window"] = [t_base_end - a.baseline_seconds, t_base_end]
        ctx.log(f"{wl.name}: baseline {base:,.0f} {wl.unit} over {a.baseline_seconds:.0f} s")
        if "qemu" in needed:
            saves["qemu"] = src.qemu_save(os.path.join(ck, "qemu.mig"))
            ctx.log(f"save qemu: {saves['qemu']['seconds']:.2f} s, {saves['qemu']['bytes'] / 1e6:.0f} MB")
            time.sleep(a.settle)
        if hlt_ok:
            for name, opts in HLT_SAVES.items():
                if name in needed or (name in ("halite", "page") and "learned" in needed):
                    saves[name] = src.hlt_save(os.path.join(ck, f"{name}.hlt"), name, **opts)
                    ctx.log(f"save {name}: {saves[name]['seconds']:.2f} s, {saves[name]['bytes'] / 1e6:.0f} MB")
                    time.sleep(a.settle)
            # The second save of the same guest as an incremental child of the first (issue 12): its size and time
            # against the full halite save are in the saves table; method halite-chain restores it.
            if "halite" in saves and ("child" in needed or a.save_side):
                saves["child"] = src.hlt_save(os.path.join(ck, "child.hlt"), "child", parent=saves["halite"]["path"])
                ctx.log(f"save child: {saves['child']['seconds']:.2f} s, {saves['child']['bytes'] / 1e6:.0f} MB "
                        f"(full halite: {saves['halite']['seconds']:.2f} s, {saves['halite']['bytes'] / 1e6:.0f} MB)")
                time.sleep(a.settle)
            # Live saves: the first rate limit gives the checkpoint of method halite-live; the others only measure
            # the guest's throughput during the save and are deleted.
            rates = a.live_rates if ("live" in needed or a.save_side) else []
            for i, rate in enumerate(rates):
                name = "live" if i == 0 else f"live-{rate}"
                try:
                    s = src.hlt_save(os.path.join(ck, f"{name}.hlt"), name, live=True,
                                     rate_limit=rate)
                    saves[name] = s
                    ctx.log(f"save {name}: {s['seconds']:.2f} s, {s['bytes'] / 1e6:.0f} MB")
                    if i > 0:
                        os.unlink(s["path"])
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    result["notes"].append(f"live save at rate {rate}: {e}")
                    ctx.log(f"save {name}: FAILED {e}")
                time.sleep(a.settle)
        ivs = src.intervals()
        for name, s in saves.items():
            s["guest_during"] = save_window(ivs, s)
            if base:
                md = s["guest_during"]["mean_during"]
                ctx.log(f"  during save {name}: {md / base * 100 if md is not None else float('nan'):.0f} % of baseline")
        result["source_intervals"] = ivs
        result.update(wl.source_record(src.serial))
    finally:
        src.stop()

    # A trace for the learned layout. QEMU asks only for the first page it misses in a block (the rest of the block
    # comes with it), so a trace recorded on the halite checkpoint holds one page per block fetched, and a layout
    # re-planned from it cannot group what the guest touched next. The trace is therefore recorded on a restore of
    # the page-granular checkpoint (block size 1, loader on): every page the guest touches before the loader
    # pushes it is requested, in the guest's first-touch order.
    if "learned" in needed and "halite" in saves:
        trace = os.path.join(d, "restore-trace.txt")
        src_name = "page" if "page" in saves else "halite"
        ctx.log(f"restore {src_name} (cold) recording the access trace")
        rec = restore_run(ctx, wl, d, "physical" if src_name == "page" else "halite", saves[src_name]["path"], "cold",
                          base, label="trace-recording", record_trace=trace)
        result["trace_source"] = src_name
        result["trace_run"] = {k: rec.get(k) for k in ("status", "t0", "t_run", "tool_exit")}
        if os.path.exists(trace) and os.path.getsize(trace) > 0:
            out = os.path.join(ck, "learned.hlt")
            cmd = ctx.tools.relayout_cmd(saves["halite"]["path"], out, trace)
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            open(os.path.join(d, "save-learned.log"), "w").write(r.stdout + r.stderr)
            if r.returncode == 0:
                saves["learned"] = {"path": out, "seconds": time.time() - t0, "bytes": os.path.getsize(out),
                                    "live": False, "tool": "hlt-save relayout", "cmd": shlex.join(cmd),
                                    "trace_lines": sum(1 for _ in open(trace))}
                ctx.log(f"relayout: {saves['learned']['seconds']:.2f} s, {saves['learned']['trace_lines']} trace lines")
            else:
                result["notes"].append(f"relayout failed ({r.returncode}): {(r.stdout + r.stderr).strip()[-400:]}")
        else:
            result["notes"].append("the trace-recording restore wrote no trace; halite-learned not run")

    for cache in a.caches:
        for m in methods:
            ck_name = METHODS[m][0]
            if ck_name not in saves:
                if m != "halite-learned" or "learned" not in needed:
                    continue
                result["runs"].append({"method": m, "cache": cache, "status": "not run: no checkpoint"})
                continue
            ctx.log(f"restore {wl.name} {m} ({cache})")
            rec = restore_run(ctx, wl, d, m, saves[ck_name]["path"], cache, base)
            result["runs"].append(rec)

    if not a.keep_checkpoints:
        shutil.rmtree(ck, ignore_errors=True)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(result, f)
    return result
