#!/usr/bin/env bash
# Checkpoints on a real Ceph (issue 13): tests/objstore/CMakeLists.txt starts one cluster for all cases
# (scripts/ceph-up, a ctest fixture) and stops it after them.
#   objstore_test.sh CEPH_DIR HLT_SAVE HLT_RESTORE HLT_MKIMAGE CASE
# Cases: s3-roundtrip, rados-roundtrip, s3-killed-save, rados-killed-save, s3-server-stopped, s3-block-cache,
# s3-encrypted, rados-encrypted, s3-eager-batched, rados-eager-batched, s3-loader-order and rados-loader-order (then
# a 6th argument: the objstore-loader-order program), s3-demand-first and rados-demand-first (the
# objstore-demand-first program),
# capi (the C API program is then HLT_MKIMAGE's place: objstore_test.sh CEPH_DIR - - CAPI_OBJSTORE capi).
# Exits 77 (skipped) when the cluster is not running: ceph-up could not install or start Ceph and said why.
set -uo pipefail
ceph_dir=$1 save=$2 restore=$3 mkimage=$4 case=$5 order_test=${6:-}
if [[ ! -f $ceph_dir/env ]]; then
  echo "SKIPPED: no Ceph cluster at $ceph_dir (the objstore/ceph-up test could not start one: see its output)"
  exit 77
fi
. "$ceph_dir/env"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/objstore-test.XXXXXX")
bg_pids=()
cleanup() {
  for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
key=$case-$$  # unique per run: the cluster is shared by parallel cases
s3_uri=s3://$HALITE_TEST_S3_BUCKET/$key.hlt
rados_uri=rados://$HALITE_TEST_RADOS_POOL/$key

s3_status() {  # s3_status KEY: HTTP status of a HEAD of the object
  curl -s -o /dev/null -w '%{http_code}' -I --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "$AWS_ENDPOINT_URL/$HALITE_TEST_S3_BUCKET/$1"
}
s3_uploads() {  # multipart uploads in progress in the bucket (XML)
  curl -s --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$AWS_ENDPOINT_URL/$HALITE_TEST_S3_BUCKET?uploads="
}

roundtrip() {  # roundtrip URI: save 256 MiB, info, verify, raw restore byte-identical
  local uri=$1
  "$mkimage" "$tmp/img" 256 7 || fail "hlt-mkimage"
  local t0=$(date +%s.%N)
  "$save" raw "$tmp/img" -o "$uri" --page-hashes --no-sync || fail "hlt-save raw to $uri"
  local t1=$(date +%s.%N)
  "$restore" info "$uri" >"$tmp/info" || fail "hlt-restore info $uri"
  grep -q "268435456\|256" "$tmp/info" || { cat "$tmp/info"; fail "info does not show the 256 MiB region"; }
  "$restore" verify "$uri" || fail "hlt-restore verify $uri"
  local t2=$(date +%s.%N)
  "$restore" raw "$uri" -o "$tmp/back.img" --no-sync >/dev/null || fail "hlt-restore raw $uri"
  local t3=$(date +%s.%N)
  cmp "$tmp/img" "$tmp/back.img" || fail "the image restored from $uri differs"
  # The lazy path: userfaultfd faults served by one ranged read per block, every touched page compared.
  python3 -c 'import random; r = random.Random(5); print("\n".join(str(r.randrange(65536)) for _ in range(2000)))' \
    >"$tmp/trace"
  if "$restore" replay "$uri" --trace "$tmp/trace" --json >"$tmp/replay.json" 2>"$tmp/replay.err"; then
    grep -q '"mismatches":0' "$tmp/replay.json" || { cat "$tmp/replay.json"; fail "lazy replay from $uri saw wrong pages"; }
    echo "lazy replay from $uri: 2000 accesses, no wrong page"
  elif grep -qi "userfaultfd" "$tmp/replay.err"; then
    echo "NOTE: lazy replay not run here (no userfaultfd): $(cat "$tmp/replay.err")"
  else
    cat "$tmp/replay.err"
    fail "hlt-restore replay $uri"
  fi
  awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
    'BEGIN { printf "save %.2f s, info+verify %.2f s, raw restore %.2f s\n", b - a, c - b, d - c }'
  # An incremental child beside its parent in the store (the reader finds the parent by its path hint there).
  "$mkimage" --mutate "$tmp/img" "$tmp/img2" 30 10 12 "$tmp/changed" >/dev/null || fail "hlt-mkimage --mutate"
  "$save" raw "$tmp/img2" -o "$uri.child" --parent "$uri" --no-sync >"$tmp/child.out" || fail "hlt-save --parent $uri"
  grep -q "in parent" "$tmp/child.out" || fail "the child stored no page in its parent"
  rm -f "$tmp/back.img"
  "$restore" raw "$uri.child" -o "$tmp/back.img" --no-sync >/dev/null || fail "hlt-restore raw $uri.child"
  cmp "$tmp/img2" "$tmp/back.img" || fail "the child restored from $uri.child differs"
}

private_rgw() {  # private_rgw: a second radosgw of the cluster for this case alone; sets rgw (pid) and port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  radosgw -n client.rgw.a --rgw-frontends="beast endpoint=127.0.0.1:$port tcp_nodelay=1" --pid-file="$tmp/rgw.pid" \
    --admin-socket="$tmp/rgw.asok" --log-file="$tmp/rgw.log" -f >/dev/null 2>&1 &
  rgw=$!
  bg_pids+=("$rgw")
  local i
  for i in $(seq 1 200); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
}

rgw_gets() {  # GET requests the private radosgw has served so far (its own perf counters)
  ceph --admin-daemon "$tmp/rgw.asok" perf dump 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["rgw"]["get"])'
}

