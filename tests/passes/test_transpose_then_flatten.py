"""passes/rules/transpose_then_flatten.py: flatten(x)ᵀ y → flatten(transpose(x)) y for a wide product, as
Before/Expected IR text (alone, and after the weight-gradient fold), its refusals, and what onnxruntime makes of
each form: FusedMatMul with transA before, a Transpose and a plain MatMul after."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from pseudoformer import ir
from pseudoformer.backends.onnx import to_onnx
from pseudoformer.passes.manager import run_passes
from pseudoformer.passes.training_step import fold_batched_gradients, transpose_rows_first
from tests.passes.ir_text import check_rewrite, text

BEFORE = """
    graph g(x: float32[batch, seq, 3], y: float32[batch, seq, 8192]) -> (z: float32[3, 8192])
      %1 = flatten %x {axis=2} : float32[batch*seq, 3]
      %2 = transpose %1 {perm=[1, 0]} : float32[3, batch*seq]
      %3 = flatten %y {axis=2} : float32[batch*seq, 8192]
      %4 = matmul %2, %3 : float32[3, 8192]
      return z = %4
"""
AFTER = """
    graph g(x: float32[batch, seq, 3], y: float32[batch, seq, 8192]) -> (z: float32[3, 8192])
      %1 = transpose %x {perm=[2, 0, 1]} : float32[3, batch, seq]
      %2 = flatten %1 {axis=1} : float32[3, batch*seq]
      %3 = flatten %y {axis=2} : float32[batch*seq, 8192]
      %4 = matmul %2, %3 : float32[3, 8192]
      return z = %4
"""
# a weight's gradient over the batch as the VJP writes it: Σ_b a_bᵀ c_b
GRADIENT = """
    graph grad(a: float32[batch, seq, A], c: float32[batch, seq, C]) -> (g: float32[A, C])
      %1 = transpose %a {perm=[0, 2, 1]} : float32[batch, A, seq]
      %2 = matmul %1, %c : float32[batch, A, C]
      %3 = reduce_sum %2 {axes=[0], keepdims=false} : float32[A, C]
      return g = %3
"""
WIDE = 8192


def test_the_rows_are_transposed_before_they_are_flattened() -> None:
    check_rewrite(transpose_rows_first, BEFORE, AFTER, tol=1e-5)


def test_a_folded_weight_gradient_transposes_its_rows_first() -> None:
    """Both rules of the training step in order, as its pipeline runs them: one product over the B·ℓ rows, whose
    left operand is one Transpose of a (the transposed product of a weight read transposed likewise, of c)."""
    both = lambda g: _both(g)  # noqa: E731
    check_rewrite(both, GRADIENT.replace("A", "3").replace("C", str(WIDE)), f"""
        graph grad(a: float32[batch, seq, 3], c: float32[batch, seq, {WIDE}]) -> (g: float32[3, {WIDE}])
          %1 = transpose %a {{perm=[2, 0, 1]}} : float32[3, batch, seq]
          %2 = flatten %1 {{axis=1}} : float32[3, batch*seq]
          %3 = flatten %c {{axis=2}} : float32[batch*seq, {WIDE}]
          %4 = matmul %2, %3 : float32[3, {WIDE}]
          return g = %4
    """, tol=1e-5)
    read_transposed = GRADIENT.replace("A", str(WIDE)).replace("C", "4").replace(
        f"-> (g: float32[{WIDE}, 4])", f"-> (g: float32[4, {WIDE}])").replace(
        "return g = %3", f"%4 = transpose %3 {{perm=[1, 0]}} : float32[4, {WIDE}]\n      return g = %4")
    check_rewrite(both, read_transposed, f"""
        graph grad(a: float32[batch, seq, {WIDE}], c: float32[batch, seq, 4]) -> (g: float32[4, {WIDE}])
          %1 = transpose %c {{perm=[2, 0, 1]}} : float32[4, batch, seq]
          %2 = flatten %1 {{axis=1}} : float32[4, batch*seq]
          %3 = flatten %a {{axis=2}} : float32[batch*seq, {WIDE}]
          %4 = matmul %2, %3 : float32[4, {WIDE}]
          return g = %4
    """, tol=1e-5)


def test_a_narrow_product_keeps_its_transposed_a() -> None:
    """A layer's weight (columns below MIN_COLUMNS): FusedMatMul(transA) re-copies A only a few times."""
    g = run_passes(ir.parse(GRADIENT.replace("A", "3").replace("C", "4")), [fold_batched_gradients])
    out, changed = transpose_rows_first(g, refusals := [])
    assert not changed and text(out) == text(g)
    assert [(r[0], "fewer than 8192" in r[1]) for r in refusals] == [("transpose_then_flatten", True)]


def _both(g: ir.Graph) -> tuple[ir.Graph, bool]:
    out = run_passes(g, [fold_batched_gradients, transpose_rows_first])
    return out, text(out) != text(g)


def test_transposed_rows_read_elsewhere_are_refused() -> None:
    g = ir.parse(BEFORE.replace(f"-> (z: float32[3, {WIDE}])", f"-> (z: float32[3, {WIDE}], t: float32[3, batch*seq])")
                 .replace("return z = %4", "return z = %4, t = %2"))
    out, changed = transpose_rows_first(g, refusals := [])
    assert not changed and text(out) == text(g)
    assert [(r[0], "copy x twice" in r[1]) for r in refusals] == [("transpose_then_flatten", True)]


