"""Lazy restore of a checkpoint into memory of this process (userfaultfd): what a VMM written in Python does."""
from __future__ import annotations

import mmap
from typing import Any, Optional

from . import errors
from ._lib import check, ffi, lib
from .checkpoint import PAGE_SIZE, Checkpoint

_PARAMS = {
    "background_loader": 1,
    "loader_rate": 2,
    "preload_working_set": 3,
    "preload_all": 4,
    "handler_threads": 5,
    "zero_window_pages": 6,
    "predict_segment_pages": 7,
    "predict_threshold": 8,
    "max_read_attempts": 9,
}
STATS = (
    "faults_blocking", "faults_zero", "faults_present", "faults_failed", "blocks_total", "blocks_read",
    "blocks_read_demand", "blocks_read_loader", "bytes_read", "pages_installed", "zero_pages_installed",
    "uffd_faults", "loader_done",
)


def probe() -> None:
    """Returns when userfaultfd can be used by this process; raises UnsupportedError saying why not (and what would
    enable it, e.g. vm.unprivileged_userfaultfd=1)."""
    check(lib.hlt_restore_probe())


class MemoryRestore:
    """Restores `checkpoint`'s memory lazily into anonymous mappings of this process (Python mmap objects): each
    region's memory is readable at once (memory(i)), a first touch of a page brings in its locality block, and a
    background loader streams the rest in the checkpoint's restore order. The mappings belong to Python: after
    close() they stay valid as ordinary memory (pages never restored read as zeros) for as long as a memoryview of
    them lives.

    Parameters (None: libhalite's default): background_loader, loader_rate (bytes/s of stored payload, 0 unlimited),
    preload_working_set, preload_all (eager), handler_threads (1..64), zero_window_pages, predict_segment_pages,
    predict_threshold, max_read_attempts. The checkpoint must stay open until close(). Touching the memory from
    Python is safe: faults are served by libhalite's own threads, which do not need the GIL."""

    def __init__(self, checkpoint: Checkpoint, **params: Optional[int]) -> None:
        self.checkpoint = checkpoint
        self._handle: Any = None
        out = ffi.new("hlt_restore**")
        check(lib.hlt_restore_create(checkpoint.handle, out))
        self._handle = out[0]
        checkpoint._restores.add(self)  # the reader must outlive the restore: Checkpoint.close() checks
        self._regions = checkpoint.regions
        self._maps: list[mmap.mmap] = []
        self._bases: list[Any] = []
        self._started = False
        for name, value in params.items():
            if name not in _PARAMS:
                self.close()
                raise errors.InvalidArgumentError(errors.HLT_EINVAL,
                                                  f"unknown restore parameter {name!r}: expected {sorted(_PARAMS)}")
            if value is not None:
                code = lib.hlt_restore_set_param(self._handle, _PARAMS[name], int(value))
                if code < 0:
                    try:
                        check(code)
                    finally:
                        self.close()

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, "the restore is closed")
        return self._handle

    def start(self) -> "MemoryRestore":
        """Maps each region's memory and starts serving it; runs a requested preload first. Releases the GIL."""
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        self._maps = [mmap.mmap(-1, max(r.size, PAGE_SIZE), flags=flags) for r in self._regions]
        self._bases = [ffi.from_buffer(m) for m in self._maps]  # held: the mmaps cannot be closed under the C code
        bases = ffi.new("void*[]", [ffi.cast("void*", b) for b in self._bases])
        check(lib.hlt_restore_start(self.handle, bases, len(self._maps)))
        self._started = True
        return self

    def memory(self, region: int) -> memoryview:
        """Region `region`'s memory (writable, valid until close()). Reading a page brings it in."""
        if not self._started:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, "memory() before start()")
        if not 0 <= region < len(self._regions):
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"region {region} out of range")
        return memoryview(self._maps[region])[:self._regions[region].size]

    def wait(self) -> None:
        """Blocks, without the GIL, until every stored page is in; raises the first error the loader met."""
        check(lib.hlt_restore_wait(self.handle))

    def stat(self, name: str) -> int:
        """One statistic by name (see STATS); thread-safe."""
        if name not in STATS:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"unknown statistic {name!r}: expected {STATS}")
        value = ffi.new("uint64_t*")
        check(lib.hlt_restore_get_stat(self.handle, STATS.index(name) + 1, value))
        return int(value[0])

    def stats(self) -> dict[str, int]:
        """Every statistic (fault counts, blocks and bytes read, pages installed, loader_done)."""
        return {name: self.stat(name) for name in STATS}

    def close(self) -> None:
        """Stops serving (idempotent); the memory stays, as ordinary memory, while memoryviews of it live."""
        if getattr(self, "_handle", None) is not None:
            lib.hlt_restore_destroy(self._handle)
            self._handle = None
            self.checkpoint._restores.discard(self)

    def __enter__(self) -> "MemoryRestore":
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
