"""Cached generation of decoders whose fused attention carries a mask or bias of positions (the gallery's ALiBi
and strided sparse attention): the step rebuilds the operand at the full length and keeps the new queries'
rows (passes/kv_cache_masks.py). Checked against the algorithm run literally (no cache), on ORT and numpy."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.generation.api import prepare
from pseudoformer.ir import Op

HERE = "tests/generation/masked"


@pytest.mark.parametrize("name", ["alibi", "sparse_strided"])
@pytest.mark.parametrize(("backend", "contrib"), [("onnx", False), ("onnx", True), ("numpy", False)])
def test_cached_generation_equals_the_literal_algorithm(name: str, backend: str, contrib: bool) -> None:
    cached = prepare(f"{HERE}/{name}.alg", backend=backend, contrib_ops=contrib).generator
    literal = prepare(f"{HERE}/{name}.alg", backend=backend, cache=False).generator
    x = np.random.default_rng(len(name)).integers(0, 50, (2, 5))
    a = cached.generate(x, max_new_tokens=9, keep_scores=True, seed=0)  # 5 + 9 positions: past the stride
    b = literal.generate(x, max_new_tokens=9, keep_scores=True, seed=0)
    assert a.tokens == b.tokens
    for u, v in zip(a.scores, b.scores, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_the_step_keeps_the_fused_attention_with_its_operand() -> None:
    """The step's attention is still one op per layer, its bias [H, new, past + new]; the one softmax left
    is the model's output."""
    gen = prepare(f"{HERE}/alibi.alg", backend="numpy").generator
    step = gen.decoder.step  # type: ignore[union-attr]
    atts = [n for n in step.nodes() if n.op in (Op.ATTENTION, Op.CACHED_ATTENTION)]
    assert len(atts) == 2 and len([n for n in step.nodes() if n.op is Op.SOFTMAX]) == 1
    bias = atts[0].src[3]
    assert bias.shape[0] == 2 and bias.shape[-1] == atts[0].src[1].shape[-2]


def test_a_mask_that_reads_the_tokens_is_refused(tmp_path) -> None:  # noqa: ANN001
    """A mask of the tokens' values, not their positions (here: keys whose first feature is positive), is
    no function of positions, and a step could not rebuild it from the new tokens alone: refused."""
    src = (tmp_path / "m.alg")
    src.write_text('''use MHAttention from "paper/primitives.alg"
use layer_norm from "variants.alg"

Algorithm: P ← TokenMasked(x | θ)
  Input: x ∈ V*
  Output: P ∈ (0, 1)^{N_V × length(x)}
  Hyperparameters: L, H, d_e, d_mlp, N_V, d_attn, d_mid ∈ ℕ
  Parameters: θ consisting of:
    W_e ∈ ℝ^{d_e × N_V}
    W : MHAttention
    W_u ∈ ℝ^{N_V × d_e}
  1 ℓ ← length(x)
  2 for t ∈ [ℓ] : e_t ← W_e[:, x[t]]
  3 X ← [e_1, e_2, …, e_ℓ]
  4 X ← X + MHAttention(X | W, Mask[t_z, t_x] ≡ [[t_z ≤ t_x ∧ X[1, t_z] > 0]])
  5 return P = softmax(W_u X)

Algorithm 14: y ← DInference(x | θ̂)
  Input: x ∈ V*
  Output: y ∈ V*
  Hyperparameters: ℓ_gen ∈ ℕ, τ ∈ (0, ∞)
  Parameters: θ̂ : TokenMasked
  1 ℓ ← length(x)
  2 for i = 1, 2, …, ℓ_gen do
  3   P ← TokenMasked(x | θ̂)
  4   p ← P[:, ℓ + i − 1]
  5   sample a token y from q ∝ p^{1/τ}
  6   x ← [x, y]
  7 end
  8 return y = x[ℓ + 1 : ℓ + ℓ_gen]
''', encoding="utf-8")
    hyper = ["L=1", "H=2", "d_e=8", "d_mlp=8", "N_V=20", "d_attn=4", "d_mid=4"]
    with pytest.raises(CompileError, match="mask depends on the tokens"):
        prepare(src, defines=hyper)
