#!/usr/bin/env python3
"""llama.cpp's side of bench_int4.py: quantize a GGUF file to Q4_0, and time greedy decoding of it.

Runs in llama-cpp-python's own venv (built from source: ../shared/anchors/llama-cpp.md; no prebuilt wheel
loads on these machines), so it imports nothing of pseudoformer; bench_int4.py calls it as a subprocess and
reads the JSON line it prints last.

    python llamacpp_timing.py quantize IN.gguf OUT.gguf [--pure] [--threads 2]
    python llamacpp_timing.py time MODEL.gguf --prompt 128 --new 16 --threads 2 --rounds 1 --vocab V
                                  [--save-logits LOGITS.npy]

quantize: llama_model_quantize with LLAMA_FTYPE_MOSTLY_Q4_0, as `llama-quantize IN OUT Q4_0` does: every
matrix Q4_0 but the unembedding (the tied embedding here), which llama.cpp keeps at Q6_K unless --pure.

time: the same random prompt as the other contenders (numpy's default_rng(0) integers below the vocabulary),
`Llama(n_threads=T, n_threads_batch=T)`; prefill is `eval(prompt)` and the first token's argmax over the last
logits (llama_get_logits_ith(ctx, -1)), each step `eval([token])` and its argmax, as genai_timing.py counts
genai's. Round 0 warms up. The JSON has every round's prefill seconds and median step seconds, the tokens of
the last round, and the model's tensor bytes; --save-logits writes that round's logits, one row per token.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from common.harness import common_arguments, decode_arguments


def quantize(args: argparse.Namespace) -> dict[str, object]:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.allow_requantize = True
    params.nthread = args.threads
    params.pure = args.pure
    start = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(str(args.input).encode(), str(args.output).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({args.input}) returned {rc}")
    return {"seconds": time.perf_counter() - start, "file_bytes": args.output.stat().st_size}


def timed(args: argparse.Namespace) -> dict[str, object]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(args.model), n_threads=args.threads, n_threads_batch=args.threads,
                          n_ctx=args.prompt + args.new, n_batch=max(args.prompt, 1), verbose=False)
    vocab = llm.n_vocab()
    if vocab != args.vocab:
        raise SystemExit(f"{args.model}: {vocab} tokens, not {args.vocab}")
    prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))[0].tolist()

    def last_logits() -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))

    prefill, steps, tokens, rows = [], [], [], []
    for r in range(args.rounds + 1):  # round 0 warms up
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        logits = last_logits()
        token = int(logits.argmax())
        t_prefill = time.perf_counter() - start
        tokens, rows, times = [token], [logits.copy()], []
        for _ in range(args.new - 1):
            start = time.perf_counter()
            llm.eval([token])
            logits = last_logits()
            token = int(logits.argmax())
            times.append(time.perf_counter() - start)
            tokens.append(token)
            rows.append(logits.copy())
        if r:
            prefill.append(t_prefill)
            steps.append(statistics.median(times))
    if args.save_logits:
        np.save(args.save_logits, np.stack(rows))
    return {"prefill_s": prefill, "step_s": steps, "tokens": tokens,
            "model_bytes": int(llama_cpp.llama_model_size(llm.model)), "version": llama_cpp.__version__}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quantize")
    q.add_argument("input", type=Path)
    q.add_argument("output", type=Path)
    q.add_argument("--pure", action="store_true", help="the unembedding Q4_0 too")
    common_arguments(q)
    t = sub.add_parser("time")
    t.add_argument("model", type=Path)
    decode_arguments(t, new=16, rounds=1)
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--save-logits", type=Path)
    args = ap.parse_args()
    print(json.dumps(quantize(args) if args.command == "quantize" else timed(args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
