"""Tiny synthetic Kineto-shaped traces, so each test reads like a spec.

    t = TraceBuilder()
    for _ in range(3):
        with t.step():
            t.dataloader(30_000)                 # host waits 30 ms in __next__
            t.op("aten::linear", kernels=[("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", 500)])
    doc = t.build()          # a dict in the current Kineto object format
    t.write(tmp_path / "x.pt.trace.json")

Times are microseconds. The host clock (`t.now`) advances as ops are issued; each kernel starts when
both its launch has happened and the previous kernel on its stream has finished (one stream by
default), which reproduces launch-bound and idle gaps naturally.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path

PID = 4242
TID = 4242

DEVICE_PROPS = {
    "H100": {
        "id": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85_000_000_000,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
    },
    "A100": {
        "id": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "totalGlobalMem": 85_000_000_000,
        "computeMajor": 8,
        "computeMinor": 0,
        "numSms": 108,
    },
    "V100": {
        "id": 0,
        "name": "Tesla V100-SXM2-32GB",
        "totalGlobalMem": 34_000_000_000,
        "computeMajor": 7,
        "computeMinor": 0,
        "numSms": 80,
    },
    "MI300X": {
        "id": 0,
        "name": "AMD Instinct MI300X",
        "totalGlobalMem": 205_000_000_000,
        "computeMajor": 9,
        "computeMinor": 4,
        "numSms": 304,
    },
}


class TraceBuilder:
    def __init__(
        self,
        gpu: str = "H100",
        *,
        launch_us: float = 5.0,
        rocm: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ):
        self.events: list[dict] = []
        self.base_time_ns = 1_700_000_000_000_000_000  # the trace's baseTimeNanoseconds (ts are relative to it)
        self.now = 1000.0  # host clock
        self.stream_free: dict[int, float] = {}
        self.gpu = gpu
        self.launch_us = launch_us
        self.rocm = rocm or gpu.startswith("MI")
        self.corr = 1
        self.ext = 1
        self.step_no = 10
        self.meta: dict = {}
        self.rank = rank
        self.world_size = world_size
        self._stack: list[dict] = []

    # --- host-side spans -------------------------------------------------------------------------
    @contextlib.contextmanager
    def span(self, name: str, cat: str = "cpu_op", args: dict | None = None):
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": PID,
            "tid": TID,
            "ts": self.now,
            "args": {"External id": self._next_ext(), **(args or {})},
        }
        self.events.append(ev)
        self._stack.append(ev)
        try:
            yield ev
        finally:
            self._stack.pop()
            ev["dur"] = max(self.now - ev["ts"], 0.001)

    @contextlib.contextmanager
    def step(self, wait_gpu: bool = False):
        """A ProfilerStep#N span; wait_gpu=True ends the step with a cudaDeviceSynchronize."""
        with self.span(f"ProfilerStep#{self.step_no}", cat="user_annotation"):
            yield
            if wait_gpu:
                self.sync()
        self.step_no += 1

    def cpu(self, us: float) -> "TraceBuilder":
        """Host work that launches nothing (Python, CPU math)."""
        self.now += us
        return self

    def dataloader(self, us: float, workers: bool = False) -> "TraceBuilder":
        it = "_MultiProcessingDataLoaderIter" if workers else "_SingleProcessDataLoaderIter"
        with self.span(f"enumerate(DataLoader)#{it}.__next__", cat="user_annotation"):
            self.now += us
        return self

    def op(
        self,
        name: str,
        *,
        kernels=(),
        cpu_us: float = 10.0,
        input_dims=None,
        input_type=None,
        args: dict | None = None,
        stream: int = 7,
    ) -> "TraceBuilder":
        """A CPU op that spends cpu_us of host time, then launches each (kernel_name, dur_us)."""
        a = dict(args or {})
        if input_dims is not None:
            a["Input Dims"] = input_dims
        if input_type is not None:
            a["Input type"] = input_type
        with self.span(name, args=a) as ev:
            self.now += cpu_us
            for kname, kdur in kernels:
                self.kernel(kname, kdur, stream=stream, external_id=ev["args"]["External id"])
        return self

    # --- runtime + GPU -----------------------------------------------------------------------------
    def _runtime(self, name: str, dur: float, cbid: int, external_id: int | None) -> dict:
        c = self.corr
        self.corr += 1
        args = {"cbid": cbid, "correlation": c}
        if external_id is not None:
            args["External id"] = external_id
        ev = {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "pid": PID,
            "tid": TID,
            "ts": self.now,
            "dur": dur,
            "args": args,
        }
        self.events.append(ev)
        self.now += dur
        return ev

    def _gpu_start(self, stream: int, launch_ts: float) -> float:
        return max(launch_ts + 2.0, self.stream_free.get(stream, 0.0))

    def kernel(
        self, name: str, dur_us: float, *, stream: int = 7, external_id: int | None = None, args: dict | None = None
    ) -> "TraceBuilder":
        if external_id is None and self._stack:
            external_id = self._stack[-1]["args"]["External id"]
        rt_name = "hipLaunchKernel" if self.rocm else "cudaLaunchKernel"
        rt = self._runtime(rt_name, self.launch_us, 211, external_id)
        start = self._gpu_start(stream, rt["ts"])
        self.stream_free[stream] = start + dur_us
        kargs = {
            "device": 0,
            "stream": stream,
            "correlation": rt["args"]["correlation"],
            "grid": [132, 1, 1],
            "block": [256, 1, 1],
            **(args or {}),
        }
        if external_id is not None:
            kargs["External id"] = external_id
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": start,
                "dur": dur_us,
                "args": kargs,
            }
        )
        return self

    def memcpy(
        self,
        kind: str = "HtoD",
        src: str = "Pageable",
        dst: str = "Device",
        nbytes: int = 1 << 20,
        dur_us: float = 100.0,
        *,
        stream: int = 7,
        blocking: bool | None = None,
    ) -> "TraceBuilder":
        """A copy; pageable HtoD and any DtoH block the host until the copy is done (CUDA semantics)."""
        if self.rocm:
            src = "Host" if src in ("Pageable", "Pinned") else src
            dst = "Host" if dst in ("Pageable", "Pinned") else dst
        ext = self._stack[-1]["args"]["External id"] if self._stack else None
        rt = self._runtime("hipMemcpyAsync" if self.rocm else "cudaMemcpyAsync", 5.0, 41, ext)
        start = self._gpu_start(stream, rt["ts"])
        self.stream_free[stream] = start + dur_us
        args = {
            "device": 0,
            "stream": stream,
            "correlation": rt["args"]["correlation"],
            "bytes": nbytes,
            "memory bandwidth (GB/s)": nbytes / (dur_us * 1e3),
        }
        if ext is not None:
            args["External id"] = ext
        self.events.append(
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": f"Memcpy {kind} ({src} -> {dst})",
                "pid": 0,
                "tid": stream,
                "ts": start,
                "dur": dur_us,
                "args": args,
            }
        )
        if blocking is None:
            blocking = (kind == "HtoD" and src == "Pageable") or kind == "DtoH"
        if blocking:
            rt["dur"] = max(rt["dur"], start + dur_us - rt["ts"])
            self.now = rt["ts"] + rt["dur"]
        return self

    def sync(self, name: str = "cudaDeviceSynchronize") -> "TraceBuilder":
        """The host blocks until every stream is drained."""
        done = max(self.stream_free.values(), default=self.now)
        if self.rocm:
            name = name.replace("cuda", "hip")
        self._runtime(name, max(done - self.now, 0.0) + 3.0, 165, None)
        return self

    def item(self) -> "TraceBuilder":
        """`.item()`: a 1-byte DtoH copy, then cudaStreamSynchronize."""
        with self.span("aten::item"):
            with self.span("aten::_local_scalar_dense"):
                self.memcpy("DtoH", "Device", "Pinned", nbytes=1, dur_us=2.0, blocking=False)
                self.sync("cudaStreamSynchronize")
        return self

    def runtime_call(self, name: str, dur_us: float, cbid: int = 0) -> "TraceBuilder":
        ext = self._stack[-1]["args"]["External id"] if self._stack else None
        self._runtime(name, dur_us, cbid, ext)
        return self

    def _next_ext(self) -> int:
        e = self.ext
        self.ext += 1
        return e

    # --- output ------------------------------------------------------------------------------------
    def build(self) -> dict:
        doc = {"schemaVersion": 1, "deviceProperties": [dict(DEVICE_PROPS[self.gpu])], "record_shapes": 1}
        doc.update(self.meta)
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size or 1}
        doc["displayTimeUnit"] = "ms"
        doc["baseTimeNanoseconds"] = self.base_time_ns
        doc["traceEvents"] = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0, "args": {"name": "python3"}},
            {
                "name": "thread_name",
                "ph": "M",
                "ts": 0,
                "pid": PID,
                "tid": TID,
                "args": {"name": "thread 4242 (python3)"},
            },
        ] + [dict(e) for e in self.events]
        return doc

    def write(self, path, *, gz: bool | None = None) -> Path:
        path = Path(path)
        data = json.dumps(self.build()).encode()
        if gz is None:
            gz = path.name.endswith(".gz")
        path.write_bytes(gzip.compress(data) if gz else data)
        return path


