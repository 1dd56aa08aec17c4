#!/usr/bin/env bash
# hlt_reader_info_json prints the document `hlt-restore info --json` prints, byte for byte (both come from
# halite::CheckpointInfoJson): a checkpoint saved through the C API, described by each.
#   info_json_test.sh CAPI_READER_TEST HLT_RESTORE
set -euo pipefail
capi=$1 restore=$2
dir=$(mktemp -d "$PWD/info-json-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$capi" --save "$dir/c.hlt"
"$capi" --json "$dir/c.hlt" >"$dir/capi.json"
"$restore" info "$dir/c.hlt" --json >"$dir/tool.json"
if ! cmp "$dir/capi.json" "$dir/tool.json"; then
  echo "FAIL: the C API's info JSON differs from hlt-restore info --json"; diff "$dir/capi.json" "$dir/tool.json" | head
  exit 1
fi
grep -q '"stored_pages":30,' "$dir/capi.json" || { echo "FAIL: unexpected document: $(cat "$dir/capi.json")"; exit 1; }
echo "info JSON: the C API and hlt-restore info --json agree ($(wc -c <"$dir/capi.json") bytes)"
