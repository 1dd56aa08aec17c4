"""libvirt domains: save a running domain with its disks (hlt-save libvirt, hlt_libvirt_save_create), and restore
such a checkpoint into a domain that libvirt starts and manages (hlt-restore libvirt: as itself or as a clone, lazy,
eager or with its RAM shared from the host's image server; resume of a restore whose restorer died), over the C
API's HLT_SESSION_LIBVIRT sessions."""
from __future__ import annotations

import os
from typing import Any, Optional, Union

from . import errors
from ._lib import check, ffi, lib, path_bytes
from .qemu import Restore, SaveResult, _run_save

_SESSION_LIBVIRT = 2
_EAGER, _MEMORY_SHARED, _CLONE, _RESUME, _LOADER_RATE, _START_PAUSED = 1, 2, 3, 4, 6, 7
_CONNECT, _DOMAIN_NAME, _IMAGE_DIR, _STATUS_FILE, _DISK_DIR, _RAM_DIR, _SERVER_PROGRAM = 1, 2, 6, 7, 8, 9, 10
_MEMORY = ("copy", "shared")
_THEN = {"cont": 0, "stop": 1, "destroy": 3}
_LIVE, _THEN_PARAM, _VA_WALK = 1, 2, 3
_SAVE_CONNECT = 2

PathLike = Union[str, "os.PathLike[str]"]


def save(domain: str, output: PathLike, *, connect: Optional[str] = None, live: bool = False, then: str = "cont",
         va_walk: bool = True, timeout: Optional[float] = None, **writer_options: Any) -> SaveResult:
    """hlt-save libvirt: saves running domain `domain` of the libvirt at `connect` (default libvirt's) into the
    checkpoint `output`, its writable disks frozen at the same instant (each restore gets overlays of its own).

    live: the guest runs on while its memory is saved; then: afterwards "cont" (a guest that was running runs
    again), "stop" (left paused) or "destroy"; va_walk, timeout and writer_options: as halite.qemu.save. Blocks
    without the GIL until the checkpoint is committed; on failure raises the error hlt-save libvirt would print,
    and nothing is left at `output`."""
    if then not in _THEN:
        raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"then {then!r}: expected one of {sorted(_THEN)}")
    strings = [] if connect is None else [(_SAVE_CONNECT, connect.encode())]
    return _run_save(lambda writer, out: lib.hlt_libvirt_save_create(writer.handle, domain.encode(), out), output,
                     [(_LIVE, int(live)), (_THEN_PARAM, _THEN[then]), (_VA_WALK, int(va_walk))], timeout, strings,
                     writer_options)


class DomainRestore(Restore):
    """A restore into a libvirt domain under way (from `restore`): the Restore handle of halite.qemu (state, stats,
    events, wait, detach, close) plus the domain's name and UUID. The domain is libvirt's: closing the handle of a
    restore still going on waits for its end, and the domain outlives the handle either way."""

    def __enter__(self) -> "DomainRestore":
        return self

    def _domain(self) -> tuple[str, str]:
        name = ffi.new("const char**")
        uuid = ffi.new("const char**")
        check(lib.hlt_session_get_domain(self._live(), name, uuid))
        return ffi.string(name[0]).decode(), ffi.string(uuid[0]).decode()

    @property
    def domain(self) -> str:
        """The domain's name, once libvirt started it (NotFoundError before)."""
        return self._domain()[0]

    @property
    def uuid(self) -> str:
        """The domain's UUID ("" for a resume: the restore taken over knows it)."""
        return self._domain()[1]


def restore(checkpoint: PathLike, *, connect: Optional[str] = None, clone: bool = False, name: Optional[str] = None,
            memory: str = "copy", eager: bool = False, resume: Optional[str] = None, loader_rate: int = 0,
            start_paused: bool = False, disk_dir: Optional[PathLike] = None, image_dir: Optional[PathLike] = None,
            ram_dir: Optional[PathLike] = None, server_program: Optional[PathLike] = None,
            status_file: Optional[PathLike] = None) -> DomainRestore:
    """hlt-restore libvirt: restores `checkpoint` (a path, s3:// or rados://, saved by hlt-save libvirt) into a
    transient domain of the libvirt at `connect` (default libvirt's), returning (without the GIL while it works) once
    the guest runs; `wait` waits for every page.

    clone: a new identity (name `name`, default "<saved>-clone-<8 hex digits>"; new UUID, MACs, VM generation ID;
    disk overlays in `disk_dir`, default beside the checkpoint). memory "shared": the guest RAM a private mapping
    of the host image server's image (under `image_dir`, default /run/halite/images; libvirt's memory backing
    directory `ram_dir`, default the URI's); the servers are `server_program`'s `serve` and `serve-ram-dir` modes,
    default libhalite's daemon halite-image-server (PREFIX/libexec/halite1 beside libhalite.so, else on PATH), and
    outlive the restore. eager: every page
    before the guest runs. start_paused: the guest stays paused until `virsh resume`. loader_rate: bytes per second
    of the background loader (0 unlimited). resume=DOMAIN: take over the lazy restore of DOMAIN whose restorer died
    ($HALITE_RUN_DIR's record must name this checkpoint). status_file: the JSON file a broker polls (state, domain,
    uuid, pid)."""
    if memory not in _MEMORY:
        raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"memory: expected 'copy' or 'shared', not {memory!r}")
    if resume is not None and name is not None:
        raise errors.InvalidArgumentError(errors.HLT_EINVAL, "resume names the domain; name is for a new restore")
    out = ffi.new("hlt_session**")
    check(lib.hlt_session_create(_SESSION_LIBVIRT, path_bytes(checkpoint), out))
    session = DomainRestore(out[0])
    try:
        handle: Any = session._live()
        params = ((_EAGER, int(eager)), (_MEMORY_SHARED, int(memory == "shared")), (_CLONE, int(clone)),
                  (_RESUME, int(resume is not None)), (_LOADER_RATE, int(loader_rate)),
                  (_START_PAUSED, int(start_paused)))
        for param, value in params:
            check(lib.hlt_session_set_param(handle, param, value))
        strings = ((_CONNECT, connect), (_DOMAIN_NAME, resume if resume is not None else name),
                   (_DISK_DIR, disk_dir), (_IMAGE_DIR, image_dir), (_RAM_DIR, ram_dir),
                   (_SERVER_PROGRAM, server_program), (_STATUS_FILE, status_file))
        for option, text in strings:
            if text is not None:
                check(lib.hlt_session_set_string(handle, option, path_bytes(text)))
        check(lib.hlt_session_start(handle))
    except BaseException:
        session.close()
        raise
    return session
