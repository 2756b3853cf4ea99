#!/usr/bin/env python3
"""onnxruntime-genai running our folder against genai running its own builder's folder: the graph alone.

Both folders hold the same model (SmolLM2-135M's shape, random weights: scale_checkpoints.py) and run
on the same runtime (genai, its own onnxruntime), so the ratio measures only the graphs:

  genai fp32 / int4        `python -m onnxruntime_genai.models.builder -p fp32|int4 -e cpu`
  ours fp32 / int4         `pseudoformer compile models/llama.alg --genai-folder` (int4: genai's format,
                           symmetric blocks of 32, accuracy level 4, embeddings quantized), with and
                           without --contrib-ops

Each folder is timed by genai_timing.py (prefill of a random prompt, median time per new token), the
folders interleaved round by round in one run. Target (issue 29): ours ≤ 1.0× genai's, each column.

    python benchmarks/bench_genai_folder.py WORKDIR --genai-python /work/genai-venv/bin/python

`--family Qwen3-0.6B` (or Gemma-3-1B, Gemma-2-2B, Phi-3-mini: common/checkpoints.py's FAMILY_SHAPES) takes that
family's shape and its models/*.alg instead; `--layers N` keeps the first N layers of the shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common.harness import decode_arguments, decode_flags, machine_summary

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
INT4 = ["--quantize", "int4", "--symmetric", "--block-size", "32", "--accuracy-level", "4", "--quantize-embeddings"]
OURS = {"ours fp32": [], "ours fp32, --contrib-ops": ["--contrib-ops"], "ours int4": INT4,
        "ours int4, --contrib-ops": [*INT4, "--contrib-ops"]}
BASELINE = {"ours fp32": "genai fp32", "ours fp32, --contrib-ops": "genai fp32", "ours int4": "genai int4",
            "ours int4, --contrib-ops": "genai int4"}


# The .alg each family of --family compiles from.
FAMILY_ALG = {"Qwen3-0.6B": "qwen3.alg", "Gemma-3-1B": "gemma3.alg", "Gemma-2-2B": "gemma2.alg",
              "Phi-3-mini": "phi3.alg"}


def build(args: argparse.Namespace, checkpoint: Path, alg: Path) -> dict[str, Path]:
    folders = {}
    for precision in ("fp32", "int4"):
        out = args.work / f"genai-{precision}"
        if args.only and f"genai {precision}" not in args.only:
            continue
        if not (out / "genai_config.json").exists():
            with open(args.work / f"builder-{precision}.log", "w") as log:
                subprocess.run([args.genai_python, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
                                "-o", str(out), "-p", precision, "-e", "cpu", "-c", str(args.work / "cache")],
                               check=True, stdout=log, stderr=subprocess.STDOUT)
        folders[f"genai {precision}"] = out
    for name, flags in OURS.items():
        out = args.work / name.replace(" ", "-").replace(",", "")
        if args.only and name not in args.only:
            continue
        if not (out / "genai_config.json").exists():
            subprocess.run([sys.executable, "-m", "pseudoformer.cli", "compile", str(alg),
                            "--weights", str(checkpoint), "--genai-folder", str(out), *flags], check=True)
        folders[name] = out
    return folders


def time_folder(args: argparse.Namespace, folder: Path, vocab: int) -> dict:
    done = subprocess.run([args.genai_python, str(HERE / "genai_timing.py"), str(folder), *decode_flags(args),
                           "--vocab", str(vocab), *(["--max-length", str(args.max_length)] if args.max_length else [])],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path, help="a directory for the checkpoint and the folders (~2 GB)")
    ap.add_argument("--genai-python", required=True, help="the Python of onnxruntime-genai's environment")
    decode_arguments(ap, rounds=3, rounds_help="timed rounds per folder per pass")
    ap.add_argument("--passes", type=int, default=3, help="passes over the folders, interleaved")
    ap.add_argument("--family", choices=sorted(FAMILY_ALG), help="that family's shape and .alg (default: "
                    "SmolLM2-135M's shape, models/llama.alg)")
    ap.add_argument("--max-length", type=int, help="genai's cache capacity (genai_timing.py --max-length)")
    ap.add_argument("--layers", type=int, help="keep only the shape's first N layers")
    ap.add_argument("--only", nargs="*", help="build and time only these folders (names as in the table)")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from common.checkpoints import FAMILY_SHAPES, SHAPES, write_checkpoint, write_tokenizer

    args.work.mkdir(parents=True, exist_ok=True)
    rung = args.family or "SmolLM2-135M"
    shape = {**(FAMILY_SHAPES | SHAPES)[rung], **({"num_hidden_layers": args.layers} if args.layers else {})}
    alg = ROOT / "models" / FAMILY_ALG.get(rung, "llama.alg")
    checkpoint = args.work / rung
    if not (checkpoint / "model.safetensors").exists():
        write_checkpoint(checkpoint, shape)
        write_tokenizer(checkpoint)
    folders = build(args, checkpoint, alg)
    runs: dict[str, dict[str, list[float]]] = {n: {"prefill": [], "step": []} for n in folders}
    tokens = {}
    for _ in range(args.passes):
        for name, folder in folders.items():
            r = time_folder(args, folder, shape["vocab_size"])
            runs[name]["prefill"] += r["prefill_s"]
            runs[name]["step"] += r["step_s"]
            tokens[name] = r["tokens"]
    med = {n: {k: statistics.median(v) * 1e3 for k, v in r.items()} for n, r in runs.items()}
    layers = f", {args.layers} layers" if args.layers else ""
    print(f"## onnxruntime-genai: our folder ({alg.name}) against its builder's ({rung} shape{layers}, random "
          "weights), "
          f"{time.strftime('%Y-%m-%d')}")
    print(f"{machine_summary()}, {args.threads} threads; prompt "
          f"{args.prompt}, {args.new} new tokens, greedy, batch 1; medians of {args.passes}×{args.rounds} rounds, "
          "interleaved")
    print("| folder | prefill ms | per-token ms | prefill vs genai | per-token vs genai | same tokens as genai |")
    print("|---|---|---|---|---|---|")
    for name, m in med.items():
        ref = BASELINE.get(name, name) if BASELINE.get(name, name) in med else name
        base, same = med[ref], tokens[name] == tokens[ref]
        print(f"| {name} | {m['prefill']:.1f} | {m['step']:.2f} | {m['prefill'] / base['prefill']:.2f}× | "
              f"{m['step'] / base['step']:.2f}× | {'yes' if same else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
