"""The guest's serial console, read live from a QEMU unix-socket chardev and stamped with host time.

After a restore the guest's clocks continue from the checkpoint (QEMU's virtual clock stops while the VM is
stopped and is migrated), so the guest's own timestamps (memsim's t_ms / rt) do not say when a line happened on the
host. Every line gets time.time() when it arrives; the raw log keeps both ("<host s> <line>").
"""

import socket
import threading
import time


def serial_arg(path):
    """The QEMU -serial value for a unix-socket server the harness connects to (QEMU does not wait for it)."""
    return f"unix:{path},server=on,wait=off"


class SerialReader:
    def __init__(self, path, log_path=None, connect_timeout=60.0):
        self.path = path
        self.lines = []  # (host time, text without CR/LF)
        self.log = open(log_path, "a", buffering=1) if log_path else None
        self.connected_at = None
        self._stop = threading.Event()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(connect_timeout,), daemon=True)
        self._thread.start()

    def _run(self, connect_timeout):
        deadline = time.monotonic() + connect_timeout
        s = None
        while not self._stop.is_set():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                s = None
                if time.monotonic() > deadline:
                    return
                time.sleep(0.001)
        if s is None:
            return
        self.connected_at = time.time()
        s.settimeout(0.2)
        partial = b""
        while not self._stop.is_set():
            try:
                data = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            now = time.time()
            partial += data
            *done, partial = partial.split(b"\n")
            if done:
                with self._cv:
                    for d in done:
                        text = d.rstrip(b"\r").decode(errors="replace")
                        self.lines.append((now, text))
                        if self.log:
                            self.log.write(f"{now:.6f} {text}\n")
                    self._cv.notify_all()
        s.close()

    def wait_for(self, predicate, start_index=0, timeout=60.0):
        """Index of the first line at or after start_index whose text satisfies predicate; TimeoutError if none."""
        deadline = time.monotonic() + timeout
        i = start_index
        with self._cv:
            while True:
                while i < len(self.lines):
                    if predicate(self.lines[i][1]):
                        return i
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("serial: no matching line")
                self._cv.wait(min(left, 0.5))

    def snapshot(self, start_index=0):
        with self._cv:
            return list(self.lines[start_index:])

    def count(self):
        with self._cv:
            return len(self.lines)

    def close(self):
        self._stop.set()
        self._thread.join(2)
        if self.log:
            self.log.close()
