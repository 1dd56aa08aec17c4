"""Fixtures of the Python bindings' tests. The library under test is HALITE_LIBRARY (ctest sets it to the build's
libhalite.so); scratch files go to pytest's tmp_path, which pytest removes (--basetemp under build/ from ctest)."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import halite

PAGE = halite.PAGE_SIZE


def make_memory(pages: int, seed: int) -> bytearray:
    """Guest-like memory: random pages, zero pages, repeated text pages, and pages equal to earlier ones."""
    rng = random.Random(seed)
    out = bytearray(pages * PAGE)
    text = b"".join(b"line %d of a guest's page cache\n" % i for i in range(200))
    for p in range(pages):
        kind = rng.randrange(4)
        if kind == 0:
            out[p * PAGE:(p + 1) * PAGE] = rng.randbytes(PAGE)
        elif kind == 1:
            continue  # a zero page
        elif kind == 2:
            start = rng.randrange(len(text) - PAGE)
            out[p * PAGE:(p + 1) * PAGE] = text[start:start + PAGE]
        elif p > 0:
            q = rng.randrange(p)  # a duplicate, stored once
            out[p * PAGE:(p + 1) * PAGE] = out[q * PAGE:(q + 1) * PAGE]
    return out


def write_checkpoint(path: Path, regions: dict[str, bytes], **options: object) -> None:
    with halite.Writer(path, **options) as w:  # type: ignore[arg-type]
        base = 0
        for name, memory in regions.items():
            r = w.add_region(name, base, len(memory))
            w.put_pages(r, 0, memory)
            base += len(memory)
        w.add_blob("device-state", b"\x01\x02state of the devices")


@pytest.fixture
def memory() -> bytearray:
    return make_memory(300, seed=25)


@pytest.fixture
def checkpoint_path(tmp_path: Path, memory: bytearray) -> Path:
    path = tmp_path / "vm.hlt"
    write_checkpoint(path, {"pc.ram": bytes(memory), "vga.vram": bytes(memory[:64 * PAGE])}, block_pages=16)
    return path


def pytest_report_header(config: pytest.Config) -> str:
    return f"libhalite: {halite.library_path} (HALITE_LIBRARY={os.environ.get('HALITE_LIBRARY', '')})"
