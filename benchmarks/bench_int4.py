#!/usr/bin/env python3
"""int4 decoding on the CPU: TVM with our kernels (backends/tvm/nbits.py) against onnxruntime's MatMulNBits,
both from the same quantized graph, against the weight-bandwidth floor measured in the same run.

  models     random weights in a shape's hyperparameters, quantized as `--quantize int4 --quantize-embeddings`
             (blocks of 32, zero points, accuracy level 4 for onnxruntime: its fast int8 path; TVM computes in
             float32 whatever the level). Contenders, each a Generator with the key/value cache on 2 threads:
               tvm   --backend tvm (our float32 kernel, nbits.py and nbits_schedule.py)
               tvm8  --backend tvm with int8 activations (nbits_int8.py: level 4's arithmetic, on VNNI)
               ort   --backend onnx --contrib-ops (MatMulNBits, GroupQueryAttention)
               genai onnxruntime-genai's int4 builder output for a random checkpoint of the shape
                     (scale_checkpoints.py; --genai-root ROOT reads ROOT/<rung>/int4, timed by genai_timing.py in
                     the genai venv, one process a round: the same prompt length, not the same weights)
               llamacpp llama.cpp's Q4_0 (llama-cpp-python built from source in its own venv, named by
                     --llamacpp-python or $PSEUDOFORMER_LLAMACPP_PYTHON; skipped, saying why, without one) of
                     genai's checkpoint ROOT/<rung> (written there when missing), converted to GGUF by
                     llamacpp_gguf.py and quantized by llama_model_quantize; timed by llamacpp_timing.py in that
                     venv, one process a round. Its greedy logits are checked against HF's on the same
                     checkpoint (llamacpp_check.py: top-1 agreement, relative error), the BF16 file's as well
             A prompt of 128 random ids and --new greedy tokens; rounds interleave the contenders after a
             warm-up round. Reported: prefill and the median time per token (medians over rounds), and the
             floor: the bytes of weights a step reads (all of them but the tables only gathered from) over
             the bandwidth of a large streaming read (common/decoding.read_bandwidth). Greedy tokens must agree.
  products   each distinct matrix of Qwen2.5-1.5B at one token, and a tall one of small K (2048 × 256): our
             kernels (float32 and int8 activations) and one MatMulNBits (levels 0 and 4), as GB/s of int4 weights
             (codes and scales) against that bandwidth.

--dtype fp32: the same two parts in float32, on SmolLM2's shape: contenders tvm (our decode schedule,
backends/tvm/matvec_schedule.py) and ort (--backend onnx), and where named, tvm-gemm (the GEMM schedule decoding
took before it; with all three, one process peaks at 4.4 GB on SmolLM2); the products are SmolLM2's (common/fp32_products.py), against onnxruntime's MatMul.

Shapes: smollm2 (SmolLM2-135M), qwen0.5b (Qwen2.5-0.5B: 24 layers, d 896, 14/2 heads, d_mlp 4864,
vocabulary 151936), qwen1.5b (Qwen2.5-1.5B: 28 layers, d 1536, 12/2 heads, d_mlp 8960; 6 GB of random
float32 weights before quantization). With --checkpoints ROOT, ours are built from ROOT/<rung>, a bf16
checkpoint of the shape (scale_checkpoints.py; genai's folder is built from the same one), read and
quantized a tensor at a time: the float32 model is never held whole (backends/tvm/weight_values.py).

    python benchmarks/bench_int4.py                          # both parts, every shape
    python benchmarks/bench_int4.py --shapes smollm2 --part models
    python benchmarks/bench_int4.py --dtype fp32 --shapes smollm2
    python benchmarks/bench_int4.py --quick                  # a tiny Llama and small products: a smoke run
    python benchmarks/bench_int4.py --part models --shapes qwen0.5b --checkpoints ROOT --genai-root ROOT \
        --quantize-method rtn                                # ROOT/Qwen2.5-0.5B and ROOT/Qwen2.5-0.5B/int4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from common.decoding import SHAPES  # noqa: E402
from common.harness import block_medians as harness_block_medians  # noqa: E402
from common.harness import decode_arguments, decode_flags, machine_summary, round_robin  # noqa: E402

# (N, K) of each distinct product of Qwen2.5-1.5B: q, k and v, o, gate and up, down, the unembedding
PRODUCTS = {"q, o": (1536, 1536), "k, v": (256, 1536), "gate, up": (8960, 1536), "down": (1536, 8960),
            "unembedding": (151936, 1536),
            "tall, small K": (2048, 256)}  # not the 1.5B's: a 256 KB product that runs on one thread (parallel_gate)
QUICK_PRODUCTS = {"small": (256, 512), "tall": (2048, 256)}


def step_bytes(graph: object) -> int:
    """Bytes of weights a decode step reads: every weight but the tables only gathered from (one row each),
    from the parameters' types (a generator may have released its arrays). A table gathered through a
    transpose (x = W_e[:, token] in the paper's notation) counts as gathered: compiling folds the transpose."""
    import math

    from pseudoformer.ir.ops import Op

    users: dict[int, list[Any]] = {}
    for n in graph.nodes():  # type: ignore[attr-defined]
        for s in n.src:
            users.setdefault(id(s), []).append(n)

    def gathered(node: Any) -> bool:
        uses = users.get(id(node), [])
        return bool(uses) and all(u.op in (Op.GATHER, Op.GATHER_NBITS) or (u.op is Op.TRANSPOSE and gathered(u))
                                  for u in uses)

    sizes = {s.attrs["name"]: np.dtype(s.dtype.value).itemsize * math.prod(int(d) for d in s.shape)
             for n in graph.nodes() for s in n.src  # type: ignore[attr-defined]
             if s.op is Op.PARAM and not gathered(s)}
    return sum(sizes.values())


RUNGS = {"smollm2": "SmolLM2-135M", "qwen0.5b": "Qwen2.5-0.5B", "qwen1.5b": "Qwen2.5-1.5B",  # genai's folders
         "tiny": "tiny-llama"}
CONTENDERS = ("tvm", "tvm8", "ort", "genai", "llamacpp")
LLAMACPP_ENV = "PSEUDOFORMER_LLAMACPP_PYTHON"
FP32_CONTENDERS = ("tvm", "tvm-gemm", "ort")


def models_part(args: argparse.Namespace, bandwidth: float) -> None:
    from pseudoformer.passes.quantize import QuantizeOptions

    opts = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=4,
                           method=args.quantize_method) if args.dtype == "int4" else None
    kind = "int4 (blocks of 32, zero points, embeddings too)" if opts else "float32"
    print(f"## per token and prefill of {args.prompt}, {kind}, "
          f"{args.threads} threads, {args.new} new tokens, medians of {args.rounds} rounds")
    print()
    print("| shape | weights read per step | floor | contender | per token (× floor) | ÷ ORT | ÷ genai | "
          "prefill | ÷ ORT | ÷ genai |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    notes: list[str] = []
    for shape in args.shapes:
        rows, shape_notes = time_shape(shape, args, opts, bandwidth)
        for row in rows:
            print(row, flush=True)
        notes += shape_notes
    print()
    for note in notes:
        print(note)
    print()


def _genai_call(folder: Path, args: argparse.Namespace, vocab: int) -> Callable[[], dict[str, Any]]:
    """One round of genai_timing.py in the genai venv (a warm-up generation, then one timed)."""
    def call() -> dict[str, Any]:
        out = subprocess.run([str(args.genai_python), str(HERE / "genai_timing.py"), str(folder),
                              *decode_flags(args, rounds=1), "--vocab", str(vocab)], capture_output=True, text=True,
                             check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    return call


def time_shape(shape: str, args: argparse.Namespace, opts: object, bandwidth: float) -> tuple[list[str], list[str]]:
    """The rows of one shape, each contender generating on the same prompt length, rounds interleaved; and
    notes for below the table (llama.cpp's check against HF, or why it did not run)."""
    from common.llamacpp_bench import LlamaCpp, skip_reason

    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load

    path, defines = SHAPES[shape]
    vocab = int(dict(d.split("=") for d in defines)["N_V"])
    checkpoint = args.checkpoints / RUNGS.get(shape, "-") if args.checkpoints else None
    if checkpoint is not None and (checkpoint / "config.json").exists():
        # the bf16 checkpoint read a tensor at a time: each contender quantizes it as it makes its weights
        model = load(ROOT / path, weights=checkpoint, lazy_weights=True)
        assert model.graph.meta["hyperparameters"]["N_V"] == vocab, checkpoint
    else:
        model = load(ROOT / path, defines=defines, seed=0)
    makers = fp32_makers(model, args.threads) if opts is None else {
              "tvm": lambda: Generator(model, backend="tvm", quantize=opts),  # threads: TVM_NUM_THREADS (main)
              "tvm8": lambda: Generator(model, backend="tvm", quantize=opts, int8_activations=True),
              # last, and releasing the float32 weights once its files are written: one copy fewer held
              "ort": lambda: Generator(model, backend="onnx", quantize=opts, contrib_ops=True, threads=args.threads,
                                       keep_weights=False)}
    gens = {name: make() for name, make in makers.items() if name in args.contenders}
    model.weights.clear()  # each generator holds what it runs: the float32 weights (2 GB for qwen0.5b) can go
    read = step_bytes(next(iter(gens.values())).decoder.step) if gens else None
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
    greedy = Sampling(temperature=0)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in (*CONTENDERS, *FP32_CONTENDERS)}

    def ours(name: str) -> None:
        g = gens[name].generate(prompt, max_new_tokens=args.new, sampling=greedy)
        runs[name].append((g.prefill_seconds, statistics.median(g.step_seconds)))

    calls: dict[str, Callable[[], None]] = {name: (lambda n=name: ours(n)) for name in gens}
    folder = args.genai_root / RUNGS.get(shape, "-") / "int4" if args.genai_root else None
    if "genai" in args.contenders and folder is not None and (folder / "genai_config.json").exists():
        genai = _genai_call(folder, args, vocab)

        def timed_genai() -> None:
            out = genai()
            runs["genai"].append((out["prefill_s"][0], out["step_s"][0]))
        calls["genai"] = timed_genai
    notes = []
    llamacpp = None
    if "llamacpp" in args.contenders:
        reason = skip_reason(args)
        if reason:
            notes.append(f"llamacpp skipped: {reason}")
        else:
            llamacpp = LlamaCpp(args, shape, RUNGS[shape], vocab)

            def timed_llamacpp() -> None:
                out = llamacpp.time_round()  # type: ignore[union-attr]
                runs["llamacpp"].append((out["prefill_s"][0], out["step_s"][0]))
            calls["llamacpp"] = timed_llamacpp
    round_robin(calls, reps=args.rounds, gap_s=0.3)
    if llamacpp is not None:
        notes += llamacpp.check_against_hf()
    step = {n: statistics.median(t[1] for t in rs[-args.rounds:]) for n, rs in runs.items() if rs}
    pre = {n: statistics.median(t[0] for t in rs[-args.rounds:]) for n, rs in runs.items() if rs}
    floor = read / bandwidth if read else float("nan")

    def ratio(d: dict[str, float], n: str, other: str) -> str:
        return f"{d[n] / d[other]:.2f}" if other in d and n != other else ""

    rows = []
    for n in dict.fromkeys((*CONTENDERS, *FP32_CONTENDERS)):
        if n not in step:
            continue
        rows.append(f"| {shape} | {(read or float('nan')) / 1e6:.0f} MB | {floor * 1e3:.2f} ms | {n} | {step[n] * 1e3:.2f} ms "
                    f"({step[n] / floor:.1f}×) | {ratio(step, n, 'ort')} | {ratio(step, n, 'genai')} | "
                    f"{pre[n] * 1e3:.0f} ms | {ratio(pre, n, 'ort')} | {ratio(pre, n, 'genai')} |")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"<!-- {shape}: peak RSS of this process {rss:.1f} GB -->")
    return rows, notes


