"""The Dask backend gives the same combined report as the local process pool (issue 29 item 3: the
512-rank figure in docs/multi-rank.md is bench/ranks.py; here a small folder, checked in CI)."""

import importlib.util
from pathlib import Path

import pytest

import builders_ranks as br
from builders import build_dataloader_stall
from traceinspect.multirank import analyze_many

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
DLRM = "facebookresearch__param/et_replay/tests/data/dlrm_kineto"


def _dask(paths):
    from traceinspect.distributed import dask_mapper

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        return analyze_many(paths, mapper=dask_mapper(cluster.scheduler_address))


def _same(a, b) -> None:
    da, db = a.to_dict(), b.to_dict()
    assert da == db


def test_dask_local_cluster_matches_process_pool(tmp_path):
    paths = []
    for r in range(3):
        b = build_dataloader_stall(steps=2, load_us=5_000 * (r + 1))
        b.rank, b.world_size = r, 3
        paths.append(str(b.write(tmp_path / f"rank{r}.pt.trace.json")))
    local = analyze_many(paths, jobs=1)
    remote = _dask(paths)
    assert [r["rank"] for r in remote.ranks] == [0, 1, 2]
    assert next(r for r in remote.ranks if r["slowest"])["rank"] == 2
    _same(local, remote)


def test_dask_gives_the_same_job_replay(tmp_path):
    """A job whose rank 5 is slowed in backward: aligned, replayed as one job, the same with Dask."""
    paths = [str(p) for p in br.write_job(tmp_path, world=8, slow_rank=5, extra_backward_us=2000.0)]
    local = analyze_many(paths, jobs=2)
    assert local.cross_rank["gating_rank"] == 5 and local.cross_rank["job"]["predictions"]
    _same(local, _dask(paths))


def _generate():
    spec = importlib.util.spec_from_file_location("generate", Path(__file__).parent.parent / "bench" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_folder_from_a_real_run(tmp_path, shared_dir):
    """bench/generate.py --ranks 16 from the real 8-rank DLRM run: two hosts of 8 ranks, every rank with
    its own baseTimeNanoseconds. The ranks of a host are one clock (base + ts), the hosts' offset is
    estimated from the collectives, and Dask gives the same report as the process pool."""
    gen = _generate()
    seed = shared_dir / DLRM
    d = gen.ensure_ranks(tmp_path, seed, 500_000, 16, log=lambda s: None)
    paths = sorted(str(p) for p in d.glob("rank*.pt.trace.json"))
    assert len(paths) == 16
    bases = {gen.Seed(p).base_us for p in paths[:3]}
    assert len(bases) == 3  # each rank's process has its own base time
    host1_us, _ = gen.rank_clocks(8, gen.Seed(seed / sorted(x.name for x in seed.iterdir())[0]))
    local = analyze_many(paths, jobs=2)
    c = local.cross_rank
    per = {p["rank"]: p["clock_offset_us"] for p in c["per_rank"]}
    assert c["clock"] != "one clock" and c["matched"] > 0
    for r in range(16):  # rank r is seed rank r % 8 with host r // 8's clock
        assert per[r] == pytest.approx(per[r % 8] + (host1_us if r >= 8 else 0.0), abs=1.0)
    for r in range(1, 8):  # one host: one clock, whatever the base times
        assert abs(per[r]) <= c["clock_tolerance_us"]
    said = next(w for w in local.warnings if "clocks differ" in w)
    assert "ranks 0-7 " in said and "ranks 8-15 " in said
    _same(local, _dask(paths))
