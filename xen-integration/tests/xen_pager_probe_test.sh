#!/usr/bin/env bash
# Builds hlt-xen-pager with HALITE_XEN_PAGER=ON (compiles and links against libxen-dev) and runs its probe.
#   xen_pager_probe_test.sh PAGER_EXE|- SOURCE_DIR BUILD_DIR HALITE_LIB HALITE_XEN_LIB [SANITIZE]
# With PAGER_EXE (the main build has the option on) only the probe runs. Otherwise pager/ is configured on its own
# against the main build's libraries, built, and probed. The probe exits 77 where no hypervisor answers (every
# machine we test on): ctest reports SKIPPED, never passed, because nothing was paged.
set -uo pipefail
exe=$1 src=$2 build=$3 lib=$4 xenlib=$5
# The libraries of a sanitizer build (HALITE_SANITIZE, passed as SANITIZE) are instrumented: the pager built
# against them needs the same flags, or it fails to link for want of the sanitizer runtime.
san_flags=""
case "${6:-}" in
  address) san_flags="-fsanitize=address,undefined" ;;
  thread) san_flags="-fsanitize=thread" ;;
esac
if [[ $exe == - ]]; then
  if ! pkg-config --exists xencontrol xenforeignmemory xenevtchn; then
    echo "=====================================================================" >&2
    echo "SKIPPED: libxen-dev (xencontrol, xenforeignmemory, xenevtchn) is not installed" >&2
    echo "=====================================================================" >&2
    exit 77
  fi
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$src/xen-integration/pager" -B "$build" "${gen[@]}" -DHALITE_XEN_PAGER=ON \
    -DHALITE_SOURCE_DIR="$src" -DHALITE_LIB="$lib" -DHALITE_XEN_LIB="$xenlib" \
    -DCMAKE_C_FLAGS="$san_flags" -DCMAKE_CXX_FLAGS="$san_flags" -DCMAKE_EXE_LINKER_FLAGS="$san_flags" \
    >"$build.log" 2>&1 ||
    { cat "$build.log"; echo "FAIL: configuring the pager with HALITE_XEN_PAGER=ON"; exit 1; }
  cmake --build "$build" --target hlt-xen-pager -j 2 >>"$build.log" 2>&1 ||
    { cat "$build.log"; echo "FAIL: building hlt-xen-pager"; exit 1; }
  exe="$build/hlt-xen-pager"
  echo "built $exe with HALITE_XEN_PAGER=ON (linked: $(ldd "$exe" | grep -o 'libxen[a-z]*\.so[.0-9]*' | sort -u | xargs))"
fi
"$exe" --help >/dev/null || { echo "FAIL: hlt-xen-pager --help"; exit 1; }
"$exe" skeleton >/dev/null 2>&1
[[ $? -eq 2 ]] || { echo "FAIL: usage errors should exit 2"; exit 1; }
"$exe" probe
rc=$?
[[ $rc -eq 0 || $rc -eq 77 ]] || { echo "FAIL: probe exit $rc"; exit 1; }
exit $rc
