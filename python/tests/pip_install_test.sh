#!/usr/bin/env bash
# `pip install` of the package from the repository into a fresh virtual environment, with nothing from PyPI:
# Debian's setuptools and wheel build it (--no-build-isolation), Debian's cffi satisfies its dependency (the venv
# sees the system's site-packages), --no-index forbids downloads. Then, from another directory: the installed copy
# is the one imported, it is typed (py.typed installed; mypy takes a consumer's correct use and rejects a wrong
# one through the installed package's hints), and it writes and reads a checkpoint with the build's libhalite.
#   pip_install_test.sh LIBHALITE_SO SCRATCH_DIR [SANITIZE]
# Under an ASan build, the runs that load the library preload libasan (as run_pytest.sh does).
set -euo pipefail
# Debian's interpreter, whose site-packages hold python3-cffi and python3-pytest (not a python3 of pyenv or a venv
# that happens to come first on PATH); HALITE_PYTHON overrides it.
python=${HALITE_PYTHON:-/usr/bin/python3}
lib=$1 scratch=$2 sanitize=${3:-}
here=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "SKIPPED: pip install test: $*" >&2; exit 77; }
fail() { echo "FAILED: pip install test: $*" >&2; exit 1; }
say() { echo "pip install test: $*"; }
"$python" -c 'import venv, ensurepip' 2>/dev/null || skip "python3-venv is missing (scripts/install-deps installs it)"
"$python" -c 'import cffi, setuptools, wheel' 2>/dev/null ||
  skip "python3-cffi, python3-setuptools or python3-wheel is missing (scripts/install-deps installs them)"
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'echo "FAILED: pip install test: line $LINENO: $BASH_COMMAND" >&2' ERR
# pip builds in the source directory (build/, *.egg-info): build a copy, so the checkout stays clean.
cp -r "$here" "$scratch/src"
rm -rf "$scratch/src/tests"
"$python" -m venv --system-site-packages "$scratch/venv"
py=$scratch/venv/bin/python
"$py" -m pip install --quiet --no-index --no-build-isolation "$scratch/src" >"$scratch/pip.log" 2>&1 ||
  { cat "$scratch/pip.log"; fail "pip install failed"; }
say "$("$py" -m pip show halite | grep -E '^(Name|Version|Requires):' | tr '\n' ' ')"
cd "$scratch"
export HALITE_LIBRARY=$lib
preload=()
if [[ $sanitize == address ]]; then
  preload=(env "LD_PRELOAD=$(${CC:-gcc} -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
elif [[ -n $sanitize ]]; then
  skip "a $sanitize build: its library needs its sanitizer's runtime loaded first into an uninstrumented python"
fi
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
where=$("${preload[@]}" "$py" -c 'import halite; print(halite.__file__)')
[[ $where == "$site/halite/__init__.py" ]] || fail "imported $where, not the installed copy under $site"
[[ -e $site/halite/py.typed ]] || fail "py.typed is not installed (the package would not count as typed)"
version=$("${preload[@]}" "$py" -c 'import halite; print(halite.__version__)')
[[ $version == "$("$py" -m pip show halite | sed -n 's/^Version: //p')" ]] || fail "halite.__version__ $version differs"
cat >roundtrip.py <<'PY'
import sys
import halite

page = bytes(range(256)) * 16
with halite.Writer(sys.argv[1], block_pages=4) as w:
    region: int = w.add_region("ram", 0, 8 * halite.PAGE_SIZE)
    for p in range(8):
        w.put_page(region, p, page if p % 2 else bytes(halite.PAGE_SIZE))
with halite.Checkpoint(sys.argv[1]) as ckpt:
    info: halite.CheckpointInfo = ckpt.info()
    assert ckpt.read_pages(0) == b"".join(page if p % 2 else bytes(halite.PAGE_SIZE) for p in range(8))
    assert ckpt.verify().blocks == info.blocks
    print(f"halite {halite.__version__} from {halite.library_path}: {info.blocks} block(s), read back equal")
PY
"${preload[@]}" "$py" roundtrip.py "$scratch/ckpt.hlt"
if command -v mypy >/dev/null; then
  mypy --strict --no-incremental --python-executable "$py" roundtrip.py >mypy.log 2>&1 ||
    { cat mypy.log; fail "mypy --strict rejects a correct use of the installed package"; }
  printf 'import halite\nhalite.Checkpoint(42)\nx: str = halite.Checkpoint("a").block_count\n' >wrong.py
  if mypy --strict --no-incremental --python-executable "$py" wrong.py >wrong.log 2>&1; then
    fail "mypy accepted wrong.py: the installed package's type hints are not seen"
  fi
  errors=$(grep -c 'error:' wrong.log || true)
  ((errors >= 2)) || { cat wrong.log; fail "mypy found $errors error(s) in wrong.py, expected 2"; }
  say "mypy --strict: the installed package's hints are seen (a correct use passes, 2 wrong calls are refused)"
  (cd "$here" && mypy --no-incremental --cache-dir=/dev/null halite tools tests) >package-mypy.log 2>&1 ||
    { cat package-mypy.log; fail "mypy --strict (pyproject.toml's [tool.mypy]) finds errors in the package or its tests"; }
  say "mypy --strict of the package, its tools and its tests: $(tail -n1 package-mypy.log)"
else
  skip "mypy is not installed: the package was installed and ran, but its type hints were not checked"
fi
cd /
rm -rf "$scratch"
say "OK"
