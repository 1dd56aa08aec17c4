#!/bin/bash
# ab.sh OUTCSV REPS IMAGE_PATHS... : interleaved A/B of hlt-save binaries ($BINS in /var/tmp/ratio28/bin), writer
# defaults at 2 threads; cpu = user+sys of the whole process; coding = the coding line of hlt-save's report
out=$1; reps=$2; shift 2
bin=/var/tmp/ratio28/bin; work=${WORK:-/var/tmp/ratio28/work}
echo "image,binary,rep,raw_bytes,wall_s,cpu_s,file_bytes,load1,coding" > $out
for r in $(seq $reps); do for img in "$@"; do for b in $BINS; do
  /usr/bin/time -f "%e %U %S" -o $work/tm $bin/$b raw $img -o $work/ab.hlt --no-sync --threads 2 $SAVEOPTS >$work/log 2>&1 || echo FAIL $b $img
  read w u s < $work/tm
  coding=$(grep -E '^  (coding|why) ' $work/log | sed 's/^ *//; s/[,"]/;/g' | tr '\n' ' ' | cut -c1-600)
  echo "$(basename $img .img),$b,$r,$(stat -c %s $img),$w,$(echo "$u + $s" | bc),$(stat -c %s $work/ab.hlt),$(cut -d' ' -f1 /proc/loadavg),\"$coding\"" >> $out
done; done; done
rm -f $work/ab.hlt $work/tm $work/log
