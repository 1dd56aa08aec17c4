"""halite.qemu.save and halite.qemu.restore against a real QEMU (TCG, 64 MiB, SeaBIOS: no guest OS needed) over its QMP socket."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest

import halite

MIB = 1 << 20
# The saved QEMU's arguments; a restore launches QEMU with the same ones.
GUEST_ARGS = ["-machine", "pc", "-m", "64M", "-accel", "tcg", "-cpu", "qemu64", "-nodefaults", "-display", "none"]


def qemu_binary() -> str:
    binary = os.environ.get("HALITE_QEMU") or shutil.which("qemu-system-x86_64")
    if not binary:
        pytest.skip("no qemu-system-x86_64 (install qemu-system-x86 or set HALITE_QEMU)")
    return binary


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A QEMU with a QMP socket, running SeaBIOS; killed afterwards if the test did not end it."""
    socket = tmp_path / "qmp.sock"
    log = open(tmp_path / "qemu.log", "wb")
    process = subprocess.Popen([qemu_binary(), *GUEST_ARGS, "-qmp", f"unix:{socket},server=on,wait=off"],
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not socket.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            log.close()
            pytest.fail(f"QEMU did not open {socket}: {(tmp_path / 'qemu.log').read_text()[-2000:]}")
        time.sleep(0.02)
    try:
        yield process, socket
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        log.close()


def test_save_then_quit(qemu: tuple[subprocess.Popen[bytes], Path], tmp_path: Path) -> None:
    process, socket = qemu
    output = tmp_path / "vm.hlt"
    ticks = 0
    result: list[halite.qemu.SaveResult] = []
    thread = threading.Thread(target=lambda: result.append(
        halite.qemu.save(socket, output, then="quit", threads=2, block_pages=32)))
    thread.start()
    while thread.is_alive():
        ticks += 1  # Python runs while the save waits on QEMU: the GIL is not held
        time.sleep(0.001)
    thread.join()
    assert result, "the save raised (above)"
    saved = result[0]
    assert process.wait(timeout=30) == 0  # then="quit"
    assert ticks > 10
    assert saved.ramblocks >= 1 and saved.data_pages > 0 and not saved.live
    assert saved.state_blob_bytes > 1000 and saved.stream_bytes > 0 and saved.total_seconds > 0
    assert saved.checkpoint.pages >= 64 * MIB // halite.PAGE_SIZE
    assert saved.checkpoint.file_bytes == output.stat().st_size
    with halite.Checkpoint(output) as ckpt:
        ram = ckpt.region("pc.ram")
        assert ram.size == 64 * MIB
        assert len(ckpt.read_blob("qemu.state")) == saved.state_blob_bytes
        info = ckpt.info()
        assert info.vmm == "qemu" and info.pages == saved.checkpoint.pages
        assert ckpt.verify().blocks == info.blocks


def test_save_to_nobody_names_the_socket(tmp_path: Path) -> None:
    output = tmp_path / "vm.hlt"
    with pytest.raises(halite.HaliteError) as e:
        halite.qemu.save(tmp_path / "nobody.sock", output, timeout=0.3)
    assert "nobody.sock" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing left
    with pytest.raises(halite.InvalidArgumentError):
        halite.qemu.save(tmp_path / "nobody.sock", output, then="reboot")


def save_fresh_guest(output: Path, extra: Sequence[str] = (), settle: float = 0.0) -> Path:
    """Starts a QEMU with GUEST_ARGS (+ `extra`) and a QMP socket next to `output`, lets it run `settle` seconds
    (0: saved the moment the socket opens), saves it to `output` with then="quit", and checks it quit."""
    socket = output.with_suffix(".sock")
    process = subprocess.Popen([qemu_binary(), *GUEST_ARGS, *extra, "-qmp", f"unix:{socket},server=on,wait=off"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert process.poll() is None and time.monotonic() < deadline, "QEMU did not open its QMP socket"
            time.sleep(0.01)
        time.sleep(settle)
        halite.qemu.save(socket, output, then="quit")
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return output


def pid_gone(pid: int) -> bool:
    """True when `pid` is no more, or a zombie (this machine's PID 1 may not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_restore_lazily_into_launched_qemu(qemu: tuple[subprocess.Popen[bytes], Path], tmp_path: Path) -> None:
    process, socket = qemu
    ckpt = tmp_path / "vm.hlt"
    halite.qemu.save(socket, ckpt, then="quit")
    assert process.wait(timeout=30) == 0
    with halite.qemu.restore(ckpt, GUEST_ARGS, qemu_dir=tmp_path / "restored", qemu_binary=qemu_binary()) as r:
        early = r.stats()
        assert early.state in ("running", "done")  # lazy: the guest runs when restore() returns
        assert early.qemu_pid > 0 and early.running_seconds > 0
        assert r.wait(timeout=120)
        done = r.stats()
        assert done.state == "done" and not done.resumed and not done.resumable
        assert done.done_seconds >= done.running_seconds
        assert done.pages_sent > 0 and done.bytes_read > 0
        kinds = [e.kind for e in r.events()]
        assert "running" in kinds and kinds[-1] == "done", kinds
        assert r.next_event(timeout=0.05) is None
        pid = done.qemu_pid
        assert not pid_gone(pid)
    # Not detached: closing killed the QEMU it launched.
    deadline = time.monotonic() + 10
    while not pid_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pid_gone(pid)
    with pytest.raises(halite.InvalidArgumentError):
        r.stats()  # closed


def test_restore_errors_name_the_cause(tmp_path: Path) -> None:
    missing = tmp_path / "missing.hlt"
    with pytest.raises(halite.HaliteError) as e:
        halite.qemu.restore(missing, GUEST_ARGS, qemu_dir=tmp_path / "q", qemu_binary=qemu_binary())
    assert "missing.hlt" in str(e.value)
    with pytest.raises(halite.HaliteError) as e:
        halite.qemu.restore(missing)  # neither QEMU arguments nor a QMP socket
    assert "--qmp" in str(e.value) or "QEMU" in str(e.value)


def test_restore_of_guests_saved_at_once(tmp_path: Path) -> None:
    """A guest saved the moment its QMP socket opens has few stored pages: its first faults outlast the whole
    background loader. The restore failed 5 times in 12 ("page N of region pc.ram was never sent") until the
    engine's WaitForLoader also waited for the blocks faults were still installing."""
    for i in range(6):
        d = tmp_path / f"vm{i}"
        d.mkdir()
        save_fresh_guest(d / "vm.hlt")
        with halite.qemu.restore(d / "vm.hlt", GUEST_ARGS, qemu_dir=d / "q", qemu_binary=qemu_binary()) as r:
            assert r.wait(timeout=120), f"cycle {i}"
            assert r.stats().state == "done"
