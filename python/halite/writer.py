"""Writing checkpoints from memory the caller holds (raw images, test data, a VMM of its own)."""
from __future__ import annotations

import os
from typing import Any, Optional

from . import errors
from ._lib import check, ffi, lib, path_bytes

PAGE_SIZE = 4096
_VMM_KINDS = {"raw": 0, "qemu": 1, "xen": 2, "other": 3}
_CIPHERS = {"auto": 0, "aes-256-gcm": 1, "xchacha20-poly1305": 2}


class Writer:
    """Writes a checkpoint to `path`: regions, pages, access hints and blobs, then finish() puts the file in place.

    Until finish() nothing is at `path` (the file is written under a temporary name, fsynced and renamed); abort(),
    or leaving a `with` block by an exception, leaves no file. Use from one thread; finish() releases the GIL while
    it plans the layout, compresses and writes.

    Options (0 or None: libhalite's default): block_pages (pages per locality block, default 64), level (zstd),
    threads (0: one per CPU), rate_limit (bytes/s), policy ("halite", "access", "va", "physical"), machine_type,
    vmm ("raw", "qemu", "xen", "other"), encryption_key (32 bytes; cipher "auto", "aes-256-gcm" or
    "xchacha20-poly1305")."""

    def __init__(self, path: str | os.PathLike[str], *, block_pages: int = 0, level: int = 0, threads: int = 0,
                 rate_limit: int = 0, policy: Optional[str] = None, machine_type: Optional[str] = None,
                 vmm: str = "raw", encryption_key: Optional[bytes] = None, cipher: str = "auto") -> None:
        self.path = os.fspath(path)
        if vmm not in _VMM_KINDS:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"vmm {vmm!r}: expected one of {sorted(_VMM_KINDS)}")
        if cipher not in _CIPHERS:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL,
                                              f"cipher {cipher!r}: expected one of {sorted(_CIPHERS)}")
        options = ffi.new("hlt_writer_options*")
        options.block_pages = block_pages
        options.level = level
        options.threads = threads
        options.rate_limit_bytes_per_s = rate_limit
        keep = []  # the option strings live until hlt_writer_create returns
        if policy is not None:
            keep.append(ffi.new("char[]", policy.encode()))
            options.policy = keep[-1]
        if machine_type is not None:
            keep.append(ffi.new("char[]", machine_type.encode()))
            options.machine_type = keep[-1]
        options.vmm_kind = _VMM_KINDS[vmm]
        out = ffi.new("hlt_writer**")
        check(lib.hlt_writer_create(path_bytes(self.path), options, out))
        self._handle: Any = out[0]
        if encryption_key is not None:
            self._call(lib.hlt_writer_set_encryption_key, encryption_key, len(encryption_key), _CIPHERS[cipher])

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{self.path}: the writer is finished or aborted")
        return self._handle

    def _call(self, fn: Any, *args: Any) -> int:
        """Calls fn(handle, *args); on failure aborts the writer (no file left) and raises."""
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

    def finish(self) -> None:
        """Writes everything and puts the file in place. The writer is done whatever the result."""
        handle, self._handle = self.handle, None
        check(lib.hlt_writer_finish(handle))

    def abort(self) -> None:
        """Discards everything; no file is left (idempotent)."""
        if getattr(self, "_handle", None) is not None:
            lib.hlt_writer_abort(self._handle)
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
