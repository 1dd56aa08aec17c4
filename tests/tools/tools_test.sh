#!/usr/bin/env bash
# Tool-level tests of hlt-save / hlt-restore: exit codes, damaged inputs, no partial outputs, and the 256 MiB
# round trip against zstd -3 of the whole image.
#   tools_test.sh BIN_DIR MKIMAGE CASE
set -uo pipefail
bin=$1
mkimage=$2
case_name=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
save="$bin/hlt-save"
restore="$bin/hlt-restore"
failures=0

expect_exit() {  # expect_exit CODE DESCRIPTION -- COMMAND...
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ $got -ne $want ]]; then
    echo "FAIL: $what: exit $got, expected $want"; cat "$tmp/err"; failures=$((failures + 1))
  fi
}

case "$case_name" in
cli-ux)
  # --version: exit 0, the library version and the format versions read and written.
  for tool in "$save" "$restore"; do
    expect_exit 0 "$(basename "$tool") --version" -- "$tool" --version
    grep -q "checkpoint format: reads 1.0 to 1.2; writes 1.0" "$tmp/out" ||
      { echo "FAIL: $(basename "$tool") --version printed: $(cat "$tmp/out")"; failures=$((failures + 1)); }
  done
  # `hlt-restore qemu CKPT -- BINARY ARGS`: an executable first after -- is the binary, not QEMU's first argument.
  # A stand-in QEMU records its arguments and exits, so the launch fails after showing what it was given.
  cat >"$tmp/fake-qemu" <<SH
#!/bin/sh
printf '%s\n' "\$@" >"$tmp/fake-qemu.args"
exit 1
SH
  chmod +x "$tmp/fake-qemu"
  "$mkimage" "$tmp/img" 4 1
  "$save" raw "$tmp/img" -o "$tmp/c.hlt" >/dev/null
  "$restore" qemu "$tmp/c.hlt" -- "$tmp/fake-qemu" -m 64M -nographic >"$tmp/out" 2>"$tmp/err"
  if [[ ! -f $tmp/fake-qemu.args ]]; then
    echo "FAIL: -- BINARY: the binary after -- was not run"; cat "$tmp/err"; failures=$((failures + 1))
  elif [[ $(head -n1 "$tmp/fake-qemu.args") != "-m" ]] || grep -qx "$tmp/fake-qemu" "$tmp/fake-qemu.args"; then
    echo "FAIL: -- BINARY: QEMU got its own path as an argument:"; cat "$tmp/fake-qemu.args"; failures=$((failures + 1))
  fi
  rm -f "$tmp/fake-qemu.args"
  # The binary by name on PATH, as users type it.
  PATH="$tmp:$PATH" "$restore" qemu "$tmp/c.hlt" -- fake-qemu -m 64M >"$tmp/out" 2>"$tmp/err"
  [[ $(head -n1 "$tmp/fake-qemu.args" 2>/dev/null) == "-m" ]] ||
    { echo "FAIL: -- NAME on PATH was not taken as the binary"; cat "$tmp/err"; failures=$((failures + 1)); }
  expect_exit 2 "--qemu and a binary after --" -- "$restore" qemu "$tmp/c.hlt" --qemu "$tmp/fake-qemu" -- "$tmp/fake-qemu" -m 64M
  grep -q "given twice" "$tmp/err" || { echo "FAIL: no 'given twice' message"; failures=$((failures + 1)); }
  ;;
exit-codes)
  "$mkimage" "$tmp/img" 4 1
  expect_exit 2 "hlt-save without arguments" -- "$save"
  expect_exit 2 "hlt-restore without arguments" -- "$restore"
  expect_exit 2 "unknown mode" -- "$save" frob
  expect_exit 2 "unknown option" -- "$save" raw "$tmp/img" -o "$tmp/c.hlt" --frob
  expect_exit 2 "a second image" -- "$save" raw "$tmp/img" "$tmp/img" -o "$tmp/c.hlt"
  expect_exit 2 "unknown option of verify" -- "$restore" verify --frob "$tmp/c.hlt"
  expect_exit 2 "bad policy" -- "$save" raw "$tmp/img" -o "$tmp/c.hlt" --policy sideways
  expect_exit 2 "bad block size" -- "$save" raw "$tmp/img" -o "$tmp/c.hlt" --block-pages 0
  expect_exit 2 "missing -o" -- "$save" raw "$tmp/img"
  expect_exit 3 "missing image" -- "$save" raw "$tmp/nope" -o "$tmp/c.hlt"
  printf 'abc' >"$tmp/odd"
  expect_exit 2 "image not a multiple of 4096" -- "$save" raw "$tmp/odd" -o "$tmp/c.hlt"
  printf '1\nbogus\n' >"$tmp/trace"
  expect_exit 2 "bad access trace" -- "$save" raw "$tmp/img" -o "$tmp/c.hlt" --access-trace "$tmp/trace"
  grep -q "trace:2" "$tmp/err" || { echo "FAIL: trace error does not name the line"; failures=$((failures + 1)); }
  [[ ! -e "$tmp/c.hlt" ]] || { echo "FAIL: a failed save left $tmp/c.hlt"; failures=$((failures + 1)); }
  expect_exit 0 "save" -- "$save" raw "$tmp/img" -o "$tmp/c.hlt"
  expect_exit 0 "info" -- "$restore" info "$tmp/c.hlt"
  expect_exit 0 "info --json" -- "$restore" info "$tmp/c.hlt" --json
  python3 -c "import json,sys; d=json.load(open('$tmp/out')); assert d['pages']==1024, d" ||
    { echo "FAIL: info --json"; failures=$((failures + 1)); }
  expect_exit 0 "verify" -- "$restore" verify "$tmp/c.hlt"
  expect_exit 3 "verify of a missing file" -- "$restore" verify "$tmp/missing.hlt"
  : >"$tmp/empty.hlt"
  expect_exit 4 "verify of an empty file" -- "$restore" verify "$tmp/empty.hlt"
  head -c 100000 /dev/urandom >"$tmp/random.hlt"
  expect_exit 4 "verify of a random file" -- "$restore" verify "$tmp/random.hlt"
  expect_exit 4 "info of a random file" -- "$restore" info "$tmp/random.hlt"
  expect_exit 4 "raw of a random file" -- "$restore" raw "$tmp/random.hlt" -o "$tmp/out.img"
  [[ ! -e "$tmp/out.img" ]] || { echo "FAIL: raw restore of a bad file left output"; failures=$((failures + 1)); }
  ;;
