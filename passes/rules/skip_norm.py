"""A residual sum and the norm over its last axis that reads it → one skip norm (onnxruntime's kernel).

    h = x + y [+ b]                         add(x, y), or add(add(x, y), b) with b a vector (a bias)
    n = rms_norm(h, γ) | layer_norm(h, γ, β)   over h's last axis
      ⟶  s = skip_rms_norm(x, y, γ[, b]) | skip_layer_norm(x, y, γ, β[, b]);  n = get(s, 0);  h = get(s, 1)

Llama's and GPT-2's layers are made of these (genai's Llama is SkipSimplifiedLayerNormalization
nodes): the kernel adds, normalises and gives both the norm and the sum, which the next residual
reads. A bias added after the sum (GPT-2's MLP output, (x + y) + b) is the kernel's bias operand.
The rule matches at the sum, so that every reader of h, the norm included, reads the fused op.

Refused, with the reason: operands of another shape than the sum (the kernel does not broadcast),
a sum of rank other than 2 or 3 or not of floats, a norm over another axis or with γ, β not vectors,
and a γ or β computed in the graph rather than a weight.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule

_SKIP = {Op.RMS_NORM: Op.SKIP_RMS_NORM, Op.LAYER_NORM: Op.SKIP_LAYER_NORM}


@dataclass
class Match:
    add: Node
    x: Node
    y: Node
    bias: Node | None
    norms: list[Node]  # of the input graph, reading the sum as their x
    norm: Node | None = None  # the one that fuses (check picks it)


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.ADD:
        return None
    norms = [u for u in ctx.consumers.of(n) if u.op in _SKIP and u.src[0] is n]
    if not norms:
        return None
    x, y = src
    bias = None
    for inner, vector in ((x, y), (y, x)):  # (x + y) + b: the bias after the residual sum
        if (vector.type.rank == 1 and inner.op is Op.ADD and inner.type.shape == n.type.shape
                and ctx.used_once(inner)):
            (x, y), bias = inner.src, vector
            break
    return Match(n, x, y, bias, norms)


def _last_axis(norm: Node) -> bool:
    return norm.attrs["axis"] % norm.type.rank == norm.type.rank - 1 and all(w.type.rank == 1 for w in norm.src[1:])


def check(m: Match, ctx: Context) -> str | None:
    h = m.add.type
    if not m.x.type.shape == m.y.type.shape == h.shape:
        return f"the sum broadcasts {m.x.type} and {m.y.type}; the kernel adds tensors of one shape"
    if h.rank not in (2, 3) or not h.dtype.is_float:
        return f"the kernel takes a float sum of rank 2 or 3, not {h}"
    m.norm = next((u for u in m.norms if _last_axis(u)), None)
    if m.norm is None:
        return "the norm that reads the sum is not over its last axis with vectors γ, β"
    weights = [*m.norm.src[1:], *([m.bias] if m.bias is not None else [])]
    if any(w.op not in (Op.PARAM, Op.CONST) for w in weights):
        return "the norm's γ or β, or the bias, is computed in the graph, not a weight"
    return None


def rewrite(m: Match, root: Node) -> tuple[Node, dict[int, Node]]:
    norm = m.norm
    assert norm is not None
    operands = (m.x, m.y, *norm.src[1:], *([m.bias] if m.bias is not None else []))
    fused = Node.at(root, _SKIP[norm.op], operands, {"eps": float(norm.attrs["eps"])})
    total = Node.at(root, Op.GET, (fused,), {"index": 1})
    normed = Node.at(norm, Op.GET, (fused,), {"index": 0})
    assert total.type == root.type and normed.type == norm.type, "skip norm fusion changed a type"
    return total, {id(norm): normed}


RULE = Rule("skip_norm", match, rewrite, check)
