"""QEMU guests: save a running QEMU over its QMP socket (hlt-save qemu) and restore a checkpoint into QEMU (hlt-restore
qemu: lazy or eager, launch or attach, resume), with stock, unpatched QEMU."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

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
    return _run_save(lambda writer, out: lib.hlt_qemu_save_create(writer.handle, path_bytes(qmp), out), output,
                     [(_LIVE, int(live)), (_THEN_PARAM, _THEN[then]), (_VA_WALK, int(va_walk))], timeout, [],
                     writer_options)


def _run_save(create: Callable[[Writer, Any], Any], output: str | os.PathLike[str], params: list[tuple[int, int]],
              timeout: Optional[float], strings: list[tuple[int, bytes]], writer_options: dict[str, Any]) -> SaveResult:
    """The save of halite.qemu.save and halite.libvirt.save: a Writer for `output`, the save made by `create`
    (hlt_qemu_save_create, hlt_libvirt_save_create) over it, its params and strings set, run without the GIL, and
    its figures. On failure nothing is left at `output`."""
    writer = Writer(output, **writer_options)
    try:
        out = ffi.new("hlt_save**")
        check(create(writer, out))
        handle = out[0]
        try:
            if timeout is not None:
                params = params + [(_TIMEOUT_MS, max(1, round(timeout * 1000)))]
            for param, value in params:
                check(lib.hlt_save_set_param(handle, param, value))
            for option, text in strings:
                check(lib.hlt_save_set_string(handle, option, text))
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


# hlt_session_* (halite_c.h): a restore into QEMU, as hlt-restore qemu does it.
_SESSION_QEMU = 1
_EAGER, _RESUME, _LOADER_RATE, _START_PAUSED = 1, 4, 6, 7
_QMP_SOCKET, _QEMU_BINARY, _QEMU_DIR = 3, 4, 5
_STATES = {0: "created", 1: "starting", 2: "running", 3: "done", 4: "failed", 5: "detached"}
_EVENTS = {1: "notice", 2: "warning", 3: "running", 5: "done", 6: "failed"}


@dataclass(frozen=True)
class RestoreStats:
    """What a restore did so far (hlt_session_get_stat)."""

    state: str  # "created", "starting", "running", "done", "failed" or "detached"
    qemu_pid: int
    running_seconds: float  # restore start to the guest running (0 before)
    done_seconds: float  # restore start to every page in (0 before)
    pages_sent: int
    bytes_read: int  # checkpoint bytes read
    faults: int  # guest faults that waited for a block
    requests: int  # page requests QEMU sent
    resumed: bool  # this restore took over one whose restorer died
    resumable: bool  # it failed and QEMU waits for a restore with resume=True


@dataclass(frozen=True)
class Event:
    """One event of a restore: kind "notice", "warning", "running", "done" or "failed", and its text."""

    kind: str
    text: str


class Restore:
    """A restore into QEMU under way (from `restore`). The guest runs once it is returned (lazy restores); `wait`
    waits for every page. Closing it (or leaving its `with` block) before `detach` kills the QEMU it launched."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def __enter__(self) -> "Restore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> Any:
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, "the restore is closed")
        return self._handle

    def _stat(self, what: int) -> int:
        value = ffi.new("uint64_t*")
        check(lib.hlt_session_get_stat(self._live(), what, value))
        return int(value[0])

    @property
    def state(self) -> str:
        return _STATES.get(self._stat(1), "unknown")

    def stats(self) -> RestoreStats:
        """The figures now; safe while another thread waits."""
        s = self._stat
        return RestoreStats(state=_STATES.get(s(1), "unknown"), qemu_pid=s(2), running_seconds=s(3) / 1e6,
                            done_seconds=s(4) / 1e6, pages_sent=s(5), bytes_read=s(6), faults=s(7), requests=s(9),
                            resumed=bool(s(8)), resumable=bool(s(10)))

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits (without the GIL) until every page is in: True; False when `timeout` seconds passed first. A failed
        restore raises the error hlt-restore qemu would print."""
        ms = -1 if timeout is None else max(0, round(timeout * 1000))
        rc = lib.hlt_session_wait(self._live(), ms)
        if rc == errors.HLT_EABORTED:
            return False
        check(rc)
        return True

    def next_event(self, timeout: float = 0.0) -> Optional[Event]:
        """The oldest event not read yet, waiting up to `timeout` seconds; None when none came."""
        kind = ffi.new("hlt_event_kind*")
        text = ffi.new("const char**")
        rc = lib.hlt_session_next_event(self._live(), max(0, round(timeout * 1000)), kind, text)
        if rc == errors.HLT_ENOTFOUND:
            return None
        check(rc)
        return Event(_EVENTS.get(int(kind[0]), "unknown"), ffi.string(text[0]).decode(errors="replace"))

    def events(self) -> list[Event]:
        """Every event that came and was not read yet."""
        out: list[Event] = []
        while (event := self.next_event()) is not None:
            out.append(event)
        return out

    def detach(self) -> None:
        """After the restore ended: the QEMU keeps running when this handle closes and this process exits."""
        check(lib.hlt_session_detach(self._live()))

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            lib.hlt_session_destroy(handle)


def restore(checkpoint: str | os.PathLike[str], qemu_args: Sequence[str] = (), *,
            qmp: Optional[str | os.PathLike[str]] = None, qemu_dir: Optional[str | os.PathLike[str]] = None,
            qemu_binary: Optional[str] = None, eager: bool = False, resume: bool = False, loader_rate: int = 0,
            start_paused: bool = False) -> Restore:
    """hlt-restore qemu: restores `checkpoint` (a path, s3:// or rados://) into a QEMU launched with `qemu_args`
    (the saved QEMU's arguments; the binary is `qemu_binary`, default $HALITE_QEMU or qemu-system-x86_64; its QMP
    socket, logs and resume record go in `qemu_dir`), or into the QEMU waiting with -incoming defer behind the QMP
    socket `qmp`. Lazy by default: returns (without the GIL while it works) once the guest runs. eager: every page
    first (start_paused keeps the guest paused then); resume: take over a restore whose restorer died (the same
    qemu_dir or qmp); loader_rate: bytes per second of the background loader (0 unlimited)."""
    out = ffi.new("hlt_session**")
    check(lib.hlt_session_create(_SESSION_QEMU, path_bytes(checkpoint), out))
    session = Restore(out[0])
    try:
        handle = session._live()
        for param, value in ((_EAGER, int(eager)), (_RESUME, int(resume)), (_LOADER_RATE, int(loader_rate)),
                             (_START_PAUSED, int(start_paused))):
            check(lib.hlt_session_set_param(handle, param, value))
        for option, text in ((_QMP_SOCKET, qmp), (_QEMU_BINARY, qemu_binary), (_QEMU_DIR, qemu_dir)):
            if text is not None:
                check(lib.hlt_session_set_string(handle, option, path_bytes(text)))
        for arg in qemu_args:
            check(lib.hlt_session_add_qemu_arg(handle, arg.encode()))
        check(lib.hlt_session_start(handle))
    except BaseException:
        session.close()
        raise
    return session