damaged)
  # Single-byte flips at random offsets and truncations anywhere: verify rejects each (exit 4, a message
  # naming the file); raw restore fails and leaves nothing, or, where the flip hit no content, produces the
  # exact original. (The in-process sweep in core_tests flips every byte of a small file.)
  "$mkimage" "$tmp/img" 8 3
  "$save" raw "$tmp/img" -o "$tmp/c.hlt" --block-pages 16 >/dev/null || exit 1
  size=$(stat -c %s "$tmp/c.hlt")
  for i in $(seq 1 60); do
    off=$(( (RANDOM * 32768 + RANDOM) % size ))
    cp "$tmp/c.hlt" "$tmp/d.hlt"
    python3 - "$tmp/d.hlt" "$off" <<'PY'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, 'r+b') as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x5a]))
PY
    expect_exit 4 "verify after a flip at offset $off" -- "$restore" verify "$tmp/d.hlt"
    grep -q "d.hlt" "$tmp/err" || { echo "FAIL: message does not name the file: $(cat "$tmp/err")"; failures=$((failures + 1)); }
    rm -f "$tmp/r.img"
    if "$restore" raw "$tmp/d.hlt" -o "$tmp/r.img" >/dev/null 2>&1; then
      cmp -s "$tmp/img" "$tmp/r.img" || { echo "FAIL: raw restore after flip at $off succeeded with wrong content"; failures=$((failures + 1)); }
    else
      [[ ! -e "$tmp/r.img" ]] || { echo "FAIL: raw restore after flip at $off left output"; failures=$((failures + 1)); }
    fi
  done
  for i in $(seq 1 20); do
    len=$(( (RANDOM * 32768 + RANDOM) % size ))
    head -c "$len" "$tmp/c.hlt" >"$tmp/t.hlt"
    expect_exit 4 "verify of a file truncated to $len" -- "$restore" verify "$tmp/t.hlt"
    expect_exit 4 "raw of a file truncated to $len" -- "$restore" raw "$tmp/t.hlt" -o "$tmp/t.img"
    [[ ! -e "$tmp/t.img" ]] || { echo "FAIL: truncated restore left output"; failures=$((failures + 1)); }
  done
  ;;
roundtrip-256)
  # The issue's bar: 256 MiB of mixed realistic content round-trips byte-identically and the checkpoint is no
  # larger than 1.15x `zstd -3` of the whole raw image.
  "$mkimage" "$tmp/img" 256 7
  "$save" raw "$tmp/img" -o "$tmp/c.hlt" --no-sync | tee "$tmp/summary"
  "$restore" raw "$tmp/c.hlt" -o "$tmp/back.img" --no-sync >/dev/null || exit 1
  cmp "$tmp/img" "$tmp/back.img" || { echo "FAIL: restored image differs"; failures=$((failures + 1)); }
  hlt=$(stat -c %s "$tmp/c.hlt")
  z=$(zstd -3 -q -c "$tmp/img" | wc -c)
  python3 -c "
r=$hlt/$z
print(f'checkpoint {$hlt} bytes, zstd -3 {$z} bytes: {r:.3f}x (bar: <= 1.15x)')
raise SystemExit(0 if r <= 1.15 else 1)" || failures=$((failures + 1))
  ;;
*) echo "unknown case $case_name"; exit 2 ;;
esac
if ((failures)); then echo "$failures failure(s)"; exit 1; fi
echo "$case_name: OK"
