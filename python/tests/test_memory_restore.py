"""Lazy restore into this process's memory (userfaultfd), and the GIL released while libhalite waits."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

import pytest

import halite
from conftest import PAGE, make_memory, write_checkpoint


def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether condition() holds within `timeout` seconds (polled every millisecond)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture(autouse=True)
def needs_userfaultfd() -> None:
    try:
        halite.probe()
    except halite.UnsupportedError as e:
        pytest.skip(f"userfaultfd is not usable here: {e}")


def test_lazy_restore_matches_byte_for_byte(checkpoint_path: Path, memory: bytearray) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        with halite.MemoryRestore(ckpt, background_loader=0) as rs:
            ram = rs.memory(0)
            assert bytes(ram[17 * PAGE:18 * PAGE]) == memory[17 * PAGE:18 * PAGE]  # one fault
            # The handler counts a fault after it woke the faulting thread: the count may come a moment later.
            assert eventually(lambda: rs.stat("blocks_read_demand") == 1)
            assert eventually(lambda: rs.stat("faults_blocking") >= 1)  # counted apart from the block read
            assert rs.stat("blocks_read_loader") == 0
            assert bytes(ram) == bytes(memory)
            assert bytes(rs.memory(1)) == bytes(memory[:64 * PAGE])
            assert eventually(lambda: rs.stat("blocks_read") == rs.stat("blocks_total") == ckpt.block_count)
            ram[0:4] = b"mine"  # ordinary memory once in
            assert bytes(ram[0:4]) == b"mine"


def test_loader_brings_everything_in(checkpoint_path: Path, memory: bytearray) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        with halite.MemoryRestore(ckpt, handler_threads=2) as rs:
            rs.wait()
            stats = rs.stats()
            assert stats["loader_done"] == 1
            assert stats["blocks_read"] == ckpt.block_count
            assert bytes(rs.memory(0)) == bytes(memory)


def test_wait_releases_the_gil(tmp_path: Path) -> None:
    path = tmp_path / "big.hlt"
    data = make_memory(2048, seed=5)  # 8 MiB
    write_checkpoint(path, {"ram": bytes(data)}, block_pages=16)
    with halite.Checkpoint(path) as ckpt:
        # The loader reads the stored payload (about the file's size) at the file's size a second: wait() blocks
        # for about a second.
        with halite.MemoryRestore(ckpt, loader_rate=path.stat().st_size) as rs:
            done = threading.Event()

            def waiter() -> None:
                rs.wait()
                done.set()

            thread = threading.Thread(target=waiter)
            ticks_while_waiting = 0
            thread.start()
            started = time.monotonic()
            while not done.is_set() and time.monotonic() - started < 30:
                ticks_while_waiting += 1  # pure Python: runs only if the waiting thread let the GIL go
                time.sleep(0.001)
            thread.join()
            assert done.is_set()
            assert ticks_while_waiting > 10, "the main thread did not run while wait() blocked"
            assert bytes(rs.memory(0)) == bytes(data)


def test_memory_outlives_the_restore(checkpoint_path: Path, memory: bytearray) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        rs = halite.MemoryRestore(ckpt).start()
        ram = rs.memory(0)
        with pytest.raises(halite.InvalidArgumentError):
            ckpt.close()  # the restore reads through it
        rs.wait()
        rs.close()
    assert bytes(ram) == bytes(memory)  # ordinary memory now, still mapped


def test_unknown_parameter_and_stat(checkpoint_path: Path) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        with pytest.raises(halite.InvalidArgumentError):
            halite.MemoryRestore(ckpt, no_such_param=1)
        with pytest.raises(halite.InvalidArgumentError):
            halite.MemoryRestore(ckpt, handler_threads=1000)
        with halite.MemoryRestore(ckpt) as rs:
            with pytest.raises(halite.InvalidArgumentError):
                rs.stat("no_such_stat")
