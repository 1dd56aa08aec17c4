import csv,statistics as st,collections,sys
def load(f):
  d=collections.defaultdict(list)
  for r in csv.DictReader(open(f)): d[(r['image'],r['binary'])].append(r)
  return d
d=load('ab-defaults.csv'); fl=load('ab-floor.csv')
raw=256*1048576
print("| image | binary | runs | CPU s (median) | GB raw / CPU s | wall s (median) | file bytes | load1 range |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for src,tag in ((d,'defaults'),(fl,'--dictionary off --frame-pages 16')):
  for k,v in sorted(src.items()):
    cpu=st.median(float(x['cpu_s']) for x in v); wall=st.median(float(x['wall_s']) for x in v)
    loads=[float(x['load1']) for x in v]
    print(f"| {k[0]} | {k[1]} ({tag}) | {len(v)} | {cpu:.2f} | {raw/cpu/1e9:.3f} | {wall:.2f} | {v[0]['bytes']} | {min(loads):.1f}-{max(loads):.1f} |")
for img in sorted({k[0] for k in d}):
  b=st.median(float(x['cpu_s']) for x in d[(img,'hlt-save.base')]); n=st.median(float(x['cpu_s']) for x in d[(img,'hlt-save.new')])
  print(f"{img}: CPU new/base = {n/b:.3f}; bytes new/base = {int(d[(img,'hlt-save.new')][0]['bytes'])/int(d[(img,'hlt-save.base')][0]['bytes']):.6f}")
