"""The clock seam of the tests: wait for a condition with a deadline instead of sleeping a fixed time.

Every wait here polls a condition (a file appears, a log matches, a status-file field has a value, a process is
gone) and returns as soon as it holds, so a test takes as long as the thing it waits for and no longer; the
deadline only bounds a wait that would otherwise hang. A fixed sleep stays only where the test means a moment
(kill the restore 0.3 s into the loader), never where it waits for something to happen.
"""

import json
import os
import re
import time


class WaitTimeout(TimeoutError):
    """The condition did not hold before the deadline; the message says what was awaited."""


def wait_until(cond, timeout, what, poll=0.05, give_up=None):
    """Calls `cond()` until it returns something truthy, and returns that value. `give_up`: optional callable
    checked between polls; when it returns a message (a str), stops at once with that message (the process that
    should make the condition true has died, say). Raises WaitTimeout naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if give_up is not None:
            why = give_up()
            if why:
                raise WaitTimeout(f"gave up waiting for {what}: {why}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{what}: not within {timeout:g} s")
        time.sleep(poll)


def poll_until(cond, timeout, poll=0.05):
    """wait_until for a caller that says itself what went wrong: returns cond()'s value, falsy when the deadline
    passed first."""
    try:
        return wait_until(cond, timeout, "", poll=poll)
    except WaitTimeout:
        return cond()


def read_text(path):
    """The file's text ('' while it does not exist): logs are read whole on every poll."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def wait_for_path(path, timeout, give_up=None, poll=0.01):
    """Returns once `path` exists (a socket QEMU creates, a FUSE mount's file)."""
    return wait_until(lambda: os.path.exists(path), timeout, f"{path} to appear", poll=poll, give_up=give_up)


def wait_for_match(path, pattern, timeout, give_up=None, poll=0.01):
    """The first match of the regular expression `pattern` in the file at `path` (a log line)."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return wait_until(lambda: rx.search(read_text(path)), timeout, f"a line matching {rx.pattern!r} in {path}",
                      poll=poll, give_up=give_up)


def read_json_field(path, key):
    """The value of `key` in the JSON object at `path`, or None while it is absent or half-written."""
    try:
        with open(path) as f:
            return json.load(f).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def wait_for_json_field(path, key, accept, timeout, give_up=None, poll=0.05):
    """Waits until the status file `path` holds `key` with a value for which `accept(value)` is true; returns
    the value."""
    def check():
        v = read_json_field(path, key)
        return (v,) if v is not None and accept(v) else None
    return wait_until(check, timeout, f"{key} in {path}", poll=poll, give_up=give_up)[0]
