"""The onnx-contrib pipeline (passes/contrib_ops.py): skip norms and grouped-query attention as IR rewrites,
Before/Expected IR text with numeric checks against the interpreter, the reasons they refuse, and the
last-position cut undone in a real decode step."""

from __future__ import annotations

import numpy as np

from pseudoformer import ir
from pseudoformer.backends.onnx.compile import prepare
from pseudoformer.backends.options import CompileOptions
from pseudoformer.generation.generator import Generator
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.model import load
from pseudoformer.passes.contrib_ops import fuse_group_query_attention, fuse_skip_norms
from pseudoformer.passes.pass_base import Pass
from pseudoformer.passes.rules import group_query_attention
from tests.passes.ir_text import check_rewrite

RESIDUAL = """
    graph layer(x: float32[batch, seq, 4], y: float32[batch, seq, 4]) -> (h: float32[batch, seq, 4], n: float32[batch, seq, 4])
      %1 = add %x, %y : float32[batch, seq, 4]
      %2 = param "g" : float32[4]
      %3 = rms_norm %1, %2 {axis=2, eps=1e-06} : float32[batch, seq, 4]
      return h = %1, n = %3
"""
SKIP = """
    graph layer(x: float32[batch, seq, 4], y: float32[batch, seq, 4]) -> (h: float32[batch, seq, 4], n: float32[batch, seq, 4])
      %1 = param "g" : float32[4]
      %2 = skip_rms_norm %x, %y, %1 {eps=1e-06} : (float32[batch, seq, 4], float32[batch, seq, 4])
      %3 = get %2 {index=1} : float32[batch, seq, 4]
      %4 = get %2 {index=0} : float32[batch, seq, 4]
      return h = %3, n = %4
"""
# GPT-2's MLP: (x + y) + b, read by the next layer norm; the bias rides in the kernel
BIASED = """
    graph layer(x: float32[batch, seq, 4], y: float32[batch, seq, 4]) -> (h: float32[batch, seq, 4], n: float32[batch, seq, 4])
      %1 = add %x, %y : float32[batch, seq, 4]
      %2 = param "b" : float32[4]
      %3 = add %2, %1 : float32[batch, seq, 4]
      %4 = param "g" : float32[4]
      %5 = layer_norm %3, %4, %2 {axis=-1, eps=1e-05} : float32[batch, seq, 4]
      return h = %3, n = %5
"""
SKIP_BIASED = """
    graph layer(x: float32[batch, seq, 4], y: float32[batch, seq, 4]) -> (h: float32[batch, seq, 4], n: float32[batch, seq, 4])
      %1 = param "g" : float32[4]
      %2 = param "b" : float32[4]
      %3 = skip_layer_norm %x, %y, %1, %2, %2 {eps=1e-05} : (float32[batch, seq, 4], float32[batch, seq, 4])
      %4 = get %3 {index=1} : float32[batch, seq, 4]
      %5 = get %3 {index=0} : float32[batch, seq, 4]
      return h = %4, n = %5
"""
ROTATED = """
    graph att(x: float32[batch, seq, 64], ang: float32[seq, 8]) -> (y: float32[batch, seq, 32])
      %1 = const 0 : int64[]
      %2 = const 32 : int64[]
      %3 = const 48 : int64[]
      %4 = const 64 : int64[]
      %5 = slice %x, %1, %2 {axis=2, dim=32} : float32[batch, seq, 32]
      %6 = slice %x, %2, %3 {axis=2, dim=16} : float32[batch, seq, 16]
      %7 = slice %x, %3, %4 {axis=2, dim=16} : float32[batch, seq, 16]
      %8 = cos %ang : float32[seq, 8]
      %9 = sin %ang : float32[seq, 8]
      %10 = rotary %5, %8, %9 {axis=2, heads=2} : float32[batch, seq, 32]
      %11 = rotary %6, %8, %9 {axis=2, heads=1} : float32[batch, seq, 16]
      %12 = attention %10, %11, %7 {causal=true, kv_heads=1, q_heads=2, scale=0.25} : float32[batch, seq, 32]
      return y = %12
"""
GQA = """
    graph att(x: float32[batch, seq, 64], ang: float32[seq, 8]) -> (y: float32[batch, seq, 32])
      %1 = cos %ang : float32[seq, 8]
      %2 = sin %ang : float32[seq, 8]
      %3 = group_query_attention %x, %1, %2 {kv_heads=1, packed=true, q_heads=2, rotary=true, scale=0.25} : float32[batch, seq, 32]
      return y = %3
"""

