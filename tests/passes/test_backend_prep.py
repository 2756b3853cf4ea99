"""The passes that prepare a graph for a backend (passes/backend_prep.py), and cse and simplify, as
Before/Expected IR text with numeric checks (tests/passes/ir_text.py)."""

from __future__ import annotations

import textwrap

import numpy as np

from pseudoformer import ir
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.cache_fusion import fuse_cache
from pseudoformer.passes.cse import cse
from pseudoformer.passes.decompose import decompose
from pseudoformer.passes.float16 import to_float16
from pseudoformer.passes.fold_constants import fold_constants
from pseudoformer.passes.packed_heads import pack_heads
from pseudoformer.passes.simplify import simplify
from tests.passes.ir_text import check_rewrite, random_feed, text

# A decode step as kv_cache derives it after head batching and layout: the cache and the new keys and
# values are concatenated before a 4-D attention, whose keys and values are also the present outputs.
STEP = """
    graph step(q3: float32[batch, seq, 4], k3: float32[batch, seq, 4], v3: float32[batch, seq, 4], past.0.key: float32[batch, 2, past, 2], past.0.value: float32[batch, 2, past, 2]) -> (Y: float32[batch, seq, 4], present.0.key: float32[batch, 2, past+seq, 2], present.0.value: float32[batch, 2, past+seq, 2])
      %1 = reshape %q3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
      %2 = transpose %1 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
      %3 = reshape %k3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
      %4 = transpose %3 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
      %5 = reshape %v3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
      %6 = transpose %5 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
      %7 = concat %past.0.key, %4 {axis=2} : float32[batch, 2, past+seq, 2]
      %8 = concat %past.0.value, %6 {axis=2} : float32[batch, 2, past+seq, 2]
      %9 = attention %2, %7, %8 {causal=true, scale=0.7071067811865475} : float32[batch, 2, seq, 2]
      %10 = transpose %9 {perm=[0, 2, 1, 3]} : float32[batch, seq, 2, 2]
      %11 = reshape %10 {shape=["batch", "seq", 4]} : float32[batch, seq, 4]
      return Y = %11, present.0.key = %7, present.0.value = %8
"""

CACHED = """
    graph step(q3: float32[batch, seq, 4], k3: float32[batch, seq, 4], v3: float32[batch, seq, 4], past.0.key: float32[batch, 2, past, 2], past.0.value: float32[batch, 2, past, 2]) -> (Y: float32[batch, seq, 4], present.0.key: float32[batch, 2, past+seq, 2], present.0.value: float32[batch, 2, past+seq, 2])
      %1 = reshape %q3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
      %2 = transpose %1 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
      %3 = reshape %k3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
      %4 = transpose %3 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
      %5 = reshape %v3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
      %6 = transpose %5 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
      %7 = cached_attention %2, %4, %6, %past.0.key, %past.0.value {causal=true, scale=0.7071067811865475} : (float32[batch, 2, seq, 2], float32[batch, 2, past+seq, 2], float32[batch, 2, past+seq, 2])
      %8 = get %7 {index=0} : float32[batch, 2, seq, 2]
      %9 = transpose %8 {perm=[0, 2, 1, 3]} : float32[batch, seq, 2, 2]
      %10 = reshape %9 {shape=["batch", "seq", 4]} : float32[batch, seq, 4]
      %11 = get %7 {index=1} : float32[batch, 2, past+seq, 2]
      %12 = get %7 {index=2} : float32[batch, 2, past+seq, 2]
      return Y = %10, present.0.key = %11, present.0.value = %12
"""

