"""Builders for the trace-quality checks (facts/trace_quality.py): each makes one capture artifact.

t = QualityBuilder()
with t.step():
    t.graph_replay([(ELEMENTWISE, 5.0)] * 40, gap_us=20.0)   # one cudaGraphLaunch, 40 kernels
"""

from __future__ import annotations

from builders import ELEMENTWISE, GEMM_BF16, TraceBuilder

GRAPH_KERNELS = 40
GRAPH_KERNEL_US = 5.0
GRAPH_GAP_US = 20.0  # the GPU idles between the graph's kernels (a dependency inside the graph)
QUEUE_WAIT_US = 5000.0  # the first kernel of the stream waits this long behind work not in the trace
WARMUP_MALLOCS = 8


class QualityBuilder(TraceBuilder):
    def graph_replay(self, kernels, *, stream: int = 7, gap_us: float = 2.0) -> "QualityBuilder":
        """One cudaGraphLaunch (hipGraphLaunch on ROCm): the graph's kernels run gap_us apart, each
        stamped with the launch's correlation id, none with a launch call of its own (CUDA graphs)."""
        ext = self._stack[-1]["args"]["External id"] if self._stack else None
        rt = self._runtime("hipGraphLaunch" if self.rocm else "cudaGraphLaunch", 20.0, 311, ext)
        start = self._gpu_start(stream, rt["ts"])
        for name, dur in kernels:
            self._kernel_event(name, start, dur, stream, rt["args"]["correlation"])
            start += dur + gap_us
        self.stream_free[stream] = start - gap_us
        return self

    def unlaunched_kernel(self, name: str, dur_us: float, *, stream: int = 7) -> "QualityBuilder":
        """A kernel whose correlation id matches no runtime call (its launch was not recorded)."""
        c = self.corr
        self.corr += 1
        start = max(self.now, self.stream_free.get(stream, 0.0))
        self._kernel_event(name, start, dur_us, stream, c)
        self.stream_free[stream] = start + dur_us
        self.now += 10.0
        return self

    def _kernel_event(self, name: str, ts: float, dur: float, stream: int, corr: int) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": {"device": 0, "stream": stream, "correlation": corr, "grid": [132, 1, 1], "block": [256, 1, 1]},
            }
        )


def _eager(t: TraceBuilder, n: int = 10) -> None:
    for _ in range(n):
        t.op("aten::linear", kernels=[(GEMM_BF16, 400.0)], cpu_us=15)


def build_graph_replay(steps: int = 3) -> QualityBuilder:
    """Decode with CUDA graphs: per step a little eager work, then one graph launch of GRAPH_KERNELS
    kernels of GRAPH_KERNEL_US each, GRAPH_GAP_US apart: the idle time inside the replay has no launch."""
    t = QualityBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            _eager(t, 2)
            t.graph_replay([(ELEMENTWISE, GRAPH_KERNEL_US)] * GRAPH_KERNELS, gap_us=GRAPH_GAP_US)
    return t


def build_unlaunched(steps: int = 3) -> QualityBuilder:
    """Half the kernels of every step carry a correlation id that no runtime call has."""
    t = QualityBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(10):
                t.op("aten::linear", kernels=[(GEMM_BF16, 400.0)], cpu_us=15)
                t.unlaunched_kernel(GEMM_BF16, 400.0)
    return t


def build_queue_wait(steps: int = 1) -> QualityBuilder:
    """The capture starts while the stream still runs earlier work: the first recorded kernel is
    launched at once but starts QUEUE_WAIT_US later, with nothing recorded before it on its stream."""
    t = QualityBuilder()
    t.stream_free[7] = t.now + QUEUE_WAIT_US
    for _ in range(steps):
        with t.step(wait_gpu=True):
            _eager(t, 4)
    return t


def build_dropped_first_step(steps: int = 4) -> QualityBuilder:
    """The first step records 2 of its 10 kernels (Kineto's session-start drop); the others all 10."""
    t = QualityBuilder()
    for i in range(steps):
        with t.step(wait_gpu=True):
            _eager(t, 2 if i == 0 else 10)
            if i == 0:
                t.cpu(8 * 415.0)  # the step lasts as long; only its kernels are missing
    return t


def build_warmup(steps: int = 4) -> QualityBuilder:
    """The first step grows the allocator (WARMUP_MALLOCS cudaMalloc calls) and runs twice as long."""
    t = QualityBuilder()
    for i in range(steps):
        with t.step(wait_gpu=True):
            if i == 0:
                for _ in range(WARMUP_MALLOCS):
                    t.runtime_call("cudaMalloc", 500.0)
            _eager(t, 10)
    return t


def build_clock_skew(steps: int = 3, every: int = 5) -> QualityBuilder:
    """A launch-bound trace whose every `every`-th kernel is stamped 1 us before its launch call (a GPU
    clock converted to the host clock with an error)."""
    t = QualityBuilder()
    for _ in range(steps):
        with t.step():
            for _ in range(200):
                t.op("aten::add", kernels=[(ELEMENTWISE, 3.0)], cpu_us=20)
    launch = {e["args"]["correlation"]: e["ts"] for e in t.events if e.get("cat") == "cuda_runtime"}
    kernels = [e for e in t.events if e.get("cat") == "kernel"]
    for e in kernels[::every]:
        e["ts"] = launch[e["args"]["correlation"]] - 1.0
    return t
