#!/usr/bin/env bash
# Runs the Python bindings' pytest suite against one build's libhalite (ctest's python/pytest):
#   run_pytest.sh LIBHALITE_SO SCRATCH_DIR [SANITIZE] [PYTEST ARGS...]
# The package is imported from the source tree (python/); scratch files go to SCRATCH_DIR (pytest's --basetemp,
# emptied at the start of each run and removed when the run passes). Under an ASan build the Python interpreter is
# not instrumented: libasan is preloaded so that the library can load, and leak detection is off (the
# interpreter's own allocations at exit are not libhalite's).
set -euo pipefail
# Debian's interpreter, whose site-packages hold python3-cffi and python3-pytest (not a python3 of pyenv or a venv
# that happens to come first on PATH); HALITE_PYTHON overrides it.
python=${HALITE_PYTHON:-/usr/bin/python3}
lib=$1 scratch=$2 sanitize=${3:-}
shift 3 || shift $#
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: python tests: $*" >&2; exit 77; }
[[ -x $python ]] || skip "$python is not installed (scripts/install-deps installs it)"
for module in pytest cffi; do
  "$python" -c "import $module" 2>/dev/null || skip "python3 module $module is missing (scripts/install-deps: python3-$module)"
done
export HALITE_LIBRARY=$lib PYTHONPATH=$here/.. PYTHONDONTWRITEBYTECODE=1
if [[ $sanitize == address ]]; then
  asan=$(${CC:-gcc} -print-file-name=libasan.so)
  [[ -e $asan ]] || skip "ASan build, but libasan.so ($asan) is missing"
  export LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
elif [[ -n $sanitize ]]; then
  skip "a $sanitize build: its library needs its sanitizer's runtime loaded first into an uninstrumented python"
fi
rm -rf "$scratch"
"$python" -m pytest -p no:cacheprovider --basetemp="$scratch" -o console_output_style=classic -v "$here" "$@"
rm -rf "$scratch"
