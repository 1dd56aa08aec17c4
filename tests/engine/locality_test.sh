#!/usr/bin/env bash
# Tool-level tests of the lazy restore: locality blocks against physical order on a fragmented guest, the learned
# layout (relayout), and the replay tool's exit codes.
#   locality_test.sh BIN_DIR FRAGMENTED_GUEST CASE
# Exits 77 (skipped, saying why) when userfaultfd is unavailable.
set -uo pipefail
bin=$1
guest=$2
case_name=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
save="$bin/hlt-save"
restore="$bin/hlt-restore"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$guest" probe || exit 77

# json FILE KEY: one number from the replay's JSON output.
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

replay() {  # replay NAME CKPT [options]: runs hlt-restore replay --json into $tmp/NAME.json
  local name=$1 ckpt=$2
  shift 2
  "$restore" replay "$ckpt" --trace "$tmp/restore.trace" --json "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "replay $name exited $rc"; cat "$tmp/$name.err"
  elif [[ $(json "$tmp/$name.json" mismatches) -ne 0 ]]; then
    fail "replay $name: mismatches"
  fi
}

case "$case_name" in
locality)
  # A 256 MiB guest with scattered frames (tests/support/fragmented_guest.h says what it models).
  "$guest" "$tmp" --pages 65536 --seed 1 || exit 1
  "$save" raw "$tmp/image" -o "$tmp/halite.hlt" --access-trace "$tmp/save.trace" --va-hints "$tmp/va.hints" \
    --no-sync >/dev/null || fail "hlt-save raw (halite)"
  "$save" raw "$tmp/image" -o "$tmp/physical.hlt" --policy physical --no-sync >/dev/null || fail "hlt-save raw (physical)"
  # Loader off and one thread: every block read by a fault is one block the trace needed (deterministic). Not the
  # blocking faults: with streamed faults the thread runs on as soon as its page is in and may fault again on a
  # page of the block still coming in, which joins that read (timing decides how often).
  replay halite "$tmp/halite.hlt" --loader off --record-trace "$tmp/recorded.trace"
  replay physical "$tmp/physical.hlt" --loader off
  h=$(json "$tmp/halite.json" blocks_read_demand)
  p=$(json "$tmp/physical.json" blocks_read_demand)
  nz=$(json "$tmp/halite.json" nonzero_pages_touched)
  echo "blocks read by faults: halite $h, physical $p, non-zero pages touched $nz"
  (( h * 5 <= p )) || fail "halite read $h blocks on faults, more than 1/5 of physical's $p"
  (( h * 20 <= nz )) || fail "halite read $h blocks on faults for $nz non-zero pages (more than 1 per 20)"
  # Learned layout: re-plan around what the replay recorded, replay again.
  "$save" relayout "$tmp/halite.hlt" -o "$tmp/relayout.hlt" --access-trace "$tmp/recorded.trace" --no-sync \
    >/dev/null || fail "hlt-save relayout"
  replay relayout "$tmp/relayout.hlt" --loader off
  r=$(json "$tmp/relayout.json" blocks_read_demand)
  echo "blocks read by faults after relayout: $r (was $h, $(( (h - r) * 100 / h ))% fewer)"
  (( r < h )) || fail "relayout did not cut the blocks read by faults ($r, was $h)"
  # (That relayout keeps the memory, regions, blobs and metadata is the relayout case's job.)
  ;;
threads)
  # Many threads, loader on (rate-limited so faults and loading overlap), working set preloaded, predictions on:
  # still every byte right.
  "$guest" "$tmp" --pages 16384 --seed 3 || exit 1
  "$save" raw "$tmp/image" -o "$tmp/c.hlt" --access-trace "$tmp/save.trace" --va-hints "$tmp/va.hints" \
    --block-pages 32 --no-sync >/dev/null || fail "hlt-save raw"
  replay threads8 "$tmp/c.hlt" --threads 8 --loader on --preload-ws --rate-limit 8M --predict 256:8
  replay threads3 "$tmp/c.hlt" --threads 3 --loader off --backing memfd --handlers 2
  ;;
relayout)
  # A checkpoint of another VMM: several regions (one name with a colon), absent pages, blobs, metadata. Relayout
  # keeps all of it and changes only the layout; the memory reads back identical.
  "$guest" vm "$tmp/vm.hlt" || exit 1
  printf '# recorded\n0000:00:02.0/rom:1\nvga.vram:100 20\npc.ram:4000 64\n' >"$tmp/rec.trace"
  "$save" relayout "$tmp/vm.hlt" -o "$tmp/new.hlt" --access-trace "$tmp/rec.trace" --block-pages 32 --no-sync \
    >/dev/null || fail "relayout"
  { "$restore" info "$tmp/vm.hlt" --json >"$tmp/old.json" && "$restore" info "$tmp/new.hlt" --json >"$tmp/new.json"; } ||
    fail "info"
  python3 - "$tmp/old.json" "$tmp/new.json" <<'EOF' || fail "relayout changed what it must keep"
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
for k in ["vmm_kind", "machine_type", "creator", "vm_uuid", "created_unix_ns", "regions", "pages", "zero_pages",
          "absent_pages", "stored_pages", "duplicate_pages"]:
    assert old[k] == new[k], (k, old[k], new[k])
