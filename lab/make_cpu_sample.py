#!/usr/bin/env python
"""Regenerate sample_traces/cpu_train_loop.pt.trace.json.gz: a real CPU torch.profiler trace
of a small training loop, captured with traceinspect.capture.profile_steps.

    python lab/make_cpu_sample.py                       # writes sample_traces/cpu_train_loop.pt.trace.json.gz
    python lab/make_cpu_sample.py --out /tmp/x.pt.trace.json.gz

What it runs: a randomly initialised LlamaForCausalLM (hidden 64, 2 layers, 4 heads,
intermediate 128, vocab 256, sdpa attention, 115k parameters), fp32 on the CPU, AdamW,
a DataLoader (num_workers=0) over 64 synthetic sequences of 8..64 tokens padded to the
longest of each batch of 4 (attention_mask marks the real tokens). 6 steps:
profile_steps(wait=1, warmup=1, active=3) records ProfilerStep#2..#4 with record_shapes=True.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"


def collate(items):
    import torch

    longest = max(len(t) for t in items)
    ids = torch.zeros((len(items), longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, t in enumerate(items):
        ids[row, : len(t)] = t
        mask[row, : len(t)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from traceinspect.capture import profile_steps

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=128,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(8, 65, (64,), generator=gen).tolist()
    data = [torch.randint(3, 256, (n,), generator=gen) for n in lengths]
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=False, collate_fn=collate)

    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": False,
        "bf16": False,
        "fp16": False,
        "packing": False,
        "padding_free": False,
        "group_by_length": False,
        "max_seq_length": 64,
        "optim": "adamw_torch",
        "torch_compile": False,
    }
    cap = profile_steps(
        out.parent,
        wait=1,
        warmup=1,
        active=3,
        model=model,
        config=config,
        filename=out.name,
        extra={"sample": {"script": "lab/make_cpu_sample.py"}},
    )
    with cap:
        for step, batch in enumerate(loader):
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            cap.step(batch)
            if step + 1 >= cap.steps_needed:
                break
    path = cap.trace_path
    print(f"wrote {path} ({os.path.getsize(path) / 1024:.0f} KiB); steps: {cap.metadata['steps']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
