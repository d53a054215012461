"""Derived facts, computed once per trace (Trace.memo) and read by detectors, the report and what-if:
the primary device and its kernels (device), step windows (steps), kernel classes (kernels), host
launch rows (host), run facts and the parameter count (run), the
memory model (memory_fit), the per-shape efficiency table (efficiency), the explicit time claims
(claims), the optimizer steps (optimizer) and the model family (model_family). Below detectors/ and
above trace/: imports no detector."""
