#!/usr/bin/env python3
"""Several onnxruntime-genai folders in one process, their generations alternated: ratios on a busy machine.

genai_timing.py times one folder per process, so on a machine shared with other jobs the load can change
between two folders' runs by more than the graphs differ. Here every folder is loaded once and each round
runs one generation of each in turn, seconds apart; the medians over rounds and their ratios to the first
folder are printed as a Markdown table. Runs in genai's own environment, like genai_timing.py.

    python genai_alternate.py --vocab 49152 --rounds 12 FOLDER_A FOLDER_B …

The prompt is genai_timing.py's (numpy's default_rng(0) integers below the vocabulary), greedy, batch 1,
the cache's capacity prompt + new; per token is the median step of a round, then the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from common.harness import decode_arguments


def generate(og: object, model: object, prompt: np.ndarray, new: int) -> tuple[float, float, list[int]]:
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=prompt.shape[1] + new, min_length=prompt.shape[1] + new)
    gen = og.Generator(model, params)
    start = time.perf_counter()
    gen.append_tokens(prompt.astype(np.int32))
    tokens = [int(gen.get_next_tokens()[0])]
    prefill, times = time.perf_counter() - start, []
    for _ in range(new - 1):
        start = time.perf_counter()
        gen.generate_next_token()
        tokens.append(int(gen.get_next_tokens()[0]))
        times.append(time.perf_counter() - start)
    return prefill, statistics.median(times), tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", type=Path, nargs="+")
    decode_arguments(ap, rounds=12)
    ap.add_argument("--vocab", type=int, required=True)
    args = ap.parse_args()

    import onnxruntime_genai as og

    models = []
    for folder in args.folders:  # the threads as genai_timing.py sets them: in the folder's session options
        config = json.loads((folder / "genai_config.json").read_text())
        session = config["model"]["decoder"].setdefault("session_options", {})
        session["intra_op_num_threads"] = args.threads
        session["inter_op_num_threads"] = 1
        (folder / "genai_config.json").write_text(json.dumps(config, indent=4))
        models.append(og.Model(str(folder)))
    prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))
    runs: list[dict[str, list]] = [{"prefill": [], "step": [], "tokens": []} for _ in models]
    for r in range(args.rounds + 1):  # round 0 warms up
        for model, run in zip(models, runs, strict=True):
            prefill, step, tokens = generate(og, model, prompt, args.new)
            if r:
                run["prefill"].append(prefill)
                run["step"].append(step)
                run["tokens"] = tokens
    med = [{k: statistics.median(run[k]) * 1e3 for k in ("prefill", "step")} for run in runs]
    print("| folder | prefill ms | per-token ms | prefill vs first | per-token vs first | same tokens as first |")
    print("|---|---|---|---|---|---|")
    for folder, m, run in zip(args.folders, med, runs, strict=True):
        print(f"| {folder.name} | {m['prefill']:.1f} | {m['step']:.2f} | {m['prefill'] / med[0]['prefill']:.2f}× | "
              f"{m['step'] / med[0]['step']:.2f}× | {'yes' if run['tokens'] == runs[0]['tokens'] else 'no'} |")
    print(json.dumps({"folders": [str(f) for f in args.folders], "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