def fp32_makers(model: Any, threads: int) -> dict[str, Callable[[], Any]]:
    """The float32 contenders: TVM with the decode schedule, TVM with GEMM's at every size (matvec_schedule's
    DECODE_ROWS at 0 while it compiles: the code before the decode schedule), onnxruntime."""
    from pseudoformer.backends.tvm import matvec_schedule
    from pseudoformer.generation import Generator

    def gemm_only() -> Any:
        rows, matvec_schedule.DECODE_ROWS = matvec_schedule.DECODE_ROWS, 0
        try:
            return Generator(model, backend="tvm")
        finally:
            matvec_schedule.DECODE_ROWS = rows
    return {"tvm": lambda: Generator(model, backend="tvm"), "tvm-gemm": gemm_only,
            "ort": lambda: Generator(model, backend="onnx", threads=threads, keep_weights=False)}


def _ort_matmulnbits(n: int, k: int, level: int, operands: list[np.ndarray], threads: int) -> object:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from pseudoformer.ir.ops.quantized import _unpack_nibbles

    packed, scales = operands[0], operands[1]
    half = packed.shape[-1]  # back from our nibble order to onnxruntime's: the same weights
    codes = np.concatenate([packed & 15, packed >> 4], axis=-1)
    ort_packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    assert (_unpack_nibbles(ort_packed)[..., :half] == (packed & 15)).all()
    inits = [numpy_helper.from_array(ort_packed, "B"), numpy_helper.from_array(scales, "S")]
    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=32, accuracy_level=level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def block_medians(calls: dict[str, Callable[[], object]], *, blocks: int, runs: int) -> dict[str, float]:
    """The harness's block_medians with a pause before each block: onnxruntime's worker threads spin on after
    its runs and take the cores TVM's pool is waiting for."""
    return harness_block_medians(calls, blocks=blocks, runs=runs, gap_s=0.3)