assert [(b["name"], b["raw_length"]) for b in old["blobs"]] == [(b["name"], b["raw_length"]) for b in new["blobs"]], "blobs"
assert new["hot_blocks"] >= 1 and new["max_block_pages"] <= 32, new
EOF
  { "$restore" raw "$tmp/vm.hlt" -o "$tmp/old.img" --no-sync >/dev/null &&
    "$restore" raw "$tmp/new.hlt" -o "$tmp/new.img" --no-sync >/dev/null; } || fail "raw restores"
  cmp -s "$tmp/old.img" "$tmp/new.img" || fail "relayout changed the memory"
  "$restore" verify "$tmp/new.hlt" >/dev/null || fail "the relaid checkpoint does not verify"
  "$save" relayout "$tmp/vm.hlt" -o "$tmp/x.hlt" >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "relayout without a trace"
  printf 'nosuch:1\n' >"$tmp/bad.trace"
  "$save" relayout "$tmp/vm.hlt" -o "$tmp/x.hlt" --access-trace "$tmp/bad.trace" >/dev/null 2>&1
  [[ $? -eq 2 ]] || fail "relayout with an unknown region in the trace"
  [[ ! -e "$tmp/x.hlt" ]] || fail "a failed relayout left output"
  ;;
errors)
  "$guest" "$tmp" --pages 4096 --seed 2 || exit 1
  "$save" raw "$tmp/image" -o "$tmp/c.hlt" --no-sync --dictionary off >/dev/null || fail "save"
  "$restore" replay "$tmp/c.hlt" >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "replay without --trace is not a usage error"
  "$restore" replay "$tmp/c.hlt" --trace "$tmp/restore.trace" --threads 0 >/dev/null 2>&1
  [[ $? -eq 2 ]] || fail "--threads 0 is not a usage error"
  "$restore" replay "$tmp/missing.hlt" --trace "$tmp/restore.trace" >/dev/null 2>&1
  [[ $? -eq 3 ]] || fail "a missing checkpoint is not an I/O error"
  printf '1\n999999999\n' >"$tmp/bad.trace"
  "$restore" replay "$tmp/c.hlt" --trace "$tmp/bad.trace" >/dev/null 2>"$tmp/err"
  [[ $? -eq 2 ]] || fail "a page outside the region is not a usage error"
  grep -q "bad.trace:2" "$tmp/err" || fail "the trace error does not name the line"
  # Damage every block's payload (one byte in the middle, found by walking the BLOCKS section of the index): the
  # replay must stop at the first fault that needs a block, exit 4 and name the region, page, block and offset.
  python3 - "$tmp/c.hlt" <<'EOF' || fail "could not damage the checkpoint"
import struct, sys
path = sys.argv[1]
data = bytearray(open(path, 'rb').read())
index_offset, index_length = struct.unpack_from('<QQ', data, len(data) - 64)
pos, end = index_offset, index_offset + index_length
while pos < end:
    typ, flags, length = struct.unpack_from('<IIQ', data, pos)
    body = pos + 16
    if typ == 4:  # BLOCKS: u32 count, u32 reserved, then 32-byte entries (u64 offset, u32 stored_length, ...)
        count = struct.unpack_from('<I', data, body)[0]
        for i in range(count):
            off, stored = struct.unpack_from('<QI', data, body + 8 + 32 * i)
            data[off + stored // 2] ^= 0x20
    pos = body + ((length + 7) & ~7)
open(path, 'wb').write(data)
EOF
  "$restore" replay "$tmp/c.hlt" --trace "$tmp/restore.trace" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [[ $rc -eq 4 ]] || { fail "replay of a damaged checkpoint exited $rc, expected 4"; cat "$tmp/err"; }
  grep -q "block [0-9]* at offset 0x" "$tmp/err" || { fail "the error does not name the block and offset"; cat "$tmp/err"; }
  grep -q 'region "ram" page [0-9]' "$tmp/err" || { fail "the error does not name the faulting page"; cat "$tmp/err"; }
  ;;
*)
  echo "unknown case $case_name"; exit 2 ;;
esac
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
