"""The host image server (hlt_server_*): a checkpoint served as read-only image files that VMMs map privately, so
that every clone on the host shares one copy of each page it has not written. The server is libhalite's own daemon
(halite-image-server, installed with the library), a process that outlives this object."""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from . import errors
from ._lib import check, ffi, lib, path_bytes
from .checkpoint import open_options


_EXIT_WHEN_UNUSED, _START_TIMEOUT = 1, 2
_IMAGE_DIR, _PROGRAM = 1, 2


class Server:
    """The image server of `checkpoint` (a path, s3:// or rados:// URI), found serving under `image_dir` (its mount
    IMAGE_DIR/FILE_ID, where restores with memory="shared" look) or started there.

    exit_when_unused: seconds without an open file after which a server this call starts stops by itself (0:
    never; default 30, as the restores start it). program: the daemon (default halite-image-server installed with
    libhalite.so, else on PATH). start_timeout: seconds to wait for a started server's mount. The reader options
    (parent_dirs, key_files, keyring_file, block_cache, block_cache_size, environment) are Checkpoint's; they reach
    the server process as flags (a Keyring in memory cannot: InvalidArgumentError).

    Raises NotFoundError (no daemon), HaliteIOError (a server that exits or does not come up: the message ends with
    its log), and the checkpoint's errors. close() (or leaving `with`) frees this object and leaves the server to
    its clones; stop() stops it."""

    def __init__(self, checkpoint: str | os.PathLike[str], *, image_dir: str | os.PathLike[str] = "/run/halite/images",
                 exit_when_unused: int = 30, program: Optional[str | os.PathLike[str]] = None,
                 start_timeout: Optional[int] = None, parent_dirs: Sequence[str | os.PathLike[str]] = (),
                 key_files: Sequence[str | os.PathLike[str]] = (),
                 keyring_file: Optional[str | os.PathLike[str]] = None,
                 block_cache: Optional[str | os.PathLike[str]] = None, block_cache_size: Optional[int] = None,
                 environment: bool = True) -> None:
        self.checkpoint = os.fspath(checkpoint)
        out = ffi.new("hlt_server**")
        check(lib.hlt_server_create(path_bytes(self.checkpoint), out))
        self._handle: Any = out[0]
        try:
            check(lib.hlt_server_set_string(self._handle, _IMAGE_DIR, path_bytes(image_dir)))
            check(lib.hlt_server_set_param(self._handle, _EXIT_WHEN_UNUSED, exit_when_unused))
            if program is not None:
                check(lib.hlt_server_set_string(self._handle, _PROGRAM, path_bytes(program)))
            if start_timeout is not None:
                check(lib.hlt_server_set_param(self._handle, _START_TIMEOUT, start_timeout))
            with open_options(parent_dirs=parent_dirs, key_files=key_files, keyring_file=keyring_file,
                              block_cache=block_cache, block_cache_size=block_cache_size,
                              environment=environment) as options:
                check(lib.hlt_server_set_open_options(self._handle, options))
            check(lib.hlt_server_start(self._handle))
            mount = ffi.new("const char**")
            check(lib.hlt_server_get_mount(self._handle, mount))
            pid, started = ffi.new("uint64_t*"), ffi.new("int*")
            check(lib.hlt_server_get_pid(self._handle, pid, started))
        except BaseException:
            self.close()
            raise
        self.mount: str = ffi.string(mount[0]).decode()
        """IMAGE_DIR/FILE_ID: region R is the file MOUNT/ckpt.R; MOUNT/.stats the server's counters (JSON)."""
        self.pid: int = int(pid[0])
        """The server's process id."""
        self.started: bool = bool(started[0])
        """True when this object started the server, False when one was serving the checkpoint already."""

    def _live(self) -> Any:
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{self.checkpoint}: the server object is closed")
        return self._handle

    def image(self, region: str = "pc.ram") -> str:
        """The image file of `region` ('/' in its name reads %2f), for a VMM to map privately (QEMU:
        memory-backend-file,mem-path=PATH,share=off). NotFoundError when the checkpoint has no such region."""
        path = ffi.new("const char**")
        check(lib.hlt_server_get_image(self._live(), region.encode(), path))
        return str(ffi.string(path[0]).decode())

    def stop(self, force: bool = False, timeout: Optional[float] = 10.0) -> None:
        """Stops the server and waits up to `timeout` seconds (None: no bound) for it to unmount. While a VMM maps one
        of its files the server refuses (AbortedError) unless `force` (it unmounts at once; its process ends when
        the last VMM closes what it holds). The GIL is released while waiting."""
        ms = -1 if timeout is None else int(timeout * 1000)
        check(lib.hlt_server_stop(self._live(), int(force), ms))

    def close(self) -> None:
        """Frees this object (idempotent); the server goes on until unused or stopped."""
        if self._handle is not None:
            lib.hlt_server_destroy(self._handle)
            self._handle = None

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def serve(checkpoint: str | os.PathLike[str], **options: Any) -> Server:
    """Server(checkpoint, **options): the image server of a checkpoint, found or started."""
    return Server(checkpoint, **options)
