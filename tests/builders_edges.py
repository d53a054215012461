"""Builders for the dependencies a trace records (whatif/graph.py `_recorded`, docs/whatif.md "Edges").

CUPTI's synchronization records, as Kineto (PyTorch 2.x) writes them: a `cuda_sync` complete event on
the GPU row, with the correlation id of the runtime call that made it and, for waits on an event,
the stream and correlation id of the `cudaEventRecord` call:

    {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": <stream>,
     "args": {"cuda_sync_kind": "Stream Wait Event", "stream": <waiting stream>, "correlation": <wait call>,
              "wait_on_stream": <recording stream>, "wait_on_cuda_event_record_corr_id": <record call>, ...}}

"Event Sync" (cudaEventSynchronize, and cudaEventQuery, which does not block), "Stream Sync"
(cudaStreamSynchronize: `stream` is the stream waited on) and "Context Sync" (cudaDeviceSynchronize).
`records=False` writes the same run without them (an older capture): the graph must then infer.
"""

from __future__ import annotations

from builders import GEMM_BF16, TraceBuilder

WAIT_LATENCY_US = 4.0  # from the awaited op's end to the waiting op's start (the GPU's wait resolution)
RETURN_LATENCY_US = 3.0  # from the awaited op's end to the blocking call's return


class EdgeTraceBuilder(TraceBuilder):
    def __init__(self, *args, records: bool = True, **kw):
        super().__init__(*args, **kw)
        self.records = records

    def _sync_record(self, kind: str, rt: dict, *, stream: int = -1, on: tuple[int, int] | None = None) -> None:
        if not self.records:
            return
        rec_corr, rec_stream = on if on is not None else (-1, -1)
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": kind,
                "pid": 0,
                "tid": stream,
                "ts": rt["ts"],
                "dur": rt["dur"],
                "args": {
                    "cuda_sync_kind": kind,
                    "wait_on_stream": rec_stream,
                    "wait_on_cuda_event_record_corr_id": rec_corr,
                    "stream": stream,
                    "correlation": rt["args"]["correlation"],
                    "device": 0,
                    "context": 1,
                },
            }
        )

    def record_event(self, stream: int) -> tuple[int, int, float]:
        """cudaEventRecord on `stream`: (its correlation id, the stream, when the recorded work is done)."""
        rt = self._runtime("cudaEventRecord", 2.0, 135, None)
        return rt["args"]["correlation"], stream, self.stream_free.get(stream, self.now)

    def wait_event(self, stream: int, event: tuple[int, int, float]) -> "EdgeTraceBuilder":
        """cudaStreamWaitEvent: `stream`'s next op starts WAIT_LATENCY_US after the event's work is done."""
        corr, rec_stream, done = event
        rt = self._runtime("cudaStreamWaitEvent", 2.0, 147, None)
        self.stream_free[stream] = max(self.stream_free.get(stream, 0.0), done + WAIT_LATENCY_US)
        self._sync_record("Stream Wait Event", rt, stream=stream, on=(corr, rec_stream))
        return self

    def _block(self, name: str, cbid: int, until: float) -> dict:
        rt = self._runtime(name, 2.0, cbid, None)
        rt["dur"] = max(rt["dur"], until + RETURN_LATENCY_US - rt["ts"])
        self.now = rt["ts"] + rt["dur"]
        return rt

    def event_synchronize(self, event: tuple[int, int, float]) -> "EdgeTraceBuilder":
        corr, rec_stream, done = event
        rt = self._block("cudaEventSynchronize", 136, done)
        self._sync_record("Event Sync", rt, on=(corr, rec_stream))
        return self

    def event_query(self, event: tuple[int, int, float]) -> "EdgeTraceBuilder":
        """cudaEventQuery: an "Event Sync" record, but the call returns at once."""
        corr, rec_stream, _ = event
        rt = self._runtime("cudaEventQuery", 2.0, 137, None)
        self._sync_record("Event Sync", rt, on=(corr, rec_stream))
        return self

    def stream_synchronize(self, stream: int) -> "EdgeTraceBuilder":
        rt = self._block("cudaStreamSynchronize", 131, self.stream_free.get(stream, self.now))
        self._sync_record("Stream Sync", rt, stream=stream)
        return self

    def device_synchronize(self) -> "EdgeTraceBuilder":
        rt = self._block("cudaDeviceSynchronize", 165, max(self.stream_free.values(), default=self.now))
        self._sync_record("Context Sync", rt)
        return self


A_US = 1000.0  # the awaited kernel (stream 7)
D_US = 300.0  # the waiting kernel (stream 8)
STEPS = 3


