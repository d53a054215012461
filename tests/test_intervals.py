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
