"""Reading checkpoints: Checkpoint(uri) opens a file, s3://BUCKET/KEY or rados://POOL/NAME and reads it verified."""
from __future__ import annotations

import contextlib
import json
import os
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from . import errors
from ._lib import check, ffi, lib, path_bytes
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
    """What Checkpoint.info() reports: the figures of `hlt-restore info` (Checkpoint.info_json() gives its JSON).
    Page counts are of the checkpoint's view (a chain's pages as this file sees them); 0 when opened without_key."""

    uri: str
    regions: tuple[Region, ...]
    encryption: Optional[Encryption]
    format: tuple[int, int]  # (major, minor) of format-spec
    file_size: int  # bytes of this file (not its parents)
    pages: int
    stored_pages: int  # pages = stored + zero + absent: stored includes duplicates (WriteStats' does not)
    duplicate_pages: int
    zero_pages: int
    absent_pages: int
    raw_bytes: int
    blocks: int
    compressed_blocks: int
    framed_blocks: int
    dictionary_blocks: int
    hot_blocks: int
    block_bytes: int
    blobs: int
    blob_bytes: int
    dictionary_bytes: int
    index_bytes: int
    restore_order_blocks: int
    working_set_blocks: int
    chain_depth: int  # parent links below this file; 0 for a full checkpoint
    authenticated: bool
    encrypted: bool
    sealed: bool  # opened without its key
    page_hashes: bool
    vmm: str  # "raw", "qemu", "xen", "other"
    created_unix_ns: int

    @property
    def memory_bytes(self) -> int:
        """The regions' sizes summed."""
        return sum(r.size for r in self.regions)


@dataclass(frozen=True)
class ChainFile:
    """One file of an incremental chain (format-spec 12); level 0 is the file opened, the last a full checkpoint."""

    level: int
    name: str  # the path it was opened at
    parent_hint: str  # how it names its parent ("" for the full checkpoint at the end)
    file_id: bytes
    file_size: int
    format_minor: int
    depth: int  # parent links below this file
    blocks: int
    block_bytes: int
    live_blocks: int  # blocks of this file the checkpoint takes pages from
    pages: int  # pages of the checkpoint this file serves
    based_blocks: int
    dictionary_bytes: int


@dataclass(frozen=True)
class VerifyReport:
    """What Checkpoint.verify() checked: every block and blob of every file of the chain, every rule and page hash."""

    blocks: int
    files: int


# hlt_info values, in the order of CheckpointInfo's figures from `file_size` on (format is 1 and 2).
_INFO_FIELDS = (
    ("file_size", 3), ("pages", 4), ("stored_pages", 5), ("duplicate_pages", 6), ("zero_pages", 7),
    ("absent_pages", 8), ("raw_bytes", 9), ("blocks", 10), ("compressed_blocks", 11), ("framed_blocks", 12),
    ("dictionary_blocks", 13), ("hot_blocks", 14), ("block_bytes", 15), ("blobs", 16), ("blob_bytes", 17),
    ("dictionary_bytes", 18), ("index_bytes", 19), ("restore_order_blocks", 20), ("working_set_blocks", 21),
    ("chain_depth", 22), ("authenticated", 23), ("encrypted", 24), ("sealed", 25), ("page_hashes", 26),
    ("vmm", 27), ("created_unix_ns", 28),
)
_BOOL_INFO = {"authenticated", "encrypted", "sealed", "page_hashes"}
_VMM_NAMES = {0: "raw", 1: "qemu", 2: "xen", 3: "other"}
_CHAIN_FIELDS = ("file_size", "format_minor", "depth", "blocks", "block_bytes", "live_blocks", "pages",
                 "based_blocks", "dictionary_bytes")
READER_STATS = ("storage_requests", "storage_bytes", "blocks_fetched", "block_bytes_fetched", "cache_hits",
                "cache_misses", "cache_dropped", "cache_inserts")


