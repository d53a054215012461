#!/usr/bin/env python
"""Scenario lab: fine-tune a small random Llama-style causal LM with one known cause of
slowness (or its fix) switched on, time it, and capture a trace with traceinspect.capture.

    python lab/scenarios.py --all --out lab_out --device cuda            # GPU, full size
    python lab/scenarios.py --scenario padded --scenario packed --out /tmp/lab --tiny --device cpu

Each scenario writes ``OUT/<scenario>/<scenario>.<ns>.pt.trace.json.gz`` (with the
"traceinspect" metadata block, plus a top-level "lab" block naming the scenario and its
expected finding) and adds/replaces its row in ``OUT/results.json`` and ``OUT/results.md``.
No downloads: the model is built from a LlamaConfig with random weights, the data is synthetic.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(HERE.parent))

PAD_ID, EOS_ID, FIRST_TOKEN = 0, 2, 3


# ---------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Flags:
    """One value per cause. The defaults are the healthy run (every fix on)."""

    batching: str = "normal"  # normal | small (bs 1 x accum) | accum (bs N x accum)
    data: str = "packed"  # packed (concatenated, no padding) | padded (pad to longest)
    attn: str = "sdpa"  # sdpa | eager
    loader: str = "fast"  # fast (workers, pin_memory, pre-tokenized) | slow (0 workers, on-the-fly)
    optimizer: str = "on-device"  # on-device | cpu-offload (ZeRO-Offload style)
    precision: str = "auto"  # bf16 (autocast) | fp32 | auto (bf16 on cuda, fp32 on cpu)

    def resolved(self, device: str) -> "Flags":
        """``auto`` precision is bf16 autocast on cuda; on a CPU (no native bf16 matmuls on most
        hosts, so autocast there is slower) it is fp32."""
        if self.precision != "auto":
            return self
        return dataclasses.replace(self, precision="bf16" if device == "cuda" else "fp32")


# name -> (flags, expected finding or None, one-line description)
SCENARIOS: dict[str, tuple[Flags, str | None, str]] = {
    "small-batch": (
        Flags(batching="small"),
        "launch-bound",
        "micro-batch 1 with many accumulation steps: tiny kernels, launch-bound",
    ),
    "grad-accum": (
        Flags(batching="accum"),
        None,
        "same effective batch as small-batch, but micro-batch N x fewer accumulation steps",
    ),
    "padded": (
        Flags(data="padded"),
        "padding-waste",
        "very variable lengths padded to the longest sequence of each batch",
    ),
    "packed": (Flags(data="packed"), None, "sequences concatenated into full rows, no padding"),
    "eager-attn": (Flags(attn="eager"), "eager-attention", "attn_implementation='eager' (matmul + softmax + matmul)"),
    "sdpa": (Flags(attn="sdpa"), None, "attn_implementation='sdpa' (fused attention)"),
    "dataloader-slow": (
        Flags(loader="slow"),
        "dataloader-stall",
        "num_workers=0, tokenization + deliberate CPU cost in __getitem__",
    ),
    "dataloader-fast": (Flags(loader="fast"), None, "workers, pin_memory, pre-tokenized data"),
    "cpu-offload": (
        Flags(optimizer="cpu-offload"),
        "cpu-offload",
        "AdamW states on CPU: grads D2H, CPU AdamW step, params H2D every step",
    ),
    "on-gpu": (Flags(optimizer="on-device"), None, "AdamW on the training device"),
    "fp32": (Flags(precision="fp32"), "fp32-gemm", "no autocast, fp32 GEMMs (TF32 off on cuda)"),
    "bf16": (Flags(precision="bf16"), None, "bf16 autocast"),
    "healthy": (Flags(), None, "every fix on"),
}

FINDING_NAMES = ("launch-bound", "padding-waste", "eager-attention", "dataloader-stall", "cpu-offload", "fp32-gemm")


@dataclasses.dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    seq_len: int
    micro_batch: int  # micro-batch of every scenario except small-batch
    small_accum: int  # small-batch: 1 x small_accum; grad-accum: micro_batch x accum_accum
    accum_accum: int
    short_len: tuple[int, int]  # padded data: 70% short docs, 30% long docs
    long_len: tuple[int, int]
    slow_ms_per_sample: float
    workers: int
    warm_steps: int
    timed_steps: int
    active: int


SIZES = {
    "tiny": Size(
        hidden=64,
        layers=2,
        heads=4,
        intermediate=128,
        vocab=256,
        seq_len=64,
        micro_batch=4,
        small_accum=8,
        accum_accum=2,
        short_len=(4, 16),
        long_len=(40, 64),
        slow_ms_per_sample=4.0,
        workers=1,
        warm_steps=1,
        timed_steps=3,
        active=3,
    ),
    "full": Size(
        hidden=1024,
        layers=8,
        heads=16,
        intermediate=2816,
        vocab=32000,
        seq_len=1024,
        micro_batch=8,
        small_accum=16,
        accum_accum=2,
        short_len=(32, 192),
        long_len=(640, 1024),
        slow_ms_per_sample=20.0,
        workers=4,
        warm_steps=3,
        timed_steps=20,
        active=3,
    ),
}


def batching(flags: Flags, size: Size) -> tuple[int, int]:
    """(micro_batch, grad_accum) of a scenario."""
    if flags.batching == "small":
        return 1, size.small_accum
    if flags.batching == "accum":
        return size.micro_batch, size.accum_accum
    return size.micro_batch, 1


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------


def _doc_lengths(rng, n: int, size: Size) -> list[int]:
    out = []
    for _ in range(n):
        lo, hi = size.short_len if rng.random() < 0.7 else size.long_len
        out.append(int(rng.integers(lo, hi + 1)))
    return out


def _letters(rng, n: int) -> str:
    return "".join(chr(ord("a") + int(i)) for i in rng.integers(0, 26, n))


def tokenize(text: str, vocab: int):
    """The lab's 'tokenizer': one token per character."""
    import torch

    return torch.tensor(
        [EOS_ID if c == "\x02" else FIRST_TOKEN + (ord(c) % (vocab - FIRST_TOKEN)) for c in text], dtype=torch.long
    )


