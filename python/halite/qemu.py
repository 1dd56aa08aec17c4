"""QEMU guests: save a running QEMU over its QMP socket (hlt-save qemu), with stock, unpatched QEMU."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from . import errors
from ._lib import check, ffi, lib, path_bytes
from .writer import Writer, WriteStats

_THEN = {"cont": 0, "stop": 1, "quit": 2}
_LIVE, _THEN_PARAM, _VA_WALK, _TIMEOUT_MS = 1, 2, 3, 4


@dataclass(frozen=True)
class SaveResult:
    """What a save did: QEMU's side (the migration stream) and the checkpoint written (`checkpoint`)."""

    ramblocks: int  # regions
    data_pages: int  # pages QEMU sent with content
    zero_pages: int
    stream_bytes: int
    stream_seconds: float
    guest_stopped_seconds: float  # stop to cont of a stopped-guest save (0 if it stays stopped)
    state_blob_bytes: int  # QEMU's device state, the blob "qemu.state"
    live: bool
    total_seconds: float
    checkpoint: WriteStats


def save(qmp: str | os.PathLike[str], output: str | os.PathLike[str], *, live: bool = False, then: str = "cont",
         va_walk: bool = True, timeout: Optional[float] = None, **writer_options: Any) -> SaveResult:
    """hlt-save qemu: saves the QEMU whose QMP unix socket is `qmp` into the checkpoint `output`.

    live: a background snapshot, the guest keeps running; then: what the guest does after ("cont", "stop" or
    "quit"); va_walk: False skips the page-table walk that orders pages by guest-virtual address; timeout: seconds
    for connecting to QMP and for the whole stream (libhalite's defaults 5 s and 600 s). writer_options: Writer's
    keyword options (block_pages, level, policy, encryption_key, parent, ...).

    Blocks without the GIL until the checkpoint is committed. On failure (no QEMU listening, QEMU refusing, a
    stream error) raises the HaliteError whose message hlt-save qemu would print; nothing is left at `output`."""
    if then not in _THEN:
        raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"then {then!r}: expected one of {sorted(_THEN)}")
    writer = Writer(output, **writer_options)
    try:
        out = ffi.new("hlt_save**")
        check(lib.hlt_qemu_save_create(writer.handle, path_bytes(qmp), out))
        handle = out[0]
        try:
            params = [(_LIVE, int(live)), (_THEN_PARAM, _THEN[then]), (_VA_WALK, int(va_walk))]
            if timeout is not None:
                params.append((_TIMEOUT_MS, max(1, round(timeout * 1000))))
            for param, value in params:
                check(lib.hlt_save_set_param(handle, param, value))
            check(lib.hlt_save_run(handle))
            figures = _save_stats(handle)
        finally:
            lib.hlt_save_free(handle)
        return SaveResult(checkpoint=writer._committed_by_save(), **figures)
    finally:
        writer.abort()  # a failed save: nothing is left at `output`


def _save_stats(handle: Any) -> dict[str, Any]:
    value = ffi.new("uint64_t*")

    def stat(what: int) -> int:
        check(lib.hlt_save_get_stat(handle, what, value))
        return int(value[0])

    return {
        "ramblocks": stat(1), "data_pages": stat(2), "zero_pages": stat(3), "stream_bytes": stat(4),
        "stream_seconds": stat(5) / 1e6, "guest_stopped_seconds": stat(6) / 1e6, "state_blob_bytes": stat(7),
        "live": bool(stat(8)), "total_seconds": stat(9) / 1e6,
    }
