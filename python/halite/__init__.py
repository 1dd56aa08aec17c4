"""libhalite for Python: VM checkpoints with locality blocks and lazy restore.

A binding of libhalite's C API (halite_c.h, libhalite.so) with cffi in ABI mode. Every call into libhalite
releases the GIL while it runs. Errors raise a HaliteError subclass per C error code, with the detailed message the
tools print.

    import halite
    with halite.Checkpoint("vm.hlt") as ckpt:
        print(ckpt.info())
        ckpt.verify()
"""
from __future__ import annotations

__version__ = "0.1.0"

from ._lib import library_path
from .checkpoint import (PAGE_SIZE, READER_STATS, ChainFile, Checkpoint, CheckpointInfo, Encryption, PageLocation,
                         Region, VerifyReport)
from .errors import (AbortedError, AuthenticationError, CorruptCheckpointError, HaliteError, HaliteIOError,
                     InternalError, InvalidArgumentError, NotFoundError, UnsupportedError)
from .keyring import Keyring, generate_key, key_id
from .memory_restore import MemoryRestore, probe
from .server import Server, serve
from .writer import WriteStats, Writer
from . import libvirt, qemu

__all__ = [
    "PAGE_SIZE", "READER_STATS", "ChainFile", "WriteStats", "Checkpoint", "CheckpointInfo", "Encryption", "PageLocation", "Region", "VerifyReport",
    "AbortedError", "AuthenticationError", "CorruptCheckpointError", "HaliteError", "HaliteIOError", "InternalError",
    "InvalidArgumentError", "NotFoundError", "UnsupportedError", "Keyring", "generate_key", "key_id",
    "MemoryRestore", "probe", "Server", "serve", "Writer", "libvirt", "qemu", "library_path", "__version__",
]
