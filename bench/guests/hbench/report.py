"""Tables (Markdown, CSV) and figures (PNG) from the recorded runs."""

import csv
import os

from . import machine as machinemod
from . import metrics, qemustart, workloads
from .runner import save_window
from .runner import METHODS, METHOD_TEXT
from .tools import pick

CSV_FIELDS = ["date", "mem", "workload", "method", "cache", "status", "checkpoint_bytes", "save_s",
              "time_to_running_s", "tool_time_to_running_s", "first_response_s", "t90_s", "work_s", "t_work_s",
              "t_done_s", "overhead_s", "overhead_lower_bound", "overhead_ratio_qemu_over_this", "overhead_fixed_work_s",
              "reference", "reference_rate", "reference_pct_of_source",
              "overhead_vs_source_s", "t90_vs_source_s", "blocking_faults", "bytes_read", "rss_guest_mib_10s",
              "rss_total_mib_10s", "thp_mib_10s", "baseline_rate", "rate_unit", "tool_exit", "tool_exit_after_s"]


def run_row(run, result, work_seconds, date, window):
    row = {"date": date, "mem": result["mem"], "workload": result["workload"], "method": run["method"],
           "cache": run["cache"], "status": run.get("status", "?"), "work_s": work_seconds,
           "baseline_rate": result.get("baseline_rate"), "rate_unit": "ops/s" if result["workload"] == "memsim"
           else "requests/s"}
    save = result["saves"].get(METHODS[run["method"]][0])
    if save:
        row["checkpoint_bytes"] = save.get("bytes")
        row["save_s"] = save.get("seconds")
    if run.get("status") != "ok":
        return row, None
    t0 = run["t0"]
    intervals = run["intervals"]
    if run.get("serial") is not None:  # memsim: recompute from the serial lines (the analysis may have changed)
        intervals, first = workloads.memsim_restore_intervals(run["serial"], run["t_run"], result["baseline_rate"])
        run["first_response"] = first
    src_base = result["baseline_rate"]
    stats = run.get("tool_stats") or {}
    # Completion: the guest runs with all of its memory. QEMU's eager restore: when it runs; hlt-restore: when
    # QEMU reported the migration completed (every page in). The overhead is taken one second after that.
    t_done = None
    if run["method"] == "qemu-eager":
        t_done = run["t_run"]
    elif stats.get("restore_wall_start_us") and stats.get("total_us"):
        t_done = stats["restore_wall_start_us"] / 1e6 + stats["total_us"] / 1e6
    t_end_data = run.get("t_end", t0 + window)
    t_c = (t_done + metrics.SETTLE) if t_done is not None else None
    # Reference ("never suspended") rate: the same guest in the ref_seconds after t_c, i.e. measured under the same
    # machine load as the restore (the source's rate, minutes earlier, differs by up to 2x on this machine).
    ref_rate, ref_from = None, None
    if t_c is not None and t_end_data - t_c >= 1.0:
        ref_rate = metrics.rate_over(intervals, t_c, min(t_end_data, t_c + metrics.REF_SECONDS))
        ref_from = "restored guest after completion"
    elif run.get("ref_window") and run.get("ref_complete"):
        ref_rate = metrics.rate_over(intervals, *run["ref_window"])
        ref_from = "restored guest after completion"
    base = ref_rate or src_base
    ref_from = ref_from if ref_rate else "source before the saves"
    end = min(t_end_data, t0 + window)
    s = metrics.summarize(intervals, t0, end, base, work_seconds)
    s_src = metrics.summarize(intervals, t0, end, src_base, work_seconds)
    # Halite's restore overhead evaluated at completion: wall time elapsed minus the time a never-suspended guest
    # needs for the work done meanwhile. Past completion both run at the same rate, so this is the extra wall time
    # for any fixed amount of work that ends later; computing it there keeps the machine's rate noise after
    # completion out of it. Without completion inside the record: a lower bound at the end of the record.
    t_eval = t_c if (t_c is not None and t_c <= t_end_data) else t_end_data
    overhead = (t_eval - t0) - metrics.work_between(intervals, t0, t_eval) / base if base else None
    row["overhead_lower_bound"] = t_c is None or t_c > t_end_data
    row["t_done_s"] = (t_done - t0) if t_done is not None else None
    row.update({
        "time_to_running_s": run["t_run"] - t0,
        "first_response_s": (run["first_response"] - t0) if run.get("first_response") else None,
        "t90_s": s["t90"],
        "t_work_s": s["t_work"],
        "overhead_s": overhead,
        "overhead_fixed_work_s": s["overhead"],
        "overhead_vs_source_s": s_src["overhead"],
        "t90_vs_source_s": s_src["t90"],
        "reference_rate": base,
        "reference": ref_from,
        "reference_pct_of_source": (base / src_base * 100) if src_base else None,
        "rss_guest_mib_10s": run["rss_guest_bytes"] / 2**20 if run.get("rss_guest_bytes") is not None else None,
        "rss_total_mib_10s": run["rss_total_bytes"] / 2**20 if run.get("rss_total_bytes") is not None else None,
        "thp_mib_10s": run["anon_huge_bytes"] / 2**20 if run.get("anon_huge_bytes") is not None else None,
        "tool_exit": run.get("tool_exit"),
        "tool_exit_after_s": run.get("tool_exit_after"),
    })
    if run["method"] == "qemu-eager":
        row["blocking_faults"] = 0
        row["bytes_read"] = save.get("bytes") if save else None
    else:
        row["blocking_faults"] = pick(stats, "faults_blocking", "blocking_faults", "blocking")
        row["bytes_read"] = pick(stats, "bytes_read", "read_bytes")
        row["tool_time_to_running_s"] = pick(stats, "time_to_running", "to_running", "running", seconds=True)
    return row, s


