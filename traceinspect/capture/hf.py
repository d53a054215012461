"""Capture a few optimizer steps of a transformers ``Trainer`` (or TRL ``SFTTrainer``).

    from traceinspect.capture import TraceinspectCallback

    cb = TraceinspectCallback(start_step=5, num_steps=3)
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=collator)
    cb.attach(trainer)          # adds the callback and lets it see each batch
    trainer.train()
    print(cb.trace_path)        # <args.output_dir>/traceinspect/<host>_<pid>.<ns>.pt.trace.json.gz

How the batch is seen: the Trainer hands callbacks no batch, so ``attach`` wraps the
*instance* attribute ``trainer.training_step`` (``training_step(model, inputs, ...)``, called
once per micro-batch in every transformers 4.x/5.x) and counts ``inputs["attention_mask"]``
before calling the original. Passing the callback via ``Trainer(callbacks=[cb])`` also works:
on ``on_train_begin`` it finds the calling Trainer on the stack and attaches itself (best
effort; without it the trace and config are still written, only ``steps`` stays empty).

Step numbering: the profiler is created at ``on_train_begin`` and ``prof.step()`` is called at
``on_step_end``, so ProfilerStep#N is optimizer step N of this ``train()`` call (= global step N
unless resumed from a checkpoint; each ``steps`` entry also carries ``global_step``).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from transformers import TrainerCallback

from . import meta as _meta
from ._session import ProfileSession, _warn

_WRAPPED_FLAG = "_traceinspect_wrapped"


class TraceinspectCallback(TrainerCallback):
    """Profile optimizer steps ``start_step .. start_step+num_steps-1`` (0-based global steps).

    ``warmup`` steps before ``start_step`` run the profiler without keeping their events.
    ``output_dir``: defaults to ``<args.output_dir>/traceinspect``.
    ``config``: extra/overriding config keys (e.g. ``{"packing": True}``).
    ``all_ranks``: profile every process, not only world process zero.
    """

    def __init__(
        self,
        start_step: int = 5,
        num_steps: int = 3,
        *,
        warmup: int = 1,
        output_dir: str | os.PathLike | None = None,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        activities: Iterable[Any] | None = None,
        config: Mapping[str, Any] | None = None,
        all_ranks: bool = False,
        filename: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if num_steps < 1:
            raise ValueError("num_steps must be >= 1")
        self.start_step = max(int(start_step), 0)
        self.num_steps = int(num_steps)
        self.warmup = max(int(warmup), 0)
        self.output_dir = output_dir
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.activities = activities
        self.user_config = dict(config or {})
        self.all_ranks = all_ranks
        self.filename = filename
        self.extra = dict(extra or {})
        self.trainer = None
        self._session: ProfileSession | None = None
        self._args = None
        self._model = None

    # -- attaching ---------------------------------------------------------
    def attach(self, trainer: Any) -> Any:
        """Add this callback to ``trainer`` (if absent) and wrap ``trainer.training_step``
        so each micro-batch's token counts are recorded. Returns the trainer."""
        self.trainer = trainer
        try:
            callbacks = trainer.callback_handler.callbacks
            if not any(cb is self for cb in callbacks):
                trainer.add_callback(self)
        except Exception as exc:  # noqa: BLE001
            _warn("could not add the callback to the trainer", exc)
        try:
            current = trainer.training_step
            if getattr(current, _WRAPPED_FLAG, None) is self:
                return trainer
            original = current

            @functools.wraps(original)
            def training_step(*args: Any, **kwargs: Any) -> Any:
                inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
                self._observe(inputs)
                return original(*args, **kwargs)

            setattr(training_step, _WRAPPED_FLAG, self)
            trainer.training_step = training_step
        except Exception as exc:  # noqa: BLE001
            _warn("could not wrap trainer.training_step; per-step token counts are off", exc)
        return trainer

    def _find_trainer_on_stack(self) -> None:
        try:
            from transformers import Trainer

            frame = sys._getframe(1)
            for _ in range(12):
                if frame is None:
                    return
                candidate = frame.f_locals.get("self")
                if isinstance(candidate, Trainer):
                    self.attach(candidate)
                    return
                frame = frame.f_back
        except Exception:  # noqa: BLE001
            return

    def _observe(self, inputs: Any) -> None:
        session = self._session
        if session is not None:
            session.record_batch(inputs)

    # -- config ------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return _meta.merge_config(
            _meta.config_from_model(self._model), _meta.config_from_training_args(self._args), self.user_config
        )

    # -- TrainerCallback events -------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        try:
            if self._session is not None:
                self._session.stop()
                self._session = None
            if not self.all_ranks and not _meta._try(lambda: state.is_world_process_zero, True):
                return control
            if self.trainer is None:
                self._find_trainer_on_stack()
            self._args, self._model = args, model
            begin = _meta._try(lambda: int(state.global_step or 0), 0)
            rel = self.start_step - begin
            if rel + self.num_steps <= 0:
                _warn(
                    "nothing to profile",
                    RuntimeError(
                        f"training resumes at step {begin}, after the window "
                        f"{self.start_step}..{self.start_step + self.num_steps - 1}"
                    ),
                )
                return control
            rel = max(rel, 0)
            warmup = min(self.warmup, rel)
            out_dir = self.output_dir
            if out_dir is None:
                out_dir = Path(_meta._try(lambda: args.output_dir) or ".") / "traceinspect"
            self._session = ProfileSession(
                out_dir,
                wait=rel - warmup,
                warmup=warmup,
                active=self.num_steps,
                source="hf_trainer",
                config_fn=self._config,
                device=_meta._try(lambda: args.device),
                record_shapes=self.record_shapes,
                profile_memory=self.profile_memory,
                with_stack=self.with_stack,
                with_flops=self.with_flops,
                activities=self.activities,
                filename=self.filename,
                extra=self.extra,
                step_offset=begin,
            )
            self._session.start()
        except Exception as exc:  # noqa: BLE001
            self._session = None
            _warn("could not start the profiler", exc)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        session = self._session
        if session is not None and not session.finished:
            session.step()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._session is not None:
            self._session.stop()
        return control

    # -- results -----------------------------------------------------------
    @property
    def trace_path(self) -> Path | None:
        return self._session.trace_path if self._session is not None else None

    @property
    def metadata(self) -> dict[str, Any] | None:
        return self._session.metadata if self._session is not None else None


def attach(trainer: Any, start_step: int = 5, num_steps: int = 3, **kwargs: Any) -> TraceinspectCallback:
    """Create a :class:`TraceinspectCallback`, attach it to ``trainer`` and return it."""
    cb = TraceinspectCallback(start_step=start_step, num_steps=num_steps, **kwargs)
    cb.attach(trainer)
    return cb
