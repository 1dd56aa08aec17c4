#!/bin/bash
# A/B of hlt-save raw on the aged desktop's raw memory: main 24ff685 (serial scan) against 20b2e72 (scan on the workers).
cd /var/tmp/lead-prof
cat ../desk27-seed/desktop-raw.img > /dev/null
for v in main par par main main par; do
  rm -f out-$v.hlt
  /usr/bin/time -f "$v wall %e user %U sys %S" ./hlt-save.$v raw ../desk27-seed/desktop-raw.img -o out-$v.hlt --no-sync --threads 2 2>&1 | egrep "seconds|wall|stored bytes" | tr '\n' ' '
  echo " load $(cut -d' ' -f1 /proc/loadavg)"
done