# --- named scenarios (detectors list which of these they fire on / stay silent on) ---------------

GEMM_BF16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_FP32_SIMT = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
FLASH_FWD = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>, true, false, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"


def _healthy_layer(t: TraceBuilder, scale: float = 1.0) -> None:
    t.op(
        "aten::linear",
        kernels=[(GEMM_BF16, 800 * scale)],
        cpu_us=15,
        input_dims=[[8, 1024, 2048], [2048, 2048], [2048]],
        input_type=["c10::BFloat16"] * 3,
    )
    t.op(
        "aten::scaled_dot_product_attention",
        kernels=[(FLASH_FWD, 600 * scale)],
        cpu_us=15,
        input_dims=[[8, 16, 1024, 128]] * 3,
        input_type=["c10::BFloat16"] * 3,
    )
    t.op("aten::add", kernels=[(ELEMENTWISE, 100 * scale)], cpu_us=8)


def build_healthy(steps: int = 4, gpu: str = "H100") -> TraceBuilder:
    """Large bf16 GEMMs and fused attention keep the GPU ~95% busy; fast multi-worker DataLoader.
    Each step ends with `loss.item()`, so the GPU work of a step lies inside its window."""
    t = TraceBuilder(gpu)
    for _ in range(steps):
        with t.step():
            t.dataloader(50, workers=True)
            t.memcpy("HtoD", "Pinned", "Device", nbytes=1 << 20, dur_us=30)
            for _ in range(12):
                _healthy_layer(t)
            t.cpu(20)
            t.item()
    return t


def build_dataloader_stall(steps: int = 4, load_us: float = 30_000, layer=None) -> TraceBuilder:
    """num_workers=0: each step the host spends load_us in __next__ while the GPU has drained. `layer`
    (TraceBuilder -> None) replaces the 12 healthy layers' ops of each step."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step(wait_gpu=True):
            t.dataloader(load_us)
            t.memcpy("HtoD", "Pageable", "Device", nbytes=8 << 20, dur_us=700)
            for _ in range(12):
                (layer or _healthy_layer)(t)
    return t


def build_launch_bound(steps: int = 3, kernels_per_step: int = 400) -> TraceBuilder:
    """Batch size 1: hundreds of 3 us kernels, each behind ~25 us of host dispatch."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step():
            for i in range(kernels_per_step):
                t.op("aten::add", kernels=[(ELEMENTWISE, 3.0)], cpu_us=20)
    return t