def build_wait_beside_a_later_op(*, records: bool = True) -> EdgeTraceBuilder:
    """Per step: A (A_US) on stream 7, an event recorded after it; Y on stream 9, launched at the same
    time, ending 2 us after A (unrelated to the wait); stream 8 waits for the event, then D, launched
    early, starts WAIT_LATENCY_US after A ends. The op of another stream that ended last before D
    started is Y, not A: timing inference takes the wrong edge, the record names A."""
    t = EdgeTraceBuilder(records=records)
    for _ in range(STEPS):
        with t.step():
            t.kernel(GEMM_BF16, A_US, stream=7)
            a_end = t.stream_free[7]
            ev = t.record_event(7)
            t.kernel("elementwise_kernel_y", 1.0, stream=9)  # placeholder duration, set below
            y = t.events[-1]
            y["dur"] = a_end + 2.0 - y["ts"]
            t.stream_free[9] = a_end + 2.0
            t.wait_event(8, ev)
            t.kernel("elementwise_kernel_d", D_US, stream=8)
            t.device_synchronize()
    return t


def build_wait_hidden_by_the_launch(*, records: bool = True, host_us: float = 1500.0) -> EdgeTraceBuilder:
    """Per step: A (A_US) on stream 7, an event after it, then host_us of host work before stream 8's D
    is launched (after A ended): D's start is bound by its launch, so its wait on A leaves no trace in
    the timing. Remove the host work and D must still wait for A."""
    t = EdgeTraceBuilder(records=records)
    for _ in range(STEPS):
        with t.step():
            t.kernel(GEMM_BF16, A_US, stream=7)
            ev = t.record_event(7)
            t.wait_event(8, ev)
            t.cpu(host_us)
            t.kernel("elementwise_kernel_d", D_US, stream=8)
            t.device_synchronize()
    return t


def build_sync_beside_a_later_op(kind: str = "stream", *, records: bool = True) -> EdgeTraceBuilder:
    """Per step: A (A_US) on stream 7; Y on stream 9 ending 1 us after A; the host synchronizes with
    stream 7 (kind "stream": cudaStreamSynchronize) or with an event recorded after A (kind "event":
    cudaEventSynchronize) and returns RETURN_LATENCY_US after A ends. The op that ended last before
    the return is Y: timing inference takes it; the record names A."""
    t = EdgeTraceBuilder(records=records)
    for _ in range(STEPS):
        with t.step():
            t.kernel(GEMM_BF16, A_US, stream=7)
            a_end = t.stream_free[7]
            ev = t.record_event(7)
            t.kernel("elementwise_kernel_y", 1.0, stream=9)
            y = t.events[-1]
            y["dur"] = a_end + 1.0 - y["ts"]
            t.stream_free[9] = a_end + 1.0
            if kind == "stream":
                t.stream_synchronize(7)
            else:
                t.event_synchronize(ev)
            t.cpu(50.0)
    return t


# --- replay order and the window's start ----------------------------------------------------------------

BLOCKING_LAUNCH_US = 400.0  # a launch call that blocks (a full launch queue) until its own kernel has run


def build_blocking_launch_of_an_empty_kernel(*, loader_us: float = 3000.0) -> EdgeTraceBuilder:
    """Each step: a DataLoader wait, a GEMM, then a launch call that returns at the very time its own
    zero-length kernel ends (a launch queue drained up to it), then host work. The graph makes the call
    wait for that kernel (LAUNCH_BACKPRESSURE_US): the wait must be replayed after the kernel, or it reads
    the kernel's measured end and pins every later host node to its measured time."""
    b = EdgeTraceBuilder()
    for _ in range(STEPS):
        with b.step():
            b.dataloader(loader_us)
            with b.span("aten::mm") as ev:
                b.cpu(10.0)
                b.kernel(GEMM_BF16, 200.0, external_id=ev["args"]["External id"])
                rt = b._runtime("cudaLaunchKernel", BLOCKING_LAUNCH_US, 211, ev["args"]["External id"])
                end = rt["ts"] + rt["dur"]
                b.events.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "elementwise_kernel_empty",
                        "pid": 0,
                        "tid": 7,
                        "ts": end,
                        "dur": 0,
                        "args": {"device": 0, "stream": 7, "correlation": rt["args"]["correlation"]},
                    }
                )
                b.stream_free[7] = end
            b.cpu(100.0)
    return b


def build_gpu_work_before_the_window(*, pre_us: float = 20000.0) -> EdgeTraceBuilder:
    """Set-up before the first profiler step: a long GEMM the host synchronises on, then steps of GEMMs
    and host work. Only the steps are analysed, so a fix that speeds up every GEMM must not move the
    first step's start."""
    b = EdgeTraceBuilder()
    with b.span("aten::mm") as ev:
        b.cpu(10.0)
        b.kernel(GEMM_BF16, pre_us, external_id=ev["args"]["External id"])
    b.sync()
    for _ in range(STEPS):
        with b.step():
            b.op("aten::mm", kernels=[(GEMM_BF16, 500.0)], cpu_us=20.0)
            b.cpu(100.0)
            b.sync()
    return b