def burn_cpu(ms: float) -> None:
    """Deliberate CPU work (hashing) for ``ms`` milliseconds."""
    deadline = time.perf_counter() + ms / 1000.0
    h = b"traceinspect"
    while time.perf_counter() < deadline:
        h = hashlib.sha256(h).digest()


class PretokenizedDataset:
    """Tensors made ahead of time; __getitem__ only indexes."""

    def __init__(self, items):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class OnTheFlyDataset:
    """Raw text; __getitem__ tokenizes it and pays a deliberate CPU cost."""

    def __init__(self, texts: list[str], vocab: int, cost_ms: float):
        self.texts, self.vocab, self.cost_ms = texts, vocab, cost_ms

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i):
        burn_cpu(self.cost_ms)
        return tokenize(self.texts[i], self.vocab)


def collate(items, *, pad_to_longest: bool):
    import torch

    if not pad_to_longest:
        ids = torch.stack(items)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    longest = max(int(t.numel()) for t in items)
    ids = torch.full((len(items), longest), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(items), longest), dtype=torch.long)
    for row, t in enumerate(items):
        ids[row, : t.numel()] = t
        mask[row, : t.numel()] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def make_loader(flags: Flags, size: Size, n_samples: int, device: str, seed: int = 0):
    """A DataLoader yielding ``n_samples`` samples in order (one epoch, no shuffling)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    padded = flags.data == "padded"
    if padded:  # one document per sample, very variable lengths
        texts = [_letters(rng, n) for n in _doc_lengths(rng, n_samples, size)]
    else:  # packed: documents joined with EOS, cut into full rows of seq_len
        need = n_samples * size.seq_len
        parts, total = [], 0
        while total < need:
            n = _doc_lengths(rng, 1, size)[0]
            parts.append(_letters(rng, n))
            total += n + 1
        stream = "\x02".join(parts)  # "\x02" becomes EOS_ID in tokenize()
        texts = [stream[i * size.seq_len : (i + 1) * size.seq_len] for i in range(n_samples)]
    if flags.loader == "slow":
        dataset = OnTheFlyDataset(texts, size.vocab, size.slow_ms_per_sample)
        workers, pin = 0, False
    else:
        dataset = PretokenizedDataset([tokenize(t, size.vocab) for t in texts])
        workers, pin = size.workers, device == "cuda"
    micro, _ = batching(flags, size)
    kwargs: dict[str, Any] = {}
    if workers > 0:
        kwargs.update(persistent_workers=False, prefetch_factor=4)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=micro,
        shuffle=False,
        drop_last=True,
        num_workers=workers,
        pin_memory=pin,
        collate_fn=functools.partial(collate, pad_to_longest=padded),
        **kwargs,
    )
    return loader, workers, pin


# ---------------------------------------------------------------------------
# model + optimizer
# ---------------------------------------------------------------------------


def build_model(size: Size, attn: str, device: str):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        hidden_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        intermediate_size=size.intermediate,
        vocab_size=size.vocab,
        max_position_embeddings=max(size.seq_len, size.long_len[1]),
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=1,
        tie_word_embeddings=False,
    )
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.to(device).train()


class CpuOffloadAdamW:
    """ZeRO-Offload style: fp32 master params + AdamW states live on the CPU.

    step(): copy grads device->host, run AdamW on the CPU copies, copy params host->device."""

    def __init__(self, params, lr: float, pin: bool):
        import torch

        self.params = [p for p in params if p.requires_grad]
        self.cpu_params = []
        for p in self.params:
            cp = torch.empty(p.shape, dtype=torch.float32, device="cpu", pin_memory=pin)
            cp.copy_(p.detach())
            cp.requires_grad_(True)
            cp.grad = torch.empty(p.shape, dtype=torch.float32, device="cpu", pin_memory=pin)
            self.cpu_params.append(cp)
        self.inner = torch.optim.AdamW(self.cpu_params, lr=lr, foreach=False)

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for p, cp in zip(self.params, self.cpu_params):
                if p.grad is not None:
                    cp.grad.copy_(p.grad)  # D2H
            self.inner.step()  # CPU AdamW
            for p, cp in zip(self.params, self.cpu_params):
                p.copy_(cp)  # H2D

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def make_optimizer(flags: Flags, model, device: str, lr: float = 1e-4):
    import torch

    if flags.optimizer == "cpu-offload":
        return CpuOffloadAdamW(model.parameters(), lr, pin=device == "cuda"), "adamw_cpu_offload"
    if device == "cuda":
        return torch.optim.AdamW(model.parameters(), lr=lr, fused=True), "adamw_torch_fused"
    return torch.optim.AdamW(model.parameters(), lr=lr), "adamw_torch"


def set_precision_flags(flags: Flags, device: str) -> bool | None:
    """fp32 scenario: TF32 off (true fp32 GEMMs); others: TF32 allowed. Returns tf32 (cuda)."""
    import torch

    if device != "cuda":
        return None
    tf32 = flags.precision != "fp32"
    with contextlib.suppress(Exception):
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return tf32


# ---------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------


def _to_device(batch: dict, device: str, non_blocking: bool) -> dict:
    return {k: v.to(device, non_blocking=non_blocking) for k, v in batch.items()}


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def run_scenario(
    name: str, out: Path, *, device: str, tiny: bool, steps: int | None = None, seed: int = 0
) -> dict[str, Any]:
    import torch

    from traceinspect.capture import profile_steps

    flags, expected, description = SCENARIOS[name]
    flags = flags.resolved(device)
    size = SIZES["tiny" if tiny else "full"]
    timed = int(steps) if steps else size.timed_steps
    micro, accum = batching(flags, size)
    torch.manual_seed(seed)
    tf32 = set_precision_flags(flags, device)
    t_start = time.perf_counter()
    model = build_model(size, flags.attn, device)
    optimizer, optim_name = make_optimizer(flags, model, device)
    warm, profiler_warmup, active = size.warm_steps, 1, size.active
    total_steps = warm + timed + profiler_warmup + active
    loader, workers, pin = make_loader(flags, size, total_steps * micro * accum, device, seed)
    use_bf16 = flags.precision == "bf16"
    autocast = (
        functools.partial(torch.autocast, device_type=device, dtype=torch.bfloat16)
        if use_bf16
        else contextlib.nullcontext
    )
    config = {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accum,
        "dataloader_num_workers": workers,
        "dataloader_pin_memory": pin,
        "bf16": use_bf16,
        "fp16": False,
        "tf32": tf32,
        "autocast_dtype": "bfloat16" if use_bf16 else None,
        "attn_implementation": flags.attn,
        "packing": flags.data == "packed",
        "padding_free": False,
        "group_by_length": False,
        "max_seq_length": size.seq_len,
        "optim": optim_name,
        "gradient_checkpointing": False,
        "torch_compile": False,
    }
    lab = {
        "scenario": name,
        "expected_finding": expected,
        "flags": dataclasses.asdict(flags),
        "size": "tiny" if tiny else "full",
        "description": description,
    }
    times: list[float] = []
    real = padded = 0
    scen_dir = out / name
    cap = profile_steps(
        scen_dir,
        wait=warm + timed,
        warmup=profiler_warmup,
        active=active,
        model=model,
        device=torch.device(device),
        config=config,
        worker_name=name,
        extra={"lab": lab},
    )
    it = iter(loader)
    with cap:
        for step in range(total_steps):
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(accum):
                batch = next(it)
                cap.record_batch(batch)  # counted on the host: no sync
                if warm <= step < warm + timed:
                    real += int(batch["attention_mask"].sum())
                    padded += int(batch["attention_mask"].numel())
                batch = _to_device(batch, device, non_blocking=pin)
                with autocast():
                    loss = model(**batch).loss / accum
                loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync(device)
            if warm <= step < warm + timed:
                times.append(time.perf_counter() - t0)
            cap.step()
    del it
    trace = cap.trace_path
    mean_s = statistics.fmean(times)
    row = {
        "scenario": name,
        "expected_finding": expected,
        "description": description,
        "flags": dataclasses.asdict(flags),
        "device": device,
        "size": "tiny" if tiny else "full",
        "micro_batch": micro,
        "grad_accum": accum,
        "timed_steps": len(times),
        "mean_step_time_ms": round(mean_s * 1000, 3),
        "std_step_time_ms": round(statistics.pstdev(times) * 1000, 3),
        "real_tokens_per_step": real / len(times),
        "padded_tokens_per_step": padded / len(times),
        "padding_share": round(1 - real / padded, 4) if padded else None,
        "real_tokens_per_s": round(real / sum(times), 1),
        "trace": str(trace.relative_to(out)) if trace is not None else None,
        "wall_s": round(time.perf_counter() - t_start, 2),
    }
    return row


# ---------------------------------------------------------------------------
# results table
# ---------------------------------------------------------------------------


def write_results(out: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge ``rows`` into OUT/results.json (one row per scenario) and rewrite results.md."""
    path = out / "results.json"
    merged: dict[str, dict[str, Any]] = {}
    if path.exists():
        with contextlib.suppress(Exception):
            for row in json.loads(path.read_text()):
                merged[row["scenario"]] = row
    for row in rows:
        merged[row["scenario"]] = row
    order = list(SCENARIOS)
    final = sorted(merged.values(), key=lambda r: order.index(r["scenario"]) if r["scenario"] in order else len(order))
    path.write_text(json.dumps(final, indent=2) + "\n")
    lines = [
        "| scenario | expected finding | device | micro x accum | mean step (ms) | "
        "padding share | real tokens/s | trace |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in final:
        lines.append(
            f"| {r['scenario']} | {r['expected_finding'] or 'none'} | {r['device']} | "
            f"{r['micro_batch']} x {r['grad_accum']} | {r['mean_step_time_ms']:.1f} | "
            f"{r['padding_share']} | {r['real_tokens_per_s']} | {r['trace']} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="scenario to run (repeatable, or comma separated): " + ", ".join(SCENARIOS),
    )
    parser.add_argument("--all", action="store_true", help="run every scenario")
    parser.add_argument("--out", type=Path, help="output directory")
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available, else cpu"
    )
    parser.add_argument("--tiny", action="store_true", help="tiny model and data: seconds per scenario on a CPU")
    parser.add_argument(
        "--steps", type=int, default=None, help="timed (non-profiled) steps per scenario (default 3 tiny / 20 full)"
    )
    parser.add_argument("--list", action="store_true", help="list scenarios and exit")
    args = parser.parse_args(argv)

    if args.list:
        for name, (_, expected, desc) in SCENARIOS.items():
            print(f"{name:16s} {expected or 'none':17s} {desc}")
        return 0
    names = list(SCENARIOS) if args.all else [n.strip() for arg in args.scenario for n in arg.split(",") if n.strip()]
    if not names:
        parser.error("give --scenario NAME (repeatable) or --all")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.out is None:
        parser.error("--out DIR is required")
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be >= 1")

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch.cuda.is_available() is False")
    args.out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if args.tiny and device == "cpu":
        # tiny ops gain nothing from intra-op threads, and on a busy small host OpenMP
        # barriers make them many times slower; restored afterwards
        torch.set_num_threads(1)
    rows = []
    try:
        for name in names:
            row = run_scenario(name, args.out, device=device, tiny=args.tiny, steps=args.steps)
            rows.append(row)
            write_results(args.out, [row])  # keep results.json current after every scenario
            print(
                f"{name:16s} {row['mean_step_time_ms']:10.1f} ms/step  "
                f"expected={row['expected_finding'] or 'none':17s} {row['trace']}",
                flush=True,
            )
    finally:
        torch.set_num_threads(threads)
    print(f"results: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
