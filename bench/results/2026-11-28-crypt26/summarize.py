#!/usr/bin/env python3
# Medians over the bench_core --encryption invocations of each binary (each already the median of 5 interleaved
# runs): restore CPU and wall, eager and lazy, and saves, per cipher; then encrypted / plain of the same
# invocation, and this branch / main. Usage: summarize.py DIR (with encryption-{main,crypt26}-N.csv).
import csv, glob, statistics, sys, os
d = sys.argv[1] if len(sys.argv) > 1 else '.'
V = ['plain (baseline)', 'AES-256-GCM', 'XChaCha20-Poly1305']
def load(path):
    t = {}
    for row in csv.DictReader(open(path)):
        t[(row['table'], row['config'])] = [float(row['value%d' % i]) for i in range(1, 5)]
    return t
runs = {b: [load(p) for p in sorted(glob.glob(os.path.join(d, 'encryption-%s-*.csv' % b)))] for b in ('main', 'crypt26')}
def med(xs): return statistics.median(xs)
def fig(t, v):
    e = t[('encryption_eager_restore', v)]; l = t[('encryption_lazy_restore', v)]; s = t[('encryption_save', v)]
    st = t[('encryption_staged_save', v)]
    raw = s[1] * s[0]  # GB raw = GB/s x s
    return {'eager_s': e[0], 'eager_cpu': e[2], 'lazy_s': l[0], 'lazy_cpu': l[2], 'save_gbps': s[1],
            'save_gb_cpu': s[2], 'staged_gbps': st[1], 'staged_gb_cpu': st[2]}
keys = ['eager_cpu', 'eager_s', 'lazy_cpu', 'lazy_s', 'save_gbps', 'save_gb_cpu', 'staged_gbps', 'staged_gb_cpu']
print('invocations: main %d, crypt26 %d (each: medians of 5 interleaved runs)' % (len(runs['main']), len(runs['crypt26'])))
for b in ('main', 'crypt26'):
    print('\n## %s: median over invocations (in brackets: each invocation)' % b)
    print('| variant | ' + ' | '.join(keys) + ' |')
    print('| --- ' * (len(keys) + 1) + '|')
    for v in V:
        cells = []
        for k in keys:
            xs = [fig(t, v)[k] for t in runs[b]]
            cells.append('%.3f [%s]' % (med(xs), ' '.join('%.3f' % x for x in xs)))
        print('| %s | %s |' % (v, ' | '.join(cells)))
    print('\nencrypted / plain, same invocation (median over invocations [each])')
    print('| variant | eager CPU | eager wall | lazy CPU | lazy wall | save GB/CPU-s | staged save GB/CPU-s |')
    print('| --- | --- | --- | --- | --- | --- | --- |')
    for v in V[1:]:
        cells = []
        for k in ['eager_cpu', 'eager_s', 'lazy_cpu', 'lazy_s', 'save_gb_cpu', 'staged_gb_cpu']:
            xs = [fig(t, v)[k] / fig(t, V[0])[k] for t in runs[b]]
            cells.append('%.3f [%s]' % (med(xs), ' '.join('%.3f' % x for x in xs)))
        print('| %s | %s |' % (v, ' | '.join(cells)))
print('\n## crypt26 / main (medians over invocations)')
print('| variant | eager CPU | eager wall | lazy CPU | lazy wall |')
print('| --- | --- | --- | --- | --- |')
for v in V:
    cells = []
    for k in ['eager_cpu', 'eager_s', 'lazy_cpu', 'lazy_s']:
        a = med([fig(t, v)[k] for t in runs['crypt26']]); m = med([fig(t, v)[k] for t in runs['main']])
        cells.append('%.3f' % (a / m))
    print('| %s | %s |' % (v, ' | '.join(cells)))