def _fmt(v, digits=2):
    if v is None or v == "":
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _mb(v):
    return "–" if v is None else f"{v / 1e6:,.0f}"


def build(results, args, machine, out_dir, stem, command, date, qemu_start=None):
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    series = {}  # (workload, cache) -> [(method, rates)]
    for res in results:
        if res.get("source_serial") is not None:  # memsim: recompute the baseline and the save-side points
            ivs = workloads.memsim_intervals(res["source_serial"])
            lo, hi = res["baseline_window"]
            res["baseline_rate"] = metrics.baseline(ivs, hi, hi - lo)
            for s in res["saves"].values():
                if "t_start" in s:
                    s["guest_during"] = save_window(ivs, s)
    for res in results:
        for run in res["runs"]:
            row, s = run_row(run, res, args.work_seconds, date, args.window)
            rows.append(row)
            if s:
                series.setdefault((res["workload"], run["cache"]), []).append((run["method"], s["rates"], run,
                                                                               row["reference_rate"]))
    # Overhead ratio against QEMU's own eager restore in the same run and cache state.
    for row in rows:
        ref = next((r for r in rows if r["workload"] == row["workload"] and r["cache"] == row["cache"]
                    and r["method"] == "qemu-eager" and r.get("overhead_s") is not None), None)
        if ref and row.get("overhead_s") and not row.get("overhead_lower_bound"):
            row["overhead_ratio_qemu_over_this"] = ref["overhead_s"] / row["overhead_s"] if row["overhead_s"] > 0 \
                else None

    with open(os.path.join(out_dir, stem + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in CSV_FIELDS})
    save_rows = []
    for res in results:
        base = res.get("baseline_rate") or 0
        for name, s in res["saves"].items():
            gd = s.get("guest_during") or {}
            save_rows.append({
                "workload": res["workload"], "checkpoint": name, "tool": s.get("tool"), "live": s.get("live"),
                "rate_limit": s.get("rate_limit"), "seconds": s.get("seconds"), "bytes": s.get("bytes"),
                "guest_stopped_s": s.get("guest_stopped_s"),
                "guest_mean_pct_during": (gd["mean_during"] / base * 100) if base and gd.get("mean_during") is not None
                else None,
                "guest_min_pct_during": (gd["min_during"] / base * 100) if base and gd.get("min_during") is not None
                else None})
    with open(os.path.join(out_dir, stem + "-saves.csv"), "w", newline="") as f:
        fields = ["workload", "checkpoint", "tool", "live", "rate_limit", "seconds", "guest_stopped_s", "bytes",
                  "guest_mean_pct_during", "guest_min_pct_during"]
        w = csv.DictWriter(f, fields)
        w.writeheader()
        for r in save_rows:
            w.writerow(r)

    figures = plot_restores(series, results, out_dir, stem, args) + plot_saves(results, out_dir, stem)

    md = [f"# Guest restore benchmark, {args.mem} guest{' (quick)' if args.quick else ''}, {date}", "",
          f"Produced by `{command}` (bench/guests/README.md explains every measure).", "",
          "## Machine", "", machinemod.markdown(machine), "",
          "## Setup", "",
          f"- Guest: {args.mem} RAM, 1 vCPU, `-cpu qemu64`, accelerator {args.accel}; Debian kernel + busybox "
          f"initramfs (scripts/build-guest --with-redis); machine options from guest/launch.py."
          + (f" **Aged guest**: {args.age} s of `memage` before the workload (processes allocating, touching and "
             f"freeing memory, files written and deleted; then long-running processes that fill most of the free "
             f"memory and free pages of it at random, one at a time, and stay"
             + (f"; options `{args.age_args}`" if getattr(args, "age_args", "") else "")
             + "), so the workload's memory is scattered over physical memory." if getattr(args, "age", 0) else "")
          + (f" hlt-restore's background loader: `--loader {args.loader}` for every lazy method."
             if getattr(args, "loader", None) else ""),
          f"- Each restore is observed for {args.window:.0f} s from its start (t0 = the restore command is "
          f"started). Fixed work for the overhead: what the never-suspended guest does in "
          f"{args.work_seconds:.0f} s.",
          f"- cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before the restore; warm: the checkpoint file read "
          f"into the page cache first. This machine is itself a VM: \"cold\" drops this kernel's cache only.",
          "- Methods:"]
    for m in args.methods:
        md.append(f"  - **{m}**: {METHOD_TEXT[m]}")
    md.append("")
    for res in results:
        md += [f"## {res['workload']}", "", f"Workload: {res['describe']}.", "",
               f"Never-suspended baseline: {res.get('baseline_rate', 0):,.0f} "
               f"{'ops/s' if res['workload'] == 'memsim' else 'requests/s'} (mean over the "
               f"{args.baseline_seconds:.0f} s before the first save).", ""]
        md += ["| method | cache | ckpt MB | save s | to running s | first response s | 90 % after s | "
               "overhead s | QEMU/this | ref % | blocking faults | MB read | guest RSS at 10 s MiB | status |",
               "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in rows:
            if r["workload"] != res["workload"]:
                continue
            t90 = _fmt(r.get("t90_s")) if r.get("t90_s") is not None or r["status"] != "ok" else f"> {args.window:.0f}"
            ovh = _fmt(r.get("overhead_s"))
            if r["status"] == "ok" and r.get("overhead_lower_bound") and r.get("overhead_s") is not None:
                ovh = f"> {r['overhead_s']:.2f}"
            md.append(f"| {r['method']} | {r['cache']} | {_mb(r.get('checkpoint_bytes'))} | {_fmt(r.get('save_s'))} | "
                      f"{_fmt(r.get('time_to_running_s'), 3)} | {_fmt(r.get('first_response_s'), 3)} | {t90} | "
                      f"{ovh} | {_fmt(r.get('overhead_ratio_qemu_over_this'), 1)} | "
                      f"{_fmt(r.get('reference_pct_of_source'), 0)}"
                      f"{'' if (r.get('reference') or '').startswith('restored') or r['status'] != 'ok' else '*'} | "
                      f"{_fmt(r.get('blocking_faults'), 0)} | {_mb(r.get('bytes_read'))} | "
                      f"{_fmt(r.get('rss_guest_mib_10s'), 0)} | {r['status']} |")
        md.append("")
        md += memory_section(res)
        srows = [s for s in save_rows if s["workload"] == res["workload"]]
        if srows:
            md += ["Saves (guest throughput during the save, % of baseline: mean / worst 100 ms):", "",
                   "| checkpoint | tool | live | QEMU rate limit | seconds | guest stopped s | MB | guest mean % | "
                   "guest worst % |",
                   "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for s in srows:
                rl = s["rate_limit"]
                md.append(f"| {s['checkpoint']} | {s['tool']} | {'yes' if s['live'] else 'no'} | "
                          f"{(f'{rl / 2**20:.0f} MiB/s' if rl else 'none') if s['live'] else 'none'} | "
                          f"{_fmt(s['seconds'])} | {_fmt(s.get('guest_stopped_s'), 3)} | "
                          f"{_mb(s['bytes'])} | {_fmt(s['guest_mean_pct_during'], 0)} | "
                          f"{_fmt(s['guest_min_pct_during'], 0)} |")
            md.append("")
        if any(r["method"] == "halite-learned" for r in res["runs"]):
            src = res.get("trace_source", "halite")
            md.append(f"- halite-learned: trace recorded on a restore of the {src} checkpoint"
                      + (" (QEMU then asks only for the first missed page of each block, so the trace holds one page "
                         "per block fetched: a weak basis for a new layout)" if src == "halite" else
                         " (block size 1: every page touched before the loader pushed it was requested)")
                      + (f", {res['saves']['learned'].get('trace_lines')} trace lines." if "learned" in res["saves"]
                         else "."))
            md.append("")
        md += profile_section(res, rows)
        for note in res.get("notes", []):
            md.append(f"- Note: {note}")
        if res.get("notes"):
            md.append("")
        for fig in figures:
            if f"-{res['workload']}-" in fig:
                md.append(f"![{fig}]({fig})")
        md.append("")
    if qemu_start:
        md += qemustart.markdown(qemu_start)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write("\n".join(md))
    return rows


def plot_restores(series, results, out_dir, stem, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []
    order = list(METHODS)
    for (wl, cache), lines in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(9, 4.8))
        for method, rates, run, ref in sorted(lines, key=lambda x: order.index(x[0])):
            xs = [i * metrics.GRID for i in range(len(rates))]
            # 500 ms centred moving average: the 100 ms rates of a TCG guest on a busy 2-core machine are noisy.
            sm = [sum(rates[max(0, i - 2):i + 3]) / len(rates[max(0, i - 2):i + 3]) for i in range(len(rates))]
            ax.plot(xs, [v / ref * 100 if ref else 0 for v in sm], label=method, linewidth=1.2)
        ax.axhline(100, color="grey", linestyle="--", linewidth=0.8, label="never suspended")
        ax.axhline(90, color="grey", linestyle=":", linewidth=0.8, label="90 %")
        ax.set_xlabel("seconds since the restore command started")
        ax.set_ylabel("throughput, % of the never-suspended rate")
        ax.set_title(f"{wl}, {args.mem} guest, {cache} cache: throughput after restore")
        ax.set_xlim(0, args.window)
        ax.set_ylim(0, 150)
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
        name = f"{stem}-{wl}-{cache}.png"
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        files.append(name)
        # Latency for redis.
        lat_lines = [(m, run.get("latency_bins")) for m, _, run, _ in lines if run.get("latency_bins")]
        if lat_lines:
            fig, ax = plt.subplots(figsize=(9, 4.2))
            for method, lb in sorted(lat_lines, key=lambda x: order.index(x[0])):
                ax.plot([b[0] for b in lb], [b[2] * 1e3 for b in lb], label=method, linewidth=1.0)
            ax.set_yscale("log")
            ax.set_xlabel("seconds since the restore command started")
            ax.set_ylabel("p99 latency per 100 ms, ms")
            ax.set_title(f"{wl}, {args.mem} guest, {cache} cache: request latency after restore")
            ax.set_xlim(0, args.window)
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
            name = f"{stem}-{wl}-{cache}-latency.png"
            fig.tight_layout()
            fig.savefig(os.path.join(out_dir, name), dpi=110)
            plt.close(fig)
            files.append(name)
    return files


def plot_saves(results, out_dir, stem):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []
    for res in results:
        saves = {n: s for n, s in res["saves"].items() if (s.get("guest_during") or {}).get("points")}
        if not saves:
            continue
        fig, ax = plt.subplots(figsize=(9, 4.2))
        for name, s in saves.items():
            pts = s["guest_during"]["points"]
            label = f"{name} ({s['seconds']:.1f} s)"
            ax.plot([p[0] for p in pts], [p[1] / 1e3 for p in pts], label=label, linewidth=1.0)
        if res.get("baseline_rate"):
            ax.axhline(res["baseline_rate"] / 1e3, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("seconds since the save started")
        ax.set_ylabel("k ops/s" if res["workload"] == "memsim" else "k requests/s")
        ax.set_title(f"{res['workload']}, {res['mem']} guest: guest throughput during each save")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        name = f"{stem}-{res['workload']}-saves.png"
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def memory_section(res):
    """Where the workload's memory is: memage's summary (aged guests), memsim's --frames lines (how scattered its
    working set is in guest-physical memory) and each hlt-save's page-table walk (address spaces, VA coverage)."""
    lines = [text.strip() for _, text in res.get("source_serial") or []
             if text.strip().startswith(("memage ", "memsim frames ", "memsim vmstat "))]
    walks = [(name, s["va_lines"]) for name, s in res["saves"].items() if s.get("va_lines")]
    if not lines and not walks:
        return []
    md = ["Guest memory (memage: free memory by the size of its free blocks; memsim frames: `groups64` = 64-frame "
          "groups of physical memory holding the set, `va_groups64` = 64-page groups of its virtual memory, so "
          "their ratio is what physical order costs against virtual order for that set; memsim vmstat: pages the "
          "kernel migrated or collapsed into huge pages since boot, at memsim's start and every 10 s):", "", "```"]
    md += lines
    for name, va in walks:
        md += [f"hlt-save {name}: {line}" for line in va]
    md += ["```", ""]
    return md


def _ms(v):
    return "–" if v is None else f"{v * 1e3:,.0f}"


def profile_section(res, rows):
    """Where the time to running and the overhead go, per run, from the harness's own timestamps and
    hlt-restore's statistics; and how the halite layout compares with the bar of issue 6 (3x less overhead than
    QEMU's eager restore, under 150 ms to running)."""
    out = ["Where the time goes (ms from t0 unless stated; hlt-restore's --stats-json):", "",
           "| method | cache | QEMU up (QMP ready) | restore call | channel connected | running | all pages in | "
           "blocking faults | blocking p50 / p99 | requests | request p50 / p99 | MB read |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in res["runs"]:
        if run.get("status") != "ok":
            continue
        t0 = run["t0"]
        st = run.get("tool_stats") or {}
        qmp_up = run.get("t_qmp", t0) - t0
        if run["method"] == "qemu-eager":
            loaded = (run.get("t_loaded") - t0) if run.get("t_loaded") else None
            out.append(f"| {run['method']} | {run['cache']} | {_ms(qmp_up)} | – | – | {_ms(run['t_run'] - t0)} | "
                       f"{_ms(loaded)} (loaded, then cont) | 0 | – | – | – | {_mb(res['saves']['qemu']['bytes'])} |")
            continue
        call = (st["restore_wall_start_us"] / 1e6 - t0) if st.get("restore_wall_start_us") else None
        conn = (call + st["start_to_connect_us"] / 1e6) if call is not None and "start_to_connect_us" in st else None
        loaded = (call + st["start_to_loaded_us"] / 1e6) if call is not None and st.get("start_to_loaded_us") else None
        bl = (f"{st['blocking_p50_us'] / 1e3:.2f} / {st['blocking_p99_us'] / 1e3:.2f}"
              if "blocking_p50_us" in st else "–")
        rq = (f"{st['request_latency_p50_us'] / 1e3:.2f} / {st['request_latency_p99_us'] / 1e3:.2f}"
              if "request_latency_p50_us" in st else "–")
        out.append(f"| {run['method']} | {run['cache']} | {_ms(qmp_up)} | {_ms(call)} | {_ms(conn)} | "
                   f"{_ms(run['t_run'] - t0)} | {_ms(loaded)} | {st.get('faults_blocking', '–')} | {bl} | "
                   f"{st.get('requests', '–')} | {rq} | {_mb(st.get('bytes_read_final', st.get('bytes_read')))} |")
    out.append("")
    verdicts = []
    for r in rows:
        if r["workload"] != res["workload"] or not r["method"].startswith("halite") or r["status"] != "ok":
            continue
        ratio = r.get("overhead_ratio_qemu_over_this")
        ttr = r.get("time_to_running_s")
        parts = []
        if ratio is None:
            parts.append("overhead ratio n/a" + (" (non-positive overhead: within noise of zero)"
                                                 if r.get("overhead_s") is not None and r["overhead_s"] <= 0 else ""))
        else:
            parts.append(f"overhead {ratio:.1f}x better than QEMU's eager restore "
                         f"({'meets' if ratio >= 3 else 'misses'} the 3x bar)")
        if ttr is not None:
            parts.append(f"{ttr * 1e3:.0f} ms to running ({'meets' if ttr < 0.150 else 'misses'} the 150 ms bar"
                         f"{'' if ttr < 0.150 else f' by {(ttr - 0.150) * 1e3:.0f} ms'})")
        verdicts.append(f"- {r['method']} ({r['cache']}): " + "; ".join(parts))
    if verdicts:
        out += ["Against the bar of issue 6:", ""] + verdicts + [""]
    return out
