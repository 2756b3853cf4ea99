#!/usr/bin/env python3
"""llama.cpp's greedy decoding against HF transformers on the same checkpoint: is llama.cpp's output sane?

llamacpp_timing.py saved llama.cpp's logits at each of its greedy steps (the prompt's last position, then one
per new token). HF runs the checkpoint in float32 on the prompt followed by llama.cpp's tokens (teacher
forcing: every position sees the same context on both sides) and gives its logits at the same positions:

  top1      the share of steps where HF's argmax is llama.cpp's token (Q4_0's error may flip near-ties: the
            random checkpoints' logits are nearly flat);
  rel_err   ‖llama.cpp − HF‖ / ‖HF‖ per step (median and max over the steps);
  corr      Pearson's correlation of the two logit vectors per step (minimum over the steps).

A wrong conversion (q/k rows in the wrong order, a norm or the rotary base off) shows as a correlation near 0
even for the unquantized BF16 file. Runs in our venv, one process of its own (HF holds the model in float32).

    python llamacpp_check.py CHECKPOINT_DIR LOGITS.npy --prompt 128 --vocab V --tokens 3,17,...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def agreement(hf: np.ndarray, cpp: np.ndarray, tokens: list[int]) -> dict[str, float]:
    """hf and cpp: [steps, vocab] logits at the same positions; tokens: llama.cpp's greedy choices."""
    hf, cpp = hf.astype(np.float64), cpp.astype(np.float64)
    rel = np.linalg.norm(cpp - hf, axis=-1) / np.linalg.norm(hf, axis=-1)
    corr = [float(np.corrcoef(a, b)[0, 1]) for a, b in zip(hf, cpp, strict=True)]
    return {"top1": float(np.mean(hf.argmax(-1) == np.asarray(tokens))), "steps": len(tokens),
            "rel_err_median": float(np.median(rel)), "rel_err_max": float(rel.max()), "corr_min": min(corr)}


def hf_logits(checkpoint: Path, ids: list[int], steps: int) -> np.ndarray:
    """HF's float32 logits at the last `steps` positions of `ids`."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), logits_to_keep=steps).logits[0]
    return out.numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("logits", type=Path)
    ap.add_argument("--prompt", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--tokens", required=True, help="llama.cpp's greedy tokens, comma-separated")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))[0].tolist()
    cpp = np.load(args.logits)
    hf = hf_logits(args.checkpoint, prompt + tokens[:-1], len(tokens))
    print(json.dumps(agreement(hf, cpp, tokens)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