@contextlib.contextmanager
def open_options(*, parent_dirs: Sequence[str | os.PathLike[str]] = (), keyring: Optional[Keyring] = None,
                 key_files: Sequence[str | os.PathLike[str]] = (),
                 keyring_file: Optional[str | os.PathLike[str]] = None,
                 mac_key_file: Optional[str | os.PathLike[str]] = None,
                 block_cache: Optional[str | os.PathLike[str]] = None, block_cache_size: Optional[int] = None,
                 without_key: bool = False, max_chain_depth: Optional[int] = None,
                 environment: bool = True) -> Iterator[Any]:
    """The C hlt_open_options* of the reader flags (Checkpoint's options), freed on leaving the block."""
    strings: list[tuple[int, str | os.PathLike[str]]] = [(2, d) for d in parent_dirs]
    strings += [(4, f) for f in key_files]
    for option, value in ((1, block_cache), (3, mac_key_file), (5, keyring_file)):
        if value is not None:
            strings.append((option, value))
    params = [(2, int(without_key)), (4, int(environment))]
    if block_cache_size is not None:
        params.append((1, block_cache_size))
    if max_chain_depth is not None:
        params.append((3, max_chain_depth))
    options_out = ffi.new("hlt_open_options**")
    check(lib.hlt_open_options_create(options_out))
    options = options_out[0]
    try:
        for param, number in params:
            check(lib.hlt_open_options_set_param(options, param, number))
        for option, text in strings:
            check(lib.hlt_open_options_set_string(options, option, path_bytes(text)))
        if keyring is not None:
            check(lib.hlt_open_options_set_keyring(options, keyring.handle))
        yield options
    finally:
        lib.hlt_open_options_free(options)


