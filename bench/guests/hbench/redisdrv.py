"""Host-side redis client for the benchmark: loads a dataset and drives a closed-loop GET load, recording every
completion with host time and latency.

Written here (RESP over plain sockets) rather than wrapping redis-benchmark so that each reply carries a host
timestamp: throughput per 100 ms, latency per 100 ms and the first reply after a restore come straight from the
record. Keys are "k:<n>" for n in [0, keys); values are slices of a random pool, so they do not compress and no two
pages of the dataset are alike.
"""

import array
import os
import random
import selectors
import socket
import threading
import time


def _cmd(*parts):
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        if isinstance(p, str):
            p = p.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


class ReplyCounter:
    """Incremental RESP parser that only counts complete replies (and notes errors)."""

    def __init__(self):
        self.buf = bytearray()
        self.errors = 0
        self.last_error = None

    def feed(self, data):
        self.buf += data
        buf = self.buf
        pos = 0
        n = 0
        end = len(buf)
        while pos < end:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            kind = buf[pos]
            if kind == 0x24:  # '$' bulk string
                length = int(buf[pos + 1:nl])
                stop = nl + 2 if length < 0 else nl + 2 + length + 2
                if stop > end:
                    break
                pos = stop
            elif kind in (0x2B, 0x3A):  # '+' simple, ':' integer
                pos = nl + 2
            elif kind == 0x2D:  # '-' error
                self.errors += 1
                self.last_error = bytes(buf[pos:nl]).decode(errors="replace")
                pos = nl + 2
            else:
                raise ValueError(f"unexpected RESP reply type {chr(kind)!r}")
            n += 1
        if pos:
            del buf[:pos]
        return n


def connect_retry(host, port, deadline):
    while True:
        try:
            return socket.create_connection((host, port), timeout=2)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def load_dataset(host, port, keys, value_size, pipeline=512, conns=2, seed=1, timeout=3600, progress=None):
    """SETs k:0 .. k:keys-1 with random values of value_size bytes. Returns seconds taken."""
    rng = random.Random(seed)
    pool = os.urandom(1 << 22)
    t0 = time.monotonic()
    deadline = t0 + timeout
    per = (keys + conns - 1) // conns

    def worker(c, first, last):
        s = connect_retry(host, port, deadline)
        s.settimeout(timeout)
        counter = ReplyCounter()
        local = random.Random(rng.random() + c)
        i = first
        pending = 0
        while i < last or pending:
            batch = []
            while i < last and pending + len(batch) < pipeline:
                off = local.randrange(0, len(pool) - value_size)
                batch.append(_cmd(b"SET", b"k:%d" % i, pool[off:off + value_size]))
                i += 1
            if batch:
                s.sendall(b"".join(batch))
                pending += len(batch)
            # Wait for at least half of what is outstanding before refilling, to keep the pipe full.
            while pending > (pipeline // 2 if i < last else 0):
                data = s.recv(1 << 20)
                if not data:
                    raise ConnectionError("redis closed the connection during the load")
                pending -= counter.feed(data)
            if progress and c == 0:
                progress(i - first, last - first)
        if counter.errors:
            raise RuntimeError(f"redis load: {counter.errors} errors, e.g. {counter.last_error}")
        s.close()

    errors = []

    def guarded(c, first, last):
        try:
            worker(c, first, last)
        except Exception as e:  # noqa: BLE001  (re-raised in the caller's thread below)
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(c, c * per, min(keys, (c + 1) * per))) for c in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0


def command(host, port, *parts, timeout=60):
    """One command on a fresh connection; returns the raw reply bytes."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(_cmd(*parts))
        counter = ReplyCounter()
        data = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
            if counter.feed(chunk):
                return data
    finally:
        s.close()


class Driver:
    """Closed-loop GET load on `conns` connections with `depth` requests outstanding on each, uniform random keys.

    Starts at once and keeps trying to connect (every 5 ms) until it succeeds, so it can be started together with
    a restore; a connection that breaks is reopened. Records (completion host time, latency s) per reply in
    self.done_t / self.lat. Runs in its own thread until stop().
    """

    def __init__(self, host, port, keys, conns=8, depth=1, seed=7):
        self.host, self.port, self.keys = host, port, keys
        self.conns, self.depth = conns, depth
        self.rng = random.Random(seed)
        self.done_t = array.array("d")
        self.lat = array.array("d")
        self.errors = 0
        self.reconnects = 0
        self.first_connect = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.time()
        self._thread.start()

    def _request(self):
        return _cmd(b"GET", b"k:%d" % self.rng.randrange(self.keys))

    def _open(self, sel, conn_state):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        try:
            s.connect((self.host, self.port))
        except BlockingIOError:
            pass
        st = {"sock": s, "sent": [], "counter": ReplyCounter(), "out": b"", "connected": False}
        conn_state[s] = st
        sel.register(s, selectors.EVENT_WRITE)
        return st

    def _close(self, sel, conn_state, s):
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()
        conn_state.pop(s, None)

    def _run(self):
        sel = selectors.DefaultSelector()
        conn_state = {}
        retry_at = 0.0
        while not self._stop.is_set():
            now = time.time()
            if len(conn_state) < self.conns and now >= retry_at:
                for _ in range(self.conns - len(conn_state)):
                    self._open(sel, conn_state)
                retry_at = now + 0.005
            for key, ev in sel.select(timeout=0.005):
                s = key.fileobj
                st = conn_state.get(s)
                if st is None:
                    continue
                now = time.time()
                if not st["connected"]:
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        self._close(sel, conn_state, s)
                        continue
                    st["connected"] = True
                    if self.first_connect is None:
                        self.first_connect = now
                    reqs = [self._request() for _ in range(self.depth)]
                    st["sent"] = [now] * self.depth
                    st["out"] = b"".join(reqs)
                    sel.modify(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
                    continue
                if ev & selectors.EVENT_WRITE and st["out"]:
                    try:
                        n = s.send(st["out"])
                        st["out"] = st["out"][n:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        self.reconnects += 1
                        self._close(sel, conn_state, s)
                        continue
                    if not st["out"]:
                        sel.modify(s, selectors.EVENT_READ)
                if ev & selectors.EVENT_READ:
                    try:
                        data = s.recv(1 << 20)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self.reconnects += 1
                        self._close(sel, conn_state, s)
                        continue
                    n = st["counter"].feed(data)
                    if n:
                        now = time.time()
                        with self._lock:
                            for _ in range(n):
                                sent = st["sent"].pop(0)
                                self.done_t.append(now)
                                self.lat.append(now - sent)
                        reqs = [self._request() for _ in range(n)]
                        st["sent"].extend([now] * n)
                        st["out"] += b"".join(reqs)
                        sel.modify(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
                    self.errors = sum(c["counter"].errors for c in conn_state.values())
        for s in list(conn_state):
            self._close(sel, conn_state, s)

    def first_reply(self):
        with self._lock:
            return self.done_t[0] if self.done_t else None

    def completions(self):
        with self._lock:
            return list(self.done_t), list(self.lat)

    def stop(self):
        self._stop.set()
        self._thread.join(5)