def test_other_transposed_products_are_left_alone() -> None:
    """A matrix transposed as it is (no flatten to undo), and a flatten that keeps a row axis apart."""
    for before in ("""
        graph g(x: float32[5, 3], y: float32[5, 4]) -> (z: float32[3, 4])
          %1 = transpose %x {perm=[1, 0]} : float32[3, 5]
          %2 = matmul %1, %y : float32[3, 4]
          return z = %2
    """, """
        graph g(x: float32[batch, seq, 3], y: float32[batch, 4]) -> (z: float32[seq*3, 4])
          %1 = flatten %x {axis=1} : float32[batch, seq*3]
          %2 = transpose %1 {perm=[1, 0]} : float32[seq*3, batch]
          %3 = matmul %2, %y : float32[seq*3, 4]
          return z = %3
    """):
        g = ir.parse(before)
        out, changed = transpose_rows_first(g, refusals := [])
        assert not changed and not refusals and text(out) == text(g)


def _ort_ops(graph: ir.Graph) -> list[str]:
    """The op types of the graph's ONNX model after onnxruntime's graph optimizations, with FusedMatMul's flags."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(to_onnx(graph, {}).SerializeToString(), options, providers=["CPUExecutionProvider"])
        nodes = onnx.load(options.optimized_model_filepath).graph.node
    return [n.op_type + "".join(f"({a.name})" for a in n.attribute if a.name in ("transA", "transB") and a.i)
            for n in nodes]


def test_onnxruntime_runs_a_transpose_and_a_matmul_not_a_transposed_a() -> None:
    """The point of the rule: before it, onnxruntime fuses the Transpose into FusedMatMul(transA) (MLAS then
    transposes A for every block of B's columns); after it, the Transpose is a node of its own and the product a
    MatMul. Both give the interpreter's values."""
    before, after = ir.parse(BEFORE), transpose_rows_first(ir.parse(BEFORE))[0]
    assert "FusedMatMul(transA)" in _ort_ops(before)
    ops = _ort_ops(after)
    assert "MatMul" in ops and "Transpose" in ops and not [o for o in ops if o.startswith("FusedMatMul")]
    import onnxruntime as ort

    from pseudoformer.ir.interpreter import run

    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((2, 5, 3), np.float32), "y": rng.standard_normal((2, 5, WIDE), np.float32)}
    want = run(before, feed, {})["z"]
    session = ort.InferenceSession(to_onnx(after, {}).SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, feed)[0], want, rtol=1e-5, atol=1e-6)


def _fused_transposed_a(model: onnx.ModelProto) -> list[str]:
    """The FusedMatMul(transA) nodes of onnxruntime's optimised `model` that read a Flatten: weight gradients."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        nodes = onnx.load(options.optimized_model_filepath).graph.node
    flattened = {o for n in nodes if n.op_type == "Flatten" for o in n.output}
    return [n.name for n in nodes if n.op_type == "FusedMatMul" and set(n.input) & flattened
            and any(a.name == "transA" and a.i for a in n.attribute)]


def test_no_weight_gradient_of_a_step_runs_as_a_transposed_a(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's step (tests/training/test_step_backends.py's, every weight trained), the rule let loose on its narrow
    products: each product over the batch's rows reads its rows transposed first, onnxruntime fuses none of them
    into FusedMatMul(transA), as it fuses every one of them without the pass, and its steps agree with the
    interpreter's."""
    from pseudoformer.ir import Op
    from pseudoformer.passes import manager
    from pseudoformer.passes.rules import transpose_then_flatten
    from pseudoformer.training.runtimes import make_runtime
    from tests.training.test_step_backends import X, _step

    monkeypatch.setattr(transpose_then_flatten, "MIN_COLUMNS", 1)  # every product here is narrow
    step = _step("adamw")
    rows = [n for n in step.graph.nodes() if n.op is Op.MATMUL and n.type.rank == 2]
    assert len(rows) >= 5 and all(n.src[0].op is Op.FLATTEN and n.src[0].src[0].op is Op.TRANSPOSE for n in rows)
    assert _fused_transposed_a(to_onnx(step.graph, step.frozen)) == []
    runs = {kind: make_runtime(kind, step.graph, step.frozen, step.state, split=step.split)
            for kind in ("interpreter", "onnxruntime")}
    losses = {kind: [rt.step({"x": X}, 0.05) for _ in range(3)] for kind, rt in runs.items()}
    np.testing.assert_allclose(losses["onnxruntime"], losses["interpreter"], rtol=1e-5)
    got, want = runs["onnxruntime"].values(), runs["interpreter"].values()
    assert all(np.allclose(got[k], want[k], rtol=1e-4, atol=1e-6) for k in want)
    monkeypatch.setitem(manager.PIPELINES, "training-step",
                        [p for p in manager.PIPELINES["training-step"] if p != "transpose_then_flatten"])
    before = _step("adamw")
    assert len(_fused_transposed_a(to_onnx(before.graph, before.frozen))) == len(rows)
