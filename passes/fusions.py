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
  expert_matmul       rules/expert_matmul.py → EXPERT_MATMUL(W, r, x) for Σ_j W[r, i, j] x[j] (mixtures of experts)
                      rules/expert_swiglu.py → SWIGLU(EXPERT_MATMUL([W₁ W₃], r, x)) for SwiGLU experts
  one_hot_pick        rules/one_hot_pick.py → GATHER_ELEMENTS(p, w; a) for Σ_a [[range = w]] ⊙ p (training)
                      rules/pick_before_slice.py → SLICE(GATHER_ELEMENTS(X, w')) for a pick from a slice of X
  log_softmax         rules/log_softmax.py →  z − max z − log Σ exp(z − max z) for log ∘ softmax (training)
  gather_of_transpose rules/gather_of_transpose.py → TRANSPOSE(GATHER(W, i)) for GATHER(TRANSPOSE(W), i) (training)

They expect `cse` and `simplify` to have run (they also work on the raw graph, just with more to
look through); attention fusion runs after CSE so that the causal mask each head rebuilds is one
node and every head's match sees the same mask. A match a rule refuses (a wrong divisor or
constant, an intermediate used elsewhere) leaves the formula as it is, a correct program still;
pass a list as `refusals` to collect the reasons as (rule name, reason, span).
"""

from __future__ import annotations

from pseudoformer.ir import Graph
from pseudoformer.passes.rule import apply_rules
from pseudoformer.passes.rules import (
    attention,
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

NORM_RULES = [layer_norm.RULE, rms_norm.RULE]
GELU_RULES = [gelu_tanh.RULE]
ATTENTION_RULES = [attention.RULE]
SWIGLU_RULES = [swiglu.RULE]
ROTARY_RULES = [rotary.RULE]
PARTIAL_ROTARY_RULES = [partial_rotary.RULE]
LOG_SOFTMAX_RULES = [log_softmax.RULE]
PICK_RULES = [one_hot_pick.RULE]
SLICED_PICK_RULES = [pick_before_slice.RULE]
EXPERT_RULES = [expert_matmul.RULE, expert_swiglu.RULE]
UNTRANSPOSED_GATHER_RULES = [gather_of_transpose.RULE]


def fuse_norms(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every Algorithm 6 / 6ε layer norm with one LAYER_NORM node, every RMS norm with RMS_NORM."""
    return apply_rules(graph, NORM_RULES, refusals)


def fuse_gelu(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every written-out GELU (tanh approximation or erf form) with one GELU node."""
    return apply_rules(graph, GELU_RULES, refusals)


def fuse_attention(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Fuse every matching head of Algorithm 4 into one ATTENTION op."""
    return apply_rules(graph, ATTENTION_RULES, refusals)


def fuse_swiglu(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every SiLU(W₁ X) ⊙ W₃ X with one SWIGLU over the packed projection [W₁; W₃] X."""
    return apply_rules(graph, SWIGLU_RULES, refusals)


def fuse_rotary(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every rotate-half rotary embedding with one ROTARY node, then every rotation of a head's first
    rows joined to the rest with a partial one. Two walks: the second counts the uses of the rotated slice
    in the graph the first made, where the halves the rotation read are gone."""
    graph, whole = apply_rules(graph, ROTARY_RULES, refusals)
    graph, partial = apply_rules(graph, PARTIAL_ROTARY_RULES, refusals)
    return graph, whole or partial


def stable_log_softmax(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace log ∘ softmax (through the moves and one-hot picks between them) with a stable log-softmax."""
    return apply_rules(graph, LOG_SOFTMAX_RULES, refusals)


def pick_one_hot(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every checked one-hot pick Σ_a [[range = w]] ⊙ p with one gather_elements."""
    return apply_rules(graph, PICK_RULES, refusals)


def pick_before_slice(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every one-entry pick from a slice with the pick from the whole, sliced (after log_softmax, so that
    the whole is the log-softmax, not the softmax it replaced)."""
    return apply_rules(graph, SLICED_PICK_RULES, refusals)


def gather_untransposed(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every gather from a transpose with the gather from the stored tensor, its result transposed (before
    the autodiff: no transposed copy of an embedding table, forward or backward)."""
    return apply_rules(graph, UNTRANSPOSED_GATHER_RULES, refusals)


def fuse_experts(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every product with per-row gathered expert matrices, Σ_j W[r, i, j] x[j], with one EXPERT_MATMUL."""
    return apply_rules(graph, EXPERT_RULES, refusals)
