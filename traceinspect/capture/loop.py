"""Capture a few steps of a plain PyTorch training loop.

    from traceinspect.capture import profile_steps

    with profile_steps("traces/", wait=1, warmup=1, active=3, model=model,
                       config={"per_device_train_batch_size": 8}) as cap:
        for batch in loader:
            loss = model(**batch).loss
            loss.backward(); opt.step(); opt.zero_grad()
            cap.step(batch)          # marks the step end (prof.step()) and counts its tokens

    print(cap.trace_path)            # traces/<host>_<pid>.<ns>.pt.trace.json.gz

or ``for batch in cap.wrap(loader): ...`` which calls ``cap.step(batch)`` after each body.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from . import meta as _meta
from ._session import ProfileSession


class StepCapture:
    """Context manager returned by :func:`profile_steps`."""

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        config: Mapping[str, Any] | None = None,
        model: Any = None,
        device: Any = None,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        activities: Iterable[Any] | None = None,
        worker_name: str | None = None,
        filename: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.user_config = dict(config or {})
        if device is None and model is not None:
            try:
                device = next(model.parameters()).device
            except Exception:
                device = None
        self._session = ProfileSession(
            out_dir,
            wait=wait,
            warmup=warmup,
            active=active,
            source="loop",
            config_fn=self._config,
            device=device,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            activities=activities,
            worker_name=worker_name,
            filename=filename,
            extra=extra,
        )

    def _config(self) -> dict[str, Any]:
        return _meta.merge_config(_meta.config_from_model(self.model), self.user_config)

    # -- context manager ---------------------------------------------------
    def __enter__(self) -> "StepCapture":
        self._session.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._session.stop()
        return False

    def start(self) -> "StepCapture":
        return self.__enter__()

    def stop(self) -> None:
        self._session.stop()

    # -- per step ----------------------------------------------------------
    def record_batch(self, batch: Any) -> None:
        """Count the tokens of a micro-batch of the current step (call once per micro-batch
        with gradient accumulation; ``step()`` adds its own ``batch`` on top)."""
        self._session.record_batch(batch)

    def step(self, batch: Any = None) -> None:
        """End the current training step (after optimizer.step()). ``batch``: the step's
        batch dict, for per-step token counts (``attention_mask`` / ``input_ids``)."""
        if batch is not None:
            self._session.record_batch(batch)
        self._session.step()

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield batches; ``step(batch)`` runs after each loop body."""
        for batch in iterable:
            yield batch
            self.step(batch)

    # -- results -----------------------------------------------------------
    @property
    def trace_path(self) -> Path | None:
        """The written ``.pt.trace.json.gz`` (None until the window has been exported)."""
        return self._session.trace_path

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The "traceinspect" block embedded in the trace (None until exported)."""
        return self._session.metadata

    @property
    def done(self) -> bool:
        """True once the profiled window is over (the trace is written)."""
        return self._session.finished

    @property
    def step_num(self) -> int:
        """Number of the running ProfilerStep#N."""
        return self._session.step_num

    @property
    def steps_needed(self) -> int:
        """wait + warmup + active: loop at least this many steps to complete the window."""
        return self._session.total_steps


def profile_steps(
    out_dir: str | os.PathLike,
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    config: Mapping[str, Any] | None = None,
    model: Any = None,
    device: Any = None,
    record_shapes: bool = True,
    profile_memory: bool = False,
    with_stack: bool = False,
    with_flops: bool = False,
    activities: Iterable[Any] | None = None,
    worker_name: str | None = None,
    filename: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> StepCapture:
    """Profile steps ``wait+warmup .. wait+warmup+active-1`` of a loop into ``out_dir``.

    ``config``: any schema config keys (see docs/capture.md) plus free extra keys;
    ``model``: read for model_type / attn_implementation / num_parameters / device.
    ``filename``: fixed file name instead of ``<host>_<pid>.<ns>.pt.trace.json.gz``.
    ``extra``: additional top-level keys of the metadata block (never replacing schema keys).
    """
    return StepCapture(
        out_dir,
        wait=wait,
        warmup=warmup,
        active=active,
        config=config,
        model=model,
        device=device,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
        with_flops=with_flops,
        activities=activities,
        worker_name=worker_name,
        filename=filename,
        extra=extra,
    )
