#!/usr/bin/env bash
# A/B: main's bench_corpus (87f338e) and this branch's, alternated, same images, same machine.
set -euo pipefail
cd /var/tmp/fault28-corpus
imgs=(repeats.img=repeats mixed.img=mixed sources.img=sources generated.img=generated random.img=random zero.img=zero)
mkdir -p ab
run() {  # NAME BINARY SETTINGS
  { echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > ab/$1.txt
  ./$2 "${imgs[@]}" --settings "$3" --faults 1000 --work /var/tmp/fault28-corpus/ab --csv ab/$1.csv >> ab/$1.txt 2>&1
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >> ab/$1.txt
}
run all-main bench_corpus.base defaults,f16,f0,f16+dict,f0+dict
run all-branch bench_corpus.new defaults,f16,f0,f16+dict,f0+dict
for r in 1 2; do
  run defaults-main-$r bench_corpus.base defaults
  run defaults-branch-$r bench_corpus.new defaults
done
