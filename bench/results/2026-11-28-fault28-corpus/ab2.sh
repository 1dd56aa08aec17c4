#!/usr/bin/env bash
# A/B 2: main's bench_corpus (87f338e) and 08d4e52's (dictionary window), alternated, defaults, same images.
set -euo pipefail
cd /var/tmp/fault28-corpus
imgs=(repeats.img=repeats mixed.img=mixed sources.img=sources generated.img=generated random.img=random zero.img=zero)
run() {
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" > ab/$1.txt
  ./$2 "${imgs[@]}" --settings "$3" --faults 1000 --work /var/tmp/fault28-corpus/ab --csv ab/$1.csv >> ab/$1.txt 2>&1
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >> ab/$1.txt
}
for r in 1 2; do
  run window-main-$r bench_corpus.base defaults,f0+dict
  run window-branch-$r bench_corpus.win defaults,f0+dict
done
