"""What every guest test script shares: its outcomes (pass, Fail, Skip = exit 77 said loudly), timestamped log
lines, the small test guest's memcheck output, and the run of one scenario with its scratch outputs handled.
"""

import re
import signal
import subprocess
import sys
import time

from .wait import WaitTimeout

# The memcheck workload of the small test guest (guest/launch.py) prints one line a pass.
OK_RX = r"memcheck pass=\d+ .* OK"
FAIL_RX = r" BAD |Kernel panic|HLT-GUEST EXIT"


class Skip(Exception):
    """The scenario cannot run here (a missing tool or permission); the message says why."""


class Fail(Exception):
    """The scenario ran and something it checks is wrong."""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def skip_loudly(program, why):
    print("*" * 70 + f"\n{program}: SKIPPED: {why}\n" + "*" * 70, flush=True)
    return 77


def pass_numbers(text):
    """memcheck's completed OK passes, in order."""
    return [int(m.group(1)) for m in re.finditer(r"memcheck pass=(\d+) .* OK", text)]


def run_scenario(program, name, body, scratch, cleanup=lambda: None):
    """Runs `body()` and returns the exit code: 0 pass (the large scratch outputs removed), 1 fail (kept, and
    the output says where), 77 skipped. SIGTERM (ctest's timeout) unwinds, so `cleanup` still kills what the
    scenario started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    passed = False
    try:
        t0 = time.monotonic()
        body()
        passed = True
        log(f"PASS {name} ({time.monotonic() - t0:.1f} s)")
        return 0
    except Skip as e:
        passed = True  # nothing of interest was written
        return skip_loudly(program, str(e))
    except (Fail, WaitTimeout, TimeoutError, RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"FAIL {name}: {e}")
        return 1
    finally:
        cleanup()
        scratch.finish(passed)
