#!/usr/bin/env bash
# main's bench_corpus (9bfbc49) and this branch's, alternated, defaults (and f0 for the zero image's new coding), same images.
set -euo pipefail
cd /var/tmp/ratio28/corpus
imgs=(repeats.img=repeats mixed.img=mixed sources.img=sources generated.img=generated random.img=random zero.img=zero)
run() {
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" > ../faults/$1.txt
  ../bin/$2 "${imgs[@]}" --settings "$3" --faults 1000 --work /var/tmp/ratio28/faults/work --csv ../faults/$1.csv >> ../faults/$1.txt 2>&1
  echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >> ../faults/$1.txt
}
for r in 1 2; do
  run defaults-main-$r bench_corpus.main defaults
  run defaults-branch-$r bench_corpus.new defaults
done
