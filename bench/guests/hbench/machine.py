"""What the results ran on: CPU, cores, RAM, kernel, QEMU, accelerator, storage, load."""

import os
import platform
import re
import subprocess


def _first(path, pattern):
    try:
        with open(path) as f:
            for line in f:
                m = re.match(pattern, line)
                if m:
                    return m.group(1).strip()
    except OSError:
        pass
    return None


def _run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def describe(accel="tcg", qemu="qemu-system-x86_64", path="."):
    mem_kib = _first("/proc/meminfo", r"MemTotal:\s+(\d+)")
    qemu_ver = _run([qemu, "--version"]).splitlines()
    qemu_pkg = _run(["dpkg-query", "-W", "-f=${Version}", "qemu-system-x86"])
    src = _run(["df", "--output=source,fstype", path]).splitlines()
    hv = _first("/proc/cpuinfo", r"flags\s*:\s*(.*)") or ""
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = []
    return {
        "cpu": _first("/proc/cpuinfo", r"model name\s*:\s*(.*)") or platform.processor(),
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem_kib) / 1048576, 1) if mem_kib else None,
        "kernel": platform.release(),
        "os": _first("/etc/os-release", r'PRETTY_NAME="?([^"]*)"?'),
        "qemu": (qemu_ver[0] if qemu_ver else "?") + (f" (Debian {qemu_pkg})" if qemu_pkg else ""),
        "accel": accel,
        "storage": " ".join(src[1].split()) if len(src) > 1 else "?",
        "virtualized": "hypervisor" in hv.split(),
        "loadavg_at_start": " ".join(load),
    }


def markdown(m):
    rows = [
        ("CPU", f"{m['cpu']}, {m['cores']} cores" + (" (a VM: the host is itself virtualized)" if m["virtualized"]
                                                     else "")),
        ("RAM", f"{m['ram_gib']} GiB"),
        ("OS / kernel", f"{m['os']} / {m['kernel']}"),
        ("QEMU", m["qemu"]),
        ("Accelerator", m["accel"] + (" (this machine's /dev/kvm cannot run the guest; see "
                                      "shared/notes/qemu-migration.md)" if m["accel"] == "tcg" else "")),
        ("Checkpoint storage", m["storage"]),
        ("Load average at start", m["loadavg_at_start"]),
    ]
    out = ["| | |", "| --- | --- |"]
    out += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out)
