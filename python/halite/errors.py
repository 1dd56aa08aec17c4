"""Exceptions: one class per HLT_E* code of the C API, each carrying the code and hlt_last_error()'s message (the
text the tools print: file, offset, what was expected)."""
from __future__ import annotations

HLT_EINVAL = -1
HLT_EIO = -2
HLT_ECORRUPT = -3
HLT_EUNSUPPORTED = -4
HLT_ENOTFOUND = -5
HLT_EAUTH = -6
HLT_EABORTED = -7
HLT_EINTERNAL = -8


class HaliteError(Exception):
    """A failed libhalite call. `code` is the C API's negative HLT_E* code, `message` the detailed message."""

    code: int = 0

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidArgumentError(HaliteError, ValueError):
    """HLT_EINVAL: a bad argument (out-of-range index, wrong buffer size, unknown option value)."""


class HaliteIOError(HaliteError, OSError):
    """HLT_EIO: an I/O error reading or writing a checkpoint (may be transient)."""

    def __init__(self, code: int, message: str) -> None:
        HaliteError.__init__(self, code, message)


class CorruptCheckpointError(HaliteError):
    """HLT_ECORRUPT: the checkpoint breaks the format (bad magic, checksum mismatch, offsets out of range)."""


class UnsupportedError(HaliteError):
    """HLT_EUNSUPPORTED: not possible here (no userfaultfd, a newer format, a function this libhalite lacks)."""


class NotFoundError(HaliteError, LookupError):
    """HLT_ENOTFOUND: a file, blob, parent or domain that does not exist."""


class AuthenticationError(HaliteError):
    """HLT_EAUTH: a key is missing or wrong, or authenticated data failed its check."""


class AbortedError(HaliteError):
    """HLT_EABORTED: the operation was cancelled."""


class InternalError(HaliteError):
    """HLT_EINTERNAL: a bug in libhalite."""


_BY_CODE: dict[int, type[HaliteError]] = {
    HLT_EINVAL: InvalidArgumentError,
    HLT_EIO: HaliteIOError,
    HLT_ECORRUPT: CorruptCheckpointError,
    HLT_EUNSUPPORTED: UnsupportedError,
    HLT_ENOTFOUND: NotFoundError,
    HLT_EAUTH: AuthenticationError,
    HLT_EABORTED: AbortedError,
    HLT_EINTERNAL: InternalError,
}


def from_code(code: int, message: str) -> HaliteError:
    """The exception for an HLT_E* code (HaliteError itself for a code this package does not know)."""
    return _BY_CODE.get(code, HaliteError)(code, message)
