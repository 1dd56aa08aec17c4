"""A checkpoint written from Python reads back byte for byte, through every reading path."""
from __future__ import annotations

import os
import subprocess
import threading
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


def page_counts(*regions: bytes) -> tuple[int, int, int]:
    """(zero pages, non-zero pages, distinct non-zero contents) of memory, counted here independently."""
    pages = [m[i:i + PAGE] for m in regions for i in range(0, len(m), PAGE)]
    nonzero = [p for p in pages if p != bytes(PAGE)]
    return len(pages) - len(nonzero), len(nonzero), len(set(nonzero))


def test_info_and_verify(checkpoint_path: Path, memory: bytearray) -> None:
    zero, nonzero, distinct = page_counts(bytes(memory), bytes(memory[:64 * PAGE]))
    assert zero > 0 and nonzero > distinct  # the fixture has zero pages and duplicates
    with halite.Checkpoint(checkpoint_path) as ckpt:
        info = ckpt.info()
        assert info.uri == str(checkpoint_path)
        assert info.memory_bytes == info.raw_bytes == (300 + 64) * PAGE
        assert [(r.name, r.base, r.size) for r in info.regions] == [("pc.ram", 0, 300 * PAGE),
                                                                   ("vga.vram", 300 * PAGE, 64 * PAGE)]
        assert (info.pages, info.zero_pages, info.stored_pages, info.absent_pages) == (364, zero, nonzero, 0)
        assert info.duplicate_pages == nonzero - distinct
        assert info.blocks == ckpt.block_count == info.restore_order_blocks
        assert sum(ckpt.block_size(b) for b in range(ckpt.block_count)) == distinct * PAGE  # each content once
        assert all(ckpt.block_size(b) <= 16 * PAGE for b in range(ckpt.block_count))  # block_pages=16
        assert info.file_size == checkpoint_path.stat().st_size
        assert info.format[0] == 1 and info.vmm == "raw" and info.chain_depth == 0 and info.blobs == 1
        assert info.encryption is None and not info.encrypted and not info.sealed
        progress: list[tuple[int, int]] = []
        report = ckpt.verify(lambda done, total: progress.append((done, total)))
        assert report == halite.VerifyReport(blocks=info.blocks, files=1)
        assert progress and progress[-1] == (info.blocks, info.blocks)
        stats = ckpt.stats()
        assert stats["blocks_fetched"] >= info.blocks  # verify read every block from storage


def test_info_json_is_the_tools(checkpoint_path: Path) -> None:
    tools = os.environ.get("HALITE_TOOLS_DIR")
    if not tools:
        pytest.skip("HALITE_TOOLS_DIR (where hlt-restore is) is not set: ctest sets it")
    tool = subprocess.run([os.path.join(tools, "hlt-restore"), "info", str(checkpoint_path), "--json"],
                          check=True, capture_output=True, text=True).stdout
    with halite.Checkpoint(checkpoint_path) as ckpt:
        assert ckpt.info_json_text() == tool
        doc = ckpt.info_json()
        assert doc["file_size"] == ckpt.info().file_size
        assert [r["name"] for r in doc["regions"]] == ["pc.ram", "vga.vram"]


def test_writer_stats(tmp_path: Path, memory: bytearray) -> None:
    zero, nonzero, distinct = page_counts(bytes(memory))
    w = halite.Writer(tmp_path / "s.hlt", block_pages=32, level=1, dictionary="off", frame_pages=0)
    w.put_pages(w.add_region("ram", 0, len(memory)), 0, memory)
    stats = w.finish()
    assert stats == w.stats
    assert (stats.pages, stats.zero_pages, stats.stored_pages) == (300, zero, distinct)
    assert stats.duplicate_pages == nonzero - distinct
    assert stats.file_bytes == (tmp_path / "s.hlt").stat().st_size
    assert stats.dictionary_bytes == 0 and not stats.encrypted
    with halite.Checkpoint(tmp_path / "s.hlt") as ckpt:
        info = ckpt.info()
        assert info.dictionary_blocks == 0
        # The two counts of stored pages differ on purpose: the writer's are distinct, the file's include duplicates.
        assert distinct < nonzero, "the test memory must hold duplicate pages"
        assert (info.stored_pages, info.duplicate_pages) == (stats.stored_pages + stats.duplicate_pages,
                                                             stats.duplicate_pages)
        assert ckpt.read_pages(0) == bytes(memory)


def test_raw_image(tmp_path: Path, memory: bytearray) -> None:
    image = tmp_path / "memory.raw"
    image.write_bytes(memory)
    with halite.Writer(tmp_path / "raw.hlt") as w:
        assert w.add_raw_image(image) == 0
    with halite.Checkpoint(tmp_path / "raw.hlt") as ckpt:
        assert ckpt.regions[0].name == "ram" and ckpt.regions[0].size == len(memory)
        assert ckpt.read_pages(0) == bytes(memory)


def test_incremental_chain(tmp_path: Path, memory: bytearray) -> None:
    parent = tmp_path / "parent.hlt"
    write_checkpoint(parent, {"ram": bytes(memory)}, page_hashes=True)
    changed = bytearray(memory)
    for page in (3, 150, 299):
        changed[page * PAGE:page * PAGE + 8] = b"changed!"
    (tmp_path / "child").mkdir()
    child = tmp_path / "child" / "child.hlt"
    with halite.Writer(child, parent=parent) as w:
        w.put_pages(w.add_region("ram", 0, len(changed)), 0, changed)
    assert w.stats is not None and w.stats.in_parent_pages > 0
    with halite.Checkpoint(child) as ckpt:
        files = ckpt.chain()
        assert [f.level for f in files] == [0, 1] and files[0].depth == 1 and files[1].depth == 0
        assert files[0].name == str(child) and files[1].parent_hint == ""
        assert files[0].pages + files[1].pages == ckpt.info().stored_pages
        assert ckpt.info().chain_depth == 1
        assert ckpt.read_pages(0) == bytes(changed)
        assert ckpt.verify().files == 2
    # The parent moves: found through parent_dirs.
    (tmp_path / "moved").mkdir()
    parent.rename(tmp_path / "moved" / "parent.hlt")
    with pytest.raises(halite.HaliteError):
        halite.Checkpoint(child)
    with halite.Checkpoint(child, parent_dirs=[tmp_path / "moved"]) as ckpt:
        assert ckpt.read_pages(0) == bytes(changed)


def test_blob_reads_back(checkpoint_path: Path) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        assert ckpt.read_blob("device-state") == b"\x01\x02state of the devices"


def test_duplicate_pages_are_stored_once(tmp_path: Path) -> None:
    page = make_memory(1, seed=7)
    assert page != bytes(PAGE)
    write_checkpoint(tmp_path / "dup.hlt", {"ram": bytes(page) * 50})
    with halite.Checkpoint(tmp_path / "dup.hlt") as ckpt:
        assert ckpt.block_count == 1 and ckpt.block_size(0) == PAGE
        assert ckpt.info().duplicate_pages == 49
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


def test_threads_share_a_checkpoint(checkpoint_path: Path, memory: bytearray) -> None:
    """A reader serves several threads at once (the C API allows it; each call runs without the GIL)."""
    results: list[bool] = []
    errors: list[BaseException] = []
    with halite.Checkpoint(checkpoint_path) as ckpt:
        def read_all(offset: int) -> None:
            try:
                for round_ in range(5):
                    order = [(offset + round_ + p) % 300 for p in range(300)]
                    results.append(all(ckpt.read_page(0, p) == memory[p * PAGE:(p + 1) * PAGE] for p in order))
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=read_all, args=(i * 75,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert results == [True] * 20
