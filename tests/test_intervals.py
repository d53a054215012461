import numpy as np

from traceinspect.trace import intervals as iv


def s(*pairs):
    return iv.union([p[0] for p in pairs], [p[1] for p in pairs])


def test_union_merges_overlaps_and_drops_empty():
    u = s((0, 2), (1, 3), (5, 6), (7, 7))
    assert u[0].tolist() == [0, 5] and u[1].tolist() == [3, 6]


def test_complement_intersect_subtract_partition_the_window():
    a = s((1, 3), (6, 8))
    b = s((2, 7))
    comp = iv.complement(a, 0, 10)
    assert iv.total(comp) + iv.total(a) == 10
    inter = iv.intersect(a, b)
    assert inter[0].tolist() == [2, 6] and inter[1].tolist() == [3, 7]
    diff = iv.subtract(a, b)
    assert iv.total(diff) + iv.total(inter) == iv.total(a)


def test_per_window_sums_to_total_for_tiling_windows():
    rng = np.random.default_rng(0)
    st = rng.uniform(0, 1000, 200)
    a = iv.union(st, st + rng.uniform(0, 20, 200))
    edges = np.linspace(0, 1100, 12)
    per = iv.per_window(a, edges[:-1], edges[1:])
    assert np.isclose(per.sum(), iv.total(a))
    # each window's share equals a brute-force clip
    for lo, hi, got in zip(edges[:-1], edges[1:], per):
        assert np.isclose(got, iv.total(iv.clip(a, lo, hi)))


def _raw(rng, n, span):
    """n random intervals with integer ends: overlapping, unsorted, some empty or reversed (not a normal set)."""
    st = rng.integers(0, span, n).astype(float)
    return st, st + rng.integers(-2, 12, n)


def _cover(a, pts):
    """Brute force: is each point inside any interval of the raw (unnormalised) intervals a."""
    s, e = a
    return ((pts[:, None] >= s[None, :]) & (pts[:, None] < e[None, :])).any(axis=1)


def test_intersect_and_subtract_match_a_brute_force_cover_on_raw_and_normal_sets():
    # intersect is a merge of two sorted sets; its inputs may come unnormalised from callers
    rng = np.random.default_rng(7)
    pts = np.arange(-5, 130) + 0.5  # integer ends: half-integers probe every elementary piece
    for trial in range(300):
        a = _raw(rng, int(rng.integers(0, 25)), 100)
        b = _raw(rng, int(rng.integers(0, 25)), 100)
        if trial % 2:
            a, b = iv.union(*a), iv.union(*b)
        ca, cb = _cover(a, pts), _cover(b, pts)
        for got, want in ((iv.intersect(a, b), ca & cb), (iv.subtract(a, b), ca & ~cb)):
            norm = iv.union(*got)  # the result is a normal set: sorted, disjoint, no empty or touching pieces
            assert np.array_equal(got[0], norm[0]) and np.array_equal(got[1], norm[1])
            assert np.array_equal(_cover(got, pts), want)


def test_intersect_of_many_intervals_with_few_windows_keeps_each_piece():
    ks = np.arange(0, 10_000, 2.0)
    a = iv.union(ks, ks + 1)  # 5,000 disjoint kernels
    steps = iv.union([100.5, 5000.0], [300.5, 9000.0])
    got = iv.intersect(a, steps)
    # [100.5, 101), [102, 103) .. [300, 300.5): 101 pieces of 100 us; then 2,000 whole kernels
    assert got[0].size == 101 + 2000 and iv.total(got) == 100 + 2000
    assert got[0][0] == 100.5 and got[1][0] == 101 and got[1][100] == 300.5 and got[0][101] == 5000
