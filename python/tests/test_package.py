"""The package itself: its version is the project's, it is typed, its cdef is the header's, its library is found."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import halite
from halite import _lib

PYTHON_DIR = Path(__file__).resolve().parent.parent
SOURCE_ROOT = PYTHON_DIR.parent


def test_version_is_the_projects() -> None:
    cmake = (SOURCE_ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(halite VERSION (\S+)", cmake)
    assert match and halite.__version__ == match.group(1)


def test_typed() -> None:
    assert (Path(halite.__file__).parent / "py.typed").exists()


def test_cdef_is_generated_from_the_header() -> None:
    sys.path.insert(0, str(PYTHON_DIR / "tools"))
    try:
        import gen_cdef
    finally:
        sys.path.pop(0)
    header = SOURCE_ROOT / "libhalite" / "include" / "halite" / "halite_c.h"
    committed = (PYTHON_DIR / "halite" / "_cdef.py").read_text()
    assert committed == gen_cdef.module_text(header), "halite/_cdef.py is stale: run python/tools/gen_cdef.py"


def test_every_declared_function_is_exported() -> None:
    declared = re.findall(r"\b(hlt_\w+)\(", halite._cdef.CDEF)
    assert len(declared) > 30
    missing = [name for name in declared if not _lib.has_function(name)]
    assert missing == [], f"{_lib.library_path} lacks {missing}"


def test_library_found_without_halite_library() -> None:
    """Without HALITE_LIBRARY the package finds the build tree's library (it sits in the checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "HALITE_LIBRARY"}
    out = subprocess.run([sys.executable, "-c", "import halite; print(halite.library_path)"], env=env,
                         check=True, capture_output=True, text=True).stdout.strip()
    assert out.endswith(tuple(_lib.SONAMES)), out


def test_bad_halite_library_is_a_clear_import_error(tmp_path: Path) -> None:
    env = dict(os.environ, HALITE_LIBRARY=str(tmp_path / "nope.so"))
    result = subprocess.run([sys.executable, "-c", "import halite"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "HALITE_LIBRARY=" in result.stderr and "nope.so" in result.stderr
