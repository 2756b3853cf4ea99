#!/usr/bin/env python3
"""Weight quantization on GPT-2 small (random weights): accuracy against fp32, beside onnxruntime's own
quantizer, and generation speed and file size of int4 and int8.

  accuracy   ours (--quantize int4|int8: balanced, MSE clipping, round to nearest; asymmetric and symmetric,
             with and without the embeddings) and onnxruntime's quantizer on our fp32 .onnx
             (common/quant_variants.py), each run by onnxruntime on the same batches of random token ids,
             compared with the fp32 model's logits
  profile    onnxruntime's time per op type in one decode step, fp32 and int4 (level 4)
  ops        one MatMulNBits by bits, accuracy level and zero points (uint8, none, float as HQQ's)
  speed      the generator (KV cache) on ORT CPU: prefill of a 128-token prompt and the median time per
             token of 32 greedy tokens, fp32 against int8 and int4 at accuracy levels 0 and 4, with and
             without the bias in MatMulNBits and the embeddings quantized; rounds interleave the variants

    python benchmarks/bench_quant.py                       # both parts
    python benchmarks/bench_quant.py --part accuracy       # or speed
    python benchmarks/bench_quant.py --quick               # a tiny GPT-2, a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from common.harness import decode_arguments, machine_summary  # noqa: E402
from common.quant_variants import accuracy, file_bytes, ort_folded, ort_quantized, run_logits  # noqa: E402

from pseudoformer.passes.quantize import QuantizeOptions  # noqa: E402

MB = 1e6


def checkpoint(directory: Path, quick: bool) -> int:
    """A random GPT-2 (HF's initialisation, seed 0) saved as a HuggingFace checkpoint; its vocabulary size."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000) if quick else GPT2Config()
    GPT2LMHeadModel(config).eval().save_pretrained(directory)
    return config.vocab_size


def llama_checkpoint(directory: Path, quick: bool) -> int:
    """bench_llama.py's random Llama (SmolLM2-135M's shape, or a tiny one); its vocabulary size."""
    from common.decoding import SMOLLM2, TINY, make_checkpoint

    make_checkpoint(directory, quick)
    return int((TINY if quick else SMOLLM2)["vocab_size"])


def compile_ours(alg: Path, weights: Path, out: Path, quantize: QuantizeOptions | None) -> float:
    import pseudoformer

    start = time.perf_counter()
    pseudoformer.compile(alg, weights=weights, quantize=quantize).save(out)
    return time.perf_counter() - start


def accuracy_part(args: argparse.Namespace, work: Path, weights: Path, vocab: int) -> None:
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, vocab, (1, args.seq)) for _ in range(args.batches)]
    fp32 = work / "fp32.onnx"
    compile_ours(args.alg, weights, fp32, None)
    reference = run_logits(fp32, batches, None, args.threads)
    folded = ort_folded(fp32, work / "fp32_folded.onnx")
    print(f"## accuracy against fp32: {args.batches} sequences of {args.seq} random tokens, onnxruntime CPU, "
          f"accuracy_level 0, blocks of {args.block_size}")
    print()
    print("| bits | embeddings | quantizer | method | zero points | logit rel. error | max abs error | top-1 "
          "agreement | KL (nats) | file MB | quantize s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| 32 | | fp32 | | | 0 | 0 | 1 | 0 | {file_bytes(fp32) / MB:.1f} | |")
    for bits in args.bits:
        for emb in (False, True):
            rows = [("ours", m, sym) for m, sym in (("balanced", False), ("mse", False), ("rtn", False),
                                                    ("balanced", True), ("rtn", True))]
            rows += [("onnxruntime", "rtn (DEFAULT)", sym) for sym in (False, True)]
            if bits == 4:  # onnxruntime's HQQ quantizes no Gather: with embeddings, the unembedding only
                rows.append(("onnxruntime", "hqq", False))
            for who, method, sym in rows:
                out = work / f"{who}_{bits}_{emb}_{method.split()[0]}_{sym}.onnx"
                start = time.perf_counter()
                if who == "ours":
                    opts = QuantizeOptions(bits=bits, block_size=args.block_size, symmetric=sym, embeddings=emb,
                                           output=emb,
                                           method=method, accuracy_level=0)
                    compile_ours(args.alg, weights, out, opts)
                else:
                    ort_quantized(folded, out, bits=bits, block_size=args.block_size, symmetric=sym,
                                  embeddings=emb, algorithm=method.split()[0].replace("rtn", "default"),
                                  unembedding="W_e")
                seconds = time.perf_counter() - start
                a = accuracy(run_logits(out, batches, None, args.threads), reference)
                zp = "no" if sym else ("float" if method == "hqq" else "yes")
                print(f"| {bits} | {'yes' if emb else 'no'} | {who} | {method} | {zp} | {a.rel_error:.4f} | "
                      f"{a.max_abs:.3f} | {a.top1:.4f} | {a.kl:.2e} | {file_bytes(out) / MB:.1f} | "
                      f"{seconds:.1f} |", flush=True)
                for p in out.parent.glob(out.name + "*"):
                    p.unlink()
    print()
    print("ours at accuracy_level 4 (int8 activations in MatMulNBits), balanced, zero points, embeddings:")
    for bits in args.bits:
        out = work / f"ours_{bits}_l4.onnx"
        compile_ours(args.alg, weights, out, QuantizeOptions(bits=bits, block_size=args.block_size, embeddings=True,
                                                   accuracy_level=4))
        a = accuracy(run_logits(out, batches, None, args.threads), reference)
        print(f"  int{bits}: logit rel. error {a.rel_error:.4f}, top-1 {a.top1:.4f}, KL {a.kl:.2e}")
    print()


