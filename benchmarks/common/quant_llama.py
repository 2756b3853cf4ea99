"""The Llama side of bench_quant.py (`--model llama`): ours quantized against onnxruntime-genai's int4 model
builder (`builder.py -p int4 -e cpu`) on one random SmolLM2-135M-shaped checkpoint.

common/decoding.py (bench_llama.py's, issue 13) supplies the checkpoint, onnxruntime-genai's virtual environment and its worker
process (llama_genai.py: onnxruntime-genai brings its own onnxruntime, so it never shares a process or an
environment with ours); this file adds genai's int4 build and the comparison:

  genai int4          the builder's file: its MatMulNBits settings are read from it and printed, so the
                      comparison says which format it is (symmetric int4, blocks of 32, accuracy level 4,
                      the tied embedding shared with lm_head, at 0.18)
  ours, genai's format  --quantize int4 --symmetric --block-size 32 --accuracy-level 4 --quantize-embeddings
  ours, zero points   the same with a zero point per block (more accurate, slightly slower)
  ours int8           8 bits, zero points, level 4

Rounds rotate over all variants after a warm-up round; medians of each round's prefill and median
per-token time. Targets (issue 14): ours ≤ 0.9× genai int4's time per token, file ≤ 1.05× genai's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pseudoformer.passes.quantize import QuantizeOptions

ROOT = Path(__file__).resolve().parents[2]
MB = 1e6
TARGET_STEP, TARGET_FILE = 0.9, 1.05


def genai_build(python: Path, checkpoint: Path, out: Path, log: Path, precision: str = "int4") -> str:
    """onnxruntime-genai's model builder for the CPU at `precision`, run from that package's source with
    this interpreter (the builder needs torch and transformers, which genai's environment lacks)."""
    found = subprocess.run([str(python), "-c", "import onnxruntime_genai, os; "
                            "print(os.path.dirname(onnxruntime_genai.__file__), onnxruntime_genai.__version__)"],
                           check=True, capture_output=True, text=True).stdout.split()
    builder, version = Path(found[0]) / "models", found[1]
    cmd = [sys.executable, str(builder / "builder.py"), "-i", str(checkpoint), "-o", str(out), "-p", precision,
           "-e", "cpu", "-c", str(out / "cache")]
    with open(log, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT,
                       env={**os.environ, "PYTHONPATH": str(builder)})
    return version


def genai_format(model_dir: Path) -> str:
    """What genai's file holds, read from it: its quantized ops and their settings."""
    import onnx

    model = onnx.load(str(model_dir / "model.onnx"), load_external_data=False)
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    settings = {(a.name, a.i) for n in nodes for a in n.attribute if a.name in ("bits", "block_size", "accuracy_level")}
    zero_points = sum(len(n.input) > 3 and bool(n.input[3]) for n in nodes)
    others = sorted({n.op_type for n in model.graph.node if n.op_type in
                     ("GatherBlockQuantized", "Gather", "MatMul", "GroupQueryAttention", "SkipSimplifiedLayerNormalization")})
    return (f"{len(nodes)} MatMulNBits ({', '.join(f'{k} {v}' for k, v in sorted(settings))}; "
            f"{zero_points} with zero points), also {', '.join(others)}")


def file_mb(path: Path) -> float:
    """A model file with its external data (genai's folder holds model.onnx and model.onnx.data)."""
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name)) / MB


MINE = "ours int4, genai's format, --contrib-ops"  # the variant the targets are read on


def variants(block_size: int) -> dict[str, tuple[QuantizeOptions, bool]]:
    """Name → (quantization, contrib_ops): with contrib_ops, GroupQueryAttention over a cache in buffers
    and SkipSimplifiedLayerNormalization, as genai's file has; without, standard ONNX ops."""
    genai_like = QuantizeOptions(bits=4, block_size=block_size, symmetric=True, accuracy_level=4, embeddings=True)
    zero_points = QuantizeOptions(bits=4, block_size=block_size, accuracy_level=4, embeddings=True)
    int8 = QuantizeOptions(bits=8, block_size=block_size, accuracy_level=4, embeddings=True)
    return {MINE: (genai_like, True),
            "ours int4, genai's format": (genai_like, False),
            "ours int4, zero points, --contrib-ops": (zero_points, True),
            "ours int8, zero points, --contrib-ops": (int8, True)}


