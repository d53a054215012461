"""One torch.profiler window shared by the loop helper and the HF callback.

The session owns a ``torch.profiler.profile`` with ``schedule(wait, warmup, active,
repeat=1)``. While steps are recorded it collects per-step token counts; at the end of the
last active step (before ``prof.step()`` stops the trace) it pushes the metadata with
``prof.add_metadata_json("traceinspect", ...)`` so Kineto writes it into the trace's
top-level object, then exports a gzipped ``.pt.trace.json.gz``. If the written file lacks
the key (e.g. a torch build whose exporter drops metadata), the file is rewritten with it.

Capture problems never break training: they become warnings.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from . import meta as _meta


class CaptureWarning(UserWarning):
    """Something went wrong while capturing; training goes on."""


def _warn(what: str, exc: BaseException) -> None:
    warnings.warn(f"traceinspect.capture: {what}: {type(exc).__name__}: {exc}", CaptureWarning, stacklevel=3)


class ProfileSession:
    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        wait: int,
        warmup: int,
        active: int,
        source: str,
        config_fn: Callable[[], Mapping[str, Any]],
        device: Any = None,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        activities: Iterable[Any] | None = None,
        worker_name: str | None = None,
        filename: str | None = None,
        extra: Mapping[str, Any] | None = None,
        step_offset: int | None = None,
    ) -> None:
        if active < 1:
            raise ValueError("active must be >= 1")
        if wait < 0 or warmup < 0:
            raise ValueError("wait and warmup must be >= 0")
        self.out_dir = Path(out_dir)
        self.wait, self.warmup, self.active = int(wait), int(warmup), int(active)
        self.source = source
        self._config_fn = config_fn
        self.device = device
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.activities = list(activities) if activities is not None else None
        self.worker_name = worker_name
        self.filename = filename
        self.extra = dict(extra or {})
        self.step_offset = step_offset
        self.trace_path: Path | None = None
        self.metadata: dict[str, Any] | None = None
        self._prof = None
        self._steps: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self._pending_step: int | None = None
        self._pushed_live = False
        self._finished = False
        self._broken = False
        self._stopped = False
        self._mem_index: int | None = None
        self._mem_reason: str | None = "the profiler was not started"
        self._mem_steps: list[dict[str, Any]] = []
        self._mem_start: int | None = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> "ProfileSession":
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile, schedule
        except ImportError as exc:
            raise ImportError(
                f"traceinspect.capture needs torch: pip install -e '.[capture]' in the traceinspect checkout ({exc})"
            ) from exc

        acts = self.activities
        if acts is None:
            acts = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Profiler won't be using warmup" when warmup=0
            sched = schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)
        self._prof = profile(
            activities=acts,
            schedule=sched,
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
        )
        self._prof.__enter__()
        self._mem_index, self._mem_reason = _meta.memory_device(self.device)
        self._mem_begin()
        return self

    @property
    def total_steps(self) -> int:
        """Steps needed to finish the window (wait + warmup + active)."""
        return self.wait + self.warmup + self.active

    @property
    def step_num(self) -> int:
        """The profiler's current step number (the N of the running ProfilerStep#N)."""
        return int(getattr(self._prof, "step_num", 0)) if self._prof is not None else 0

    @property
    def finished(self) -> bool:
        return self._finished

    def _action(self):
        return getattr(self._prof, "current_action", None)

    def is_recording(self) -> bool:
        if self._prof is None or self._broken or self._finished:
            return False
        from torch.profiler import ProfilerAction

        return self._action() in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    def _is_last_active(self) -> bool:
        from torch.profiler import ProfilerAction

        return self._action() == ProfilerAction.RECORD_AND_SAVE

    # -- per step ----------------------------------------------------------
    def record_batch(self, batch: Any) -> None:
        """Count tokens of one (micro-)batch that belongs to the current step (recorded steps only)."""
        try:
            if batch is None or not self.is_recording():
                return
            if self._pending_step != self.step_num:
                self._flush_pending()
                self._pending_step = self.step_num
            counts = _meta.token_counts(batch)
            if counts is not None:
                self._pending.append(counts)
        except Exception as exc:  # noqa: BLE001
            _warn("could not count tokens of a batch", exc)

    def _flush_pending(self) -> None:
        if self._pending_step is None:
            return
        combined = _meta.combine_counts(self._pending)
        if combined is not None:
            entry = {"step": self._pending_step}
            entry.update(combined)
            if self.step_offset is not None:
                entry["global_step"] = self._pending_step + self.step_offset
            self._steps.append(entry)
        self._pending = []
        self._pending_step = None

    def step(self) -> None:
        """End the current step: push metadata if it was the last recorded one, then prof.step()."""
        if self._prof is None or self._broken or self._stopped:
            return
        try:
            if self.is_recording():
                self._flush_pending()
                self._mem_end()
                if self._is_last_active():
                    self._push_metadata(live=True)
        except Exception as exc:  # noqa: BLE001
            _warn("could not prepare the trace metadata", exc)
        try:
            self._prof.step()
        except Exception as exc:  # noqa: BLE001
            self._broken = True
            _warn("torch.profiler step failed; profiling stopped", exc)
        self._mem_begin()
        if self.trace_path is not None or self.step_num >= self.total_steps:
            self._finished = True
            self.stop()  # window done: release the profiler (cheap; nothing is recording)

    def stop(self) -> None:
        """Close the profiler; a window cut short is still exported (with its metadata)."""
        if self._prof is None or self._stopped:
            return
        self._stopped = True
        try:
            if self.is_recording():
                self._flush_pending()
                self._mem_end()
                self._push_metadata(live=True)
        except Exception as exc:  # noqa: BLE001
            _warn("could not prepare the trace metadata", exc)
        try:
            self._prof.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            _warn("torch.profiler stop failed", exc)
        finally:
            self._finished = True

    # -- device memory per recorded step -------------------------------------
    def _mem_begin(self) -> None:
        """At the start of a recorded step: reset the CUDA peak counters (host-side, no sync)."""
        try:
            self._mem_start = _meta.memory_step_begin(self._mem_index) if self.is_recording() else None
        except Exception as exc:  # noqa: BLE001
            _warn("could not read the CUDA memory counters", exc)

    def _mem_end(self) -> None:
        """At the end of a recorded step: its peaks (null on the CPU, where the block says why)."""
        try:
            self._mem_steps.append(_meta.memory_step_end(self._mem_index, self.step_num, self._mem_start))
        except Exception as exc:  # noqa: BLE001
            _warn("could not read the CUDA memory counters", exc)

    # -- metadata + export -------------------------------------------------
    def _build_metadata(self) -> dict[str, Any]:
        import torch

        steps = self._steps
        if any(s.get("real_tokens") is not None and not isinstance(s.get("real_tokens"), int) for s in steps):
            with torch.profiler.record_function("traceinspect::resolve_token_counts"):
                steps = _meta.resolve_counts(steps)
            self._steps = steps
        try:
            config = self._config_fn() or {}
        except Exception as exc:  # noqa: BLE001
            _warn("could not read the run configuration", exc)
            config = {}
        memory = _meta.memory_block(self._mem_index, self._mem_reason, self._mem_steps)
        profiler = {
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
            "profile_memory": self.profile_memory,
            "with_flops": self.with_flops,
        }
        return _meta.build_metadata(
            source=self.source,
            config=config,
            steps=steps,
            device=self.device,
            extra=self.extra,
            memory=memory,
            profiler=profiler,
        )

    def _push_metadata(self, live: bool) -> None:
        self.metadata = self._build_metadata()
        self._prof.add_metadata_json(_meta.METADATA_KEY, _meta.dumps(self.metadata))
        if live:
            self._pushed_live = True

    def _trace_file(self) -> Path:
        if self.filename:
            name = self.filename
            if not name.endswith(".pt.trace.json.gz"):
                name = name.removesuffix(".gz").removesuffix(".json").removesuffix(".pt.trace")
                name += ".pt.trace.json.gz"
            return self.out_dir / name
        worker = self.worker_name or f"{socket.gethostname()}_{os.getpid()}"
        # same naming as torch.profiler.tensorboard_trace_handler(dir, use_gzip=True)
        return self.out_dir / f"{worker}.{time.time_ns()}.pt.trace.json.gz"

    def _on_trace_ready(self, prof) -> None:
        try:
            if self.metadata is None:
                self._flush_pending()
                self._push_metadata(live=False)
            else:  # keep the python-side copy in sync for exporters that read it
                prof.add_metadata_json(_meta.METADATA_KEY, _meta.dumps(self.metadata))
            self.out_dir.mkdir(parents=True, exist_ok=True)
            path = self._trace_file()
            prof.export_chrome_trace(str(path))
            if not (self._pushed_live and _meta.trace_has_metadata(path)):
                _meta.inject_metadata(path, self.metadata)
            self.trace_path = path
        except Exception as exc:  # noqa: BLE001
            _warn("could not write the trace", exc)
        finally:
            self._finished = True
