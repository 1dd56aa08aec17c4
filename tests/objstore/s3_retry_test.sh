#!/usr/bin/env bash
# The S3 client against fake_s3_server.py (no Ceph): 503 is retried with backoff until the read succeeds (restore
# byte-identical); opening takes two requests; 403 is never retried and fails naming the URI and the offset.
#   s3_retry_test.sh HLT_SAVE HLT_RESTORE HLT_MKIMAGE
set -uo pipefail
save=$1 restore=$2 mkimage=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/objstore-retry.XXXXXX")
server=""
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
start_server() {  # start_server MODE: serves $tmp/c.hlt, logs to $tmp/MODE.log
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -f "$tmp/port"
  python3 "$here/fake_s3_server.py" "$tmp/c.hlt" "$tmp/port" "$tmp/$1.log" "$1" &
  server=$!
  for _ in $(seq 1 200); do [[ -f $tmp/port ]] && break; sleep 0.02; done
  [[ -f $tmp/port ]] || fail "the fake S3 server did not start"
  export AWS_ENDPOINT_URL=http://127.0.0.1:$(cat "$tmp/port")
}
export AWS_ACCESS_KEY_ID=fake AWS_SECRET_ACCESS_KEY=fake AWS_REGION=us-east-1

"$mkimage" "$tmp/img" 16 5 >/dev/null || fail "hlt-mkimage"
"$save" raw "$tmp/img" -o "$tmp/c.hlt" --no-sync >/dev/null || fail "hlt-save"

start_server flaky
"$restore" raw s3://bucket/c.hlt -o "$tmp/back.img" --no-sync >/dev/null || fail "restore through 503s failed"
cmp "$tmp/img" "$tmp/back.img" || fail "the image restored through 503s differs"
n503=$(grep -c '^GET 503' "$tmp/flaky.log")
((n503 > 0)) || fail "the fake server sent no 503 (the test proves nothing)"
# Every range answered 503 was asked again and served.
while read -r range; do
  grep -q "^GET 206 $range\$" "$tmp/flaky.log" || fail "range $range got a 503 and was never retried"
done < <(awk '$1 == "GET" && $2 == 503 {print $3}' "$tmp/flaky.log")
echo "flaky: $n503 answers 503, all retried; restore byte-identical"

start_server forbidden
# Opening takes two requests: the object's last 256 KiB (size, footer, index) and the header. The server refuses
# every GET after the second, so info succeeds only if open asks for no more.
"$restore" info s3://bucket/c.hlt >/dev/null || fail "hlt-restore info needed more than two requests to open"
[[ $(wc -l <"$tmp/forbidden.log") == 2 ]] || { cat "$tmp/forbidden.log"; fail "open sent other requests than two GETs"; }
echo "open: $(tr '\n' ';' <"$tmp/forbidden.log")"
rm "$tmp/forbidden.log"
start_server forbidden  # counts GETs from zero again
if "$restore" raw s3://bucket/c.hlt -o "$tmp/back2.img" --no-sync >"$tmp/out" 2>&1; then
  fail "restore succeeded although every read was refused"
fi
cat "$tmp/out"
grep -q "s3://bucket/c.hlt" "$tmp/out" || fail "the error does not name the URI"
grep -q "offset 0x" "$tmp/out" || fail "the error does not name the offset"
grep -q "HTTP 403" "$tmp/out" || fail "the error does not say HTTP 403"
dups=$(awk '$1 == "GET" && $2 == 403 {print $3}' "$tmp/forbidden.log" | sort | uniq -d | wc -l)
((dups == 0)) || fail "a range refused with 403 was asked again (4xx must not be retried)"
[[ ! -e $tmp/back2.img ]] || fail "a partial image was left behind"
echo "forbidden: $(grep -c '^GET 403' "$tmp/forbidden.log") answers 403, none retried"
echo "s3-retry: OK"