def speed_part(args: argparse.Namespace, work: Path, checkpoint: Path, vocab: int) -> None:
    """Generation time and file size, ours against genai int4, interleaved."""
    import pseudoformer
    from common.decoding import Genai, genai_venv, generation_rounds
    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load

    python = genai_venv(args.genai_venv)
    built = work / "genai-int4"
    start = time.perf_counter()
    version = genai_build(python, checkpoint, built, work / "builder.log")
    build_s = time.perf_counter() - start
    model = load(args.alg, weights=checkpoint)
    gens, sizes = {}, {"genai int4": file_mb(built / "model.onnx")}
    chosen = variants(args.block_size)
    if args.variants:  # the target's variant is always timed
        chosen = {k: v for k, v in chosen.items() if k == MINE or k in args.variants.split(";")}
    for name, (opts, contrib) in chosen.items():
        gens[name] = Generator(model, backend="onnx", threads=args.threads, quantize=opts, contrib_ops=contrib)
        out = work / "size" / "model.onnx"
        out.parent.mkdir(exist_ok=True)
        pseudoformer.compile(args.alg, weights=checkpoint, quantize=opts, contrib_ops=contrib).save(out)
        sizes[name] = file_mb(out)
        out.unlink()
    genai = Genai(python, built, args.threads)
    prompt = np.random.default_rng(0).integers(3, vocab, size=(1, args.prompt))  # bench_llama's prompt
    greedy = Sampling(temperature=0)

    def ours(name: str):  # noqa: ANN202
        res = gens[name].generate(prompt, max_new_tokens=args.new, sampling=greedy)
        return res.tokens[0], res.prefill_seconds, res.step_seconds

    run = {**{name: (lambda n=name: ours(n)) for name in gens},
           "genai int4": lambda: genai.generate(prompt[0].tolist(), args.new)}
    rows, tokens = generation_rounds(run, args.rounds)
    genai.close()
    med = {k: {m: statistics.median(v) * 1e3 for m, v in d.items()} for k, d in rows.items()}
    g_step, g_file = med["genai int4"]["step"], sizes["genai int4"]
    print(f"## Llama generation against onnxruntime-genai {version} int4 (`-p int4 -e cpu`, built in {build_s:.0f} s): "
          f"prompt {args.prompt}, {args.new} new tokens, greedy, {args.threads} threads, batch 1; {args.rounds} rounds "
          "after a warm-up, rotating, medians")
    print(f"genai's file: {genai_format(built)}")
    print()
    print("| variant | prefill ms | per-token ms | per-token vs genai | file MB | file vs genai |")
    print("|---|---|---|---|---|---|")
    for name in run:
        m = med[name]
        print(f"| {name} | {m['prefill']:.1f} | {m['step']:.2f} | {m['step'] / g_step:.2f}× | {sizes[name]:.1f} | "
              f"{sizes[name] / g_file:.2f}× |")
    mine = MINE
    step_ok = med[mine]["step"] / g_step <= TARGET_STEP
    file_ok = sizes[mine] / g_file <= TARGET_FILE
    print()
    print(f"targets ({mine}): per-token ≤ {TARGET_STEP}× genai: {'met' if step_ok else 'missed'} "
          f"({med[mine]['step'] / g_step:.2f}×); file ≤ {TARGET_FILE}× genai: {'met' if file_ok else 'missed'} "
          f"({sizes[mine] / g_file:.2f}×)")
    same = sum(a == b for a, b in zip(tokens[mine], tokens["genai int4"], strict=False))
    print(f"greedy tokens equal to genai's ({mine}): {same} of {len(tokens[mine])} (the two quantize differently)")
    print()
    if args.profile is not None:  # where a step goes, per op type, ours (the target's variant) beside genai's
        from common.llama_profile import profile_ours, summarize, table

        profiles = {"ours": summarize(profile_ours(gens[mine], prompt, args.profile / "ours", args.new, args.threads))}
        worker = Genai(python, built, args.threads, args.profile / "genai")
        worker.generate(prompt[0].tolist(), args.new)
        worker.close()
        profiles["genai int4"] = summarize(max(args.profile.glob("genai*.json"), key=lambda p: p.stat().st_mtime))
        for part in ("prefill", "step"):
            print(table(profiles, part))
            print()
