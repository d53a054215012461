"""The Dask backend gives the same combined report as the local process pool."""

import pytest

from builders import build_dataloader_stall
from traceinspect.multirank import analyze_many

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")


def test_dask_local_cluster_matches_process_pool(tmp_path):
    paths = []
    for r in range(3):
        b = build_dataloader_stall(steps=2, load_us=5_000 * (r + 1))
        b.rank, b.world_size = r, 3
        paths.append(str(b.write(tmp_path / f"rank{r}.pt.trace.json")))
    local = analyze_many(paths, jobs=1)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        from traceinspect.distributed import dask_mapper

        remote = analyze_many(paths, mapper=dask_mapper(cluster.scheduler_address))
    assert [r["rank"] for r in remote.ranks] == [0, 1, 2]
    assert remote.ranks == local.ranks
    assert next(r for r in remote.ranks if r["slowest"])["rank"] == 2