def int8_product(shape: Any, ops: list[np.ndarray], x: np.ndarray, target: Any) -> Callable[[], None]:
    """nbits_int8's kernel for one product, checked against numpy's emulation: a call of it (the activations'
    quantization, a per-token pass over K elements, is left out: the product's weights are what is timed)."""
    import tvm

    from pseudoformer.backends.tvm import nbits_int8 as q8

    kb, n16 = shape.k // shape.block_size, -(-shape.n // q8.ROWS)
    f = tvm.compile(tvm.IRModule({"main": q8.matmul_int8_func(n16, kb, shape.block_size, q8.isa(target))}),
                    target=target)["main"]
    xq, xs, xsum = q8.quantize_x_reference(x, shape.block_size)
    weights = [q8.rows16_codes(ops[0]), q8.rows16_scales(ops[1]), q8.rows16_zero_points(None, shape.n, kb)]
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in [xq, xs, xsum, *weights, np.zeros((1, n16 * q8.ROWS), np.float32)]]
    f(*args)
    rows = min(shape.n, 2048)  # checked on the first rows: W in float64 would be 1.9 GB for the unembedding
    want = (xq.reshape(1, kb, -1) * xs[..., None]).reshape(1, -1).astype(np.float64) @ q8_dequantized(ops, rows).T
    assert np.abs(args[-1].numpy()[:, :rows] - want).max() <= 1e-5 * np.abs(want).max()
    return lambda: f(*args)


