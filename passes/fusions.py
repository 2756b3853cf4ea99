"""The fusion passes: each replaces the formulas one family of rules (passes/rules/) matches with a single op.

The paper defines layer_norm (Algorithm 6), GPT-2's GELU and attention (Algorithm 4) as formulas,
and the frontend lowers them literally: about twenty nodes per layer norm, eleven per tanh GELU,
a masked softmax and two products per head. Backends have one kernel for each, which is faster
and, for layer norm, more accurate than the sum-of-quotients form.

  layer_norm_fusion   rules/layer_norm.py  →  LAYER_NORM(x, γ, β; axis, eps)
                      rules/rms_norm.py    →  RMS_NORM(x, γ; axis, eps)
  gelu_fusion         rules/gelu_tanh.py   →  GELU(x; approximate="tanh" | "none")
  swiglu_fusion       rules/swiglu.py      →  SWIGLU([W₁; W₃] X; axis)
  rotary_fusion       rules/rotary.py      →  ROTARY(x, cos θ, sin θ; axis)
                      rules/partial_rotary.py → ROTARY(x, cos θ, sin θ; axis, rotary_dim) of x's first rows
  attention_fusion    rules/attention.py   →  ATTENTION(q, k, v[, mask]; scale, causal)
  expert_matmul_fusion rules/expert_matmul.py → EXPERT_MATMUL(W, r, x) for Σ_j W[r, i, j] x[j] (mixtures of experts)
                      rules/expert_swiglu.py → SWIGLU(EXPERT_MATMUL([W₁ W₃], r, x)) for SwiGLU experts
  one_hot_pick        rules/one_hot_pick.py → GATHER_ELEMENTS(p, w; a) for Σ_a [[range = w]] ⊙ p (training)
  log_softmax         rules/log_softmax.py →  z − max z − log Σ exp(z − max z) for log ∘ softmax (training)
  pick_before_slice   rules/pick_before_slice.py → SLICE(GATHER_ELEMENTS(X, w')) for a pick from a slice of X
  concat_of_transposes rules/concat_of_transposes.py → TRANSPOSE(CONCAT(a_i)) for CONCAT(TRANSPOSE(a_i)) (torch)
  gather_of_transpose rules/gather_of_transpose.py → TRANSPOSE(GATHER(W, i)) for GATHER(TRANSPOSE(W), i) (training)

They expect `cse` and `simplify` to have run (they also work on the raw graph, just with more to
look through); attention fusion runs after CSE so that the causal mask each head rebuilds is one
node and every head's match sees the same mask. A match a rule refuses (a wrong divisor or
constant, an intermediate used elsewhere) leaves the formula as it is, a correct program still;
each pass is built from its rules (`Pass.from_rules`, as onnxscript's rewriter builds one from a
RewriteRuleSet), and records its refusals and how often each rule fired in the PassContext; called alone
(`layer_norm_fusion(graph, refusals)`), it appends the refusals as (rule name, reason, span, scope).
"""

from __future__ import annotations

from pseudoformer.passes.pass_base import Pass
from pseudoformer.passes.rules import (
    attention,
    concat_of_transposes,
    expert_matmul,
    expert_swiglu,
    gather_of_transpose,
    gelu_tanh,
    layer_norm,
    log_softmax,
    one_hot_pick,
    partial_rotary,
    pick_before_slice,
    rms_norm,
    rotary,
    swiglu,
)

layer_norm_fusion = Pass.from_rules("layer_norm_fusion", "Algorithm 6 (with or without ε) → one layer_norm op",
                                    [layer_norm.RULE, rms_norm.RULE])
gelu_fusion = Pass.from_rules("gelu_fusion", "the tanh and erf GELU formulas → one gelu op", [gelu_tanh.RULE])
swiglu_fusion = Pass.from_rules("swiglu_fusion", "SiLU(W₁ X) ⊙ W₃ X → one swiglu op over one packed projection "
                                "[W₁; W₃] X", [swiglu.RULE])
# Two walks: the partial rotation counts the uses of the rotated slice in the graph the first walk made, where
# the halves the whole rotation read are gone.
rotary_fusion = Pass.from_rules("rotary_fusion", "the rotate-half RoPE [x₁ cos θ − x₂ sin θ; x₂ cos θ + x₁ sin θ] "
                                "→ one rotary op", [rotary.RULE], [partial_rotary.RULE])
attention_fusion = Pass.from_rules("attention_fusion", "Algorithm 4's masked softmax(KᵀQ/√d) and V · A → one "
                                   "attention op; [[t ≤ t']] → causal", [attention.RULE])
expert_matmul_fusion = Pass.from_rules(
    "expert_matmul_fusion", "Σ_j W[r, i, j] x[j] over per-row gathered expert matrices → one expert_matmul (no "
    "per-row copies); SwiGLU experts' gate and up products packed into one", [expert_matmul.RULE, expert_swiglu.RULE])
one_hot_pick_fusion = Pass.from_rules(
    "one_hot_pick", "Σ_a [[range = w]] ⊙ p, a checked per-example index's one-hot pick → one gather_elements "
    "(training)", [one_hot_pick.RULE])
log_softmax_fusion = Pass.from_rules(
    "log_softmax", "log ∘ softmax (through slices, gathers and one-hot picks) → a stable log-softmax (training)",
    [log_softmax.RULE])
# After log_softmax, so that the whole is the log-softmax, not the softmax it replaced.
pick_before_slice_fusion = Pass.from_rules(
    "pick_before_slice", "a pick from a slice → the pick from the whole, sliced: no copy of the sliced data "
    "(training)", [pick_before_slice.RULE])
# Before the autodiff: no transposed copy of an embedding table, forward or backward.
gather_of_transpose_fusion = Pass.from_rules(
    "gather_of_transpose", "gather(transpose(W), i) → transpose(gather(W, i)): no transposed copy of an embedding "
    "table (training)", [gather_of_transpose.RULE])

# The torch backend's pipeline: per-head weights stacked as stored, so each head's gradient is a slice of rows.
concat_of_transposes_fusion = Pass.from_rules(
    "concat_of_transposes", "concat(transpose(a_i; p)) → transpose(concat(a_i); p): stacked weights as stored "
    "(torch)", [concat_of_transposes.RULE])

PASSES = [layer_norm_fusion, gelu_fusion, swiglu_fusion, rotary_fusion, attention_fusion, expert_matmul_fusion,
          one_hot_pick_fusion, log_softmax_fusion, pick_before_slice_fusion, gather_of_transpose_fusion,
          concat_of_transposes_fusion]
