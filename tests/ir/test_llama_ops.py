"""The ops of the Llama family — SiLU, SwiGLU, the rotary embedding, attention's sliding window — against
torch and HuggingFace's own Llama code, and their formulas (what backends without a kernel lower)
against the ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.ops import IRTypeError
from pseudoformer.ir.verify import verify
from pseudoformer.passes.decompose import decompose

F32 = DType.float32
rng = np.random.default_rng(0)


def inp(name: str, *shape: int | str) -> Node:
    return Node(Op.INPUT, attrs={"name": name, "type": TensorType(F32, tuple(shape))})


def both(inputs: list[Node], out: Node, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The op's value, and its decomposition's."""
    g = Graph(inputs, [("y", out)])
    verify(g)
    formula, changed = decompose(g, lambda n: False)
    assert changed and out.op not in {n.op for n in formula.nodes()}
    verify(formula)
    return run(g, feed, {})["y"], run(formula, feed, {})["y"]


def test_silu_is_torchs() -> None:
    x = inp("x", 3, 5)
    xv = (rng.standard_normal((3, 5)) * 8).astype(np.float32)
    xv[0, :2] = [-200.0, 200.0]  # e^{−x} overflows: the limits, −0 and x
    got, formula = both([x], Node(Op.SILU, (x,)), {"x": xv})
    want = torch.nn.functional.silu(torch.from_numpy(xv)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(formula, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("axis", [1, -1])
def test_swiglu_gates_the_second_half_with_the_first(axis: int) -> None:
    h = inp("h", 2, 6, 6)
    hv = rng.standard_normal((2, 6, 6)).astype(np.float32)
    got, formula = both([h], Node(Op.SWIGLU, (h,), {"axis": axis}), {"h": hv})
    gate, up = np.split(torch.from_numpy(hv), 2, axis=axis)
    want = (torch.nn.functional.silu(gate) * up).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(formula, want, rtol=1e-6, atol=1e-7)


def test_swiglu_needs_an_even_axis() -> None:
    with pytest.raises(IRTypeError, match="even"):
        Node(Op.SWIGLU, (inp("h", 2, 5),), {"axis": 1})


def _hf_rotary(q: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """HF's apply_rotary_pos_emb on q [b, H, s, d], angles [s, d/2] (its cos/sin repeat them twice)."""
    emb = np.concatenate([angles, angles], axis=-1)[None]
    cos, sin = torch.from_numpy(np.cos(emb)), torch.from_numpy(np.sin(emb))
    t = torch.from_numpy(q)
    return apply_rotary_pos_emb(t, t, cos, sin)[0].numpy()


def test_rotary_on_heads_is_hfs_rotate_half() -> None:
    b, heads, s, d = 2, 3, 5, 8
    qv = rng.standard_normal((b, heads, s, d)).astype(np.float32)
    av = rng.uniform(-6, 6, (s, d // 2)).astype(np.float32)
    q, a = inp("q", b, heads, "seq", d), inp("a", "seq", d // 2)
    out = Node(Op.ROTARY, (q, Node(Op.COS, (a,)), Node(Op.SIN, (a,))), {"axis": 3})
    got, formula = both([q, a], out, {"q": qv, "a": av})
    want = _hf_rotary(qv, av)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(formula, want, rtol=1e-5, atol=1e-6)


def test_rotary_packed_rotates_each_head_on_its_own() -> None:
    b, heads, s, d = 2, 3, 5, 4
    qv = rng.standard_normal((b, s, heads * d)).astype(np.float32)
    av = rng.uniform(-6, 6, (s, d // 2)).astype(np.float32)
    q, a = inp("q", b, "seq", heads * d), inp("a", "seq", d // 2)
    out = Node(Op.ROTARY, (q, Node(Op.COS, (a,)), Node(Op.SIN, (a,))), {"axis": 2, "heads": heads})
    got, formula = both([q, a], out, {"q": qv, "a": av})
    want = _hf_rotary(qv.reshape(b, s, heads, d).transpose(0, 2, 1, 3), av).transpose(0, 2, 1, 3).reshape(qv.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(formula, want, rtol=1e-5, atol=1e-6)


def test_rotary_in_the_papers_layout_rotates_rows() -> None:
    d, s = 6, 4
    xv = rng.standard_normal((1, d, s)).astype(np.float32)
    av = rng.uniform(-6, 6, (d // 2, s)).astype(np.float32)
    x, a = inp("x", 1, d, "seq"), inp("a", d // 2, "seq")
    out = Node(Op.ROTARY, (x, Node(Op.COS, (a,)), Node(Op.SIN, (a,))), {"axis": 1})
    got, formula = both([x, a], out, {"x": xv, "a": av})
    want = _hf_rotary(xv.transpose(0, 2, 1)[:, None], av.T)[:, 0].transpose(0, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(formula, want, rtol=1e-5, atol=1e-6)


def test_rotary_refuses_angles_of_the_wrong_width() -> None:
    x, a = inp("x", 1, "seq", 8), inp("a", "seq", 3)
    with pytest.raises(IRTypeError, match="broadcast"):
        Node(Op.ROTARY, (x, a, a), {"axis": 2})
    with pytest.raises(IRTypeError, match="last axis"):
        Node(Op.ROTARY, (inp("y", 1, 8, "seq"), inp("c", 1, "seq"), inp("s", 1, "seq")), {"axis": 1, "heads": 2})


@pytest.mark.parametrize(("sq", "sk", "window"), [(6, 6, 2), (6, 6, 1), (1, 7, 3), (3, 7, 4), (5, 5, 9)])
def test_sliding_window_is_torchs_explicit_mask(sq: int, sk: int, window: int) -> None:
    """Query i (position i + s_k − s_q) sees keys j with i' − w < j ≤ i', as HF's Mistral mask."""
    qv, kv, vv = (rng.standard_normal((2, 3, n, 4)).astype(np.float32) for n in (sq, sk, sk))
    q, k, v = inp("q", 2, 3, sq, 4), inp("k", 2, 3, sk, 4), inp("v", 2, 3, sk, 4)
    out = Node(Op.ATTENTION, (q, k, v), {"scale": 0.5, "causal": True, "window": window})
    got, formula = both([q, k, v], out, {"q": qv, "k": kv, "v": vv})
    i = np.arange(sq)[:, None] + sk - sq
    j = np.arange(sk)[None, :]
    mask = torch.from_numpy((j <= i) & (i - j < window))
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(qv), torch.from_numpy(kv), torch.from_numpy(vv), attn_mask=mask, scale=0.5).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(formula, want, rtol=1e-5, atol=1e-6)
