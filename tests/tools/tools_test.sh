#!/usr/bin/env bash
# Tool-level tests of hlt-save / hlt-restore: exit codes, damaged inputs, no partial outputs, the 256 MiB
# round trip against zstd -3 of the whole image, and incremental chains (issue 12).
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
    grep -q "checkpoint format: reads 1.0 to 1.4; writes 1.3 when blocks are stored as independent frames" "$tmp/out" ||
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
  expect_exit 2 "--loader-threads 0" -- "$restore" qemu "$tmp/c.hlt" --loader-threads 0 --qmp "$tmp/none.sock"
  grep -q -- '--loader-threads: expected 1 to 16, got "0"' "$tmp/err" ||
    { echo "FAIL: --loader-threads 0: $(cat "$tmp/err")"; failures=$((failures + 1)); }
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
chain-256)
  # Issue 12: a 256 MiB image, then a copy with 3% of its pages changed and 1% newly zero. The child saved with
  # --parent is at most 1.1x `zstd -3` of the changed pages alone, and restores byte-identically; so does its
  # flattened copy.
  "$mkimage" "$tmp/img" 256 7
  "$mkimage" --mutate "$tmp/img" "$tmp/img2" 30 10 12 "$tmp/changed.pages"
  "$save" raw "$tmp/img" -o "$tmp/base.hlt" --page-hashes --no-sync >/dev/null || exit 1
  "$save" raw "$tmp/img2" -o "$tmp/child.hlt" --parent "$tmp/base.hlt" --no-sync | tee "$tmp/summary" || exit 1
  grep -q "in parent" "$tmp/summary" || { echo "FAIL: no page stored in the parent"; failures=$((failures + 1)); }
  child=$(stat -c %s "$tmp/child.hlt")
  z=$(zstd -3 -q -c "$tmp/changed.pages" | wc -c)
  python3 -c "
r=$child/$z
print(f'child {$child} bytes, zstd -3 of the changed pages {$z} bytes: {r:.3f}x (bar: <= 1.1x)')
raise SystemExit(0 if r <= 1.1 else 1)" || failures=$((failures + 1))
  "$restore" raw "$tmp/child.hlt" -o "$tmp/back.img" --no-sync >/dev/null || exit 1
  cmp "$tmp/img2" "$tmp/back.img" || { echo "FAIL: restored child differs"; failures=$((failures + 1)); }
  "$restore" verify "$tmp/child.hlt" >/dev/null || { echo "FAIL: verify of the chain"; failures=$((failures + 1)); }
  # A lazy restore of the chain touching every page (userfaultfd; one block read per fault, from whichever file
  # holds the page), each page compared with the checkpoint's content.
  seq 0 65535 >"$tmp/all.trace"
  "$restore" replay "$tmp/child.hlt" --trace "$tmp/all.trace" --json >"$tmp/replay.json" 2>"$tmp/replay.err"
  rc=$?
  if [[ $rc -eq 3 ]] && grep -q userfaultfd "$tmp/replay.err"; then
    echo "NOTE: replay of the chain skipped: no userfaultfd here"
  elif [[ $rc -ne 0 ]] || ! grep -q '"mismatches": *0' "$tmp/replay.json"; then
    echo "FAIL: replay of the chain (exit $rc)"; cat "$tmp/replay.json" "$tmp/replay.err"; failures=$((failures + 1))
  fi
  "$restore" info "$tmp/child.hlt" >"$tmp/info" || exit 1
  grep -q "chain        2 files, 1 parent links" "$tmp/info" && grep -q "base.hlt" "$tmp/info" ||
    { echo "FAIL: info does not show the chain"; cat "$tmp/info"; failures=$((failures + 1)); }
  "$save" flatten "$tmp/child.hlt" -o "$tmp/full.hlt" --no-sync >/dev/null || exit 1
  "$restore" info "$tmp/full.hlt" | grep -q "chain        none" ||
    { echo "FAIL: flatten left a chain"; failures=$((failures + 1)); }
  rm -f "$tmp/back.img"
  "$restore" raw "$tmp/full.hlt" -o "$tmp/back.img" --no-sync >/dev/null || exit 1
  cmp "$tmp/img2" "$tmp/back.img" || { echo "FAIL: restored flattened checkpoint differs"; failures=$((failures + 1)); }
  ;;
