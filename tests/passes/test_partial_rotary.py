"""The partial rotary fusion (passes/rules/partial_rotary.py): [rotary(x[0:r]); x[r:d]] → rotary(x; rotary_dim = r),
as Before/Expected IR text checked on the interpreter, and its refusals with their reasons."""

from __future__ import annotations

import pytest

from pseudoformer import ir
from pseudoformer.passes.fusions import rotary_fusion
from tests.passes.ir_text import check_rewrite
from tests.passes.test_llama_fusions import ANGLES

# x has 6 rows: the first 4 are rotated (RoPE of a 4-row slice, as gpt_neox.alg's [RoPE(Q[1:r, :] | b); …]
# elaborates), the last 2 pass.
PARTIAL = """
graph Partial(x: float32[batch, 6, seq]) -> (y: float32[batch, 6, seq])""" + ANGLES + """
  %16 = const 0 : int64[]
  %17 = const 2 : int64[]
  %18 = const 4 : int64[]
  %19 = const 6 : int64[]
  %20 = slice %x, %16, %18 {axis=1, dim=4} : float32[batch, 4, seq]
  %21 = slice %20, %16, %17 {axis=1, dim=2} : float32[batch, 2, seq]
  %22 = slice %20, %17, %18 {axis=1, dim=2} : float32[batch, 2, seq]
  %23 = mul %21, %14 : float32[batch, 2, seq]
  %24 = mul %15, %22 : float32[batch, 2, seq]
  %25 = sub %23, %24 : float32[batch, 2, seq]
  %26 = mul %22, %14 : float32[batch, 2, seq]
  %27 = mul %21, %15 : float32[batch, 2, seq]
  %28 = add %27, %26 : float32[batch, 2, seq]
  %29 = concat %25, %28 {axis=1} : float32[batch, 4, seq]
  %30 = slice %x, %18, %19 {axis=1, dim=2} : float32[batch, 2, seq]
  %31 = concat %29, %30 {axis=1} : float32[batch, 6, seq]
  return y = %31
"""

FUSED = """
graph Partial(x: float32[batch, 6, seq]) -> (y: float32[batch, 6, seq])""" + ANGLES + """
  %16 = rotary %x, %14, %15 {axis=1, rotary_dim=4} : float32[batch, 6, seq]
  return y = %16
"""


def test_a_rotation_of_the_first_rows_joined_to_the_rest_is_one_partial_rotary() -> None:
    check_rewrite(rotary_fusion, PARTIAL, FUSED, tol=1e-5)


@pytest.mark.parametrize(("old", "new", "why"), [
    ("%30 = slice %x, %18, %19", "%30 = slice %x, %16, %17", "do not split axis 1"),
    ("graph Partial(x: float32[batch, 6, seq])", "graph Partial(x: float32[batch, 6, seq], z: float32[batch, 6, seq])",
     None),
])
def test_slices_that_are_not_the_rest_of_the_rotated_value_are_refused(old: str, new: str, why: str | None) -> None:
    source = PARTIAL.replace(old, new)
    if why is None:  # the passed rows are a slice of another value
        source = source.replace("%30 = slice %x, %18, %19", "%30 = slice %z, %18, %19")
        why = "slices of different values"
    refusals: list = []
    got, _ = rotary_fusion(ir.parse(source), refusals)
    assert not any(n.attrs.get("rotary_dim") for n in got.nodes() if n.op is ir.Op.ROTARY)
    assert any(why in r[1] for r in refusals), refusals


def test_a_rotated_slice_used_elsewhere_is_refused() -> None:
    g = ir.parse(PARTIAL.replace("return y = %31", "return y = %31, z = %29")
                 .replace("-> (y: float32[batch, 6, seq])", "-> (y: float32[batch, 6, seq], z: float32[batch, 4, seq])"))
    refusals: list = []
    got, _ = rotary_fusion(g, refusals)
    assert not any(n.attrs.get("rotary_dim") for n in got.nodes() if n.op is ir.Op.ROTARY)
    assert any("partial rotation is used elsewhere" in r[1] for r in refusals), refusals