def speed_part(args: argparse.Namespace, work: Path, weights: Path, vocab: int) -> None:
    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load

    base = QuantizeOptions(bits=4, block_size=args.block_size, accuracy_level=4, embeddings=True)
    variants: dict[str, QuantizeOptions | None] = {
        "fp32": None,
        "int8, level 4": replace(base, bits=8),
        "int8, level 0": replace(base, bits=8, accuracy_level=0),
        "int4, level 4": base,
        "int4, level 4, symmetric": replace(base, symmetric=True),
        "int4, level 4, no bias in the op": replace(base, bias=False),
        "int4, level 4, embeddings fp32": replace(base, embeddings=False),
        "int4, level 0": replace(base, accuracy_level=0),
        "int4, level 1": replace(base, accuracy_level=1),
    }
    if args.variants:
        variants = {k: v for k, v in variants.items() if k in args.variants.split(";")}
    model = load(args.alg, weights=weights)
    gens, sizes = {}, {}
    for name, opts in variants.items():
        gens[name] = Generator(model, backend="onnx", threads=args.threads, quantize=opts)
        out = work / "size.onnx"
        compile_ours(args.alg, weights, out, opts)
        sizes[name] = file_bytes(out)
        out.unlink()
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
    greedy = Sampling(temperature=0)
    rows: dict[str, dict[str, list[float]]] = {k: {"prefill": [], "step": []} for k in gens}
    for r in range(args.rounds + 1):  # round 0 warms up
        names = list(gens)
        k = r % len(names)
        for name in names[k:] + names[:k]:
            time.sleep(0.2)  # let the previous session's threads stop spinning
            res = gens[name].generate(prompt, max_new_tokens=args.new, sampling=greedy)
            if r:
                rows[name]["prefill"].append(res.prefill_seconds)
                rows[name]["step"].append(statistics.median(res.step_seconds))
    print(f"## generation: prompt {args.prompt}, {args.new} new tokens, greedy, {args.threads} threads, batch 1; "
          f"{args.rounds} rounds after a warm-up, medians")
    print()
    print("| variant | prefill ms | per-token ms | per-token vs fp32 | file MB |")
    print("|---|---|---|---|---|")
    fp = statistics.median(rows["fp32"]["step"]) if "fp32" in rows else None
    for name, r in rows.items():
        step = statistics.median(r["step"])
        ratio = f"{step / fp:.2f}×" if fp else ""
        print(f"| {name} | {statistics.median(r['prefill']) * 1e3:.1f} | {step * 1e3:.2f} | {ratio} | "
              f"{sizes[name] / MB:.1f} |")
    print()


