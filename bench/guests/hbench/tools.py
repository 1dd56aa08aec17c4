"""The project's tools as the harness drives them: hlt-save qemu / relayout and hlt-restore qemu (CLI of issue 5),
and parsing of what they print (the --json object when the tool offers one, else its text)."""

import json
import os
import re
import subprocess

SIZE_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text):
    """'64M' -> 67108864; '0' or 'unlimited' -> 0."""
    if text in ("unlimited", "max", "0", ""):
        return 0
    m = re.fullmatch(r"(\d+)([kKmMgG]?)(i?B)?", text)
    if not m:
        raise ValueError(f"bad size {text!r}")
    return int(m.group(1)) * SIZE_SUFFIX[m.group(2).lower()]


class HaliteTools:
    def __init__(self, tools_dir):
        self.dir = tools_dir
        self.save = os.path.join(tools_dir, "hlt-save", "hlt-save")
        self.restore = os.path.join(tools_dir, "hlt-restore", "hlt-restore")
        # CMake puts tool binaries in build/tools/ (no per-tool subdirectory) in this project; accept both.
        for attr, name in (("save", "hlt-save"), ("restore", "hlt-restore")):
            if not os.access(getattr(self, attr), os.X_OK):
                setattr(self, attr, os.path.join(tools_dir, name))
        self._help = {}

    def help(self, tool, mode):
        key = (tool, mode)
        if key not in self._help:
            try:
                r = subprocess.run([getattr(self, tool), mode, "--help"], capture_output=True, text=True, timeout=20)
                self._help[key] = (r.returncode, r.stdout + r.stderr)
            except OSError as e:
                self._help[key] = (127, str(e))
        return self._help[key]

    def missing(self):
        """None when hlt-save qemu, hlt-save relayout and hlt-restore qemu all answer --help; else why not."""
        for tool, mode in (("save", "qemu"), ("restore", "qemu"), ("save", "relayout")):
            rc, text = self.help(tool, mode)
            if rc != 0 or "unknown mode" in text:
                return f"{getattr(self, tool)} {mode}: not available (exit {rc}: {text.strip()[:200]})"
        return None

    def restore_has(self, flag):
        return flag in self.help("restore", "qemu")[1]

    def save_cmd(self, qmp, out, live=False, block_pages=None, policy=None, rate_limit=None, then="cont",
                 parent=None):
        cmd = [self.save, "qemu", "--qmp", qmp, "-o", out, "--then", then]
        if parent:
            cmd += ["--parent", parent]
        if live:
            cmd.append("--live")
        if block_pages:
            cmd += ["--block-pages", str(block_pages)]
        if policy:
            cmd += ["--policy", policy]
        if rate_limit:
            cmd += ["--rate-limit", str(rate_limit)]
        return cmd

    def relayout_cmd(self, ckpt, out, trace):
        return [self.save, "relayout", ckpt, "-o", out, "--access-trace", trace]

    def restore_cmd(self, ckpt, qemu_argv, eager=False, loader=None, record_trace=None, rate_limit=None,
                    stats_json=None, placement=None, loader_threads=None):
        cmd = [self.restore, "qemu", ckpt]
        if loader_threads:
            cmd += ["--loader-threads", str(loader_threads)]
        if placement:
            cmd += ["--placement", placement]
        if eager:
            cmd.append("--eager")
        if loader:
            cmd += ["--loader", loader]
        if record_trace:
            cmd += ["--record-trace", record_trace]
        if rate_limit:
            cmd += ["--rate-limit", str(rate_limit)]
        if stats_json and self.restore_has("--stats-json"):
            cmd += ["--stats-json", stats_json]
        elif self.restore_has("--json"):
            cmd.append("--json")
        # QEMU's arguments after "--"; the binary comes from $HALITE_QEMU (set by the caller) unless the tool's
        # usage says the binary goes first.
        args = list(qemu_argv)
        if not self.restore_has("-- QEMU-BINARY") and not self.restore_has("-- qemu-system"):
            args = args[1:]
        return cmd + ["--"] + args


_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}


def parse_tool_output(text):
    """Flat dict of what a tool printed. A line holding a JSON object wins (merged, nested keys joined by '.');
    otherwise 'key: value', 'key=value' and 'key   value' lines, keys lowercased with spaces as '_'."""
    out = {}

    def flatten(prefix, obj):
        for k, v in obj.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                flatten(key + ".", v)
            else:
                out[key] = v

    found_json = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                flatten("", json.loads(line))
                found_json = True
            except ValueError:
                pass
    if found_json:
        return out
    for line in text.splitlines():
        for k, v in re.findall(r"([A-Za-z_][\w.\-]*)=(\S+)", line):
            out.setdefault(k.lower(), _value(v))
        m = re.match(r"\s*([A-Za-z][A-Za-z _\-/()]*?)\s*(?::|\s{2,})\s*(.+)$", line)
        if m and "=" not in m.group(2):
            key = re.sub(r"[\s\-/()]+", "_", m.group(1).strip().lower()).strip("_")
            out.setdefault(key, _value(m.group(2).strip()))
    return out


def _value(v):
    m = re.match(_NUM + r"\s*([a-zµ]+)?", v)
    if not m:
        return v
    num = float(m.group(1))
    unit = (m.group(2) or "").lower()
    if unit in _UNIT:
        return {"seconds": num * _UNIT[unit], "text": v}
    return num if m.end() == len(v) or not unit else {"number": num, "text": v}


def pick(stats, *names, seconds=False):
    """First value among keys containing any of `names` (substring match, in order of names)."""
    for name in names:
        for k, v in stats.items():
            if name in k:
                if isinstance(v, dict):
                    if seconds and "seconds" in v:
                        return v["seconds"]
                    if "number" in v:
                        return v["number"]
                    if "seconds" in v:
                        return v["seconds"]
                    continue
                if isinstance(v, (int, float)):
                    if seconds:
                        # Bare numbers: keys say their unit (_ms, _us, _s / _seconds).
                        if k.endswith("_ms"):
                            return v / 1e3
                        if k.endswith("_us"):
                            return v / 1e6
                        if k.endswith("_ns"):
                            return v / 1e9
                    return v
    return None