PACKED = """
    graph step(q3: float32[batch, seq, 4], k3: float32[batch, seq, 4], v3: float32[batch, seq, 4], past.0.key: float32[batch, 2, past, 2], past.0.value: float32[batch, 2, past, 2]) -> (Y: float32[batch, seq, 4], present.0.key: float32[batch, 2, past+seq, 2], present.0.value: float32[batch, 2, past+seq, 2])
      %1 = cached_attention %q3, %k3, %v3, %past.0.key, %past.0.value {causal=true, kv_heads=2, q_heads=2, scale=0.7071067811865475} : (float32[batch, seq, 4], float32[batch, 2, past+seq, 2], float32[batch, 2, past+seq, 2])
      %2 = get %1 {index=0} : float32[batch, seq, 4]
      %3 = get %1 {index=1} : float32[batch, 2, past+seq, 2]
      %4 = get %1 {index=2} : float32[batch, 2, past+seq, 2]
      return Y = %2, present.0.key = %3, present.0.value = %4
"""


def test_cache_fusion_makes_one_cached_attention_with_the_present_outputs() -> None:
    check_rewrite(fuse_cache, STEP, CACHED, tol=1e-5)


def test_packed_heads_drop_the_head_splits_and_merges() -> None:
    check_rewrite(pack_heads, CACHED, PACKED, tol=1e-5)


def test_a_concat_read_elsewhere_is_no_cache_fusion() -> None:
    g = ir.parse(textwrap.dedent(STEP).replace("return Y = %11,", "%12 = neg %7 : float32[batch, 2, past+seq, 2]\n"
                                               "  return Y = %11, extra = %12,"))
    assert fuse_cache(g) == (g, False)


def test_decompose_writes_cached_attention_by_parts() -> None:
    """A backend without a cached-attention kernel (TVM) gets concat, matmul, mask, softmax, matmul back."""
    check_rewrite(lambda g: decompose(g, lambda n: n.op is not Op.CACHED_ATTENTION), PACKED, """
        graph step(q3: float32[batch, seq, 4], k3: float32[batch, seq, 4], v3: float32[batch, seq, 4], past.0.key: float32[batch, 2, past, 2], past.0.value: float32[batch, 2, past, 2]) -> (Y: float32[batch, seq, 4], present.0.key: float32[batch, 2, past+seq, 2], present.0.value: float32[batch, 2, past+seq, 2])
          %1 = reshape %q3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
          %2 = transpose %1 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
          %3 = dim %2 {axis=2} : int64[]
          %4 = arange %3 {dim="seq"} : int64[seq]
          %5 = reshape %k3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
          %6 = transpose %5 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
          %7 = concat %past.0.key, %6 {axis=2} : float32[batch, 2, past+seq, 2]
          %8 = dim %7 {axis=2} : int64[]
          %9 = sub %8, %3 : int64[]
          %10 = add %4, %9 : int64[seq]
          %11 = unsqueeze %10 {axes=[1]} : int64[seq, 1]
          %12 = arange %8 {dim="past+seq"} : int64[past+seq]
          %13 = unsqueeze %12 {axes=[0]} : int64[1, past+seq]
          %14 = ge %11, %13 : bool[seq, past+seq]
          %15 = transpose %7 {perm=[0, 1, 3, 2]} : float32[batch, 2, 2, past+seq]
          %16 = matmul %2, %15 : float32[batch, 2, seq, past+seq]
          %17 = const 0.7071067811865475 : float32[]
          %18 = mul %16, %17 : float32[batch, 2, seq, past+seq]
          %19 = const -inf : float32[]
          %20 = where %14, %18, %19 : float32[batch, 2, seq, past+seq]
          %21 = softmax %20 {axis=-1} : float32[batch, 2, seq, past+seq]
          %22 = reshape %v3 {shape=["batch", "seq", 2, 2]} : float32[batch, seq, 2, 2]
          %23 = transpose %22 {perm=[0, 2, 1, 3]} : float32[batch, 2, seq, 2]
          %24 = concat %past.0.value, %23 {axis=2} : float32[batch, 2, past+seq, 2]
          %25 = matmul %21, %24 : float32[batch, 2, seq, 2]
          %26 = transpose %25 {perm=[0, 2, 1, 3]} : float32[batch, seq, 2, 2]
          %27 = reshape %26 {shape=["batch", "seq", 4]} : float32[batch, seq, 4]
          return Y = %27, present.0.key = %7, present.0.value = %24
    """, tol=1e-5)


