"""The QEMU guest agent (qemu-guest-agent inside the guest): run commands in the guest and ask it questions.

Two ways to reach it, one interface:
  SocketAgent(path)          QEMU's own chardev socket (a guest the harness started: -chardev socket,server=on)
  VirshAgent(uri, domain)    a libvirt domain: libvirt owns the agent channel, so go through it
                             (`virsh qemu-agent-command`, libvirt's virDomainQemuAgentCommand)

    agent.ping()                                   raises AgentError if the agent does not answer
    agent.exec(["systemctl", "is-system-running"]) -> ExecResult(exitcode, stdout, stderr)
    agent.command("guest-network-get-interfaces")  -> the "return" value

Before the guest's agent runs, or right after a restore, the channel may hold stale bytes or none: SocketAgent
resynchronises with guest-sync-delimited (a 0xFF byte, then a request whose id the answer must echo) before every
conversation. Not thread-safe.
"""

import base64
import json
import random
import socket
import subprocess
import time


class AgentError(RuntimeError):
    pass


class ExecResult:
    def __init__(self, exitcode, stdout, stderr, signal=None):
        self.exitcode = exitcode
        self.stdout = stdout
        self.stderr = stderr
        self.signal = signal

    def __repr__(self):
        return f"ExecResult(exitcode={self.exitcode}, stdout={self.stdout!r}, stderr={self.stderr!r})"


