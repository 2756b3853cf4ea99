#!/usr/bin/env python3
"""Llama generation: ours against onnxruntime-genai's model builder and HF eager, on SmolLM2-135M's shape.

One random checkpoint (HF LlamaForCausalLM: 30 layers, d 576, 9 query and 3 key/value heads, d_mlp 1536,
vocabulary 49152, tied embeddings; norms perturbed), saved once, serves all three:

  ours    pseudoformer's Generator on ORT CPU, fp32: models/llama.alg loaded from the checkpoint, the
          decoder with the key/value cache the compiler derives (one Attention, two RotaryEmbedding per
          layer; logits of the last position only)
  genai   onnxruntime-genai's model builder (`builder.py -p fp32 -e cpu`: packed QKV, GroupQueryAttention
          with the rotary fused in, SkipSimplifiedLayerNormalization) run by og.Generator, in a process of
          its own: onnxruntime-genai brings its own onnxruntime, so it lives in a virtual environment this
          script makes (--genai-venv, `pip install onnxruntime-genai`); the builder itself runs here, from
          that package's source, since it needs torch and transformers
  eager   HF LlamaForCausalLM, a loop over model(…, past_key_values=…) under inference_mode, its prefill
          computing the last position's logits (logits_to_keep=1, as HF's generate does)

Prompt of 128 random ids, 32 new tokens, greedy, batch 1, 2 threads. Rounds rotate over the three after a
warm-up round; each round is one whole generation per variant. Reported: prefill, and the median per-token
time of each round's decode steps, as medians over rounds; greedy tokens must agree. The per-token time is
set against the weight-bandwidth floor: the bytes a decode step reads (every weight once, the embedding
table only a row) over the read bandwidth measured here (the better of a 512 MB numpy sum and a 512 MB
ORT MatMul of one row).

    python benchmarks/bench_llama.py                  # full run (makes benchmarks/.genai-venv once)
    python benchmarks/bench_llama.py --quick          # a tiny Llama, a smoke test of the three
    python benchmarks/bench_llama.py --profile DIR    # also ORT profiles of our prefill and step
    python benchmarks/bench_llama.py --source ir      # ours from the hand-built graph llama.alg elaborates to
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.decoding import (
    Genai,
    genai_build,
    genai_venv,
    generation_rounds,
    make_checkpoint,
    read_bandwidth,
    step_bytes,
    torch_generate,
)
from common.harness import decode_arguments, machine_summary

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9  # ours / genai, per token and prefill
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    decode_arguments(ap)
    ap.add_argument("--genai-venv", type=Path, default=ROOT / "benchmarks" / ".genai-venv")
    ap.add_argument("--model", default=str(ROOT / "models" / "llama.alg"))
    ap.add_argument("--source", choices=("alg", "ir"), default="alg",
                    help="ir: the decoder llama.alg elaborates to, built by hand (tests/passes/llama_graphs.py), "
                         "for as long as the frontend cannot read llama.alg's notation")
    ap.add_argument("--profile", type=Path, help="write ORT profiles of our prefill and decode step here")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)

    import torch
    from common.llama_profile import profile_ours, summarize, table
    from transformers import LlamaForCausalLM

    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load

    torch.set_num_threads(args.threads)
    python = genai_venv(args.genai_venv)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, built = Path(tmp) / "checkpoint", Path(tmp) / "genai"
        make_checkpoint(ckpt, args.quick)
        start = time.perf_counter()
        version = genai_build(python, ckpt, built, Path(tmp) / "builder.log")
        genai_seconds = time.perf_counter() - start
        start = time.perf_counter()
        if args.source == "ir":
            from tests.models.llama_cases import hand_built

            model = hand_built("llama", ckpt)
        else:
            model = load(args.model, weights=ckpt)
        gen = Generator(model, backend="onnx", threads=args.threads)
        ours_seconds = time.perf_counter() - start
        fast = Generator(model, backend="onnx", threads=args.threads, contrib_ops=True)
        hf = LlamaForCausalLM.from_pretrained(ckpt).eval()
        genai = Genai(python, built, args.threads)
        vocab = hf.config.vocab_size
        prompt = np.random.default_rng(0).integers(3, vocab, size=(1, args.prompt))
        greedy = Sampling(temperature=0)

        def ours_generate(g: Generator) -> tuple[list[int], float, list[float]]:
            res = g.generate(prompt, max_new_tokens=args.new, sampling=greedy)
            return res.tokens[0], res.prefill_seconds, res.step_seconds

        variants = {"ours": lambda: ours_generate(gen), "contrib": lambda: ours_generate(fast),
                    "genai": lambda: genai.generate(prompt[0].tolist(), args.new),
                    "eager": lambda: torch_generate(hf, prompt, args.new, logits_to_keep=1)}
        rows, tokens = generation_rounds(variants, args.rounds)
        genai.close()
        profiles = {}
        if args.profile is not None:
            profiles["ours"] = summarize(profile_ours(gen, prompt, args.profile / "standard", args.new, args.threads))
            profiles["ours --contrib-ops"] = summarize(profile_ours(fast, prompt, args.profile / "contrib", args.new,
                                                                     args.threads))
            prefix = args.profile / "genai"
            worker = Genai(python, built, args.threads, prefix)
            worker.generate(prompt[0].tolist(), args.new)
            worker.close()
            profiles["genai"] = summarize(max(args.profile.glob("genai*.json"), key=lambda p: p.stat().st_mtime))
    agree = tokens["ours"] == tokens["contrib"] == tokens["genai"] == tokens["eager"]
    med = {k: {m: statistics.median(v) * 1e3 for m, v in d.items()} for k, d in rows.items()}
    bandwidth = read_bandwidth(args.threads)
    floor = step_bytes(model.weights) / bandwidth * 1e3
    ratio_step = med["contrib"]["step"] / med["genai"]["step"]  # the targets: ours at its fastest option
    ratio_prefill = med["contrib"]["prefill"] / med["genai"]["prefill"]
    shape = "a tiny Llama (--quick)" if args.quick else "SmolLM2-135M's shape"
    what = "the hand-built decoder of llama.alg (--source ir)" if args.source == "ir" else args.model
    print(f"# Llama generation, {shape}, random weights, ours from {what}: prompt {args.prompt}, {args.new} new tokens, greedy, "
          f"{args.threads} threads, batch 1, fp32, CPU")
    print(f"# {machine_summary()}; "
          f"{args.rounds} rounds after a warm-up, rotating, medians; onnxruntime-genai {version}")
    print()
    print("| | prefill ms | per-token ms |")
    print("|---|---|---|")
    for k, label in (("genai", "onnxruntime-genai (model builder)"), ("eager", "HF eager"),
                     ("ours", "ours (standard ONNX ops)"), ("contrib", "ours --contrib-ops")):
        print(f"| {label} | {med[k]['prefill']:.1f} | {med[k]['step']:.1f} |")
    print(f"| ours (standard) / genai | {med['ours']['prefill'] / med['genai']['prefill']:.2f}× | "
          f"{med['ours']['step'] / med['genai']['step']:.2f}× |")
    print(f"| ours --contrib-ops / genai | {ratio_prefill:.2f}× | {ratio_step:.2f}× |")
    print(f"| ours / eager | {med['ours']['prefill'] / med['eager']['prefill']:.2f}× | "
          f"{med['ours']['step'] / med['eager']['step']:.2f}× |")
    print()
    print(f"weight-bandwidth floor per token: {step_bytes(model.weights) / 1e6:.0f} MB read per step / "
          f"{bandwidth / 1e9:.1f} GB/s = {floor:.1f} ms (ours at {med['ours']['step'] / floor:.2f}× it, "
          f"--contrib-ops {med['contrib']['step'] / floor:.2f}×, genai at {med['genai']['step'] / floor:.2f}×)")
    print(f"greedy tokens equal (ours, ours --contrib-ops, genai, eager): {agree}; building: ours {ours_seconds:.1f} s (load, derive, "
          f"lower, session), genai's builder {genai_seconds:.1f} s")
    print(f"targets (ours --contrib-ops): per-token ≤ {TARGET}× genai: {'met' if ratio_step <= TARGET else 'missed'}; "
          f"prefill ≤ {TARGET}× genai: {'met' if ratio_prefill <= TARGET else 'missed'}")
    for part in ("prefill", "step") if profiles else ():
        print()
        print(table(profiles, part))
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
