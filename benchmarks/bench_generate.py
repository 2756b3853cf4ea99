#!/usr/bin/env python3
"""Generation benchmark: GPT-2 small, prompt 128, 32 new tokens, greedy, 2 threads, batch 1.

  ours      pseudoformer's Generator on ORT CPU: the decoder with the key/value cache the compiler
            derived from models/gpt2.alg (step graph with past inputs, logits for the last position)
  torch     HuggingFace GPT2LMHeadModel, a loop over model(…, past_key_values=…) under inference_mode
            (prefill returns every position's logits, as model(ids) does; --logits-to-keep 1 times
            HF's own prefill shortcut instead)

Same random weights, same prompt, in one process; rounds alternate between the two after a warm-up
round, and each round is a whole generation. Reported: prefill time and the median per-token time
of the 31 decode steps, medians over rounds, and the ratios ours / torch. Greedy tokens must agree.

    python benchmarks/bench_generate.py                  # full run
    python benchmarks/bench_generate.py --quick          # a tiny GPT-2, a smoke test
    python benchmarks/bench_generate.py --quantize int4 --accuracy-level 4 --quantize-embeddings
                                                         # ours with block-quantized weights (the
                                                         # tokens may then differ from torch's)

bench_quant.py compares the quantized variants with each other (accuracy levels, bias, embeddings).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.decoding import torch_generate
from common.harness import decode_arguments, machine_summary

ROOT = Path(__file__).resolve().parents[1]
TARGET_STEP = 0.55  # ours / torch per-token time
TARGET_PREFILL = 0.35  # ours / torch prefill time


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    decode_arguments(ap)
    ap.add_argument("--logits-to-keep", type=int, default=0, help="pass logits_to_keep to HF's prefill")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--contrib-ops", action="store_true", help="also time ours with --contrib-ops")
    sys.path.insert(0, str(ROOT))
    from pseudoformer.quantization import add_arguments, from_arguments

    add_arguments(ap)
    args = ap.parse_args(argv)
    quantize = from_arguments(args)

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0) if args.quick else GPT2Config()
    hf = GPT2LMHeadModel(config).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        start = time.perf_counter()
        model = load(ROOT / "models/gpt2.alg", weights=d)
        gen = Generator(model, backend="onnx", threads=args.threads, quantize=quantize)
        build = time.perf_counter() - start
        fast = (Generator(model, backend="onnx", threads=args.threads, quantize=quantize, contrib_ops=True)
                if args.contrib_ops else None)
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, size=(1, args.prompt))
    greedy = Sampling(temperature=0)

    ours = {"ours": gen, **({"ours --contrib-ops": fast} if fast is not None else {})}
    rows: dict[str, dict[str, list[float]]] = {k: {"prefill": [], "step": []} for k in (*ours, "torch")}
    agree = True
    for r in range(args.rounds + 1):  # round 0 warms up all
        t_tokens, t_prefill, t_steps = torch_generate(hf, prompt, args.new, args.logits_to_keep)
        if r:
            rows["torch"]["prefill"].append(t_prefill)
            rows["torch"]["step"].append(statistics.median(t_steps))
        for name, g in ours.items():
            time.sleep(0.2)  # the last variant's threads stop spinning
            res = g.generate(prompt, max_new_tokens=args.new, sampling=greedy)
            agree &= res.tokens[0] == t_tokens
            if r:
                rows[name]["prefill"].append(res.prefill_seconds)
                rows[name]["step"].append(statistics.median(res.step_seconds))

    med = {k: {m: statistics.median(v) * 1e3 for m, v in d.items()} for k, d in rows.items()}
    step_ratio = med["ours"]["step"] / med["torch"]["step"]
    prefill_ratio = med["ours"]["prefill"] / med["torch"]["prefill"]
    weights = "fp32" if quantize is None else f"weights {quantize.describe()}"
    print(f"# generate: GPT-2 {'tiny (--quick)' if args.quick else 'small'} (ours: {weights}), prompt {args.prompt}, "
          f"{args.new} new tokens, greedy, {args.threads} threads, batch 1")
    print(f"# {machine_summary()}; {args.rounds} rounds after a warm-up, medians; "
          f"torch prefill logits_to_keep={args.logits_to_keep or 'all'}")
    print()
    print("| | prefill ms | per-token ms |")
    print("|---|---|---|")
    for k in (*ours, "torch"):
        print(f"| {k} | {med[k]['prefill']:.1f} | {med[k]['step']:.1f} |")
    for k in ours:
        print(f"| {k} / torch | {med[k]['prefill'] / med['torch']['prefill']:.2f}× | "
              f"{med[k]['step'] / med['torch']['step']:.2f}× |")
    print()
    print(f"greedy tokens equal: {agree}; building the generator (load weights, derive, lower, ORT "
          f"session): {build:.1f} s")
    print(f"targets: per-token ≤ {TARGET_STEP}× torch: {'met' if step_ratio <= TARGET_STEP else 'missed'}; "
          f"prefill ≤ {TARGET_PREFILL}× torch: {'met' if prefill_ratio <= TARGET_PREFILL else 'missed'}")
    return 0 if agree or quantize is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