json_field() {  # json_field FILE KEY
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

block_cache() {  # issue 13 item 3: a second restore, a clone's, a child's read nothing twice from the store
  "$mkimage" "$tmp/img" 256 13 || fail "hlt-mkimage"
  "$save" raw "$tmp/img" -o "$s3_uri" --no-sync >/dev/null || fail "hlt-save raw to $s3_uri"
  private_rgw
  export AWS_ENDPOINT_URL=http://127.0.0.1:$port
  rgw_gets >/dev/null || fail "cannot read the private radosgw's perf counters ($tmp/rgw.asok)"
  local cache=$tmp/cache blocks before after out open_gets
  # What opening costs (the object's tail, its header, and the rest of a large index): info reads no block.
  before=$(rgw_gets)
  blocks=$("$restore" info "$s3_uri" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["blocks"])')
  after=$(rgw_gets)
  open_gets=$((after - before))
  ((open_gets >= 1 && open_gets <= 3)) || fail "opening $s3_uri took $open_gets GETs (expected 1 to 3)"
  # 1. A cold restore fills the cache: every block fetched once.
  before=$(rgw_gets)
  "$restore" raw "$s3_uri" -o "$tmp/back1.img" --no-sync --block-cache "$cache" >"$tmp/raw1.out" || fail "raw 1"
  after=$(rgw_gets)
  cat "$tmp/raw1.out"
  cmp "$tmp/img" "$tmp/back1.img" || fail "the first restore through the cache differs"
  grep -q "0 blocks from the block cache, $blocks fetched" "$tmp/raw1.out" || fail "the cold restore did not fetch all $blocks blocks"
  echo "cold restore: radosgw served $((after - before)) GETs for $blocks blocks ($open_gets to open)"
  # 2. A second restore (here a lazy replay, as a clone's restore would be) fetches no block: the radosgw sees
  #    only the open's GETs.
  python3 -c 'import random; r = random.Random(5); print("\n".join(str(r.randrange(65536)) for _ in range(2000)))' \
    >"$tmp/trace"
  before=$(rgw_gets)
  "$restore" replay "$s3_uri" --trace "$tmp/trace" --json --block-cache "$cache" >"$tmp/replay.json" 2>"$tmp/replay.err"
  local rc=$?
  after=$(rgw_gets)
  if ((rc != 0)) && grep -qi userfaultfd "$tmp/replay.err"; then
    echo "NOTE: lazy replay not run here (no userfaultfd): $(cat "$tmp/replay.err")"
  else
    ((rc == 0)) || { cat "$tmp/replay.err"; fail "replay through the cache"; }
    [[ $(json_field "$tmp/replay.json" mismatches) == 0 ]] || fail "the replay through the cache saw wrong pages"
    [[ $(json_field "$tmp/replay.json" blocks_fetched) == 0 ]] || { cat "$tmp/replay.json"; fail "the replay fetched blocks"; }
    [[ $(json_field "$tmp/replay.json" cache_hits) -gt 0 ]] || fail "the replay took no block from the cache"
    [[ $(json_field "$tmp/replay.json" storage_requests) == 0 ]] || fail "the replay sent block requests"
    ((after - before == open_gets)) ||
      fail "radosgw served $((after - before)) GETs to the cached replay (expected the open's $open_gets)"
    echo "cached lazy replay: $(json_field "$tmp/replay.json" cache_hits) blocks from the cache, 0 fetched;" \
      "radosgw: $open_gets GETs (open)"
  fi
  # 3. Two restores at once (two processes, a fresh cache): both right, the cache consistent, and a third
  #    restore fetches nothing.
  local shared=$tmp/cache2
  "$restore" raw "$s3_uri" -o "$tmp/back2.img" --no-sync --block-cache "$shared" >"$tmp/raw2.out" &
  local p2=$!
  "$restore" raw "$s3_uri" -o "$tmp/back3.img" --no-sync --block-cache "$shared" >"$tmp/raw3.out" || fail "raw 3"
  wait "$p2" || fail "raw 2"
  cmp "$tmp/img" "$tmp/back2.img" && cmp "$tmp/img" "$tmp/back3.img" || fail "concurrent restores through one cache differ"
  before=$(rgw_gets)
  "$restore" raw "$s3_uri" -o "$tmp/back4.img" --no-sync --block-cache "$shared" >"$tmp/raw4.out" || fail "raw 4"
  after=$(rgw_gets)
  cat "$tmp/raw4.out"
  cmp "$tmp/img" "$tmp/back4.img" || fail "the restore after the concurrent ones differs"
  grep -q "$blocks blocks from the block cache, 0 fetched" "$tmp/raw4.out" || fail "the third restore fetched blocks"
  ((after - before == open_gets)) ||
    fail "radosgw served $((after - before)) GETs to the cached restore (expected the open's $open_gets)"
  # 4. A damaged entry is dropped and its block fetched, never served.
  local entry
  entry=$(find "$shared" -path '*/[0-9a-f][0-9a-f]/*' -type f | head -1)
  python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(64 + 5); b = f.read(1); f.seek(64 + 5); f.write(bytes([b[0] ^ 1]))' "$entry"
  "$restore" raw "$s3_uri" -o "$tmp/back5.img" --no-sync --block-cache "$shared" >"$tmp/raw5.out" || fail "raw 5"
  cat "$tmp/raw5.out"
  cmp "$tmp/img" "$tmp/back5.img" || fail "a damaged cache entry reached the restored image"
  grep -q "1 fetched.*1 damaged cache entries dropped" "$tmp/raw5.out" || fail "the damaged entry was not dropped and refetched"
  # 5. A child saved with --parent: its restore fetches its own blocks only; the parent's come from the cache.
  "$mkimage" --mutate "$tmp/img" "$tmp/img2" 30 10 12 "$tmp/changed" >/dev/null || fail "hlt-mkimage --mutate"
  "$save" raw "$tmp/img2" -o "$s3_uri.child" --parent "$s3_uri" --no-sync >/dev/null || fail "hlt-save --parent"
  "$restore" info "$s3_uri.child" --json >"$tmp/child.json" || fail "info of the child"
  local own parent_live
  own=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chain"][0]["live_blocks"])' "$tmp/child.json")
  parent_live=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chain"][1]["live_blocks"])' "$tmp/child.json")
  "$restore" raw "$s3_uri.child" -o "$tmp/back6.img" --no-sync --block-cache "$shared" >"$tmp/raw6.out" || fail "raw child"
  cat "$tmp/raw6.out"
  cmp "$tmp/img2" "$tmp/back6.img" || fail "the child restored through the cache differs"
  grep -q "$parent_live blocks from the block cache, $own fetched" "$tmp/raw6.out" ||
    fail "the child should fetch its $own own blocks and take the parent's $parent_live from the cache"
}

killed_save() {  # killed_save URI STARTED_CMD GONE_CMD: SIGKILL hlt-save once STARTED_CMD succeeds
  local uri=$1 started=$2 gone=$3
  "$mkimage" "$tmp/img" 256 9 || fail "hlt-mkimage"
  "$save" raw "$tmp/img" -o "$uri" --no-sync >"$tmp/save.out" 2>&1 &
  local pid=$!
  bg_pids+=("$pid")
  local i
  for i in $(seq 1 600); do
    eval "$started" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null || { cat "$tmp/save.out"; fail "hlt-save ended before it could be killed mid-upload"; }
  wait "$pid" 2>/dev/null
  echo "killed hlt-save (pid $pid) mid-upload"
  eval "$gone" || fail "the killed save left a visible object at $uri"
  if "$restore" info "$uri" >"$tmp/info.out" 2>&1; then fail "hlt-restore info opened $uri after the killed save"; fi
  cat "$tmp/info.out"
}

encrypted() {  # encrypted URI RAW_BYTES_CMD: issue 26: the object holds ciphertext, the cache too; restores decrypt
  local uri=$1 raw_bytes=$2
  python3 - "$tmp/img" <<'PY'
import random, sys
rnd = random.Random(13)
with open(sys.argv[1], 'wb') as f:
    for p in range(8192):  # 32 MiB: text pages with a secret each, random pages (stored raw when plain)
        if p % 3 == 2:
            page = bytearray(rnd.getrandbits(8) for _ in range(4096)); page[64:82] = b'OBJECT-TENANT-KEY='
            f.write(page)
        else:
            line = ('OBJECT-TENANT-KEY=%x page %d\n' % (rnd.getrandbits(64), p)).encode()
            f.write((line * (4096 // len(line) + 1))[:4096])
PY
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
  "$save" raw "$tmp/img" -o "$uri" --encrypt-key-file "$tmp/key" --no-sync >/dev/null || fail "encrypted save to $uri"
  eval "$raw_bytes" >"$tmp/object" || fail "reading the object's bytes"
  [[ $(stat -c %s "$tmp/object") -gt 1000000 ]] || fail "the object's bytes were not read"
  ! grep -q OBJECT-TENANT-KEY "$tmp/object" || fail "plaintext in the object at $uri"
  if "$restore" verify "$uri" >"$tmp/v.out" 2>&1; then fail "verify of $uri without its key"; fi
  grep -q "encrypted with key id" "$tmp/v.out" || { cat "$tmp/v.out"; fail "the refusal does not name the key id"; }
  "$restore" verify "$uri" --without-key >/dev/null || fail "verify --without-key of $uri"
  "$restore" raw "$uri" -o "$tmp/back.img" --encrypt-key-file "$tmp/key" --plaintext-output --block-cache "$tmp/cache" \
    --no-sync >/dev/null || fail "restore of $uri with its key through the block cache"
  cmp "$tmp/img" "$tmp/back.img" || fail "the image decrypted from $uri differs"
  [[ -n $(find "$tmp/cache" -type f) ]] || fail "the block cache holds nothing"
  ! grep -rq OBJECT-TENANT-KEY "$tmp/cache" || fail "plaintext in the host block cache"
  echo "encrypted $uri: ciphertext in the object and in the block cache; restored byte for byte with the key"
}

eager_batched() {  # eager_batched URI: an eager restore reads the object in large ranged reads, not a block each
  local uri=$1
  "$mkimage" "$tmp/img" 256 13 || fail "hlt-mkimage"
  "$save" raw "$tmp/img" -o "$uri" --no-sync >/dev/null || fail "hlt-save raw to $uri"
  python3 -c 'import random; r = random.Random(9); print("\n".join(str(r.randrange(65536)) for _ in range(3000)))' \
    >"$tmp/trace"
  if ! "$restore" replay "$uri" --eager --trace "$tmp/trace" --json >"$tmp/eager.json" 2>"$tmp/eager.err"; then
    if grep -qi "userfaultfd" "$tmp/eager.err"; then
      echo "SKIPPED: no userfaultfd here: $(cat "$tmp/eager.err")"
      exit 77
    fi
    cat "$tmp/eager.err"
    fail "hlt-restore replay --eager $uri"
  fi
  python3 - "$tmp/eager.json" <<'PY' || fail "the eager restore from $uri did not read in batches"
import json, sys
j = json.load(open(sys.argv[1]))
blocks, requests, batches = j["blocks_total"], j["storage_requests"], j["preload_batches"]
stored_mib = j["bytes_read"] / 2**20
print(f"eager: {blocks} blocks ({stored_mib:.1f} MiB stored) in {batches} batches, {requests} storage requests, "
      f"{j['mismatches']} mismatches, {j['seconds']:.2f} s")
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what)
        ok = False
check(j["mismatches"] == 0, "pages differ from the checkpoint")
check(j["blocks_read_preload"] == blocks, f"the preload read {j['blocks_read_preload']} of {blocks} blocks")
check(batches > 0, "the preload fetched no batch (one request per block)")
# A request per block was the bug (3,777 requests for 3,775 blocks). Batches of 8 MiB go out as ranged reads of
# 256 KiB to 1 MiB, sent in pieces of at most 1 MiB (s3) or 512 KiB (rados: demand_gate.h): at least 3 blocks
# (~110 KiB stored each here) per request on average, whatever the timing.
check(requests * 3 <= blocks, f"{requests} storage requests for {blocks} blocks (fewer than 3 blocks a request)")
sys.exit(0 if ok else 1)
PY
}

case $case in
s3-encrypted)
  encrypted "$s3_uri" 'curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$AWS_ENDPOINT_URL/$HALITE_TEST_S3_BUCKET/$key.hlt"'
  ;;
rados-encrypted)
  # Every stripe of the checkpoint (NAME.s.<save id>.<index>), in order.
  encrypted "$rados_uri" 'for o in $(rados -p "$HALITE_TEST_RADOS_POOL" ls | grep "^$key\.s\." | sort -t. -k4 -n); do
      rados -p "$HALITE_TEST_RADOS_POOL" get "$o" - || exit 1; done'
  ;;
s3-roundtrip) roundtrip "$s3_uri" ;;
s3-eager-batched) eager_batched "$s3_uri" ;;
s3-loader-order | rados-loader-order)
  uri=$s3_uri
  [[ $case == rados-* ]] && uri=$rados_uri
  "$mkimage" "$tmp/img" 256 17 || fail "hlt-mkimage"
  "$save" raw "$tmp/img" -o "$uri" --no-sync >/dev/null || fail "hlt-save raw to $uri"
  "$order_test" "$uri" "$tmp/img" || fail "how the restore read $uri"
  ;;
