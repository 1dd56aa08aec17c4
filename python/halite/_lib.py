"""Loads libhalite's C API with cffi in ABI mode (ffi.dlopen; no compiler at install time).

Where the library comes from, first found wins:
  1. HALITE_LIBRARY: a path to libhalite.so (a build, an ASan build, a test's copy);
  2. the build tree this package sits in (python/ beside build/libhalite/ in a checkout, or an editable install);
  3. the system's libhalite by SONAME (libhalite.so.1), as the libhalite1 package installs it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

from cffi import FFI

from ._cdef import CDEF
from . import errors

ffi = FFI()
ffi.cdef(CDEF)

# The SONAME whose C API the declarations (_cdef.py, from halite_c.h) describe. In ABI mode nothing checks a
# signature against the library at run time, so a library of another SONAME (libhalite.so.0's writer took an
# options struct) is never loaded by name.
SONAMES = ("libhalite.so.1",)


def _build_tree_candidates() -> list[Path]:
    source_root = Path(__file__).resolve().parent.parent.parent
    found = []
    for build in ("build", "build-asan", "build-tsan"):
        lib_dir = source_root / build / "libhalite"
        for soname in SONAMES:
            if (lib_dir / soname).exists():
                found.append(lib_dir / soname)
    return found


def _load() -> tuple[Any, str]:
    explicit = os.environ.get("HALITE_LIBRARY")
    if explicit:
        try:
            return ffi.dlopen(explicit), explicit
        except OSError as e:
            raise ImportError(f"HALITE_LIBRARY={explicit}: cannot load it: {e}") from e
    tried = []
    for path in _build_tree_candidates():
        try:
            return ffi.dlopen(str(path)), str(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
    for soname in SONAMES:
        try:
            return ffi.dlopen(soname), soname
        except OSError as e:
            tried.append(f"{soname}: {e}")
    raise ImportError("libhalite not found (set HALITE_LIBRARY to its path, or install the libhalite1 package); "
                      "tried: " + "; ".join(tried))


lib, library_path = _load()


def has_function(name: str) -> bool:
    """Whether the loaded libhalite exports the C function `name` (an older library lacks later additions)."""
    try:
        getattr(lib, name)
        return True
    except AttributeError:
        return False


def function(name: str) -> Any:
    """The C function `name`, or UnsupportedError naming the library that lacks it."""
    try:
        return getattr(lib, name)
    except AttributeError:
        raise errors.UnsupportedError(
            errors.HLT_EUNSUPPORTED, f"{library_path} has no {name}: a newer libhalite is needed") from None


def last_error() -> str:
    """hlt_last_error() of this thread (call it right after the failed call, on the same thread)."""
    return str(ffi.string(lib.hlt_last_error()).decode("utf-8", errors="replace"))


def fail(code: int) -> NoReturn:
    message = last_error() or ffi.string(lib.hlt_strerror(code)).decode("utf-8", errors="replace")
    raise errors.from_code(code, message)


def check(code: int) -> int:
    """Raises the HaliteError subclass of a negative HLT_E* code with hlt_last_error's message; returns code."""
    if code < 0:
        fail(code)
    return code


def path_bytes(path: str | os.PathLike[str]) -> bytes:
    return os.fsencode(path)
