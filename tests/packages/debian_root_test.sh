#!/usr/bin/env bash
# The Debian packages from cpack (cmake/Packaging.cmake), checked as files and then installed into a fresh Debian
# bookworm root made with mmdebstrap, apt resolving their Depends from Debian's mirror; in that root the tools run
# (--version, a raw save, info, verify, a restore compared byte for byte, the image server serving it over FUSE
# at the path restores look for), pkg-config finds libhalite, and systemd-analyze verifies the units.
#   debian_root_test.sh BUILD_DIR [SANITIZE]
# Needs root and the mirror (HALITE_DEBIAN_MIRROR, default http://deb.debian.org/debian): without them it says so
# and exits 77. The base root (mmdebstrap, variant apt, plus systemd) is cached under ~/.cache/libhalite/, named by
# a hash of its recipe and rebuilt after 14 days; downloaded .debs are kept there too.
set -euo pipefail
build=$1
sanitize=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s.%N)
say() { echo "packages test: $*"; }
fail() { echo "FAILED: packages test: $*" >&2; exit 1; }
skip() {
  echo "########################################################################" >&2
  echo "SKIPPED: packages test: $*" >&2
  echo "########################################################################" >&2
  exit 77
}
trap 'echo "FAILED: packages test: line $LINENO: $BASH_COMMAND (exit $?)" >&2' ERR
elapsed() { echo "$(date +%s.%N) $started" | awk '{printf "%.1f s", $1 - $2}'; }

[[ -z $sanitize ]] ||
  skip "the packages are built from the normal build only; this is a $sanitize build (its binaries need its runtime)"
((EUID == 0)) || skip "needs root (mmdebstrap's root mode, chroot, the image server's FUSE mount)"
for tool in cpack dpkg-deb dpkg-shlibdeps readelf mmdebstrap curl unshare chroot flock; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps installs it)"
done

tmp=$(mktemp -d /tmp/halite-packages.XXXXXX)
# Every mount of the root is made in a private mount namespace (unshare below): gone when it ends.
trap 'rm -rf --one-file-system "$tmp"' EXIT

