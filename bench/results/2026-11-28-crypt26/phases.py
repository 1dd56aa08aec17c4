# Splits `perf script -F comm,pid,tid,time,ip,sym,dso` of `bench_core --encryption --runs R` (perf record
# --call-graph dwarf) into phases by the main thread's bench function (Save, SaveStaged, Eager, Lazy, Faults; every
# thread's samples go to the phase the main thread is in), the nth entry into a phase being variant n % 3, and
# prints per phase and variant where the samples' leaf is: by library (zstd, OpenSSL, libsodium, xxhash), memcpy
# or memset with their callers, malloc, the kernel (by the user-space function that entered it), or other.
# Usage: phases.py SCRIPT.txt [PHASE...]
import re, sys, collections
PH = ['SaveStaged', 'Save', 'Eager', 'Lazy', 'Faults', 'AeadUnits', 'AeadThroughput']
VAR = ['plain', 'AES', 'XChaCha']
def bucket(stack):
    leaf = stack[0]
    dso = leaf.rsplit(' (', 1)[-1] if ' (' in leaf else ''
    if 'libzstd' in dso: return 'zstd'
    if 'libcrypto' in dso: return 'AEAD aes-gcm (openssl)'
    if 'libsodium' in dso: return 'AEAD xchacha (sodium)'
    if 'libxxhash' in dso: return 'xxh3'
    s = ' '.join(stack[:6])
    if re.search(r'aesni|gcm|AES|aes_|ghash|EVP_|ossl_|CRYPTO_|evp_', leaf): return 'AEAD aes-gcm (openssl)'
    if re.search(r'chacha|poly1305|crypto_aead|crypto_stream|crypto_onetime', leaf): return 'AEAD xchacha (sodium)'
    if re.search(r'ZSTD|HUF_|FSE_|zstd', leaf): return 'zstd'
    if re.search(r'XXH', leaf): return 'xxh3'
    if re.search(r'memcpy|memmove', leaf): return 'memcpy:' + ('|'.join(x for x in stack[1:3]))[:90]
    if re.search(r'memset', leaf): return 'memset:' + ('|'.join(x for x in stack[1:3]))[:90]
    if re.search(r'malloc|free|_int_|operator new|operator delete|cfree', leaf): return 'malloc/free'
    if re.search(r'memcmp|bcmp', leaf): return 'memcmp'
    if leaf.startswith('[k]') or re.match(r'^[a-z_0-9]+$', leaf) and any(x.startswith('[k]') for x in stack[:1]): return 'kernel'
    return 'other:' + leaf[:80]
samples = []
cur = None
for line in open(sys.argv[1], errors='replace'):
    if not line.startswith('\t') and line.strip():
        m = re.match(r'(\S.*?)\s+(\d+)/(\d+)\s+([\d.]+):', line)
        if m:
            cur = [int(m.group(2)), int(m.group(3)), float(m.group(4)), []]
            samples.append(cur)
    elif line.strip() and cur is not None:
        parts = line.strip().split(None, 1)
        addr = parts[0]
        sym = parts[1] if len(parts) > 1 else '?'
        if addr.startswith('ffffffff'): sym = '[k]' + sym
        cur[3].append(sym)
main_pid = samples[0][0]
# phase timeline from main-thread samples
timeline = []
counts = collections.Counter()
last = None
for pid, tid, t, st in samples:
    if tid != main_pid: continue
    ph = None
    for fr in st:
        for p in PH:
            if re.search(r'bench::\(anonymous namespace\)::' + p + r"(\s|$)", fr): ph = p; break
        if ph: break
    if ph is None: continue
    if ph != last:
        counts[ph] += 1  # the nth time the main thread enters a phase: variant n % 3 (plain, AES, XChaCha)
        timeline.append((t, ph, counts[ph] - 1))
        last = ph
def phase_at(t):
    lo, hi = 0, len(timeline) - 1
    if t < timeline[0][0]: return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if timeline[mid][0] <= t: lo = mid
        else: hi = mid - 1
    return timeline[lo]
agg = collections.defaultdict(collections.Counter)
for pid, tid, t, st in samples:
    p = phase_at(t)
    if not p or not st: continue
    name = p[1] + ' ' + VAR[p[2] % 3]
    b = bucket(st)
    if b.startswith('kernel') or st[0].startswith('[k]'):
        # kernel: name by the first user frame
        user = next((x for x in st if not x.startswith('[k]')), '?')
        b = 'kernel<-' + user[:60]
    agg[name][b] += 1
want = sys.argv[2:] or ['Eager', 'Lazy']
for ph in want:
    for v in VAR:
        name = ph + ' ' + v
        c = agg.get(name)
        if not c: continue
        tot = sum(c.values())
        print(f'== {name}: {tot} samples')
        for k, n in c.most_common(40):
            print(f'  {n:6d} {100*n/tot:5.1f}%  {k}')
