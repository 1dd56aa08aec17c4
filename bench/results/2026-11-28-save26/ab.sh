#!/bin/bash
# ab.sh OUTCSV REPS IMAGES... : interleaved A/B of the saved binaries, defaults; cpu = user+sys
out=$1; reps=$2; shift 2
cd ${WORK:-/var/tmp/save26}
echo "image,binary,rep,wall_s,cpu_s,bytes,load1" > $out
for r in $(seq $reps); do for img in "$@"; do for b in $BINS; do
  /usr/bin/time -f "%e %U %S" -o tm ./$b raw corpus/$img.img -o ab.hlt --no-sync $SAVEOPTS >/dev/null 2>&1 || echo FAIL $b $img
  read w u s < tm
  echo "$img,$b,$r,$w,$(echo "$u + $s" | bc),$(stat -c %s ab.hlt),$(cut -d' ' -f1 /proc/loadavg)" >> $out
done; done; done
rm -f ab.hlt tm
