"""Synthetic multi-rank runs: N ranks of one DDP job, one of them slowed by a known amount before a
collective, ranks split over hosts whose clocks differ by known offsets.

Every rank runs the same step: compute, a synchronised all-reduce, compute, a synchronised all-reduce.
The host synchronises before each collective, so a collective kernel starts (arrives) when its rank's
host launches it; the slowed rank's host spends SLOW_US in the DataLoader first, so it arrives SLOW_US
after the others, and NCCL keeps every other rank's kernel spinning until it arrives: their kernels
last SLOW_US + XFER_US, its own XFER_US, and all end together.
"""

from __future__ import annotations

from builders_transfer import ALLREDUCE, TransferBuilder, _gemm

SLOW_US = 3000.0  # the slowed rank's extra host time before collective #1 of each step
XFER_US = 400.0  # an all-reduce's own transfer time, the same on every rank
NUMEL = 4_000_000  # elements per all-reduce (bf16, the kernel name says so)
COLLECTIVES_PER_STEP = 2
HOST_OFFSET_US = 250_000.0  # clock of host 1 minus clock of host 0


def build_rank(
    rank: int,
    world: int,
    *,
    slow_rank: int | None,
    steps: int = 3,
    slow_at: int = 1,
    gpus_per_host: int | None = None,
    offset_us: float = 0.0,
) -> TransferBuilder:
    t = TransferBuilder(rank=rank, world_size=world, node_gpus=gpus_per_host or world)
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for c in range(COLLECTIVES_PER_STEP):
                for _ in range(4):
                    _gemm(t, "aten::linear", 1000)
                t.sync()  # the host waits for the GPU, then launches
                late = rank == slow_rank and c == slow_at
                if late:
                    t.dataloader(SLOW_US)
                wait = 0.0 if late or slow_rank is None or c != slow_at else SLOW_US
                with t.span("record_param_comms", args={"Collective name": "allreduce"}):
                    t.kernel(
                        ALLREDUCE,
                        wait + XFER_US,
                        stream=20,
                        args={
                            "Collective name": "allreduce",
                            "In msg nelems": NUMEL,
                            "Out msg nelems": NUMEL,
                            "Group size": world,
                            "dtype": "BFloat16",
                        },
                    )
                t.sync()
    t.offset_us = offset_us
    return t


def write_run(
    d,
    world: int = 4,
    *,
    slow_rank: int | None = 2,
    steps: int = 3,
    gpus_per_host: int = 2,
    host_offset_us: float = HOST_OFFSET_US,
    skip: tuple[int, ...] = (),
    base_step_s: int = 0,
) -> list:
    """One run's folder: rank r lives on host r // gpus_per_host, whose clock is that many times
    host_offset_us ahead of host 0's. With base_step_s, rank r's process has its own
    baseTimeNanoseconds, r * base_step_s seconds before rank 0's, and its ts (relative to it, as Kineto
    writes them since 2024) are that much larger: the same instants on the host's clock. Returns the
    written paths."""
    paths = []
    for r in range(world):
        if r in skip:
            continue
        off = (r // gpus_per_host) * host_offset_us
        b = build_rank(r, world, slow_rank=slow_rank, steps=steps, gpus_per_host=gpus_per_host, offset_us=off)
        b.base_time_ns -= r * base_step_s * 10**9
        for e in b.events:
            e["ts"] += off + r * base_step_s * 1e6
        paths.append(b.write(d / f"rank{r}.pt.trace.json"))
    return paths


# --- a DDP job whose collectives are solved across the ranks (the job replay's builders) ------------
# Every rank: DataLoader, 12 forward and 12 backward GEMMs of 1 ms queued by a host that runs ahead,
# then JOB_BUCKETS gradient all-reduces on the NCCL stream after backward, the optimizer after them, and
# a step-end synchronisation. A rank's all-reduce kernel starts when its backward is done (its arrival)
# and ends on every rank when the last rank has arrived plus the transfer: the builder solves those
# durations across the ranks (write_job), as NCCL's spinning kernels make them.
JOB_BUCKETS = 2
JOB_XFER_US = 400.0


def _job_rank(rank, world, durs, *, slow_rank, extra_backward_us, extra_loader_us, steps, gpus_per_host):
    from builders_transfer import FUSED_ADAM

    t = TransferBuilder(rank=rank, world_size=world, node_gpus=gpus_per_host)
    slow = rank == slow_rank
    k = 0
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(50 + (extra_loader_us if slow else 0.0))
            for _ in range(12):
                _gemm(t, "aten::linear", 1000)
            for _ in range(12):
                _gemm(
                    t,
                    "autograd::engine::evaluate_function: MmBackward0",
                    1000 + (extra_backward_us / 12 if slow else 0),
                )
            t.wait_stream(20, 7)
            for _ in range(JOB_BUCKETS):
                with t.span("record_param_comms", args={"Collective name": "allreduce"}):
                    t.now += 8
                    t.kernel(
                        ALLREDUCE,
                        durs[k],
                        stream=20,
                        args={"Collective name": "allreduce", "In msg nelems": NUMEL, "Out msg nelems": NUMEL},
                    )
                k += 1
            t.wait_stream(7, 20)
            with t.span("Optimizer.step#AdamW.step", cat="user_annotation"):
                t.op("aten::_fused_adamw_", kernels=[(FUSED_ADAM, 400)])
    return t


def write_job(
    d,
    world: int = 8,
    *,
    slow_rank: int | None = None,
    extra_backward_us: float = 0.0,
    extra_loader_us: float = 0.0,
    xfer_us: float = JOB_XFER_US,
    steps: int = 3,
    gpus_per_host: int = 4,
    host_offset_us: float = HOST_OFFSET_US,
) -> list:
    """One job's folder (rank r on host r // gpus_per_host, whose clock runs host_offset_us per host
    ahead). Each all-reduce lasts, on each rank, from its arrival to the last rank's arrival plus
    xfer_us: solved by rebuilding until the arrivals stop moving (each pass fixes one more collective)."""
    n = steps * JOB_BUCKETS
    durs = {r: [xfer_us] * n for r in range(world)}
    kw = dict(
        slow_rank=slow_rank,
        extra_backward_us=extra_backward_us,
        extra_loader_us=extra_loader_us,
        steps=steps,
        gpus_per_host=gpus_per_host,
    )
    for _ in range(n + 2):
        built = {r: _job_rank(r, world, durs[r], **kw) for r in range(world)}
        arrive = {
            r: [e["ts"] for e in b.events if e.get("name") == ALLREDUCE and e.get("cat") == "kernel"]
            for r, b in built.items()
        }
        ends = [max(arrive[r][k] for r in range(world)) + xfer_us for k in range(n)]
        new = {r: [ends[k] - arrive[r][k] for k in range(n)] for r in range(world)}
        if all(abs(a - b) < 1e-6 for r in range(world) for a, b in zip(new[r], durs[r])):
            break
        durs = new
    paths = []
    for r, b in built.items():
        off = (r // gpus_per_host) * host_offset_us
        for e in b.events:
            e["ts"] += off
        paths.append(b.write(d / f"rank{r}.pt.trace.json"))
    return paths