def ops_part(args: argparse.Namespace) -> None:
    """One MatMulNBits (K 768, N 3072: GPT-2's first MLP matrix) by bits, accuracy level and zero-point type."""
    import onnxruntime as ort
    from common.harness import block_medians
    from onnx import TensorProto, helper, numpy_helper

    from pseudoformer.ir.ops.quantized import pack

    k, n, bs = 768, 3072, 32
    rng = np.random.default_rng(0)

    def session(bits: int | None, level: int, zero: str) -> object:
        if bits is None:
            inits = [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "B")]
            node = helper.make_node("MatMul", ["A", "B"], ["Y"])
        else:
            packed, zp = pack(rng.integers(0, 1 << bits, (n, k // bs, bs)), rng.integers(0, 1 << bits, (n, k // bs)),
                              k, bits)
            if zero == "float":
                zp = (rng.random((n, k // bs)) * ((1 << bits) - 1)).astype(np.float32)
            inits = [numpy_helper.from_array(packed, "B"),
                     numpy_helper.from_array(rng.random((n, k // bs)).astype(np.float32), "S")]
            names = ["A", "B", "S"]
            if zero != "none":
                inits.append(numpy_helper.from_array(zp, "Z"))
                names.append("Z")
            node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
                                    block_size=bs, accuracy_level=level)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, "m", k])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                        helper.make_opsetid("com.microsoft", 1)], ir_version=10)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    variants = {"fp32 MatMul": (None, 0, "")}
    for bits in (4, 8):
        for level in (0, 4):
            for zero in ("uint8", "none", "float") if bits == 4 else ("uint8", "none"):  # no 8-bit float zeros
                variants[f"int{bits}, level {level}, zero points {zero}"] = (bits, level, zero)
    sessions = {name: session(*v) for name, v in variants.items()}
    print(f"## one MatMulNBits, K {k}, N {n}, blocks of {bs}, {args.threads} threads: ms per call")
    print()
    print("| variant | M = 1 (a decode step) | M = 128 (a prefill) |")
    print("|---|---|---|")
    times = {}
    for m in (1, 128):
        a = rng.standard_normal((1, m, k)).astype(np.float32)
        times[m] = block_medians({name: (lambda s=s, a=a: s.run(None, {"A": a})) for name, s in sessions.items()},
                                 blocks=5, runs=10 if m == 1 else 3)
    for name in sessions:
        print(f"| {name} | {times[1][name] * 1e3:.3f} | {times[128][name] * 1e3:.2f} |")
    print()


def profile_part(args: argparse.Namespace, work: Path, weights: Path) -> None:
    """onnxruntime's time per op type in one decode step after a prompt of args.prompt tokens."""
    import onnxruntime as ort
    from common.cpu_measure import ops_of_trace

    from pseudoformer.backends.onnx import to_onnx
    from pseudoformer.generation import Generator
    from pseudoformer.model import load

    model = load(args.alg, weights=weights)
    variants = {"fp32": None, "int4, level 4": QuantizeOptions(bits=4, accuracy_level=4, embeddings=True)}
    print(f"## one decode step after {args.prompt} tokens: onnxruntime's time per op type, {args.threads} threads, "
          f"{args.rounds * 10} steps")
    print()
    for name, opts in variants.items():
        gen = Generator(model, backend="onnx", threads=args.threads, quantize=opts)
        dec = gen.decoder
        assert dec is not None
        path = work / f"step-{name.split(',')[0]}.onnx"
        path.write_bytes(to_onnx(dec.step, gen.weights).SerializeToString())
        feed = {"x": np.array([[1]])}
        for s in dec.slots:
            for key, t in ((s.past_key, s.key_type), (s.past_value, s.value_type)):
                shape = [1 if d == "batch" else args.prompt if isinstance(d, str) else d for d in t.shape]
                feed[key] = np.zeros(shape, np.float32)
        step_ms = {}
        for profiling in (False, True):  # the profiler's per-node events slow small nodes most: time without
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
            so.enable_profiling, so.profile_file_prefix = profiling, str(work / f"profile-{path.stem}")
            session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            session.run(None, feed)
            start = time.perf_counter()
            for _ in range(args.rounds * 10):
                session.run(None, feed)
            step_ms[profiling] = (time.perf_counter() - start) / (args.rounds * 10) * 1e3
        prof = ops_of_trace(Path(session.end_profiling()))
        print(f"{name}: {step_ms[False]:.2f} ms a step ({step_ms[True]:.2f} ms profiled, of which "
              f"{prof['kernel_ms']:.2f} ms in kernels)")
        print()
        print("| op | ms | share | nodes |")
        print("|---|---|---|---|")
        for row in prof["ops"][:8]:
            print(f"| {row['op']} | {row['ms']:.3f} | {row['share']:.0%} | {row['nodes']} |")
        print()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["accuracy", "speed", "ops", "profile", "both"], default="both",
                    help="both: accuracy and speed; ops: one MatMulNBits by bits, level and zero points")
    ap.add_argument("--quick", action="store_true", help="a tiny GPT-2: a smoke run")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128, help="accuracy: tokens per sequence")
    ap.add_argument("--batches", type=int, default=4, help="accuracy: sequences")
    decode_arguments(ap)
    ap.add_argument("--variants", help="speed: the variants to time, separated by ';'")
    ap.add_argument("--bits", type=lambda t: [int(b) for b in t.split(",")], default=[4, 8],
                    help="accuracy: the bit widths (default 4,8)")
    ap.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2",
                    help="llama: SmolLM2-135M's shape (common/decoding.py's checkpoint); its speed part is against "
                         "onnxruntime-genai's int4 (common/quant_llama.py)")
    ap.add_argument("--genai-venv", type=Path, default=HERE / ".genai-venv",
                    help="llama: onnxruntime-genai's own environment (made on first use)")
    ap.add_argument("--profile", type=Path, help="llama, speed: also profile ours and genai's int4 (ORT traces here)")
    args = ap.parse_args(argv)
    args.alg = ROOT / "models" / f"{args.model}.alg"
    if args.model == "llama" and args.part in ("ops", "profile"):
        raise SystemExit(f"--part {args.part} is GPT-2's; for the Llama's profile, bench_llama.py --profile")
    if args.quick:
        args.seq, args.batches, args.prompt, args.new, args.rounds = 16, 2, 8, 4, 1

    size = "tiny (--quick)" if args.quick else "small" if args.model == "gpt2" else "SmolLM2-135M-shaped"
    print(f"# bench_quant: {args.model} {size}, random weights (HF init, seed 0)")
    print(f"# {machine_summary()}")
    print()
    if args.part == "ops":
        ops_part(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        weights = work / "hf"
        vocab = checkpoint(weights, args.quick) if args.model == "gpt2" else llama_checkpoint(weights, args.quick)
        if args.part in ("accuracy", "both"):
            accuracy_part(args, work, weights, vocab)
        if args.part in ("speed", "both"):
            if args.model == "gpt2":
                speed_part(args, work, weights, vocab)
            else:
                from common.quant_llama import speed_part as llama_speed

                llama_speed(args, work, weights, vocab)
        if args.part == "profile":
            profile_part(args, work, weights)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
