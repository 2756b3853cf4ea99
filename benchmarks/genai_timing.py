#!/usr/bin/env python3
"""Time an onnxruntime-genai model folder: prefill of a prompt and the median time per new token.

Runs in onnxruntime-genai's own environment (it brings its own onnxruntime, which must not share an
environment with ours), so it imports nothing of pseudoformer: bench_llama.py and bench_quant.py call
it as a subprocess and read the JSON it prints.

    python genai_timing.py MODEL_DIR --prompt 128 --new 32 --threads 2 --rounds 5

The same random prompt as the caller's (numpy's default_rng(0) integers below the vocabulary), greedy,
batch 1; the JSON has every round's prefill seconds and median step seconds, and the tokens of the last
round.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common.genai_generate import time_model
from common.harness import decode_arguments


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    decode_arguments(ap)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--max-length", type=int, help="the cache's capacity (default prompt + new); genai's "
                    "sliding-window GroupQueryAttention refuses one under the window (Gemma 2: 4096)")
    args = ap.parse_args()

    import onnxruntime_genai as og

    config = json.loads((args.model / "genai_config.json").read_text())
    session = config["model"]["decoder"].setdefault("session_options", {})
    session["intra_op_num_threads"] = args.threads
    session["inter_op_num_threads"] = 1
    (args.model / "genai_config.json").write_text(json.dumps(config, indent=4))
    model = og.Model(str(args.model))
    prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))
    timed = time_model(og, model, prompt, args.new, args.rounds, args.max_length)
    prefill, steps, tokens = timed["prefill_s"], timed["step_s"], timed["tokens"][0]
    size = sum(p.stat().st_size for p in args.model.iterdir() if p.name.startswith("model.onnx"))
    print(json.dumps({"prefill_s": prefill, "step_s": steps, "tokens": tokens, "file_bytes": size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