chain-errors)
  # A parent that is missing (exit 3), replaced by another checkpoint or modified (exit 4): each named with the
  # child; --parent-dir finds a moved parent; a checkpoint cannot be its own parent (exit 2); with --key-file every
  # file of the chain must be authenticated.
  mkdir -p "$tmp/a" "$tmp/moved"
  "$mkimage" "$tmp/img" 4 1
  "$mkimage" --mutate "$tmp/img" "$tmp/img2" 100 0 3 "$tmp/changed.pages" >/dev/null
  "$save" raw "$tmp/img" -o "$tmp/a/base.hlt" --no-sync >/dev/null || exit 1
  "$save" raw "$tmp/img2" -o "$tmp/child.hlt" --parent "$tmp/a/base.hlt" --no-sync >/dev/null || exit 1
  expect_exit 2 "own parent" -- "$save" raw "$tmp/img2" -o "$tmp/a/base.hlt" --parent "$tmp/a/base.hlt" --no-sync
  mv "$tmp/a/base.hlt" "$tmp/moved/base.hlt"
  expect_exit 3 "missing parent" -- "$restore" raw "$tmp/child.hlt" -o "$tmp/out.img" --no-sync
  grep -q "child.hlt" "$tmp/err" && grep -q "a/base.hlt" "$tmp/err" ||
    { echo "FAIL: missing parent: message names both files: $(cat "$tmp/err")"; failures=$((failures + 1)); }
  [[ ! -e "$tmp/out.img" ]] || { echo "FAIL: output left behind"; failures=$((failures + 1)); }
  expect_exit 0 "--parent-dir" -- "$restore" raw "$tmp/child.hlt" -o "$tmp/out.img" --parent-dir "$tmp/moved" --no-sync
  cmp "$tmp/img2" "$tmp/out.img" || { echo "FAIL: restore through --parent-dir differs"; failures=$((failures + 1)); }
  expect_exit 0 "verify --parent-dir" -- "$restore" verify "$tmp/child.hlt" --parent-dir "$tmp/moved"
  expect_exit 0 "info --parent-dir" -- "$restore" info "$tmp/child.hlt" --parent-dir "$tmp/moved" --json
  grep -q '"chain_depth": *1' "$tmp/out" || { echo "FAIL: info --json chain_depth"; failures=$((failures + 1)); }
  # Replaced: another checkpoint at the parent's path.
  "$save" raw "$tmp/img2" -o "$tmp/a/base.hlt" --no-sync >/dev/null || exit 1
  expect_exit 4 "replaced parent" -- "$restore" info "$tmp/child.hlt"
  grep -q "has file_id" "$tmp/err" && grep -q "child.hlt" "$tmp/err" && grep -q "a/base.hlt" "$tmp/err" ||
    { echo "FAIL: replaced parent: $(cat "$tmp/err")"; failures=$((failures + 1)); }
  # Modified: the real parent with one index byte changed (its checksum then fails: corrupt, naming the parent).
  cp "$tmp/moved/base.hlt" "$tmp/a/base.hlt"
  python3 -c "
import sys
p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)-64-8] ^= 1; open(p,'wb').write(b)" "$tmp/a/base.hlt"
  expect_exit 4 "modified parent" -- "$restore" verify "$tmp/child.hlt"
  grep -q "child.hlt: parent" "$tmp/err" && grep -q "a/base.hlt" "$tmp/err" ||
    { echo "FAIL: modified parent: $(cat "$tmp/err")"; failures=$((failures + 1)); }
  # Authenticated chain: the key applies to every file; an unauthenticated file in place of the parent is refused.
  head -c 32 /dev/urandom >"$tmp/key"
  "$save" raw "$tmp/img" -o "$tmp/kbase.hlt" --key-file "$tmp/key" --no-sync >/dev/null || exit 1
  "$save" raw "$tmp/img2" -o "$tmp/kchild.hlt" --parent "$tmp/kbase.hlt" --key-file "$tmp/key" --no-sync >/dev/null ||
    exit 1
  expect_exit 0 "keyed chain" -- "$restore" raw "$tmp/kchild.hlt" -o "$tmp/k.img" --key-file "$tmp/key" --no-sync
  cmp "$tmp/img2" "$tmp/k.img" || { echo "FAIL: keyed chain restore differs"; failures=$((failures + 1)); }
  "$save" raw "$tmp/img" -o "$tmp/kbase.hlt" --no-sync >/dev/null || exit 1
  expect_exit 4 "unauthenticated parent" -- "$restore" verify "$tmp/kchild.hlt" --key-file "$tmp/key"
  grep -q "kchild.hlt: parent: .*kbase.hlt: a key was given but the checkpoint is not authenticated" "$tmp/err" ||
    { echo "FAIL: unauthenticated parent: $(cat "$tmp/err")"; failures=$((failures + 1)); }
  ;;
*) echo "unknown case $case_name"; exit 2 ;;
esac
if ((failures)); then echo "$failures failure(s)"; exit 1; fi
echo "$case_name: OK"
