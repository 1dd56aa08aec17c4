"""Writing checkpoints: from memory the caller holds (pages), or from raw memory image files (hlt-save raw)."""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Optional, Sequence, Union

from . import errors
from ._lib import check, ffi, lib, path_bytes
from .keyring import Keyring

PAGE_SIZE = 4096
_VMM_KINDS = {"raw": 0, "qemu": 1, "xen": 2, "other": 3}
_CIPHERS = {"auto": 0, "aes-256-gcm": 1, "xchacha20-poly1305": 2}
_PARENT_CODINGS = {"plain": 0, "based": 1}

# Keyword -> hlt_writer_param (halite_c.h), each named after hlt-save's flag.
_INT_OPTIONS = {
    "block_pages": 1, "level": 2, "threads": 3, "rate_limit": 4, "vmm": 5, "frame_pages": 6, "page_hashes": 7,
    "parent_coding": 8, "rewrite_fraction": 9, "sync": 10, "low_priority": 11, "cipher": 12, "encryption": 13,
}
# Keyword -> hlt_writer_string.
_STRING_OPTIONS = {
    "policy": 1, "dictionary": 2, "machine_type": 3, "creator": 4, "staging_dir": 5, "mac_key_file": 6,
    "encrypt_key_file": 7, "parent": 8, "access_trace": 10, "va_hints": 11,
}
_PARENT_DIR = 9

Path = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class WriteStats:
    """What a committed checkpoint holds (hlt-save's summary)."""

    pages: int
    zero_pages: int
    absent_pages: int
    duplicate_pages: int
    stored_pages: int  # distinct: pages = zero + absent + duplicate + stored (CheckpointInfo's includes duplicates)
    blocks: int
    hot_blocks: int
    accessed_pages: int
    raw_bytes: int
    file_bytes: int
    block_bytes: int
    blob_bytes: int
    index_bytes: int
    dictionary_bytes: int
    in_parent_pages: int
    frame_pages: int
    encrypted: bool
    microseconds: int


def _int_value(name: str, value: object) -> int:
    """An option's value as the C API takes it."""
    table = {"vmm": _VMM_KINDS, "cipher": _CIPHERS, "parent_coding": _PARENT_CODINGS}.get(name)
    if table is not None:
        if value not in table:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{name} {value!r}: expected one of {sorted(table)}")
        return table[str(value)]
    if name == "frame_pages" and value == "auto":
        return -1
    if name == "rewrite_fraction":
        return round(float(value) * 1000)  # type: ignore[arg-type]
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, int):
        raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{name}: expected an integer, not {value!r}")
    return value


def _committed_stats(handle: Any) -> WriteStats:
    value = ffi.new("uint64_t*")
    figures: dict[str, Any] = {}
    for stat, field in enumerate(fields(WriteStats), start=1):  # hlt_writer_stat's order
        check(lib.hlt_writer_get_stat(handle, stat, value))
        figures[field.name] = int(value[0])
    figures["encrypted"] = bool(figures["encrypted"])
    return WriteStats(**figures)


