#!/bin/sh
# main against this branch, whole bench_core --encryption runs alternated (ABBAAB), the load average logged
# before and after each. Usage: BIN=/dir/with/bench_core.{main,crypt26} OUT=dir ./ab.sh
set -e
for b in main crypt26 crypt26 main main crypt26; do
  n=$(ls "$OUT" | grep -c "^encryption-$b-" || true)
  f="$OUT/encryption-$b-$((n / 2 + 1))"
  echo "$(date -u +%H:%M:%S) $b start load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.log"
  TMPDIR=/var/tmp/crypt26-tmp "$BIN/bench_core.$b" --encryption --runs 5 --csv "$f.csv" > "$f.txt"
  echo "$(date -u +%H:%M:%S) $b end   load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.log"
done