def q8_dequantized(ops: list[np.ndarray], rows: int) -> np.ndarray:
    """The first `rows` rows of W [N, K] from symmetric Q4_0-ordered codes and scales, in float64."""
    packed, scales = ops[0][:rows], ops[1][:rows]
    codes = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.float64) - 8
    return (codes * scales[..., None]).reshape(rows, -1)


def products_part(args: argparse.Namespace, bandwidth: float) -> None:
    import tvm

    from pseudoformer.backends.tvm.build import make_target
    from pseudoformer.backends.tvm.nbits_kernel import Shape, build, random_operands

    target = make_target("llvm")
    products = QUICK_PRODUCTS if args.quick else PRODUCTS
    print(f"## one product at one token, int4 in blocks of 32, symmetric, {args.threads} threads "
          f"(TVM: TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}); GB/s of weights read and % of "
          f"{bandwidth / 1e9:.1f} GB/s")
    print()
    print("| product | N × K | weights | TVM float32 (ours) | TVM int8 activations (ours) | ORT level 0 | ORT level 4 |")
    print("|---|---|---|---|---|---|---|")
    dev = tvm.cpu()
    for name, (n, k) in products.items():
        shape = Shape(n, k)
        ops, w = random_operands(shape)
        x = np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)
        lib = build(shape, target)
        targs = [tvm.runtime.tensor(a, dev) for a in [x, *ops, np.zeros((1, n), np.float32)]]
        lib["main"](*targs)
        want = x.astype(np.float64) @ w.T
        assert np.abs(targs[-1].numpy() - want).max() <= 1e-4 * np.abs(want).max(), name
        sessions = {lv: _ort_matmulnbits(n, k, lv, ops, args.threads) for lv in (0, 4)}
        int8 = int8_product(shape, ops, x, target)
        calls = {"tvm": lambda f=lib["main"], a=targs: f(*a), "tvm8": int8,
                 **{f"ort{lv}": (lambda s=s, x=x: s.run(None, {"A": x})) for lv, s in sessions.items()}}
        times = block_medians(calls, blocks=5, runs=20 if n * k < 5e7 else 5)
        cells = [f"{times[c] * 1e3:.3f} ms, {shape.weight_bytes / times[c] / 1e9:.1f} GB/s "
                 f"({100 * shape.weight_bytes / times[c] / bandwidth:.0f} %)" for c in ("tvm", "tvm8", "ort0", "ort4")]
        print(f"| {name} | {n} × {k} | {shape.weight_bytes / 1e6:.1f} MB | " + " | ".join(cells) + " |")
    print()