class Checkpoint:
    """A checkpoint opened for reading. Every block read is checked (checksum, authentication tag) before use.

    uri: a path, s3://BUCKET/KEY or rados://POOL/NAME. Options, named after hlt-restore's reader flags:
    parent_dirs (where moved parents of an incremental checkpoint are looked for, after the path the child records),
    keyring (keys of an encrypted checkpoint or chain, looked up first), key_files (files of one key, 64 hex
    digits), keyring_file, mac_key_file (the checkpoint must be authenticated with this key), block_cache (a host
    block cache directory for s3:// and rados:// blocks) and block_cache_size (bytes), without_key (open an
    encrypted checkpoint without its key: info and verify only), max_chain_depth (0..16), environment (False:
    ignore HALITE_BLOCK_CACHE*, HALITE_ENCRYPT_KEY and HALITE_KEYRING).

    Raises NotFoundError, HaliteIOError, CorruptCheckpointError, AuthenticationError (a key is missing: the message
    names its key id), UnsupportedError (a newer format). Reads may run from several threads at once; each releases
    the GIL while libhalite works. Close it (or use `with`) to free the file at once."""

    def __init__(self, uri: str | os.PathLike[str], *, parent_dirs: Sequence[str | os.PathLike[str]] = (),
                 keyring: Optional[Keyring] = None, key_files: Sequence[str | os.PathLike[str]] = (),
                 keyring_file: Optional[str | os.PathLike[str]] = None,
                 mac_key_file: Optional[str | os.PathLike[str]] = None,
                 block_cache: Optional[str | os.PathLike[str]] = None, block_cache_size: Optional[int] = None,
                 without_key: bool = False, max_chain_depth: Optional[int] = None, environment: bool = True) -> None:
        self.uri = os.fspath(uri)
        self._handle: Any = None
        self._restores: weakref.WeakSet[Any] = weakref.WeakSet()  # MemoryRestores reading through this reader
        self._keyring = keyring  # keeps a key-fetch callback alive while the reader may call it
        with open_options(parent_dirs=parent_dirs, keyring=keyring, key_files=key_files, keyring_file=keyring_file,
                          mac_key_file=mac_key_file, block_cache=block_cache, block_cache_size=block_cache_size,
                          without_key=without_key, max_chain_depth=max_chain_depth,
                          environment=environment) as options:
            out = ffi.new("hlt_reader**")
            check(lib.hlt_reader_open_with(path_bytes(self.uri), options, out))
        self._handle = out[0]

    # --- lifetime ---
    @property
    def handle(self) -> Any:
        """The C hlt_reader* (for other bindings of the C API); valid until close()."""
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, f"{self.uri}: the checkpoint is closed")
        return self._handle

    def close(self) -> None:
        """Closes the checkpoint (idempotent). InvalidArgumentError while a MemoryRestore of it is open."""
        if getattr(self, "_restores", None):
            raise errors.InvalidArgumentError(errors.HLT_EINVAL,
                                              f"{self.uri}: close its MemoryRestore first (it reads through it)")
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
            lib.hlt_free(data[0])

    def blocks(self) -> Iterator[bytes]:
        """Every block in order, each verified and decompressed."""
        for block in range(self.block_count):
            yield self.read_block(block)

    # --- inspection ---
    def info(self) -> CheckpointInfo:
        """The figures `hlt-restore info` prints (the page counts take one pass over the page map, made once)."""
        value = ffi.new("uint64_t*")

        def figure(what: int) -> int:
            check(lib.hlt_reader_get_info(self.handle, what, value))
            return int(value[0])

        figures: dict[str, Any] = {name: figure(what) for name, what in _INFO_FIELDS}
        for name in _BOOL_INFO:
            figures[name] = bool(figures[name])
        figures["vmm"] = _VMM_NAMES.get(figures["vmm"], str(figures["vmm"]))
        return CheckpointInfo(uri=self.uri, regions=self.regions, encryption=self.encryption,
                              format=(figure(1), figure(2)), **figures)

    def info_json(self) -> dict[str, Any]:
        """The JSON document `hlt-restore info --json` prints, parsed (the same bytes: the library makes both)."""
        return dict(json.loads(self.info_json_text()))

    def info_json_text(self) -> str:
        """The JSON text of `hlt-restore info --json`, byte for byte (one line and a newline)."""
        out = ffi.new("char**")
        check(lib.hlt_reader_info_json(self.handle, out))
        try:
            return str(ffi.string(out[0]).decode())
        finally:
            lib.hlt_free(out[0])

    def verify(self, progress: Optional[Callable[[int, int], None]] = None) -> VerifyReport:
        """hlt-restore verify: reads and checks every block and blob of every file of the chain, every rule and every
        page hash (opened without_key: the structure and every payload's checksum). The GIL is released while it
        works; progress(blocks_done, blocks_total), if given, is called now and then with the GIL taken.

        Raises CorruptCheckpointError, AuthenticationError or HaliteIOError at the first failure, the message naming
        the file, the offset and what was expected."""
        failure: list[BaseException] = []
        callback: Any = ffi.NULL
        if progress is not None:
            report: Callable[[int, int], None] = progress

            def trampoline(ctx: Any, done: int, total: int) -> None:
                if not failure:
                    try:
                        report(int(done), int(total))
                    except BaseException as e:  # raised after the C call returns, not lost in C
                        failure.append(e)
            callback = ffi.callback("hlt_progress_fn", trampoline)
        check(lib.hlt_reader_verify(self.handle, callback, ffi.NULL))
        if failure:
            raise failure[0]
        chain = self.chain()
        return VerifyReport(blocks=sum(f.blocks for f in chain), files=len(chain))

    def chain(self) -> tuple[ChainFile, ...]:
        """The files of the checkpoint's chain, the file opened first (one entry for a full checkpoint)."""
        name = ffi.new("const char**")
        hint = ffi.new("const char**")
        file_id = ffi.new("uint8_t[16]")
        value = ffi.new("uint64_t*")
        files = []
        for level in range(lib.hlt_reader_chain_length(self.handle)):
            check(lib.hlt_reader_chain_file(self.handle, level, name, hint, file_id))
            figures = {}
            for what, field in enumerate(_CHAIN_FIELDS, start=1):
                check(lib.hlt_reader_chain_get(self.handle, level, what, value))
                figures[field] = int(value[0])
            files.append(ChainFile(level, ffi.string(name[0]).decode(), ffi.string(hint[0]).decode(),
                                   bytes(ffi.buffer(file_id)), **figures))
        return tuple(files)

    def stats(self) -> dict[str, int]:
        """Storage statistics since open (requests, bytes, blocks fetched, block cache hits and misses)."""
        value = ffi.new("uint64_t*")
        out = {}
        for what, name in enumerate(READER_STATS, start=1):
            check(lib.hlt_reader_get_stat(self.handle, what, value))
            out[name] = int(value[0])
        return out

    def _check_block(self, block: int) -> None:
        if not 0 <= block < self.block_count:
            raise errors.InvalidArgumentError(
                errors.HLT_EINVAL, f"{self.uri}: block {block} out of range (the checkpoint has {self.block_count})")
