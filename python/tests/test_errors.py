"""Bad inputs raise the HaliteError subclass of the C error code, with hlt_last_error()'s message."""
from __future__ import annotations

from pathlib import Path

import pytest

import halite
from halite import errors
from halite._lib import ffi, lib
from conftest import PAGE


def test_a_class_per_error_code() -> None:
    classes = {}
    for code in range(-1, -9, -1):
        e = errors.from_code(code, "m")
        assert isinstance(e, halite.HaliteError) and e.code == code and e.message == "m"
        classes[code] = type(e)
        # the C library knows every code this package maps
        assert ffi.string(lib.hlt_strerror(code)) not in (b"", b"unknown error")
    assert len(set(classes.values())) == 8
    assert issubclass(halite.InvalidArgumentError, ValueError)
    assert issubclass(halite.HaliteIOError, OSError)
    assert issubclass(halite.NotFoundError, LookupError)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(halite.HaliteError) as e:
        halite.Checkpoint(tmp_path / "absent.hlt")
    assert isinstance(e.value, (halite.NotFoundError, halite.HaliteIOError))
    assert "absent.hlt" in str(e.value)


def test_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "garbage.hlt"
    path.write_bytes(b"this is not a checkpoint" * 1000)
    with pytest.raises(halite.CorruptCheckpointError) as e:
        halite.Checkpoint(path)
    assert "garbage.hlt" in str(e.value)
    assert e.value.code == errors.HLT_ECORRUPT


def test_message_is_hlt_last_error(tmp_path: Path) -> None:
    path = tmp_path / "short.hlt"
    path.write_bytes(b"HLT")
    with pytest.raises(halite.HaliteError) as e:
        halite.Checkpoint(path)
    assert str(e.value) == ffi.string(lib.hlt_last_error()).decode()
    assert str(e.value) != ffi.string(lib.hlt_strerror(e.value.code)).decode()  # the detailed message, not the code's


def test_damaged_block_fails_verify_and_its_reads(checkpoint_path: Path) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        stored = next(p for p in range(300) if ckpt.lookup(0, p).kind == "stored")
        block = ckpt.lookup(0, stored).block
    # Flip bytes in the middle of the block area (blocks come first in the file, the index after them).
    data = bytearray(checkpoint_path.read_bytes())
    for offset in range(4096, len(data) // 2, 4096):
        data[offset] ^= 0xFF
    checkpoint_path.write_bytes(data)
    with halite.Checkpoint(checkpoint_path) as ckpt:
        with pytest.raises(halite.CorruptCheckpointError) as e:
            ckpt.verify()
        assert "vm.hlt" in str(e.value) and "block" in str(e.value)
        failures = 0
        for b in range(ckpt.block_count):
            try:
                ckpt.read_block(b)
            except halite.CorruptCheckpointError:
                failures += 1
        assert failures > 0
    assert block is not None


def test_bad_arguments(checkpoint_path: Path, tmp_path: Path) -> None:
    with halite.Checkpoint(checkpoint_path) as ckpt:
        with pytest.raises(halite.InvalidArgumentError):
            ckpt.read_page(7, 0)  # no region 7
        with pytest.raises(halite.InvalidArgumentError):
            ckpt.read_page(0, 300)  # past the region's end
        with pytest.raises(halite.InvalidArgumentError):
            ckpt.read_block(ckpt.block_count)
        with pytest.raises(halite.NotFoundError):
            ckpt.read_blob("no-such-blob")
        with pytest.raises(halite.NotFoundError):
            ckpt.region("no-such-region")
    with pytest.raises(halite.InvalidArgumentError):
        ckpt.read_page(0, 0)  # closed
    with halite.Writer(tmp_path / "w.hlt") as w:
        r = w.add_region("ram", 0, 4 * PAGE)
        with pytest.raises(halite.InvalidArgumentError):
            w.put_page(r, 0, b"short")
        w.put_page(r, 0, bytes(PAGE))
    with pytest.raises(halite.InvalidArgumentError):
        halite.Writer(tmp_path / "x.hlt", vmm="bochs")
    with pytest.raises(halite.InvalidArgumentError):
        halite.Writer(tmp_path / "x.hlt", no_such_option=1)
    with pytest.raises(halite.InvalidArgumentError) as e:
        halite.Writer(tmp_path / "x.hlt", block_pages=100000)  # the C API refuses it
    assert "block" in str(e.value).lower()
    with pytest.raises(halite.HaliteError) as f:
        halite.Writer(tmp_path / "x.hlt", mac_key_file=tmp_path / "no-key")  # files named are read at once
    assert "no-key" in str(f.value)
    with pytest.raises(halite.HaliteError):
        halite.Checkpoint(checkpoint_path, max_chain_depth=99)
    assert list(tmp_path.glob("x.hlt*")) == []


def test_c_rejection_becomes_exception_and_aborts_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "rejected.hlt"
    w = halite.Writer(path)
    r = w.add_region("ram", 0, 4 * PAGE)
    with pytest.raises(halite.InvalidArgumentError) as e:
        w.put_page(r, 4, bytes(PAGE))  # page 4 of a 4-page region: the C writer refuses
    assert e.value.message
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(halite.InvalidArgumentError):
        w.finish()  # the writer was aborted with the failure