# --- 1. The packages, as files ---
if ! (cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/debs") >"$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log"
  fail "cpack -G DEB failed"
fi
shopt -s nullglob
debs=("$tmp"/debs/*.deb)
((${#debs[@]} == 4)) || fail "cpack made ${#debs[@]} packages, expected 4: $(ls "$tmp/debs")"
lib_deb=("$tmp"/debs/libhalite[0-9]*_*.deb)
dev_deb=("$tmp"/debs/libhalite-dev_*.deb)
tools_deb=("$tmp"/debs/halite-tools_*.deb)
python_deb=("$tmp"/debs/python3-halite_*_all.deb)
((${#lib_deb[@]} == 1 && ${#dev_deb[@]} == 1 && ${#tools_deb[@]} == 1 && ${#python_deb[@]} == 1)) ||
  fail "expected libhaliteN, libhalite-dev, halite-tools and python3-halite (all), got: $(ls "$tmp/debs")"
field() { dpkg-deb -f "$1" "$2"; }
lib_pkg=$(field "$lib_deb" Package)
version=$(field "$lib_deb" Version)
files_of() { dpkg-deb -c "$1" | awk '{print $6}'; }
has_file() { files_of "$1" | grep -qx "$2" || fail "$(basename "$1") lacks $2"; }

# The library package is named after the SONAME of the library it holds.
mkdir "$tmp/lib"
dpkg-deb -x "$lib_deb" "$tmp/lib"
so=$(find "$tmp/lib" -type f -name 'libhalite.so.*' | head -n1)
[[ -n $so ]] || fail "$lib_pkg holds no libhalite.so.*"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname =~ ^libhalite\.so\.([0-9]+)$ && $lib_pkg == "libhalite${BASH_REMATCH[1]}" ]] ||
  fail "package $lib_pkg holds a library with SONAME '$soname' (Debian names it libhalite<SOVERSION>)"
has_file "$lib_deb" "./usr/lib/$soname"
# The image server is the library's own daemon (restores with shared memory start it; no tool is run).
has_file "$lib_deb" "./usr/libexec/halite1/halite-image-server"
# SONAME 1 since the C writer's options became setters (hlt_writer_options went: an ABI break, issue 25).
[[ $lib_pkg == libhalite1 ]] || fail "the library package is $lib_pkg: expected libhalite1 (SONAME libhalite.so.1)"
dpkg-deb -I "$lib_deb" shlibs | grep -q "^libhalite ${soname##*.so.} $lib_pkg" || fail "$lib_pkg has no shlibs entry"
for h in halite_c.h checkpoint_reader.h checkpoint_info.h; do has_file "$dev_deb" "./usr/include/halite/$h"; done
for f in pkgconfig/halite.pc cmake/halite/haliteConfig.cmake libhalite.so; do has_file "$dev_deb" "./usr/lib/$f"; done
for f in bin/hlt-save bin/hlt-restore lib/systemd/system/halite-image-server@.service \
         lib/systemd/system/halite-restore@.service; do
  has_file "$tools_deb" "./usr/$f"
done
# Depends: from dpkg-shlibdeps for the binaries, the exact library version for the -dev package.
field "$dev_deb" Depends | grep -qF "$lib_pkg (= $version)" ||
  fail "libhalite-dev does not depend on $lib_pkg (= $version)"
for deb in "$lib_deb" "$tools_deb"; do
  deps=$(field "$deb" Depends)
  for want in libc6 libzstd1 libsodium23; do
    grep -q "\b$want\b" <<<"$deps" || fail "$(field "$deb" Package) Depends lacks $want (dpkg-shlibdeps): $deps"
  done
done
field "$lib_deb" Depends | grep -q '\blibfuse3-3\b' || fail "$lib_pkg Depends lacks libfuse3-3 (the image server)"
field "$tools_deb" Depends | grep -qF "$lib_pkg (= $version)" ||
  fail "halite-tools does not depend on $lib_pkg (= $version), whose daemon is its image server"
# python3-halite: the package `halite` in Debian's dist-packages, typed; it loads the library by SONAME.
for f in __init__.py _cdef.py checkpoint.py py.typed; do has_file "$python_deb" "./usr/lib/python3/dist-packages/halite/$f"; done
if files_of "$python_deb" | grep -E '__pycache__|\.so$'; then fail "python3-halite holds compiled files (above)"; fi
for want in "$lib_pkg (>= $version)" python3-cffi; do
  field "$python_deb" Depends | grep -qF "$want" || fail "python3-halite Depends lacks $want: $(field "$python_deb" Depends)"
done
mkdir "$tmp/tools"
dpkg-deb -x "$tools_deb" "$tmp/tools"
for b in hlt-save hlt-restore; do
  if readelf -d "$tmp/tools/usr/bin/$b" | grep -E 'RUNPATH|RPATH'; then
    fail "/usr/bin/$b keeps a run path into the build"
  fi
done
for deb in "${debs[@]}"; do
  printf 'packages test: %-40s %9d bytes, Installed-Size %s KiB\n' "$(basename "$deb")" "$(stat -c %s "$deb")" \
    "$(field "$deb" Installed-Size)"
  say "  Depends: $(field "$deb" Depends)"
done
say "packages checked as files after $(elapsed)"

# --- 2. A fresh Debian root, with the network ---
mirror=${HALITE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
if ! curl -fsS --max-time 20 -o /dev/null "$mirror/dists/$suite/InRelease"; then
  skip "the Debian mirror $mirror is unreachable from this machine: the packages were built and checked as" \
    "files, but NOT installed into a Debian root nor run there"
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}/libhalite/debian-root
mkdir -p "$cache/archives/partial"
recipe="mmdebstrap --variant=apt --include=systemd --format=tar $suite OUT $mirror ($(mmdebstrap --version))"
base=$cache/$suite-$(sha256sum <<<"$recipe" | cut -c1-16).tar
(
  flock 9
  if [[ -s $base ]] && [[ -z $(find "$base" -mtime +14) ]]; then
    say "base root: $base (cached; recipe: $recipe)"
  else
    say "base root: making $base ($recipe)"
    mmdebstrap --quiet --variant=apt --include=systemd --format=tar "$suite" "$base.$$" "$mirror" ||
      { rm -f "$base.$$"; exit 3; }
    mv "$base.$$" "$base"
  fi
) 9>"$cache/.lock" || skip "mmdebstrap could not make a $suite root from $mirror (see above): nothing was installed"
say "base root ready after $(elapsed)"

root=$tmp/root
mkdir -p "$root"

# --- 3. Install with apt (Depends from the mirror) and run the tools, in a mount namespace of our own ---
# The root lives on a tmpfs of that namespace: nothing to delete afterwards, nothing left if the test is killed.
rc=0
unshare --mount --propagation private bash -euo pipefail -s "$root" "$cache" "$lib_pkg" "$version" "$base" "$here" \
  "$tmp/debs" <<'INNER' || rc=$?
root=$1 cache=$2 lib_pkg=$3 version=$4 base=$5 here=$6 debs=$7
mount -t tmpfs -o size=4g,mode=0755 tmpfs "$root"
tar -C "$root" -xf "$base"
mkdir -p "$root/tmp/debs"
cp "$debs"/*.deb "$root/tmp/debs/"
cp "$here/in_root_checks.sh" "$root/tmp/"
rm -f "$root/etc/resolv.conf"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount -t tmpfs tmpfs "$root/run"
mount --bind "$cache/archives" "$root/var/cache/apt/archives"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin
(
  flock 9  # one apt at a time over the shared download cache
  chroot "$root" apt-get -q update >/dev/null
  # The glob is the root's: expanded by a shell in it.
  if ! chroot "$root" sh -c 'apt-get -q -y --no-install-recommends -o APT::Sandbox::User=root \
    install /tmp/debs/*.deb' >"$root/tmp/apt.log" 2>&1; then
    cat "$root/tmp/apt.log"
    echo "FAILED: packages test: apt-get install of the packages in the root failed"
    exit 1
  fi
  grep -E '^[0-9]+ upgraded, [0-9]+ newly installed' "$root/tmp/apt.log" | sed 's/^/packages test: apt: /'
) 9>"$cache/.apt-lock"
for p in "$lib_pkg" libhalite-dev halite-tools python3-halite; do
  chroot "$root" dpkg-query -W -f='${Status} ${Version}\n' "$p" | grep -qx "install ok installed $version" ||
    { echo "FAILED: packages test: $p $version is not installed in the root"; exit 1; }
done
echo "packages test: installed into the root: $(chroot "$root" dpkg-query -W -f='${Package} ${Version}, ' \
  "$lib_pkg" libhalite-dev halite-tools python3-halite)$(chroot "$root" dpkg-query -W -f='.\n' | wc -l) packages in all"
chroot "$root" bash /tmp/in_root_checks.sh "$version"
INNER
((rc == 0)) || fail "the checks in the Debian root failed (exit $rc, above)"
say "OK after $(elapsed) in all"
