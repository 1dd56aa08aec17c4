"""Reading checkpoints: Checkpoint(uri) opens a file, s3://BUCKET/KEY or rados://POOL/NAME and reads it verified."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from . import errors
from ._lib import check, ffi, lib, libc, path_bytes
from .keyring import Keyring

PAGE_SIZE = 4096

PAGE_ABSENT = "absent"
PAGE_ZERO = "zero"
PAGE_STORED = "stored"
_PAGE_KINDS = {0: PAGE_ABSENT, 1: PAGE_ZERO, 2: PAGE_STORED}
_CIPHERS = {0: None, 1: "aes-256-gcm", 2: "xchacha20-poly1305"}


@dataclass(frozen=True)
class Region:
    """A guest memory region: its name (e.g. "pc.ram"), guest-physical base and size in bytes."""

    index: int
    name: str
    base: int
    size: int

    @property
    def pages(self) -> int:
        return self.size // PAGE_SIZE


@dataclass(frozen=True)
class PageLocation:
    """Where a page lives: kind is "absent", "zero" or "stored"; block and slot are set for stored pages."""

    kind: str
    block: Optional[int] = None
    slot: Optional[int] = None


@dataclass(frozen=True)
class Encryption:
    """How a checkpoint is encrypted: cipher ("aes-256-gcm", "xchacha20-poly1305") and the 16-byte key id."""

    cipher: str
    key_id: bytes


@dataclass(frozen=True)
class CheckpointInfo:
    """What Checkpoint.info() reports."""

    uri: str
    regions: tuple[Region, ...]
    block_count: int
    memory_bytes: int  # sum of the regions' sizes
    decoded_block_bytes: int  # what the blocks decompress to (stored pages)
    encryption: Optional[Encryption]


@dataclass(frozen=True)
class VerifyReport:
    """What Checkpoint.verify() checked: every block read, its checksum (and tag) verified and decompressed."""

    blocks: int
    decoded_bytes: int


class Checkpoint:
    """A checkpoint opened for reading. Every block read is checked (checksum, authentication tag) before use.

    uri: a path, s3://BUCKET/KEY or rados://POOL/NAME. parent_dirs: where to look for the parents of an incremental
    checkpoint that moved (after the path the child records). keyring: keys of an encrypted checkpoint or chain,
    besides HALITE_ENCRYPT_KEY / HALITE_KEYRING of the environment.

    Raises NotFoundError, HaliteIOError, CorruptCheckpointError, AuthenticationError (a key is missing: the message
    names its key id), UnsupportedError (a newer format). Reads may run from several threads at once; each releases
    the GIL while libhalite works. Close it (or use `with`) to free the file at once."""

    def __init__(self, uri: str | os.PathLike[str], *, parent_dirs: Sequence[str | os.PathLike[str]] = (),
                 keyring: Optional[Keyring] = None) -> None:
        self.uri = os.fspath(uri)
        self._keyring = keyring  # keeps a key-fetch callback alive while the reader may call it
        dirs = [ffi.new("char[]", path_bytes(d)) for d in parent_dirs]
        dir_array = ffi.new("const char*[]", dirs) if dirs else ffi.NULL
        out = ffi.new("hlt_reader**")
        check(lib.hlt_reader_open_keyed(path_bytes(self.uri), dir_array, len(dirs),
                                        keyring.handle if keyring is not None else ffi.NULL, out))
        self._handle: Any = out[0]

    # --- lifetime ---
    @property
    def handle(self) -> Any:
        """The C hlt_reader* (for other bindings of the C API); valid until close()."""
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{self.uri}: the checkpoint is closed")
        return self._handle

    def close(self) -> None:
        """Closes the checkpoint (idempotent). A MemoryRestore of it must be closed first."""
        if getattr(self, "_handle", None) is not None:
            lib.hlt_reader_close(self._handle)
            self._handle = None

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({self.uri!r})"

    # --- layout ---
    @property
    def regions(self) -> tuple[Region, ...]:
        """The memory regions, in the checkpoint's order."""
        name = ffi.new("const char**")
        base = ffi.new("uint64_t*")
        size = ffi.new("uint64_t*")
        regions = []
        for i in range(lib.hlt_reader_region_count(self.handle)):
            check(lib.hlt_reader_region(self.handle, i, name, base, size))
            regions.append(Region(i, ffi.string(name[0]).decode(), base[0], size[0]))
        return tuple(regions)

    def region(self, name_or_index: str | int) -> Region:
        """A region by name or index (NotFoundError if there is none)."""
        for r in self.regions:
            if r.name == name_or_index or r.index == name_or_index:
                return r
        raise errors.NotFoundError(errors.HLT_ENOTFOUND, f"{self.uri}: no region {name_or_index!r}")

    @property
    def block_count(self) -> int:
        return int(lib.hlt_reader_block_count(self.handle))

    def block_size(self, block: int) -> int:
        """Bytes block `block` decompresses to (its page count times 4096)."""
        self._check_block(block)
        return int(lib.hlt_reader_block_size(self.handle, block))

    def lookup(self, region: int, page: int) -> PageLocation:
        """Where page `page` of region `region` lives."""
        kind = ffi.new("int*")
        block = ffi.new("uint32_t*")
        slot = ffi.new("uint32_t*")
        check(lib.hlt_reader_lookup(self.handle, region, page, kind, block, slot))
        if kind[0] == 2:
            return PageLocation(PAGE_STORED, block[0], slot[0])
        return PageLocation(_PAGE_KINDS.get(kind[0], str(kind[0])))

    @property
    def encryption(self) -> Optional[Encryption]:
        """The cipher and key id of an encrypted checkpoint; None for a plain one."""
        cipher = ffi.new("int*")
        key_id = ffi.new("uint8_t[16]")
        if check(lib.hlt_reader_encryption(self.handle, cipher, key_id)) == 0:
            return None
        return Encryption(_CIPHERS.get(cipher[0], str(cipher[0])) or "unknown", bytes(ffi.buffer(key_id)))

    # --- content ---
    def read_page(self, region: int, page: int) -> bytes:
        """One page's 4096 bytes (zero and absent pages read as zeros)."""
        buf = ffi.new("uint8_t[]", PAGE_SIZE)
        check(lib.hlt_reader_read_page(self.handle, region, page, buf))
        return bytes(ffi.buffer(buf))

    def read_pages(self, region: int, first: int = 0, count: Optional[int] = None) -> bytes:
        """Pages [first, first + count) of a region as one bytes object (count: to the region's end)."""
        if count is None:
            count = self.region(region).pages - first
        buf = bytearray(count * PAGE_SIZE)
        out = ffi.from_buffer(buf)
        for i in range(count):
            check(lib.hlt_reader_read_page(self.handle, region, first + i, out + i * PAGE_SIZE))
        return bytes(buf)

    def read_block(self, block: int) -> bytes:
        """Block `block`, read, verified and decompressed: its pages in slot order."""
        size = self.block_size(block)
        buf = ffi.new("uint8_t[]", size)
        check(lib.hlt_reader_read_block(self.handle, block, buf, size))
        return bytes(ffi.buffer(buf))

    def read_blob(self, name: str) -> bytes:
        """The named blob (device state, domain XML, ...). NotFoundError when the checkpoint has none of that name."""
        data = ffi.new("void**")
        size = ffi.new("size_t*")
        check(lib.hlt_reader_read_blob(self.handle, name.encode(), data, size))
        try:
            return bytes(ffi.buffer(data[0], size[0])) if size[0] else b""
        finally:
            libc.free(data[0])

    def blocks(self) -> Iterator[bytes]:
        """Every block in order, each verified and decompressed."""
        for block in range(self.block_count):
            yield self.read_block(block)

    # --- inspection ---
    def info(self) -> CheckpointInfo:
        """The checkpoint's regions, block count, sizes and encryption."""
        regions = self.regions
        blocks = self.block_count
        decoded = sum(int(lib.hlt_reader_block_size(self.handle, b)) for b in range(blocks))
        return CheckpointInfo(self.uri, regions, blocks, sum(r.size for r in regions), decoded, self.encryption)

    def verify(self) -> VerifyReport:
        """Reads every block, checking its checksum (and authentication tag) and decompressing it.

        Raises CorruptCheckpointError (or AuthenticationError, HaliteIOError) at the first block that fails, with
        the message naming the file, the block and its offset. The GIL is released while each block is checked."""
        decoded = 0
        for block in range(self.block_count):
            size = int(lib.hlt_reader_block_size(self.handle, block))
            buf = ffi.new("uint8_t[]", size)
            check(lib.hlt_reader_read_block(self.handle, block, buf, size))
            decoded += size
        return VerifyReport(self.block_count, decoded)

    def _check_block(self, block: int) -> None:
        if not 0 <= block < self.block_count:
            raise errors.InvalidArgumentError(
                errors.HLT_EINVAL, f"{self.uri}: block {block} out of range (the checkpoint has {self.block_count})")
