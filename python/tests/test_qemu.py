"""halite.qemu.save against a real QEMU (TCG, 64 MiB, SeaBIOS: no guest OS needed) over its QMP socket."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import halite

MIB = 1 << 20


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
    process = subprocess.Popen(
        [qemu_binary(), "-machine", "pc", "-m", "64M", "-accel", "tcg", "-cpu", "qemu64", "-nodefaults",
         "-display", "none", "-qmp", f"unix:{socket},server=on,wait=off"], stdout=log, stderr=subprocess.STDOUT)
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
