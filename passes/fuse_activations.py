"""Fuse the normalisation and activation formulas the frontend writes out into single ops.

The paper defines layer_norm (Algorithm 6) and GPT-2's GELU as formulas, and the frontend lowers
them literally: about twenty nodes per layer norm and eleven per tanh GELU. Backends have one
kernel for each (ONNX LayerNormalization and Gelu), which is faster and, for layer norm, more
accurate than the sum-of-quotients form. These passes find the formulas and replace them:

  layer_norm_fusion   passes/rules/layer_norm.py  →  LAYER_NORM(x, γ, β; axis, eps)
                      passes/rules/rms_norm.py    →  RMS_NORM(x, γ; axis, eps)
  gelu_fusion         passes/rules/gelu_tanh.py   →  GELU(x; approximate="tanh" | "none")

Both expect `cse` and `simplify` to have run (they also work on the raw graph, just with more
to look through). A match the rule refuses — a wrong divisor or constant, an intermediate used
elsewhere — leaves the formula as it is; pass a list as `refusals` to collect the reasons as
(rule name, reason, span).
"""

from __future__ import annotations

from pseudoformer.ir import Graph
from pseudoformer.passes.rule import apply_rules
from pseudoformer.passes.rules import gelu_tanh, layer_norm, rms_norm

NORM_RULES = [layer_norm.RULE, rms_norm.RULE]
GELU_RULES = [gelu_tanh.RULE]


def fuse_norms(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every Algorithm 6 / 6ε layer norm with one LAYER_NORM node, every RMS norm with RMS_NORM."""
    return apply_rules(graph, NORM_RULES, refusals)


def fuse_gelu(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Replace every written-out GELU (tanh approximation or erf form) with one GELU node."""
    return apply_rules(graph, GELU_RULES, refusals)
