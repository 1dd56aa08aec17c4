#!/usr/bin/env bash
# libhalite.so exports only the public API: C functions hlt_*, and C++ symbols of namespace halite that are not
# in one of the library's internal namespaces (src/: cache, capi, codec, engine, format, io, objstore, writer) and are not a
# private Impl. Prints the count, so a change in the exported surface shows in the test log.
#   exports_test.sh LIBHALITE_SO
set -euo pipefail
lib=$1
command -v nm >/dev/null && command -v c++filt >/dev/null || { echo "SKIPPED: nm or c++filt missing"; exit 77; }
symbols=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
count=$(wc -l <<<"$symbols")
echo "$lib exports $count symbols"
bad=$(grep -vE '^(hlt_[a-z_]+$|halite::|typeinfo for halite::|typeinfo name for halite::|vtable for halite::)' <<<"$symbols" || true)
internal=$(grep -E 'halite::(cache|capi|codec|engine|format|io|objstore|writer)::|::Impl::' <<<"$symbols" || true)
if [[ -n $bad || -n $internal ]]; then
  echo "FAIL: symbols outside the public API:"
  printf '%s\n' "$bad" "$internal" | grep -v '^$' | head -50
  exit 1
fi
for f in hlt_restore_start hlt_writer_set_param hlt_reader_info_json hlt_reader_verify hlt_open_options_set_string \
    hlt_qemu_save_create hlt_session_create hlt_session_start hlt_session_wait hlt_session_get_stat \
    hlt_session_get_domain hlt_libvirt_save_create hlt_save_set_string hlt_server_create hlt_server_start \
    hlt_server_get_image hlt_server_stop; do
  grep -q "^$f\$" <<<"$symbols" || { echo "FAIL: the C API is not exported ($f)"; exit 1; }
done
grep -q '^halite::CheckpointReader::Open' <<<"$symbols" || { echo "FAIL: CheckpointReader::Open is not exported"; exit 1; }
echo "exports: OK (public API only)"
