"""Processes of a test: start with logs, run to completion, stop, and tell whether one still runs.

This machine's PID 1 (a container's) does not reap orphans: a process the test did not spawn itself (QEMU
started by hlt-restore, an image server) stays a zombie after it exits. Every check here counts a zombie
(/proc/PID/stat state Z) as stopped.
"""

import os
import signal
import subprocess

from .wait import WaitTimeout, read_text, wait_until


def pid_alive(pid):
    """False once the process has exited, also while it waits to be reaped (state Z)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pid(pid):
    """SIGKILL, if it still runs (a pid of 0 or less is ignored: never a process group)."""
    if pid and pid > 0 and pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_gone(pids, timeout):
    """Waits until none of `pids` runs (zombies count as gone); raises WaitTimeout otherwise."""
    pids = list(pids)
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout, f"processes {pids} to end", poll=0.02)


def stop_pid(pid, timeout=30.0, what="the process"):
    """SIGTERM until `pid` is gone (a server may refuse the first one while a client still uses it), at most
    `timeout` s; then SIGKILL it and return False. True when it stopped on SIGTERM."""
    def gone():
        if not pid_alive(pid):
            return True
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return True
        return False
    try:
        wait_until(gone, timeout, f"{what} (pid {pid}) to stop on SIGTERM", poll=0.5)
        return True
    except WaitTimeout:
        kill_pid(pid)
        return False


def stop_popen(p, timeout=30.0):
    """The same for a child of ours: SIGTERM until it exits (reaped), else SIGKILL. True when SIGTERM did it."""
    def gone():
        if p.poll() is not None:
            return True
        p.send_signal(signal.SIGTERM)
        return False
    try:
        wait_until(gone, timeout, f"pid {p.pid} to stop on SIGTERM", poll=0.5)
        return True
    except WaitTimeout:
        p.kill()
        p.wait()
        return False


def start_logged(cmd, out_path, env_vars=None):
    """Starts `cmd` with stdout to `out_path` and stderr to `out_path`.err (a QEMU it launches inherits no pipe
    the test would have to drain)."""
    with open(out_path, "wb") as out, open(out_path + ".err", "wb") as err:
        return subprocess.Popen(cmd, stdout=out, stderr=err, env=env_vars)


def run_tool(cmd, out_path, timeout, env_vars=None):
    """Runs `cmd` to completion with its output in files; returns (exit code, stdout text, stderr text)."""
    with open(out_path, "wb") as out, open(out_path + ".err", "wb") as err:
        p = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout, env=env_vars)
    return p.returncode, read_text(out_path), read_text(out_path + ".err")
