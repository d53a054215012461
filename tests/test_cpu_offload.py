"""cpu-offload helpers checked against the plain computation they replace."""


def test_launches_inside_a_span_are_counted_per_thread_as_a_scan_would():
    """The per-span launch count (two binary searches in the span's thread) equals the plain count of
    launches on that thread in [ts, end), ties at both ends included."""
    import numpy as np
    import pandas as pd

    from traceinspect.detectors.cpu_offload import _launched_inside

    rng = np.random.default_rng(7)
    kt = np.round(rng.uniform(0, 1000, 5000), 0)  # rounded: many launches exactly at a span's ends
    ktid = rng.integers(1, 4, 5000)
    ts = np.round(rng.uniform(0, 1000, 50), 0)
    spans = pd.DataFrame(
        {"ts_us": ts, "end_us": ts + np.round(rng.uniform(-5, 200, 50), 0), "tid": rng.integers(1, 5, 50)}
    )
    want = [int(np.sum((kt >= r.ts_us) & (kt < r.end_us) & (ktid == r.tid))) for r in spans.itertuples(index=False)]
    assert _launched_inside(kt, ktid, spans).tolist() == want
    assert sum(want) > 0 and 0 in want  # both cases occur (tid 4 launches nothing)
