"""Builders for the profiler-overhead estimate (facts/profiler_overhead.py): traces whose profiler settings
show in the metadata, in the capture metadata, or only in the events they recorded.

Kineto's shapes, as torch 2.x writes them: `python_function` complete events on the Python thread
({"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "args": {"Python id", "Python
parent id", "Python thread"}}), `Input Dims` args on CPU ops, `[memory]` instants (builders_memory.py),
and top-level keys `"with_stack": 1`, `"profile_memory": 1`, ... for the options that are on only.
"""

from __future__ import annotations

from builders import PID, TID
from builders_host import _forward_backward
from builders_memory import MemoryTraceBuilder

OV_STEPS = 4
OV_CPU_US = 600.0  # CPU tensor work (aten::cat, no kernel) at the start of each step, the GPU drained
OV_PY_PER_STEP = 2000  # Python function events per step (with_stack)
OV_MEM_PER_STEP = 40  # [memory] events per step (profile_memory)
# CPU ops per step: aten::cat, 6 healthy layers x 3 ops (linear, sdpa, add), aten::item and
# aten::_local_scalar_dense (builders.item); the ProfilerStep span is an annotation, not an op
OV_OPS_PER_STEP = 1 + 6 * 3 + 2


class ProfilerTraceBuilder(MemoryTraceBuilder):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.py_id = 1

    def python_functions(self, n: int, us: float, name: str = "train.py(42): step") -> "ProfilerTraceBuilder":
        """n Python function events one after another over `us` of host time (the clock advances)."""
        d = us / n
        for _ in range(n):
            self.events.append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": name,
                    "pid": PID,
                    "tid": TID,
                    "ts": self.now,
                    "dur": d,
                    "args": {"Python id": self.py_id, "Python parent id": 0, "Python thread": 0},
                }
            )
            self.py_id += 1
            self.now += d
        return self

    def settings(self, **options) -> "ProfilerTraceBuilder":
        """The trace's top-level profiler keys; None leaves a key out of the file (the base builder
        always writes record_shapes: 1)."""
        self.meta.update(options)
        return self

    def build(self) -> dict:
        doc = super().build()
        for k in [k for k, v in doc.items() if v is None]:
            del doc[k]
        return doc


def build_host_bound_profiled(
    *, py_per_step: int = OV_PY_PER_STEP, mem_per_step: int = OV_MEM_PER_STEP, cpu_us: float = OV_CPU_US
) -> ProfilerTraceBuilder:
    """builders_host.build_host_bound with a short CPU stretch (cpu_us of aten::cat while the GPU has
    drained) and, at the start of each step, py_per_step Python function events over the first half of
    that stretch and mem_per_step [memory] events: a host-bound claim of ~cpu_us per step that a
    with_stack capture's estimated overhead (py_per_step x its cost) can cover."""
    t = ProfilerTraceBuilder()
    for _ in range(OV_STEPS):
        with t.step():
            with t.span("aten::cat"):
                if py_per_step:
                    t.python_functions(py_per_step, cpu_us / 2)
                else:
                    t.cpu(cpu_us / 2)
                for _ in range(mem_per_step):
                    t.mem(4096, device_type=0)
                t.cpu(cpu_us / 2 - 0.5 * mem_per_step)  # each [memory] event advances the clock 0.5 us
            _forward_backward(t, 6)
            t.item()
    return t