class _Agent:
    def command(self, name, timeout=30.0, **args):  # pragma: no cover - implemented by the transports
        raise NotImplementedError

    def ping(self, timeout=10.0):
        self.command("guest-ping", timeout=timeout)

    def exec(self, argv, timeout=60.0, input_data=None):
        """Runs argv[0] (a path or a name the guest's PATH finds) with the rest as arguments, waits for it and
        returns its exit code and output. Raises AgentError if it is still running after `timeout` s."""
        args = {"path": argv[0], "arg": list(argv[1:]), "capture-output": True}
        if input_data is not None:
            args["input-data"] = base64.b64encode(input_data).decode()
        pid = self.command("guest-exec", timeout=timeout, **args)["pid"]
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            st = self.command("guest-exec-status", timeout=timeout, pid=pid)
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
                err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
                return ExecResult(st.get("exitcode"), out, err, st.get("signal"))
            if time.monotonic() > deadline:
                raise AgentError(f"guest-exec {' '.join(argv)}: still running after {timeout:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def shell(self, script, timeout=60.0):
        """Runs a /bin/sh script in the guest (as root); returns its ExecResult."""
        return self.exec(["/bin/sh", "-c", script], timeout=timeout)

    def wait_ready(self, timeout, alive=None):
        """Waits until the agent answers a ping. Returns the seconds waited. `alive`: a callable; when it returns
        False (QEMU exited), gives up at once."""
        start = time.monotonic()
        last = None
        while True:
            if alive is not None and not alive():
                raise AgentError(f"the guest's QEMU exited while waiting for its agent ({last})")
            try:
                self.ping(timeout=min(5.0, max(1.0, timeout)))
                return time.monotonic() - start
            except (AgentError, OSError, TimeoutError) as e:
                last = e
            if time.monotonic() - start > timeout:
                raise AgentError(f"the guest agent did not answer within {timeout:.0f} s (last: {last})")
            time.sleep(0.5)


class SocketAgent(_Agent):
    """The agent through QEMU's chardev socket at `path` (a unix socket QEMU listens on). One connection, opened on
    first use and again after an error (QEMU may have been replaced by a restored one)."""

    def __init__(self, path):
        self.path = path
        self.sock = None
        self.buf = b""
        self.synced = False

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.buf = b""
        self.synced = False

    def _connect(self):
        if self.sock is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
            except OSError as e:
                s.close()
                raise AgentError(f"{self.path}: cannot connect to the agent's socket: {e}") from e
            self.sock = s

    def _recv(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer from the guest agent")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no answer from the guest agent")
        if not data:
            raise AgentError(f"{self.path}: the agent's socket was closed")
        self.buf += data

    def _read_json(self, deadline):
        while b"\n" not in self.buf:
            self._recv(deadline)
        line, self.buf = self.buf.split(b"\n", 1)
        line = line.strip(b"\xff").strip()
        if not line:
            return None
        try:
            return json.loads(line)
        except ValueError:
            return None  # a fragment from before a resync

    def _sync(self, timeout):
        deadline = time.monotonic() + timeout
        sync_id = random.randrange(1, 1 << 31)
        # 0xFF makes the agent drop a partial request; the answer is preceded by 0xFF, so anything before it is
        # stale and skipped.
        self.sock.sendall(b"\xff" + json.dumps({"execute": "guest-sync-delimited",
                                               "arguments": {"id": sync_id}}).encode() + b"\n")
        while True:
            while b"\xff" not in self.buf:
                self.buf = b""
                self._recv(deadline)
            self.buf = self.buf[self.buf.index(b"\xff") + 1:]
            msg = self._read_json(deadline)
            if msg is not None and msg.get("return") == sync_id:
                self.synced = True
                return

    def command(self, name, timeout=30.0, **args):
        try:
            self._connect()
            if not self.synced:
                self._sync(min(timeout, 10.0))
            msg = {"execute": name}
            if args:
                msg["arguments"] = args
            self.sock.sendall(json.dumps(msg).encode() + b"\n")
            deadline = time.monotonic() + timeout
            while True:
                r = self._read_json(deadline)
                if r is None:
                    continue
                if "error" in r:
                    raise AgentError(f"{name}: {r['error'].get('desc', r['error'])}")
                if "return" in r:
                    return r["return"]
        except (OSError, TimeoutError) as e:
            self.close()
            raise AgentError(f"{name}: {e}") from e


class VirshAgent(_Agent):
    """The agent of libvirt domain `domain` on connection `uri`, through virsh.

    With libvirt's embedded driver (qemu:///embed?root=...) every virsh is a new libvirt that reconnects to the
    running domains in background threads, its guest agent connection last: a command that comes first fails with
    "QEMU guest agent is not connected" although the agent runs. Then the command is sent again from a virsh that
    first lets libvirt's event loop run (`event --loop --timeout`), which gives the reconnection time to finish."""

    def __init__(self, uri, domain, virsh="virsh", reconnect_wait=2):
        self.uri = uri
        self.domain = domain
        self.virsh = virsh
        self.reconnect_wait = reconnect_wait

    def _run(self, name, msg, timeout, wait_first):
        # One virsh command line, parsed by virsh itself: the JSON in double quotes, its \ and " escaped.
        line = (f"qemu-agent-command {self.domain} --timeout {max(1, int(timeout))} "
                '"' + msg.replace("\\", "\\\\").replace('"', '\\"') + '"')
        if wait_first:
            line = f"event --all --loop --timeout {self.reconnect_wait}; " + line
        try:
            p = subprocess.run([self.virsh, "-q", "-c", self.uri, line], capture_output=True, text=True,
                               timeout=timeout + self.reconnect_wait + 30)
        except subprocess.TimeoutExpired as e:
            raise AgentError(f"{name}: virsh qemu-agent-command did not return") from e
        err = " ".join(x for x in p.stderr.splitlines() if x.startswith("error"))
        return p.returncode, p.stdout, err or p.stderr.strip()[-500:]

    def command(self, name, timeout=30.0, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        msg = json.dumps(msg)
        rc, out, err = self._run(name, msg, timeout, wait_first=False)
        if rc != 0 and "agent is not connected" in err:
            rc, out, err = self._run(name, msg, timeout, wait_first=True)
        if rc != 0:
            raise AgentError(f"{name} on {self.domain}: {err}")
        lines = [x for x in out.splitlines() if x.startswith("{")]
        try:
            return json.loads(lines[-1])["return"]
        except (ValueError, KeyError, IndexError) as e:
            raise AgentError(f"{name} on {self.domain}: unexpected answer {out[:300]!r}") from e