s3-demand-first | rados-demand-first)
  uri=$s3_uri
  [[ $case == rados-* ]] && uri=$rados_uri
  "$mkimage" "$tmp/img" 512 17 || fail "hlt-mkimage"
  "$save" raw "$tmp/img" -o "$uri" --no-sync >/dev/null || fail "hlt-save raw to $uri"
  "$order_test" "$uri" "$tmp/img" || fail "demand reads behind the loader's on $uri"
  ;;
rados-eager-batched) eager_batched "$rados_uri" ;;
rados-roundtrip) roundtrip "$rados_uri" ;;
s3-killed-save)
  # Started: the upload is listed in progress and its first part is written (the process is mid-upload).
  killed_save "$s3_uri" 's3_uploads | grep -q "<Key>$key.hlt</Key>" && sleep 0.2' \
    '[[ $(s3_status "$key.hlt") == 404 ]]'
  ;;
rados-killed-save)
  killed_save "$rados_uri" 'rados -p "$HALITE_TEST_RADOS_POOL" ls 2>/dev/null | grep -q "^$key\.s\."' \
    '! rados -p "$HALITE_TEST_RADOS_POOL" stat "$key" >/dev/null 2>&1'
  ;;
capi) "$mkimage" "$s3_uri" "$rados_uri" || fail "the C API on object URIs" ;;
s3-block-cache) block_cache ;;
s3-server-stopped)
  # A second radosgw of the same cluster, only for this case, stopped while hlt-restore reads through it.
  "$mkimage" "$tmp/img" 256 11 || fail "hlt-mkimage"
  "$save" raw "$tmp/img" -o "$s3_uri" --no-sync >/dev/null || fail "hlt-save raw to $s3_uri"
  private_rgw
  export AWS_ENDPOINT_URL=http://127.0.0.1:$port
  "$restore" raw "$s3_uri" -o "$tmp/back.img" --no-sync >"$tmp/restore.out" 2>&1 &
  rpid=$!
  bg_pids+=("$rpid")
  # Stop the server once the restore has written 16 MiB of the image (wchar; socket reads do not show in rchar).
  w=0
  for i in $(seq 1 2000); do
    w=$(awk '/^wchar/ {print $2}' "/proc/$rpid/io" 2>/dev/null) || break  # unreadable: the restore has ended
    [[ -n $w ]] || break
    ((w > 16 * 1024 * 1024)) && break
    sleep 0.005
  done
  kill -KILL "$rgw"
  echo "stopped radosgw (pid $rgw) after the restore wrote ${w:-?} bytes of the image"
  wait "$rpid"
  rc=$?
  cat "$tmp/restore.out"
  ((rc != 0)) || fail "hlt-restore raw succeeded although its server was stopped (it read everything first?)"
  grep -q "$s3_uri" "$tmp/restore.out" || fail "the error does not name $s3_uri"
  grep -q "offset 0x" "$tmp/restore.out" || fail "the error does not name the offset"
  [[ ! -e $tmp/back.img ]] || fail "a partial image was left at $tmp/back.img"
  ;;
*) echo "objstore_test.sh: unknown case $case" >&2; exit 2 ;;
esac
echo "$case: OK"
