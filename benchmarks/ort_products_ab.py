"""The training step's matrix products on onnxruntime's CPU provider (MLAS), each written several ways: every
formulation a session of its own over the same operands, interleaved in one process with the same threads, the
order rotating, several rounds; the median time, GFLOP/s (2·M·K·N over it) and the median of each round's ratio
to the step's present form.

    python benchmarks/ort_products_ab.py [--products wgrad,logits,dx] [--rounds 7] [--threads 2] [--quick]

Products (GPT-2 small's widths, batch 8, ℓ = 128, so B·ℓ = 1024 rows):
  wgrad   a weight's gradient flatten(a)ᵀ flatten(c), a [B, ℓ, k], c [B, ℓ, n], for (k, n) of the unembedding
          and the layers' weights; the step writes it as Transpose + MatMul, which onnxruntime fuses into
          FusedMatMul(transA)
  logits  the unembedding X · W, X [B, ℓ, d_e], W [d_e, N_V]; and X at positions 0…ℓ−2 only (what the loss reads)
  dx      the input gradients dY · Wᵀ (the logits', and a layer's), which onnxruntime fuses into FusedMatMul(transB)

Each session's optimised graph is printed (its op types), so that a formulation is known to run as written, not
fused back into another; each output is checked against numpy's float64 product.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common.harness import common_arguments, machine_summary, round_robin  # noqa: E402

B, ELL, D, V = 8, 128, 768, 50257
# (k, n) of each weight's gradient in GPT-2 small: the unembedding [d_e, N_V], the MLP's two, q/k/v packed, the
# attention's output
WGRAD = [(D, V), (3072, D), (D, 3072), (D, 2304), (D, D)]
QUICK_WGRAD = [(64, 1000), (96, 64)]


def _value(name: str, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _ints(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], list(values))


class Variant:
    """One formulation: its ONNX nodes from the inputs to "out", and the optimisers its session turns off."""

    def __init__(self, nodes: list[onnx.NodeProto], inits: Sequence[onnx.TensorProto] = (),
                 disabled: Sequence[str] = (), transposed_out: bool = False) -> None:
        self.nodes, self.inits, self.disabled, self.transposed_out = nodes, list(inits), list(disabled), transposed_out


def node(op: str, ins: Sequence[str], out: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, list(ins), [out], **attrs)


def wgrad_variants() -> dict[str, Variant]:
    """g = flatten(a)ᵀ flatten(c): [k, n] (or gᵀ [n, k] where said)."""
    flat = [node("Flatten", ["a"], "a2", axis=2), node("Flatten", ["c"], "c2", axis=2)]
    return {
        "now: Transpose+MatMul → FusedMatMul(transA)": Variant(
            [*flat, node("Transpose", ["a2"], "at", perm=[1, 0]), node("MatMul", ["at", "c2"], "out")]),
        "Transpose(a,[2,0,1]) → Flatten → MatMul": Variant(
            [node("Transpose", ["a"], "at3", perm=[2, 0, 1]), node("Flatten", ["at3"], "at", axis=1), flat[1],
             node("MatMul", ["at", "c2"], "out")]),
        "Flatten → Transpose → MatMul, fusion off": Variant(
            [*flat, node("Transpose", ["a2"], "at", perm=[1, 0]), node("MatMul", ["at", "c2"], "out")],
            disabled=["MatmulTransposeFusion"]),
        "Gemm(transA)": Variant([*flat, node("Gemm", ["a2", "c2"], "out", transA=1)]),
        "(cᵀa)ᵀ: Transpose c → MatMul → Transpose": Variant(
            [node("Transpose", ["c"], "ct3", perm=[2, 0, 1]), node("Flatten", ["ct3"], "ct", axis=1), flat[0],
             node("MatMul", ["ct", "a2"], "gt"), node("Transpose", ["gt"], "out", perm=[1, 0])]),
        "cᵀa alone (a Wᵀ layout) → [n, k]": Variant(
            [node("Transpose", ["c"], "ct3", perm=[2, 0, 1]), node("Flatten", ["ct3"], "ct", axis=1), flat[0],
             node("MatMul", ["ct", "a2"], "out")], transposed_out=True),
    }


def logits_variants() -> dict[str, Variant]:
    """X · W, X [B, ℓ, d], W [d, V]."""
    return {
        "now: MatMul [B, ℓ, d]": Variant([node("MatMul", ["a", "w"], "out")]),
        "Flatten → MatMul [B·ℓ, d]": Variant([node("Flatten", ["a"], "a2", axis=2), node("MatMul", ["a2", "w"], "out")]),
        "Flatten → Gemm": Variant([node("Flatten", ["a"], "a2", axis=2), node("Gemm", ["a2", "w"], "out")]),
        "positions 0…ℓ−2 only": Variant(
            [node("Slice", ["a", "s0", "s1", "s2"], "as"), node("MatMul", ["as", "w"], "out")],
            inits=[_ints("s0", [0]), _ints("s1", [-1]), _ints("s2", [1])]),
    }


def dx_variants() -> dict[str, Variant]:
    """dY · Wᵀ, dY [B, ℓ, n], W [k, n]."""
    return {
        "now: MatMul(dY, Transpose W) → FusedMatMul(transB)": Variant(
            [node("Transpose", ["w"], "wt", perm=[1, 0]), node("MatMul", ["a", "wt"], "out")]),
        "Flatten → Gemm(transB)": Variant([node("Flatten", ["a"], "a2", axis=2), node("Gemm", ["a2", "w"], "out", transB=1)]),
        "Transpose W → MatMul, fusion off": Variant(
            [node("Transpose", ["w"], "wt", perm=[1, 0]), node("MatMul", ["a", "wt"], "out")],
            disabled=["MatmulTransposeFusion"]),
    }


def session(variant: Variant, inputs: dict[str, np.ndarray], threads: int, workdir: str) -> tuple[object, list[str]]:
    """The variant's session (graph optimisations on, as the step's) and its optimised graph's op types."""
    import onnxruntime as ort

    graph = helper.make_graph(variant.nodes, "p", [_value(k, v.shape) for k, v in inputs.items()],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], variant.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    optimized = os.path.join(workdir, f"opt{id(variant)}.onnx")
    options.optimized_model_filepath = optimized
    s = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=variant.disabled or None)
    ops = [f"{n.op_type}{_trans(n)}" for n in onnx.load(optimized).graph.node]
    return s, ops


