"""The forms the VJP rules write for zeros, broadcasts and a slice's transpose, as Before/Expected IR text:
EXPAND of a 0 shaped like the parameter, EXPAND of a cotangent up to what a sum reduced, and a PAD of the
slice's cotangent (ir/ops/shaped_like.py), never `cast(x < x)`, `where(x < x, 0, c)` or a scatter into
zeros. In the IR, every backend runs these forms; the values agree with the formula by hand."""

from __future__ import annotations

import textwrap

import numpy as np

from pseudoformer import ir
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.verify import verify
from pseudoformer.passes.autodiff import gradients
from tests.passes.ir_text import text

BEFORE = """
    graph loss(x: float32[2, 5]) -> (loss: float32[])
      %1 = dim %x {axis=1} : int64[]
      %2 = const 1 : int64[]
      %3 = slice %x, %2, %1 {axis=1, dim=4} : float32[2, 4]
      %4 = param "w" : float32[2, 4]
      %5 = const 0.0 : float32[]
      %6 = gt %4, %5 : bool[2, 4]
      %7 = where %6, %3, %5 : float32[2, 4]
      %8 = reduce_sum %7 {axes=[0, 1], keepdims=false} : float32[]
      return loss = %8
"""

# w reaches the loss only through a mask: its gradient is zeros (%10); the sum's cotangent is spread back
# up (%13); the slice's is put back after one zero column (%16).
EXPECTED = """
    graph loss(x: float32[2, 5]) -> (loss: float32[], grad.w: float32[2, 4], grad.x: float32[2, 5])
      %1 = param "w" : float32[2, 4]
      %2 = const 0.0 : float32[]
      %3 = gt %1, %2 : bool[2, 4]
      %4 = const 1 : int64[]
      %5 = dim %x {axis=1} : int64[]
      %6 = slice %x, %4, %5 {axis=1, dim=4} : float32[2, 4]
      %7 = where %3, %6, %2 : float32[2, 4]
      %8 = reduce_sum %7 {axes=[0, 1], keepdims=false} : float32[]
      %9 = const 0.0 : float32[]
      %10 = expand %9, %1 : float32[2, 4]
      %11 = const 1.0 : float32[]
      %12 = unsqueeze %11 {axes=[0, 1]} : float32[1, 1]
      %13 = expand %12, %7 : float32[2, 4]
      %14 = const 0.0 : float32[]
      %15 = where %3, %13, %14 : float32[2, 4]
      %16 = pad %15, %x, %4 {axis=1} : float32[2, 5]
      return loss = %8, grad.w = %10, grad.x = %16
"""


def test_zeros_broadcasts_and_a_slices_transpose_are_expand_and_pad() -> None:
    got = gradients(ir.parse(textwrap.dedent(BEFORE)), ["w"], inputs=["x"])
    verify(got)
    assert text(got) == text(ir.parse(textwrap.dedent(EXPECTED))), text(got)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 5)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    out = run(got, {"x": x}, {"w": w})
    np.testing.assert_array_equal(out["grad.w"], np.zeros_like(w))
    np.testing.assert_array_equal(out["grad.x"], np.concatenate([np.zeros((2, 1)), w > 0], axis=1))


def test_a_start_counted_from_the_end_is_made_a_position_before_the_pad() -> None:
    """slice(x, −2, …): the pad's start is −2 + 6 (a where, as a start may be negative at run time)."""
    g = ir.parse(textwrap.dedent(BEFORE).replace("const 1 : int64[]", "const -2 : int64[]")
                 .replace("dim=4", "dim=2").replace("2, 4", "2, 2").replace("2, 5", "2, 6"))
    got = gradients(g, [], inputs=["x"])
    verify(got)
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_array_equal(run(got, {"x": x}, {"w": np.ones((2, 2), np.float32)})["grad.x"],
                                  np.concatenate([np.zeros((2, 4)), np.ones((2, 2))], axis=1))