def measured_bandwidth(threads: int) -> float:
    """common/decoding.py's read_bandwidth in a process of its own: its 512 MB arrays and onnxruntime session (3 GB at
    their peak, some of it kept by the allocators after) leave with it, not in the peak of the models' builds."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); from common.decoding import read_bandwidth; " \
           f"print(read_bandwidth({threads}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["models", "products", "both"], default="both")
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["smollm2", "qwen0.5b", "qwen1.5b"])
    decode_arguments(ap, new=16, rounds=4)
    ap.add_argument("--dtype", choices=["int4", "fp32"], default="int4",
                    help="fp32: float32 weights (SmolLM2's products; contenders tvm and ort, tvm-gemm if named)")
    ap.add_argument("--contenders", nargs="+", choices=[*CONTENDERS, "tvm-gemm"], default=None,
                    help="a subset, for shapes whose contenders do not fit one process's memory together")
    ap.add_argument("--genai-root", type=Path, help="ROOT/<rung>/int4: genai's int4 builder output per shape; "
                    "ROOT/<rung>: its random HF checkpoint, which llama.cpp's files are made from (written when "
                    "missing) and kept beside it")
    ap.add_argument("--checkpoints", type=Path, help="ROOT/<rung>: a bf16 checkpoint per shape (scale_checkpoints.py) "
                    "that ours are built from, a tensor at a time (else random float32 weights in memory)")
    ap.add_argument("--quantize-method", choices=["balanced", "mse", "rtn"], default="balanced",
                    help="how ours choose codes (timing does not depend on it; rtn builds the large shapes ~10× sooner)")
    ap.add_argument("--genai-python", type=Path, default=Path("/work/genai-venv/bin/python"),
                    help="the interpreter of onnxruntime-genai's own venv")
    ap.add_argument("--llamacpp-python", type=Path, default=os.environ.get(LLAMACPP_ENV) or None,
                    help=f"the interpreter of llama-cpp-python's own venv (default ${LLAMACPP_ENV}; none: "
                    "llamacpp is skipped)")
    ap.add_argument("--llamacpp-pure", action="store_true", help="llama.cpp's unembedding Q4_0 as well (its "
                    "Q4_0 keeps the tied embedding, the unembedding here, at Q6_K)")
    ap.add_argument("--llamacpp-threads", type=int, help="llama.cpp's n_threads and n_threads_batch (default "
                    "--threads): on a loaded machine its 2-thread barriers wait for descheduled threads")
    ap.add_argument("--quick", action="store_true", help="the tiny Llama, small products, short prompt: a smoke run")
    args = ap.parse_args(argv)
    if args.contenders is None:
        # tvm-gemm is asked for by name: the three float32 generators of SmolLM2 together peak at 4.4 GB
        args.contenders = ["tvm", "ort"] if args.dtype == "fp32" else list(CONTENDERS)
    if args.quick:
        args.shapes, args.prompt, args.new, args.rounds = ["tiny"], 16, 4, 2
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM starts its pool (build.py keeps a set value)
    print(f"# bench_int4 on {machine_summary()}")
    bandwidth = measured_bandwidth(args.threads)
    print(f"# streaming read bandwidth: {bandwidth / 1e9:.1f} GB/s (common/decoding.read_bandwidth, {args.threads} threads)")
    print()
    if args.part in ("products", "both"):
        if args.dtype == "fp32":
            from common.fp32_products import products_part as fp32_products

            fp32_products(args, bandwidth, block_medians)
        else:
            products_part(args, bandwidth)
    if args.part in ("models", "both"):
        models_part(args, bandwidth)
    print(f"# done; load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