def _trans(n: onnx.NodeProto) -> str:
    flags = [a.name for a in n.attribute if a.name in ("transA", "transB") and a.i]
    return f"({','.join(flags)})" if flags else ""


def compare(title: str, variants: dict[str, Variant], inputs: dict[str, np.ndarray], want: np.ndarray,
            flops: Callable[[str], float], args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        calls, ops = {}, {}
        for name, v in variants.items():
            s, ops[name] = session(v, inputs, args.threads, tmp)
            got = s.run(None, inputs)[0]  # type: ignore[attr-defined]
            ref = want.T if v.transposed_out else want
            if name.startswith("positions"):
                ref = ref[:, :-1]
            got = got.reshape(ref.shape)  # a flattened product: [B·ℓ, n] for [B, ℓ, n]
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            assert err < 1e-4, (title, name, err)
            calls[name] = lambda s=s: s.run(None, inputs)  # type: ignore[attr-defined]
        times = round_robin(calls, reps=args.rounds, warmup=1)
    base = next(iter(variants))
    print(f"### {title}\n")
    print("| formulation | as onnxruntime runs it | median ms | min ms | GFLOP/s (median) | ÷ now (median of rounds) |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, times[base], strict=True))
        med = statistics.median(ts)
        print(f"| {name} | {' '.join(ops[name])} | {med * 1e3:.1f} | {min(ts) * 1e3:.1f} | "
              f"{flops(name) / med / 1e9:.0f} | {ratio:.3f} |")
    print(f"\n({machine_summary()})\n", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--products", default="wgrad,logits,dx")
    ap.add_argument("--rounds", type=int, default=7)
    common_arguments(ap)
    ap.add_argument("--quick", action="store_true", help="small shapes, 2 rounds: the smoke test")
    args = ap.parse_args(argv)
    b, ell, d, v = (2, 16, 64, 1000) if args.quick else (B, ELL, D, V)
    if args.quick:
        args.rounds = 2
    rng = np.random.default_rng(0)
    print(f"# onnxruntime's products, {args.threads} threads, {args.rounds} rounds\n\n({machine_summary()})\n")
    products = args.products.split(",")
    if "wgrad" in products:
        for k, n in QUICK_WGRAD if args.quick else WGRAD:
            a = rng.standard_normal((b, ell, k), np.float32)
            c = rng.standard_normal((b, ell, n), np.float32)
            want = (a.reshape(-1, k).astype(np.float64).T @ c.reshape(-1, n)).astype(np.float32)
            compare(f"weight gradient [{b * ell}, {k}]ᵀ · [{b * ell}, {n}] → [{k}, {n}]", wgrad_variants(),
                    {"a": a, "c": c}, want, lambda _, k=k, n=n: 2.0 * b * ell * k * n, args)
    if "logits" in products:
        a = rng.standard_normal((b, ell, d), np.float32)
        w = rng.standard_normal((d, v), np.float32)
        want = (a.astype(np.float64) @ w).astype(np.float32)
        compare(f"logits [{b}, {ell}, {d}] · [{d}, {v}]", logits_variants(), {"a": a, "w": w}, want,
                lambda name: 2.0 * b * (ell - name.startswith("positions")) * d * v, args)
    if "dx" in products:
        for k, n in ((d, v), (d, 4 * d)):
            a = rng.standard_normal((b, ell, n), np.float32)
            w = rng.standard_normal((k, n), np.float32)
            want = (a.astype(np.float64) @ w.T).astype(np.float32)
            compare(f"input gradient [{b}, {ell}, {n}] · [{k}, {n}]ᵀ", dx_variants(), {"a": a, "w": w}, want,
                    lambda _, k=k, n=n: 2.0 * b * ell * k * n, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