def test_float16_keeps_what_only_reductions_read_in_float32() -> None:
    check_rewrite(to_float16, """
        graph f(x: float32[batch, 3]) -> (y: float32[batch, 3], s: float32[batch])
          %1 = param "W" : float32[3, 3]
          %2 = matmul %x, %1 : float32[batch, 3]
          %3 = mul %2, %2 : float32[batch, 3]
          %4 = reduce_sum %3 {axes=[1]} : float32[batch]
          %5 = softmax %2 {axis=1} : float32[batch, 3]
          return y = %5, s = %4
    """, """
        graph f(x: float32[batch, 3]) -> (y: float16[batch, 3], s: float16[batch])
          %1 = cast %x {dtype=float16} : float16[batch, 3]
          %2 = param "W" : float16[3, 3]
          %3 = matmul %1, %2 : float16[batch, 3]
          %4 = cast %3 {dtype=float32} : float32[batch, 3]
          %5 = softmax %4 {axis=1} : float32[batch, 3]
          %6 = cast %5 {dtype=float16} : float16[batch, 3]
          %7 = mul %4, %4 : float32[batch, 3]
          %8 = reduce_sum %7 {axes=[1]} : float32[batch]
          %9 = cast %8 {dtype=float16} : float16[batch]
          return y = %6, s = %9
    """, tol=2e-2)


def test_fold_constants_computes_what_weights_alone_make() -> None:
    before = ir.parse(textwrap.dedent("""
        graph f(x: float32[batch, 3]) -> (y: float32[batch, 2])
          %1 = param "W" : float32[2, 3]
          %2 = transpose %1 {perm=[1, 0]} : float32[3, 2]
          %3 = const 2.0 : float32[]
          %4 = mul %2, %3 : float32[3, 2]
          %5 = matmul %x, %4 : float32[batch, 2]
          return y = %5
    """))
    feed, weights = random_feed(before)
    after, folded = fold_constants(before, weights)
    assert text(after) == text(ir.parse(textwrap.dedent("""
        graph f(x: float32[batch, 3]) -> (y: float32[batch, 2])
          %1 = param "folded.0" : float32[3, 2]
          %2 = matmul %x, %1 : float32[batch, 2]
          return y = %2
    """)))
    np.testing.assert_array_equal(folded["folded.0"], weights["W"].T * 2)
    np.testing.assert_allclose(run(after, feed, folded)["y"], run(before, feed, weights)["y"], rtol=1e-6)


def test_cse_and_simplify() -> None:
    check_rewrite(cse, """
        graph f(x: float32[batch, 3]) -> (y: float32[batch, 3])
          %1 = exp %x : float32[batch, 3]
          %2 = exp %x : float32[batch, 3]
          %3 = add %1, %2 : float32[batch, 3]
          return y = %3
    """, """
        graph f(x: float32[batch, 3]) -> (y: float32[batch, 3])
          %1 = exp %x : float32[batch, 3]
          %2 = add %1, %1 : float32[batch, 3]
          return y = %2
    """)
    check_rewrite(simplify, """
        graph f(x: float32[batch, 3, 4]) -> (y: float32[batch, 4, 3], z: float32[batch, 3, 4])
          %1 = transpose %x {perm=[0, 2, 1]} : float32[batch, 4, 3]
          %2 = transpose %1 {perm=[0, 2, 1]} : float32[batch, 3, 4]
          %3 = unsqueeze %2 {axes=[1]} : float32[batch, 1, 3, 4]
          %4 = squeeze %3 {axes=[1]} : float32[batch, 3, 4]
          %5 = exp %4 : float32[batch, 3, 4]
          %6 = transpose %5 {perm=[0, 2, 1]} : float32[batch, 4, 3]
          return y = %6, z = %5
    """, """
        graph f(x: float32[batch, 3, 4]) -> (y: float32[batch, 4, 3], z: float32[batch, 3, 4])
          %1 = exp %x : float32[batch, 3, 4]
          %2 = transpose %1 {perm=[0, 2, 1]} : float32[batch, 4, 3]
          return y = %2, z = %1
    """)
