"""Pure interval algebra on numpy arrays of [start, end) in microseconds. No pandas, no trace knowledge.

A "set" is a pair (starts, ends) of float64 arrays, sorted, non-overlapping, non-empty intervals,
as returned by `union`.
"""

from __future__ import annotations

import numpy as np

Set = tuple[np.ndarray, np.ndarray]
EMPTY: Set = (np.empty(0), np.empty(0))


def union(starts, ends) -> Set:
    """Merge possibly overlapping intervals into a sorted disjoint set (zero-length ones vanish)."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new group starts where the start is beyond everything seen so far
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = run_end[np.r_[idx[1:] - 1, s.size - 1]]
    return out_s, out_e


def total(a: Set) -> float:
    return float(np.sum(a[1] - a[0]))


def clip(a: Set, lo: float, hi: float) -> Set:
    s = np.clip(a[0], lo, hi)
    e = np.clip(a[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def complement(a: Set, lo: float, hi: float) -> Set:
    """The parts of [lo, hi) not covered by a."""
    a = clip(a, lo, hi)
    s = np.concatenate(([lo], a[1]))
    e = np.concatenate((a[0], [hi]))
    keep = e > s
    return s[keep], e[keep]


def intersect(a: Set, b: Set) -> Set:
    """The parts covered by both a and b.

    A merge of the two sorted sets, not a sort of their boundaries: for each interval of a, the run of
    b's intervals that overlap it (two binary searches), and one piece per overlapping pair. The pieces
    come out sorted and disjoint, and the memory is that of the pairs (at most len(a) + len(b)), so
    intersecting a million kernels with a few steps costs a few arrays of the result's size.
    """
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    a, b = _normal(a), _normal(b)
    first = np.searchsorted(b[1], a[0], side="right")  # first b interval ending after a's start
    last = np.searchsorted(b[0], a[1], side="left")  # b intervals starting before a's end
    n = np.maximum(last - first, 0)
    total = int(n.sum())
    if total == 0:
        return EMPTY
    ia = np.repeat(np.arange(a[0].size), n)
    # b's index for each pair: first[ia] plus the pair's rank within its a interval
    ib = np.arange(total) - np.repeat(np.cumsum(n) - n, n) + first[ia]
    s = np.maximum(a[0][ia], b[0][ib])
    e = np.minimum(a[1][ia], b[1][ib])
    return _merge_touching(s, e)


def subtract(a: Set, b: Set) -> Set:
    """The parts of a not covered by b: a intersected with b's complement over a's span."""
    a = _normal(a)
    if a[0].size == 0 or b[0].size == 0:
        return a
    return intersect(a, complement(_normal(b), float(a[0][0]), float(a[1][-1])))


def _normal(a: Set) -> Set:
    """a itself when it is sorted, disjoint and without empty intervals (what union returns), else union(a)."""
    s, e = a
    if s.size and ((~(e > s)).any() or (s[1:] < e[:-1]).any()):  # ~(e > s) also catches NaN
        return union(s, e)
    return s, e


def _merge_touching(s: np.ndarray, e: np.ndarray) -> Set:
    """Sorted disjoint pieces with empty ones dropped and touching ones joined, as union would give."""
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size < 2:
        return s, e
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], e[:-1], out=new[1:])
    if new.all():
        return s, e
    idx = np.flatnonzero(new)
    return s[idx], e[np.r_[idx[1:] - 1, s.size - 1]]


def _contains(a: Set, x: np.ndarray) -> np.ndarray:
    """For each x: is it inside one interval of the disjoint sorted set a."""
    i = np.searchsorted(a[0], x, side="right") - 1
    ok = i >= 0
    out = np.zeros(x.shape, dtype=bool)
    out[ok] = x[ok] < a[1][i[ok]]
    return out


def contains(a: Set, x) -> np.ndarray:
    return _contains(a, np.asarray(x, dtype=np.float64))


def covered_upto(a: Set, x) -> np.ndarray:
    """Total length of a within (-inf, x], vectorised over x."""
    x = np.asarray(x, dtype=np.float64)
    if a[0].size == 0:
        return np.zeros(x.shape)
    lengths = np.concatenate(([0.0], np.cumsum(a[1] - a[0])))
    i = np.searchsorted(a[0], x, side="right")  # intervals starting at or before x
    full = lengths[np.maximum(i - 1, 0)]
    last_s = a[0][np.maximum(i - 1, 0)]
    last_e = a[1][np.maximum(i - 1, 0)]
    partial = np.clip(np.minimum(x, last_e) - last_s, 0, None)
    return np.where(i > 0, full + partial, 0.0)


def per_window(a: Set, lo, hi) -> np.ndarray:
    """Length of a inside each window [lo_k, hi_k)."""
    return covered_upto(a, hi) - covered_upto(a, lo)