# The float16 pass's form of ROTATED: the tables computed in float32 and cast where the rotation reads them, the
# softmax asked in float32
ROTATED16 = (ROTATED.replace("x: float32[batch, seq, 64]", "x: float16[batch, seq, 64]")
             .replace("float32[batch", "float16[batch")
             .replace("%10 = rotary %5, %8, %9", "%14 = cast %8 {dtype=float16} : float16[seq, 8]\n"
                      "      %15 = cast %9 {dtype=float16} : float16[seq, 8]\n      %10 = rotary %5, %14, %15")
             .replace("%11 = rotary %6, %8, %9", "%11 = rotary %6, %14, %15")
             .replace("scale=0.25}", "scale=0.25, softmax_fp32=true}"))
GQA16 = (GQA.replace("x: float32[batch, seq, 64]", "x: float16[batch, seq, 64]")
         .replace("float32[batch", "float16[batch")
         .replace("%3 = group_query_attention %x, %1, %2", "%4 = cast %1 {dtype=float16} : float16[seq, 8]\n"
                  "      %5 = cast %2 {dtype=float16} : float16[seq, 8]\n      %3 = group_query_attention %x, %4, %5")
         .replace("scale=0.25}", "scale=0.25, softmax_fp32=true}"))


def test_a_residual_sum_and_its_norm_are_one_skip_norm() -> None:
    check_rewrite(fuse_skip_norms, RESIDUAL, SKIP)


def test_a_bias_after_the_sum_is_the_kernels_bias() -> None:
    check_rewrite(fuse_skip_norms, BIASED, SKIP_BIASED, tol=1e-5)


def test_a_rotated_packed_attention_is_one_group_query_attention() -> None:
    check_rewrite(fuse_group_query_attention, ROTATED, GQA, tol=1e-5)


def test_float16_attention_is_the_kernels_only_in_a_step_whose_cache_is_in_buffers() -> None:
    """rule(float16=True), what a compile with kv_buffers runs (and genai's lengths step: test_genai_gpu_folder.py):
    the float16 attention (softmax in float32, carried to the fused op) with its fp16 tables inside; the plain pass
    says why it keeps it."""
    buffered = Pass.from_rules("group_query_attention_fusion", "", [group_query_attention.rule(float16=True)])
    check_rewrite(buffered, ROTATED16, GQA16, tol=2e-2)
    assert _refusals(fuse_group_query_attention, ROTATED16) == [
        "group_query_attention: the kernel is taken in float32 only, not float16 (float16 too in a decode step "
        "whose cache lives in buffers: generate --contrib-ops, and a --genai-folder's)"]


def _refusals(fuse, text: str) -> list[str]:  # noqa: ANN001
    reasons: list[tuple[str, str, object]] = []
    graph, changed = fuse(ir.parse(text), reasons)
    assert not changed
    return [f"{rule}: {why}" for rule, why, *_ in reasons]


def test_the_skip_norm_says_why_it_refused() -> None:
    broadcast = RESIDUAL.replace("y: float32[batch, seq, 4])", "y: float32[4])")
    assert _refusals(fuse_skip_norms, broadcast) == [
        "skip_norm: the sum broadcasts float32[batch, seq, 4] and float32[4]; the kernel adds tensors of one shape"]
    computed = RESIDUAL.replace('%2 = param "g" : float32[4]', "%2 = reduce_sum %y {axes=[0, 1]} : float32[4]")
    assert _refusals(fuse_skip_norms, computed) == [
        "skip_norm: the norm's γ or β, or the bias, is computed in the graph, not a weight"]


def test_group_query_attention_says_why_it_refused() -> None:
    bidirectional = ROTATED.replace("causal=true", "causal=false")
    assert _refusals(fuse_group_query_attention, bidirectional) == [
        "group_query_attention: the attention is not causal (the kernel's always is)"]


def test_the_last_position_cut_is_undone_in_a_decode_step() -> None:
    """The last layer's one query is the packed product's last row: the kernel attends for every new
    position with the rotation inside, and keeps the last row; the step computes what it did."""
    m = load("models/llama.alg", defines=["L=2", "d_e=64", "H=4", "H_kv=2", "d_mlp=128", "N_V=100", "d_attn=16"])
    gen = Generator(m, backend="numpy")
    assert gen.decoder is not None
    step = gen.decoder.step
    plain, weights = prepare(step, gen.weights, CompileOptions())
    fused, _ = prepare(step, gen.weights, CompileOptions(contrib_ops=True))
    kernels = [n for n in fused.nodes() if n.op is Op.GROUP_QUERY_ATTENTION]
    assert [(n.attrs.get("last", False), n.attrs.get("rotary"), n.attrs.get("packed")) for n in kernels] == [
        (False, True, True), (True, True, True)]
    assert not any(n.op in (Op.ATTENTION, Op.CACHED_ATTENTION, Op.ROTARY) for n in fused.nodes())
    rng = np.random.default_rng(0)
    feed = {"x": rng.integers(0, 100, (2, 3))}
    feed |= {n.attrs["name"]: rng.standard_normal((2, 2, 4, 16)).astype(np.float32)
             for n in step.inputs if n.attrs["name"] != "x"}
    want, got = run(plain, feed, weights), run(fused, feed, weights)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
