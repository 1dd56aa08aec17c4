"""A checkpoint written from Python reads back byte for byte, through every reading path."""
from __future__ import annotations

from pathlib import Path

import pytest

import halite
from conftest import PAGE, make_memory, write_checkpoint


def test_pages_read_back_byte_for_byte(checkpoint_path: Path, memory: bytearray) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        assert [r.name for r in ckpt.regions] == ["pc.ram", "vga.vram"]
        assert ckpt.read_pages(0) == bytes(memory)
        assert ckpt.read_pages(1) == bytes(memory[:64 * PAGE])
        for page in (0, 1, 17, 299):
            assert ckpt.read_page(0, page) == memory[page * PAGE:(page + 1) * PAGE]


def test_blocks_hold_the_stored_pages_at_their_slots(checkpoint_path: Path, memory: bytearray) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        blocks = list(ckpt.blocks())
        assert len(blocks) == ckpt.block_count > 0
        kinds = set()
        for page in range(300):
            where = ckpt.lookup(0, page)
            kinds.add(where.kind)
            content = memory[page * PAGE:(page + 1) * PAGE]
            if where.kind == "stored":
                assert where.block is not None and where.slot is not None
                assert blocks[where.block][where.slot * PAGE:(where.slot + 1) * PAGE] == content
            else:
                assert content == bytes(PAGE)
        assert kinds == {"stored", "zero"}


def test_info_and_verify(checkpoint_path: Path) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        info = ckpt.info()
        assert info.uri == str(checkpoint_path)
        assert info.memory_bytes == (300 + 64) * PAGE
        assert [(r.name, r.base, r.size) for r in info.regions] == [("pc.ram", 0, 300 * PAGE),
                                                                   ("vga.vram", 300 * PAGE, 64 * PAGE)]
        assert info.block_count == ckpt.block_count
        assert info.decoded_block_bytes == sum(ckpt.block_size(b) for b in range(ckpt.block_count))
        assert all(ckpt.block_size(b) <= 16 * PAGE for b in range(ckpt.block_count))  # block_pages=16
        assert info.encryption is None
        report = ckpt.verify()
        assert report.blocks == info.block_count
        assert report.decoded_bytes == info.decoded_block_bytes


def test_blob_reads_back(checkpoint_path: Path) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        assert ckpt.read_blob("device-state") == b"\x01\x02state of the devices"


def test_duplicate_pages_are_stored_once(tmp_path: Path) -> None:
    page = make_memory(1, seed=7)
    assert page != bytes(PAGE)
    write_checkpoint(tmp_path / "dup.hlt", {"ram": bytes(page) * 50})
    with halite.Checkpoint(tmp_path / "dup.hlt") as ckpt:
        assert ckpt.info().decoded_block_bytes == PAGE
        assert ckpt.read_pages(0) == bytes(page) * 50


def test_zero_pages_and_access_hints(tmp_path: Path) -> None:
    path = tmp_path / "hinted.hlt"
    data = make_memory(64, seed=3)
    with halite.Writer(path, block_pages=8, vmm="qemu", machine_type="pc-q35-7.2") as w:
        r = w.add_region("pc.ram", 0x100000, 128 * PAGE)
        w.put_pages(r, 0, data)
        w.put_zero_pages(r, 64, 64)
        w.add_accessed(r, 40, 8)
        w.add_accessed(r, 2, 4)
    with halite.Checkpoint(path) as ckpt:
        assert ckpt.regions[0].base == 0x100000
        assert ckpt.read_pages(0) == bytes(data) + bytes(64 * PAGE)
        assert ckpt.lookup(0, 100).kind == "zero"


def test_exception_in_with_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "never.hlt"
    with pytest.raises(RuntimeError):
        with halite.Writer(path) as w:
            r = w.add_region("ram", 0, 4 * PAGE)
            w.put_page(r, 0, bytes(PAGE))
            raise RuntimeError("the save failed half way")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left beside it either


def test_abort_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "aborted.hlt"
    w = halite.Writer(path)
    w.add_region("ram", 0, 4 * PAGE)
    w.abort()
    w.abort()  # idempotent
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(halite.InvalidArgumentError):
        w.add_region("more", 0, PAGE)
