"""Measures computed from host-timed work intervals (start, end, operations).

Definitions (also in bench/guests/README.md):
- baseline rate: operations per second of the never-suspended source guest over the window before the first save.
- grid rate: the intervals spread evenly over their duration onto a 100 ms grid starting at t0 (restore start).
- time to 90 %: start of the first 1 s window of the grid (stepping by 100 ms) whose mean rate is >= 90 % of the
  baseline, measured from t0.
- restore overhead (Halite: extra wall time to complete a fixed amount of work compared with a guest that was never
  suspended): evaluated when the restore is complete plus SETTLE s (t_c): (t_c - t0) - work done in [t0, t_c] /
  reference rate. Past t_c the restored guest runs at the never-suspended rate, so this equals the extra time for
  any fixed work ending later. The literal fixed-work form is kept too: W = reference x D, T_W = time from t0
  until W operations are done, overhead = T_W - D (noisier: it integrates the machine's rate swings over D).
- reference rate: the restored guest's own rate in the REF_SECONDS after t_c (same machine load as the restore);
  the source's rate before the saves when the restore did not complete inside the record.
"""

import math

GRID = 0.1
SETTLE = 1.0        # s after a restore completes before the overhead is evaluated
REF_SECONDS = 5.0   # length of the reference window after that


def rate_over(intervals, t_from, t_to):
    ops = 0.0
    for a, b, n in intervals:
        if b <= t_from or a >= t_to or b <= a:
            continue
        ops += n * (min(b, t_to) - max(a, t_from)) / (b - a)
    return ops / (t_to - t_from) if t_to > t_from else 0.0


def baseline(intervals, t_end, seconds):
    """Mean rate over the `seconds` before t_end."""
    return rate_over(intervals, t_end - seconds, t_end)


def grid_rates(intervals, t0, t_end, width=GRID):
    n = max(0, int(math.ceil((t_end - t0) / width)))
    rates = [0.0] * n
    for a, b, ops in intervals:
        if b <= a:
            continue
        per_s = ops / (b - a)
        i = max(0, int((a - t0) / width))
        while i < n:
            lo, hi = t0 + i * width, t0 + (i + 1) * width
            if lo >= b:
                break
            overlap = min(hi, b) - max(lo, a)
            if overlap > 0:
                rates[i] += per_s * overlap / width
            i += 1
    return rates


def time_to_fraction(rates, base, fraction=0.9, window=1.0, width=GRID):
    k = int(round(window / width))
    if base <= 0 or len(rates) < k:
        return None
    s = sum(rates[:k])
    for i in range(0, len(rates) - k + 1):
        if i:
            s += rates[i + k - 1] - rates[i - 1]
        if s / k >= fraction * base:
            return i * width
    return None


def time_to_work(intervals, t0, work):
    """Seconds from t0 until `work` operations are done (linear within an interval); None if never."""
    done = 0.0
    for a, b, ops in sorted(intervals):
        if b < t0 or ops <= 0:
            continue
        if done + ops >= work:
            frac = (work - done) / ops
            return a + frac * (b - a) - t0
        done += ops
    return None


def summarize(intervals, t0, t_end, base, work_seconds):
    rates = grid_rates(intervals, t0, t_end)
    work = base * work_seconds
    t_w = time_to_work(intervals, t0, work)
    return {
        "t90": time_to_fraction(rates, base),
        "t_work": t_w,
        "overhead": (t_w - work_seconds) if t_w is not None else None,
        "work_ops": work,
        "rates": rates,
        "ops_total": sum(n for a, b, n in intervals if b >= t0),
    }


def work_between(intervals, t_from, t_to):
    return rate_over(intervals, t_from, t_to) * (t_to - t_from)
