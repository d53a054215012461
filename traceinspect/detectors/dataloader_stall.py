"""dataloader-stall: GPU idle while the training loop waits for the next batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..facts.steps import idle_in_steps
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.timeline import is_dataloader
from .base import (
    Detector,
    config_value,
    current,
    events_from,
    fmt_us,
    in_steps,
    option,
    pct,
    window_label,
    dataloader_prep,
)


@dataclass(frozen=True)
class DataloaderStall(Detector):
    """
    What it detects
        GPU idle time during which the host thread was inside the DataLoader's
        `enumerate(DataLoader)#...__next__` span: the GPU has finished the previous step and waits
        for the next batch to be loaded, collated and copied.

    Why it costs time
        With `num_workers=0` (`_SingleProcessDataLoaderIter`) every batch is read, tokenized or
        decoded (text, images) and collated on the training thread, serially with the GPU work. With workers that
        are too few or too slow the queue runs dry. Copies from pageable memory (`pin_memory=False`)
        add a staging copy and block the host.

    How time lost is estimated
        The GPU idle time that overlaps DataLoader spans, summed over the analysed steps (the
        timeline attributes each idle microsecond to one cause, DataLoader first). This is the time
        a perfectly prefetching loader would give back; it is a point estimate, not an upper bound.
        Evidence also gives the DataLoader span per step, which bounds it from above.

    How to fix
        Background workers, pinned memory and persistent workers; then the per-sample work the
        model family needs (facts/model_family.py): pre-tokenize a language model's dataset once,
        keep a vision model's image decoding and augmentation in the workers or on the GPU,
        preprocess a recommender's sparse features offline, and generic wording when the trace does
        not show the family. With workers already, the fix doubles the count the capture recorded.

        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before
            args = TrainingArguments(..., dataloader_num_workers=0)
            # after
            args = TrainingArguments(..., dataloader_num_workers=4, dataloader_pin_memory=True,
                                     dataloader_persistent_workers=True)
            # text: tokenize once, up front: dataset = dataset.map(tokenize, batched=True)

        Plain PyTorch:

            # before
            loader = DataLoader(ds, batch_size=32, shuffle=True)
            # after
            loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4, pin_memory=True,
                                persistent_workers=True, prefetch_factor=2)
            batch = batch.to("cuda", non_blocking=True)

    False positives
        The first step of an epoch (workers starting up) can stall legitimately; analyse steady-state
        steps (`--steps 1:`). DataLoader time that overlaps GPU work costs nothing and is not
        counted.

    References
        PyTorch DataLoader docs (num_workers, pin_memory); the TensorBoard profiler plugin's
        DataLoader rule (> 5% of the step).
    """

    code = "TI104"
    fires_on = ("builders.build_dataloader_stall",)
    silent_on = ("builders.build_healthy", "builders.build_launch_bound")

    claims_parts = ("idle_dataloader",)
    min_frac: float = option(0.03, "minimum share of the step time the GPU idles in the DataLoader")
    prefetched_us: float = option(100.0, "what-if: host cost of __next__ when the next batch is already prefetched")
    host_copy_gbps: float = option(
        10.0,
        "what-if: one host thread's memory copy rate (the batch is copied once "
        "out of the workers' shared memory / into pinned memory)",
    )

    def whatif(self, graph, finding) -> str:
        """Replay model: each DataLoader __next__ span shrinks to its prefetched cost: `prefetched_us`
        plus one host copy of the batch at `host_copy_gbps` (with workers the batch still crosses from
        their shared memory, and pin_memory copies it once more on another thread), the batch being the
        host-to-device bytes per step. The host time removed is taken out of the gaps on its thread."""
        trace = graph.trace
        ops = trace.cpu_ops
        dl = ops[is_dataloader(ops["name"])] if len(ops) else ops
        if not len(dl):
            return "no DataLoader spans: nothing to change"
        mc = in_steps(trace.memcpy, trace) if len(trace.memcpy) else trace.memcpy
        batch = (
            float(mc.loc[mc["kind"].to_numpy() == "HtoD", "size_bytes"].clip(lower=0).sum()) / max(len(trace.steps), 1)
            if len(mc)
            else 0.0
        )
        keep = self.prefetched_us + batch / (self.host_copy_gbps * 1e3)  # bytes / (bytes per us)
        ts = dl["ts_us"].to_numpy()
        graph.remove_host_time(np.minimum(ts + keep, dl["end_us"].to_numpy()), dl["end_us"].to_numpy())
        return (
            f"each DataLoader __next__ span shrinks to {keep:.0f} us (prefetched: {self.prefetched_us:g} us + "
            f"{batch / 1e6:.1f} MB copied at {self.host_copy_gbps:g} GB/s)"
        )

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        ops = trace.cpu_ops
        dl = ops[is_dataloader(ops["name"])] if len(ops) else ops
        if not len(dl):
            yield self.skip("no DataLoader spans (enumerate(DataLoader)#...__next__) in the trace")
            return
        st = trace.steps
        claim = idle_in_steps(trace, "idle_dataloader")
        idle = iv.total(claim)
        frac = idle / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            yield self.declined(
                f"DataLoader spans present, GPU idle in them {fmt_us(idle / max(ctx.n_steps, 1))}/step "
                f"({100 * frac:.1f}%), below the {100 * self.min_frac:g}% threshold"
            )
            return
        dl_in = in_steps(dl, trace)
        dl_set = iv.union(dl["ts_us"], dl["end_us"])
        per_step = iv.per_window(dl_set, st["start_us"].to_numpy(), st["end_us"].to_numpy())
        share = per_step / st["dur_us"].to_numpy()
        names = {str(n) for n in dl["name"].astype(str).unique()}
        single = any("SingleProcess" in n for n in names)
        mc = in_steps(trace.memcpy, trace)
        htod = mc[(mc["kind"] == "HtoD")]
        pageable = htod[htod["src_kind"] == "Pageable"]
        ev = [
            Evidence(
                label="GPU idle waiting for the DataLoader",
                value=round(idle / ctx.n_steps / 1e3, 2),
                unit="ms/step",
                window=window_label(trace),
            ),
            Evidence(label="share of step time", value=round(100 * frac, 1), unit="%", window=window_label(trace)),
            Evidence(
                label="DataLoader __next__ span per step (median)",
                value=round(float(np.median(per_step)) / 1e3, 2),
                unit="ms",
                window=window_label(trace),
            ),
            Evidence(
                label="DataLoader share of each step (min..max)",
                value=f"{100 * share.min():.1f}..{100 * share.max():.1f}",
                unit="%",
                window=window_label(trace),
            ),
            Evidence(
                label="iterator",
                value="single-process (num_workers=0)" if single else "multi-process (workers)",
                unit="",
            ),
        ]
        if len(htod):
            ev.append(
                Evidence(
                    label="host-to-device copies from pageable memory",
                    value=f"{len(pageable)} of {len(htod)}",
                    unit="copies",
                    window=window_label(trace),
                )
            )
        workers = config_value(trace, "dataloader_num_workers")
        hf = ctx.framework in ("hf_trainer", "trl")
        # the per-sample work named is the model family's the trace shows (generic when it does not say);
        # the worker count is the user's own doubled, or labelled as an example
        if single:
            fix = (
                (
                    "Load batches in background workers (for example dataloader_num_workers=4), with "
                    "dataloader_pin_memory=True and dataloader_persistent_workers=True in TrainingArguments"
                    if hf
                    else "Load batches in background workers, for example DataLoader(num_workers=4, pin_memory=True, "
                    "persistent_workers=True)"
                )
                + current(trace, "dataloader_num_workers")
                + ", "
                + dataloader_prep(trace, single_process=True)
                + "."
            )
        else:
            more = (
                f"dataloader_num_workers={2 * workers}"
                if isinstance(workers, int) and workers > 0
                else "more dataloader workers"
            )
            fix = (
                f"The workers cannot keep up: use {more}{current(trace, 'dataloader_num_workers')}, enable "
                f"pin_memory and persistent_workers, {dataloader_prep(trace, single_process=False)}."
            )
        title = f"GPU idles {fmt_us(idle / ctx.n_steps)} per step ({pct(frac)}) waiting for the DataLoader" + (
            " (num_workers=0)" if single else ""
        )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=idle,
            confidence="high" if frac >= 0.1 else "medium",
            evidence=ev,
            fix=fix,
            events=events_from(dl_in, trace, "cpu"),
            idle_claims={"idle_dataloader": claim},
        )