class Writer:
    """Writes a checkpoint to `path` (a file, s3://BUCKET/KEY or rados://POOL/NAME): regions, pages, access hints
    and blobs, then finish() commits it and returns its WriteStats.

    Nothing is at `path` until finish() has committed (the file is written under a temporary name, fsynced and
    renamed); abort(), a failed call, or leaving a `with` block by an exception, leaves nothing. Use from one thread;
    finish() releases the GIL while it plans the layout, compresses and writes.

    Options, named after hlt-save's flags (None: libhalite's default): block_pages (default 64), level (zstd, 3),
    threads (0: one per CPU), rate_limit (raw bytes/s), vmm ("raw", "qemu", "xen", "other"), frame_pages (int or
    "auto"), page_hashes, parent_coding ("based", "plain"), rewrite_fraction (0..1+), sync, low_priority, cipher
    ("auto", "aes-256-gcm", "xchacha20-poly1305"), encryption (False: ignore HALITE_ENCRYPT_KEY), policy ("halite",
    "access", "va", "physical"), dictionary ("auto", "on", "off"), machine_type, creator, staging_dir,
    mac_key_file, encrypt_key_file, parent (an incremental child of this checkpoint), parent_dirs, access_trace,
    va_hints; keyring (keys of the parent's chain); encryption_key (32 bytes: encrypt with this key)."""

    def __init__(self, path: Path, *, parent_dirs: Sequence[Path] = (), keyring: Optional[Keyring] = None,
                 encryption_key: Optional[bytes] = None, **options: object) -> None:
        self.path = os.fspath(path)
        self._stats: Optional[WriteStats] = None
        out = ffi.new("hlt_writer**")
        check(lib.hlt_writer_create(path_bytes(self.path), out))
        self._handle: Any = out[0]
        try:
            self._configure(options, parent_dirs, keyring, encryption_key)
        except BaseException:
            self.abort()
            raise

    def _configure(self, options: dict[str, object], parent_dirs: Sequence[Path], keyring: Optional[Keyring],
                   encryption_key: Optional[bytes]) -> None:
        for name, value in options.items():
            if value is None:
                continue
            if name in _INT_OPTIONS:
                self._call(lib.hlt_writer_set_param, _INT_OPTIONS[name], _int_value(name, value))
            elif name in _STRING_OPTIONS:
                text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
                self._call(lib.hlt_writer_set_string, _STRING_OPTIONS[name], text.encode())
            else:
                known = sorted([*_INT_OPTIONS, *_STRING_OPTIONS, "parent_dirs", "keyring", "encryption_key"])
                raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"unknown writer option {name!r}: expected {known}")
        for directory in parent_dirs:
            self._call(lib.hlt_writer_set_string, _PARENT_DIR, path_bytes(directory))
        if keyring is not None:
            self._call(lib.hlt_writer_set_keyring, keyring.handle)
        if encryption_key is not None:
            cipher = _int_value("cipher", options.get("cipher") or "auto")
            self._call(lib.hlt_writer_set_encryption_key, encryption_key, len(encryption_key), cipher)

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{self.path}: the writer is finished or aborted")
        return self._handle

    def _call(self, fn: Any, *args: Any) -> int:
        """Calls fn(handle, *args); on failure aborts the writer (nothing is left) and raises."""
        code = fn(self.handle, *args)
        if code < 0:
            try:
                check(code)
            finally:
                self.abort()
        return int(code)

    def add_region(self, name: str, base: int, size: int) -> int:
        """Adds a memory region of `size` bytes (a multiple of 4096) at guest-physical `base`; returns its index."""
        out = ffi.new("uint32_t*")
        self._call(lib.hlt_writer_add_region, name.encode(), base, size, out)
        return int(out[0])

    def add_raw_image(self, image: Path) -> int:
        """hlt-save raw: adds the region "ram" (base 0) of the image file's size, its pages read from the file at
        finish(); the file must stay unchanged until then. Returns the region's index."""
        out = ffi.new("uint32_t*")
        self._call(lib.hlt_writer_add_raw_image, path_bytes(image), out)
        return int(out[0])

    def attach_image(self, region: int, image: Path) -> None:
        """Takes region `region`'s whole content from a file of its size (page p at offset p * 4096) at finish()."""
        self._call(lib.hlt_writer_attach_image, region, path_bytes(image))

    def put_page(self, region: int, page: int, data: bytes | bytearray | memoryview) -> None:
        """Stores one page (4096 bytes); an all-zero page is stored as a zero page."""
        if len(data) != PAGE_SIZE:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"a page is {PAGE_SIZE} bytes, not {len(data)}")
        self._call(lib.hlt_writer_put_page, region, page, ffi.from_buffer(data))

    def put_pages(self, region: int, first: int, data: bytes | bytearray | memoryview) -> None:
        """Stores consecutive pages from `first`; len(data) must be a multiple of 4096."""
        if len(data) % PAGE_SIZE:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL,
                                              f"{len(data)} bytes is not a whole number of {PAGE_SIZE}-byte pages")
        buf = ffi.from_buffer(data)
        for i in range(len(data) // PAGE_SIZE):
            self._call(lib.hlt_writer_put_page, region, first + i, buf + i * PAGE_SIZE)

    def put_zero_pages(self, region: int, first: int, count: int) -> None:
        """Marks pages [first, first + count) as zero."""
        self._call(lib.hlt_writer_put_zero_pages, region, first, count)

    def add_accessed(self, region: int, first: int, count: int) -> None:
        """Save-time access hint: pages in the order the guest touched them (call in that order)."""
        self._call(lib.hlt_writer_add_accessed, region, first, count)

    def add_blob(self, name: str, data: bytes | bytearray | memoryview) -> None:
        """Adds a named blob (device state, configuration)."""
        self._call(lib.hlt_writer_add_blob, name.encode(), ffi.from_buffer(data), len(data))

    def finish(self) -> WriteStats:
        """Commits the checkpoint (puts the file in place) and returns what it holds. The writer is done whatever
        the result; after a failure nothing is left at the path."""
        handle, self._handle = self.handle, None
        try:
            check(lib.hlt_writer_commit(handle))
            self._stats = _committed_stats(handle)
        finally:
            lib.hlt_writer_free(handle)
        return self._stats

    def _committed_by_save(self) -> WriteStats:
        """After a save (halite.qemu.save) committed this writer's handle: its stats; the writer is then done."""
        handle, self._handle = self.handle, None
        try:
            self._stats = _committed_stats(handle)
        finally:
            lib.hlt_writer_free(handle)
        return self._stats

    @property
    def stats(self) -> Optional[WriteStats]:
        """The committed checkpoint's WriteStats (None before a successful finish())."""
        return self._stats

    def abort(self) -> None:
        """Discards everything; nothing is left at the path (idempotent)."""
        if getattr(self, "_handle", None) is not None:
            lib.hlt_writer_free(self._handle)
            self._handle = None

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            if self._handle is not None:
                self.finish()
        else:
            self.abort()

    def __del__(self) -> None:
        self.abort()
