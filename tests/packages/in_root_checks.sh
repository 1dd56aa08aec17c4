#!/usr/bin/env bash
# Run by debian_root_test.sh inside the fresh Debian root where the packages were installed, as root:
#   in_root_checks.sh VERSION
# The installed tools run from /usr/bin with only what apt installed: versions, a raw save, info, verify, a restore
# compared byte for byte, the image server in its service form (halite-image-server@.service's command), the -dev
# package's pkg-config file, python3-halite reading the checkpoint back, and systemd-analyze verify of the units.
set -euo pipefail
version=${1%-*}  # the package version without its Debian revision: the project's version
fail() { echo "FAILED: packages test (in the root): $*" >&2; exit 1; }
say() { echo "packages test (in the root): $*"; }
trap 'echo "FAILED: packages test (in the root): line $LINENO: $BASH_COMMAND (exit $?)" >&2' ERR
cd /tmp

for tool in hlt-save hlt-restore; do
  [[ $(command -v $tool) == /usr/bin/$tool ]] || fail "$tool is not /usr/bin/$tool"
  if ldd /usr/bin/$tool | grep 'not found'; then fail "$tool misses libraries (Depends incomplete)"; fi
  out=$($tool --version) || fail "$tool --version failed"
  grep -qF "$version" <<<"$out" || fail "$tool --version does not name version $version: $out"
  say "$tool --version: $(head -n1 <<<"$out")"
done

# A raw memory image of 8 MiB: random pages, zero pages, and text pages.
head -c 2097152 /dev/urandom >image.raw
head -c 4194304 /dev/zero >>image.raw
seq 1 400000 >numbers.txt  # 2.7 MB: no pipe into head, whose early exit pipefail would count
head -c 2097152 numbers.txt >>image.raw
hlt-save raw image.raw -o ckpt.hlt --block-pages 16 >save.log || { cat save.log; fail "hlt-save raw failed"; }
hlt-restore info ckpt.hlt >info.txt || fail "hlt-restore info failed"
hlt-restore info ckpt.hlt --json >info.json || fail "hlt-restore info --json failed"
hlt-restore verify ckpt.hlt >verify.txt || { cat verify.txt; fail "hlt-restore verify failed"; }
hlt-restore raw ckpt.hlt -o back.raw >/dev/null || fail "hlt-restore raw failed"
cmp image.raw back.raw || fail "the restored image differs from the saved one"
say "hlt-save raw of 8 MiB -> $(stat -c %s ckpt.hlt) bytes; info, verify and a restore that matches byte for byte"
# A damaged checkpoint is refused, with an error and a non-zero exit.
cp ckpt.hlt bad.hlt
printf '\xff\xff\xff\xff' | dd of=bad.hlt bs=1 seek=8192 conv=notrunc status=none
if hlt-restore verify bad.hlt >bad.txt 2>&1; then fail "verify accepted a damaged checkpoint"; fi
say "verify of a damaged copy: $(tail -n1 bad.txt)"

# The image server as halite-image-server@.service runs it: mounted at /run/halite/images/FILE_ID, where restores
# with --memory shared look for it, its region readable as a file equal to the image.
# info prints the file id as a UUID; the mount is named by its 16 bytes in hex.
[[ $(<info.json) =~ \"file_id\":\"([0-9a-f-]{36})\" ]] ||
  fail "no file_id in hlt-restore info --json: $(head -c 300 info.json)"
file_id=${BASH_REMATCH[1]//-/}
image=/run/halite/images/$file_id/ckpt.ram
unit_command=$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' /usr/lib/systemd/system/halite-image-server@.service)
[[ $unit_command == /usr/libexec/halite1/halite-image-server ]] ||
  fail "halite-image-server@.service runs '$unit_command', not the library's daemon"
"$unit_command" serve --image-dir /run/halite/images /tmp/ckpt.hlt >serve.log 2>&1 &
server=$!
stop_server() {
  kill -TERM "$server" 2>/dev/null || return 0
  wait "$server" 2>/dev/null || true
}
trap stop_server EXIT
for _ in $(seq 150); do
  [[ -e $image ]] && break
  kill -0 "$server" 2>/dev/null || { cat serve.log; fail "the image server exited"; }
  sleep 0.1
done
[[ -e $image ]] || { cat serve.log; fail "the image server did not mount $image within 15 s"; }
cmp image.raw "$image" || fail "$image differs from the saved image"
# hlt-restore serve is the same daemon, found beside the library.
if hlt-restore serve --image-dir /run/halite/images /tmp/ckpt.hlt >second.log 2>&1; then
  fail "a second image server of the same checkpoint started"
fi
grep -q "already serves" second.log || { cat second.log; fail "the second image server did not say why it refused"; }
stop_server
trap - EXIT
[[ ! -e $image ]] || fail "$image is still there after the image server stopped"
say "image server: $image equals the image; a second server of it refused; unmounted on SIGTERM"

# libhalite-dev: pkg-config resolves halite.pc (and its Requires.private, from the -dev package's Depends).
pc=$(pkg-config --modversion halite) || fail "pkg-config does not find halite"
[[ $pc == "$version" ]] || fail "pkg-config --modversion halite: $pc, expected $version"
flags=$(pkg-config --cflags --libs halite) || fail "pkg-config --cflags --libs halite failed"
grep -q -- '-lhalite' <<<"$flags" || fail "pkg-config --libs halite: $flags"
say "pkg-config halite: $pc, $flags"

# python3-halite: the package imports with the system's python3 and reads the checkpoint hlt-save wrote.
py_version=$(python3 -c "import halite; print(halite.__version__)") || fail "python3 -c 'import halite' failed"
[[ $py_version == "$version" ]] || fail "halite.__version__ is $py_version, expected $version"
python3 - <<'PY' || fail "python3-halite could not read back the checkpoint"
import halite
with halite.Checkpoint("ckpt.hlt") as ckpt:
    assert halite.library_path.startswith("libhalite.so."), halite.library_path
    assert ckpt.read_pages(0) == open("image.raw", "rb").read()
    report = ckpt.verify()
    print(f"packages test (in the root): python3-halite {halite.__version__} ({halite.library_path}): "
          f"ckpt.hlt read back equal to image.raw, {report.blocks} blocks verified")
PY

# The units: systemd-analyze verify of an instance of each template.
if command -v systemd-analyze >/dev/null; then
  mkdir -p units /etc/halite/restore
  printf 'CHECKPOINT=/tmp/ckpt.hlt\n' >/etc/halite/restore/test.env
  cp /usr/lib/systemd/system/halite-image-server@.service \
    "units/halite-image-server@$(systemd-escape /tmp/ckpt.hlt).service"
  cp /usr/lib/systemd/system/halite-restore@.service units/halite-restore@test.service
  if ! systemd-analyze verify units/*.service >verify-units.txt 2>&1; then
    cat verify-units.txt
    fail "systemd-analyze verify of the units failed"
  fi
  if grep -i 'halite' verify-units.txt; then fail "systemd-analyze verify warns about the units (above)"; fi
  say "systemd-analyze verify ($(systemd-analyze --version | head -n1)): both units clean"
else
  fail "systemd-analyze is not in the root (the base root includes systemd)"
fi
say "OK"
