"""A small QMP client for the benchmark harness: commands, and events kept with QEMU's own timestamps.

QEMU stamps every event with the host's CLOCK_REALTIME ({"seconds", "microseconds"}), so an event's time is
comparable with time.time() on the host; the harness uses that for "guest running" (the RESUME event).
Not thread-safe: one thread per client.
"""

import json
import os
import socket
import time


class QmpError(RuntimeError):
    pass


class Qmp:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.events = []  # (host realtime seconds, event dict), in arrival order
        greeting = self._read_msg(timeout=30)
        if "QMP" not in greeting:
            raise QmpError(f"not a QMP greeting: {greeting}")
        self.command("qmp_capabilities")

    @classmethod
    def connect(cls, path, timeout=30.0, poll=0.001, alive=None):
        """Connects to a QMP unix socket, waiting up to `timeout` s for it to appear (QEMU creates it at start).
        `alive`: optional callable; when it returns False (the process that should create the socket is gone),
        gives up at once."""
        deadline = time.monotonic() + timeout
        while True:
            if alive is not None and not alive():
                raise QmpError(f"{path}: the process that should serve it exited")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return cls(s)
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if time.monotonic() > deadline:
                    raise QmpError(f"{path}: no QMP socket within {timeout:.0f} s")
                time.sleep(poll)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _read_msg(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("QMP: no message")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError("QMP: no message")
            if not data:
                raise QmpError("QMP connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def _note_event(self, msg):
        ts = msg.get("timestamp", {})
        t = ts.get("seconds", 0) + ts.get("microseconds", 0) / 1e6 if ts else time.time()
        self.events.append((t, msg))

    def command(self, name, timeout=60.0, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            r = self._read_msg(timeout)
            if "event" in r:
                self._note_event(r)
                continue
            if "error" in r:
                raise QmpError(f"{name}: {r['error'].get('desc', r['error'])}")
            if "return" in r:
                return r["return"]

    def poll_events(self, timeout=0.0):
        """Reads whatever events arrived (waiting up to `timeout` s for the first). Returns the new ones."""
        n = len(self.events)
        try:
            while True:
                r = self._read_msg(timeout)
                if "event" in r:
                    self._note_event(r)
                timeout = 0.0001
        except TimeoutError:
            pass
        return self.events[n:]

    def wait_event(self, name, timeout=60.0):
        """Host time of the first event `name` (already received or arriving within `timeout` s)."""
        deadline = time.monotonic() + timeout
        while True:
            for t, e in self.events:
                if e["event"] == name:
                    return t
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"QMP: no {name} event within {timeout:.0f} s")
            self.poll_events(min(left, 0.5))

    def event_time(self, name):
        for t, e in self.events:
            if e["event"] == name:
                return t
        return None


def wait_for_path(path, timeout=30.0, poll=0.001):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(poll)
