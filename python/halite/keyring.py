"""Keys of encrypted checkpoints (format-spec 13): a Keyring holds 32-byte keys by key id."""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from . import errors
from ._lib import check, ffi, lib, path_bytes

KEY_SIZE = 32
KEY_ID_SIZE = 16

# fetch(key_id) -> the 32-byte key, or None when it is not known.
KeyFetcher = Callable[[bytes], Optional[bytes]]


def key_id(key: bytes) -> bytes:
    """The 16-byte key id of a 32-byte key (what a checkpoint's header names)."""
    out = ffi.new("uint8_t[16]")
    check(lib.hlt_key_id(key, len(key), out))
    return bytes(ffi.buffer(out))


def generate_key() -> bytes:
    """A new random 32-byte key (os.urandom)."""
    return os.urandom(KEY_SIZE)


class Keyring:
    """Keys by key id, for opening encrypted checkpoints and chains whose files use different keys.

    Thread-safe (the C keyring is). A Checkpoint opened with a keyring keeps its own reference to the C keyring,
    so the Keyring may be closed afterwards."""

    def __init__(self) -> None:
        out = ffi.new("hlt_keyring**")
        check(lib.hlt_keyring_create(out))
        self._handle: Any = out[0]
        self._fetch_callback: Any = None
        self._fetch_error: Optional[BaseException] = None

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise errors.InvalidArgumentError(errors.HLT_EINVAL, "the keyring is closed")
        return self._handle

    def add_key(self, key: bytes) -> bytes:
        """Adds a 32-byte key; returns its key id."""
        out = ffi.new("uint8_t[16]")
        check(lib.hlt_keyring_add_key(self.handle, key, len(key), out))
        return bytes(ffi.buffer(out))

    def add_file(self, path: str | os.PathLike[str]) -> None:
        """Adds the keys of a keyring file ("KEY_ID KEY" lines of 32 and 64 hex digits, '#' comments)."""
        check(lib.hlt_keyring_add_file(self.handle, path_bytes(path)))

    def set_fetch(self, fetch: KeyFetcher) -> None:
        """Asks `fetch(key_id)` for a key the keyring lacks (at most once per id; how a broker asks its KMS).

        It is called from the thread that opens a checkpoint, with the GIL taken for the call; returning None (or
        raising) makes the open fail with AuthenticationError naming the key id."""

        def trampoline(ctx: Any, key_id_ptr: Any, key_out: Any) -> int:
            try:
                key = fetch(bytes(ffi.buffer(key_id_ptr, KEY_ID_SIZE)))
            except BaseException as e:  # reported by the failed open, not lost in a C thread
                self._fetch_error = e
                return errors.HLT_EAUTH
            if key is None:
                return errors.HLT_EAUTH
            if len(key) != KEY_SIZE:
                return errors.HLT_EINVAL
            ffi.memmove(key_out, key, KEY_SIZE)
            return 0

        callback = ffi.callback("hlt_key_fetch_fn", trampoline, error=errors.HLT_EAUTH)
        check(lib.hlt_keyring_set_fetch(self.handle, callback, ffi.NULL))
        self._fetch_callback = callback  # the C keyring calls it as long as it lives

    def close(self) -> None:
        """Wipes the keys and frees the keyring (idempotent)."""
        if self._handle is not None:
            lib.hlt_keyring_free(self._handle)
            self._handle = None

    def __enter__(self) -> "Keyring":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
