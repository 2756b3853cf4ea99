"""Attention fusion: one head of Algorithm 4, in the paper's layout, becomes one ATTENTION op.

    S  = Kᵀ Q                                          [.., s_z, s_x]   keys × queries
    S' = S under mask, bias and scale layers, in any order:
           where(¬M, −∞, ·)   where(M, ·, −∞)   · + where(M, 0, −∞)   · + B   · − B   ·/c   ·×c
         and, below the masks and biases and above the scale, a soft-cap c·tanh(·/c) (Gemma 2's)
    Ṽ  = V · softmax(S', axis=keys)                     [.., d_v, s_x]
  →
    Ṽ  = transpose(ATTENTION(transpose(Q), Kᵀ, transpose(V)[, transpose(mask)]; scale=1/c, causal, window))

ATTENTION is row-major (q [.., s_q, d], k [.., s_k, d], v [.., s_k, d_v]), so the paper's column
layout is transposed in and out; those transposes cancel against the frontend's own in `simplify`.
M [s_z, s_x] = INDEX_MASK(seq, seq, rel="<=") — key t_z ≤ query t_x, the paper's [[t ≤ t']] — is
`causal` with no mask operand; a conjunct t_x − t_z < w beside it (Mistral's sliding window,
[[t ≤ t' ∧ t' − t < w]]) is `window=w`; any other bool mask becomes the operand, transposed: a
function of (t_z, t_x) and sizes (a strided mask, [[(t' − t) mod s = 0]]), or one that also varies by
example (a prefix length given as an input), as long as it broadcasts to the scores.

An additive term B that does not lead back to Kᵀ Q is a score bias (ALiBi's m·(t − t'), T5's learned
w[t' − t + ℓ]): ATTENTION adds a float mask to its scaled scores, so B becomes that operand, times
the scale where it was added before the scaling. Bool masks and biases together become one operand,
where(M, B, −∞).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pseudoformer.ir import Node, Op
from pseudoformer.ir.types import DType, broadcast_shapes
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import const_value, describe, escaping

# What a relation i rel j becomes under ¬ and under swapping i and j (a transposed mask).
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_SWAP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def swap_last(rank: int) -> list[int]:
    """The permutation that exchanges the last two axes: the paper's ᵀ on a batched matrix."""
    return [*range(rank - 2), rank - 1, rank - 2]


def transposed(x: Node, like: Node) -> Node:
    """xᵀ over the last two axes, looking through an existing ᵀ rather than stacking another."""
    perm = swap_last(x.type.rank)
    if x.op is Op.TRANSPOSE and list(x.attrs["perm"]) == perm:
        return x.src[0]
    return Node.at(like, Op.TRANSPOSE, (x,), {"perm": perm})


@dataclass
class _Keep:
    """A keep-mask over keys × queries: `node` (or its negation) is True where a score survives."""

    node: Node
    negated: bool
    inside_scale: bool  # applied before the scale, so −∞ goes through the scaling


@dataclass
class _Bias:
    """An additive score term: `node` (subtracted if `negated`) added to the scores."""

    node: Node
    negated: bool
    inside_scale: bool


@dataclass
class AttentionMatch:
    src: tuple[Node, ...]  # the final matmul's operands, rebuilt
    kt: Node
    q: Node
    v: Node
    scale: float = 1.0
    softcap: float = 0.0
    keeps: list[_Keep] = field(default_factory=list)
    biases: list[_Bias] = field(default_factory=list)
    interior: list[Node] = field(default_factory=list)
    problem: str | None = None


def _is_neg_inf(n: Node) -> bool:
    v = const_value(n)
    return v is not None and v == -math.inf


def _is_zero(n: Node) -> bool:
    return const_value(n) == 0.0


def _mask_bias(b: Node) -> tuple[Node, bool] | None:
    """B = where(M, 0, −∞) → (M, False); where(N, −∞, 0) → (N, True): the additive mask form."""
    if b.op is not Op.WHERE:
        return None
    c, yes, no = b.src
    if _is_zero(yes) and _is_neg_inf(no):
        return c, False
    if _is_neg_inf(yes) and _is_zero(no):
        return c, True
    return None


def _softcap(x: Node) -> tuple[float, list[Node], Node] | None:
    """c·tanh(s / c) (or tanh(s·(1/c))·c) → (c, [the tanh, the division], s): Gemma 2's soft-capping."""
    if x.op is not Op.MUL:
        return None
    k = next((i for i, s in enumerate(x.src) if const_value(s) is not None), None)
    if k is None or x.src[1 - k].op is not Op.TANH:
        return None
    c, inner = const_value(x.src[k]), x.src[1 - k].src[0]
    if inner.op not in (Op.DIV, Op.MUL) or const_value(inner.src[1]) is None or not c or not math.isfinite(c) or c < 0:
        return None
    d = const_value(inner.src[1])
    if not math.isclose(d if inner.op is Op.DIV else 1.0 / d, c, rel_tol=1e-6):
        return None
    return c, [x.src[1 - k], inner], inner.src[0]


def _peel(m: AttentionMatch, x: Node) -> Node | str:
    """Strip mask and scale layers off the softmax operand down to S; or say what stands in the way."""
    scaled = False
    while x.op is not Op.MATMUL:
        m.interior.append(x)
        if (cap := _softcap(x)) is not None:
            if scaled:
                return f"the soft-capped scores are scaled after the cap ({describe(x)}); scale them inside it"
            if m.softcap:
                return "the scores are soft-capped twice"
            m.softcap = cap[0]
            m.interior += cap[1]
            return _below_cap(m, cap[2])
        if x.op in (Op.DIV, Op.MUL):
            k = next((i for i, s in enumerate(x.src) if const_value(s) is not None), None)
            if k is None or (x.op is Op.DIV and k == 0):
                return f"the scores are scaled by a non-constant ({describe(x)})"
            if scaled:
                return "the scores are scaled twice"
            c = const_value(x.src[k])
            assert c is not None
            if not math.isfinite(c) or c == 0:
                return f"the scale constant {c} is not a finite nonzero number"
            m.scale, scaled = (1.0 / c if x.op is Op.DIV else c), True
            x = x.src[1 - k]
        elif x.op is Op.WHERE:
            c, yes, no = x.src
            if _is_neg_inf(yes):
                m.keeps.append(_Keep(c, True, scaled))
                x = no
            elif _is_neg_inf(no):
                m.keeps.append(_Keep(c, False, scaled))
                x = yes
            else:
                return f"a where sets scores to something other than −∞ ({describe(x)})"
        elif x.op is Op.ADD and (bias := [(i, mb) for i, s in enumerate(x.src)
                                           if (mb := _mask_bias(s)) is not None]):
            i, (c, negated) = bias[-1]
            m.keeps.append(_Keep(c, negated, scaled))
            x = x.src[1 - i]
        elif x.op in (Op.ADD, Op.SUB):
            reach = [_reaches_scores(s) for s in x.src]
            if reach == [True, True]:
                return f"both terms of {describe(x)} lead back to the scores"
            if reach == [False, False]:
                return f"neither term of {describe(x)} leads back to the scores Kᵀ Q"
            i = reach.index(True)
            if x.op is Op.SUB and i == 1:
                return f"the scores are subtracted from something ({describe(x)}), which negates them"
            m.biases.append(_Bias(x.src[1 - i], x.op is Op.SUB, scaled))
            x = x.src[i]
        else:
            return f"the scores pass through {describe(x)} before the softmax"
    return x


def _below_cap(m: AttentionMatch, x: Node) -> Node | str:
    """Under the soft-cap only the scale may stand (ONNX caps the scaled scores, then masks and biases)."""
    while x.op is not Op.MATMUL:
        m.interior.append(x)
        k = next((i for i, s in enumerate(x.src) if const_value(s) is not None), None) \
            if x.op in (Op.DIV, Op.MUL) else None
        if k is None or (x.op is Op.DIV and k == 0) or m.scale != 1.0:
            return f"the scores pass through {describe(x)} inside the soft-cap; only their scale may stand there"
        c = const_value(x.src[k])
        assert c is not None
        if not math.isfinite(c) or c == 0:
            return f"the scale constant {c} is not a finite nonzero number"
        m.scale = 1.0 / c if x.op is Op.DIV else c
        x = x.src[1 - k]
    return x


def _reaches_scores(x: Node) -> bool:
    """Whether x is the scores Kᵀ Q under the layers _peel strips: the term of a sum that is not a bias."""
    for _ in range(64):
        if x.op is Op.MATMUL:
            return x.type.rank >= 2 and all(s.type.rank >= 2 and s.op is not Op.CONST for s in x.src)
        if x.op in (Op.DIV, Op.MUL):
            k = [i for i, s in enumerate(x.src) if const_value(s) is not None]
            if not k or (x.op is Op.DIV and k[0] == 0):
                return False
            x = x.src[1 - k[0]]
        elif x.op is Op.WHERE and (_is_neg_inf(x.src[1]) or _is_neg_inf(x.src[2])):
            x = x.src[2] if _is_neg_inf(x.src[1]) else x.src[1]
        elif x.op is Op.ADD:
            return any(_reaches_scores(s) for s in x.src)
        elif x.op is Op.SUB:
            x = x.src[0]
        else:
            return False
    return False


def _match(n: Node, src: tuple[Node, ...], ctx: Context) -> AttentionMatch | None:
    if n.op is not Op.MATMUL or src[1].op is not Op.SOFTMAX:
        return None
    v, a = src
    s = a.src[0]
    m = AttentionMatch(src=src, kt=s, q=s, v=v, interior=[a])
    found = _peel(m, s)
    if isinstance(found, str):
        m.problem = found
        return m
    m.interior.append(found)
    m.kt, m.q = found.src
    rank = found.type.rank
    if not (m.kt.type.rank == m.q.type.rank == v.type.rank == a.type.rank == rank) \
            or not (m.kt.shape[:-2] == m.q.shape[:-2] == v.shape[:-2]):
        m.problem = f"Kᵀ {m.kt.type}, Q {m.q.type} and V {v.type} do not share their batch dims"
    elif a.attrs["axis"] % rank != rank - 2:
        m.problem = f"the softmax is over axis {a.attrs['axis']} of {a.type}, not over the keys (axis {rank - 2})"
    elif s.type != found.type:
        m.problem = f"the masks broadcast the scores {found.type} to {s.type}"
    return m


def _relation(n: Node, negated: bool) -> str | None:
    """r such that keep[t_z, t_x] = t_z r t_x, when the mask is an index comparison over one length."""
    flip = negated
    swap = False
    while n.op in (Op.NOT, Op.TRANSPOSE):
        if n.op is Op.NOT:
            flip = not flip
        else:
            swap = not swap
        n = n.src[0]
    if n.op is not Op.INDEX_MASK:
        return None
    rows, cols = n.attrs["dims"]
    if not (n.src[0] is n.src[1] or (isinstance(rows, str) and rows == cols)):
        return None  # a comparison of positions over two different lengths is a general mask
    rel = _SWAP[n.attrs["rel"]] if swap else n.attrs["rel"]
    return _NEGATE[rel] if flip else rel


def _conjuncts(n: Node) -> list[Node]:
    return [c for s in n.src for c in _conjuncts(s)] if n.op is Op.AND else [n]


def _positions(n: Node) -> tuple[Node, float, int] | None:
    """(ARANGE, offset, axis) when n is arange + offset laid along `axis` of a [rows, cols] matrix: unsqueezed
    to [n, 1] (axis 0) or [1, n], or a vector broadcast as a row (axis 1); cast and shifted by constants."""
    axis = 1
    if n.op is Op.UNSQUEEZE and n.type.rank == 2:
        axis = 0 if list(n.attrs["axes"]) in ([1], [-1]) else 1
        n = n.src[0]
    if n.type.rank != 1:
        return None
    offset = 0.0
    while n.op in (Op.CAST, Op.ADD, Op.SUB):
        if n.op is Op.CAST:
            n = n.src[0]
            continue
        c = const_value(n.src[1])
        if c is None:
            return None
        offset += c if n.op is Op.ADD else -c
        n = n.src[0]
    return (n, offset, axis) if n.op is Op.ARANGE else None


def _window(n: Node) -> int | None:
    """w when keep[t_z, t_x] = t_x − t_z < w over one length (Mistral's [[t' − t < w]]): a sliding window."""
    swapped = False
    while n.op is Op.TRANSPOSE:
        n, swapped = n.src[0], not swapped
    if n.op is not Op.LT or n.src[0].op is not Op.SUB:
        return None
    w = const_value(n.src[1])
    later, earlier = (_positions(s) for s in n.src[0].src)
    if w is None or w != int(w) or w < 1 or later is None or earlier is None:
        return None
    # t_x (the queries) runs along the columns of [s_z, s_x], the rows of its transpose
    if later[1] != earlier[1] or later[2] != (0 if swapped else 1) or earlier[2] != (1 if swapped else 0):
        return None
    a, b = later[0].src[0], earlier[0].src[0]
    same = a is b or later[0].shape == earlier[0].shape and isinstance(later[0].shape[0], str)
    return int(w) if same else None


def _check(m: AttentionMatch, ctx: Context) -> str | None:
    if m.problem is not None:
        return m.problem
    scores = m.interior[-1].shape
    for k in m.keeps:
        value = const_value(k.node)
        if value is not None:
            if bool(value) == k.negated:
                return "the mask hides every score, so there is nothing to attend to"
            continue  # keeps everything: the rewrite drops it
        if k.node.dtype is not DType.bool or broadcast_shapes(k.node.shape, scores) != scores:
            return f"the mask {k.node.type} is not a bool matrix that broadcasts to the scores {list(scores)}"
        if k.inside_scale and not m.scale > 0:
            return f"−∞ scaled by {m.scale} is not −∞: the mask is applied before a non-positive scale"
    for b in m.biases:
        if b.node.dtype is not m.interior[-1].dtype or broadcast_shapes(b.node.shape, scores) != scores:
            return f"the score bias {b.node.type} does not broadcast to the scores {m.interior[-1].type}"
    leak = escaping(ctx, m.src, m.interior)
    if leak is not None:
        return f"an intermediate of the attention is used elsewhere: {describe(leak)}"
    return None


def _node(like: Node, op: Op, *src: Node, **attrs: object) -> Node:
    return Node.at(like, op, src, attrs)


def _matrix(x: Node, like: Node) -> Node:
    """x with at least two axes (a vector of scores broadcasts as a row), ready to transpose."""
    if x.type.rank >= 2:
        return x
    return _node(like, Op.UNSQUEEZE, x, axes=list(range(2 - x.type.rank)))


def _bias(m: AttentionMatch, n: Node) -> Node | None:
    """The sum of the score biases, each scaled where it was added before the scale; None if there are none."""
    total: Node | None = None
    for b in m.biases:
        if const_value(b.node) == 0.0:
            continue
        t = b.node
        if b.inside_scale and m.scale != 1.0:
            t = _node(n, Op.MUL, t, _node(n, Op.CONST, value=m.scale, dtype=t.dtype))
        if total is None:
            total = _node(n, Op.NEG, t) if b.negated else t
        else:
            total = _node(n, Op.SUB if b.negated else Op.ADD, total, t)
    return total


def _rewrite(m: AttentionMatch, n: Node) -> Node:
    causal = False
    windows: list[tuple[int, Node]] = []
    general: list[Node] = []
    for k in m.keeps:
        if k.node.op is Op.CONST:
            continue  # a mask that keeps everything
        if _relation(k.node, k.negated) == "<=":
            causal = True
            continue
        keep = k.node
        if k.negated:
            keep = keep.src[0] if keep.op is Op.NOT else _node(n, Op.NOT, keep)
        # [[t ≤ t' ∧ t' − t < w]]: each conjunct the kernel knows becomes an attribute.
        for c in _conjuncts(keep) if keep.op is Op.AND else [keep]:
            if _relation(c, False) == "<=":
                causal = True
            elif (w := _window(c)) is not None:
                windows.append((w, c))
            else:
                general.append(c)
    attrs: dict[str, object] = {"scale": m.scale, "causal": causal}
    if m.softcap:
        attrs["softcap"] = m.softcap
    if causal and windows:
        attrs["window"] = min(w for w, _ in windows)
    else:  # a window alone also shows later keys: not what the kernel's window means
        general += [c for _, c in windows]
    operands = [transposed(m.q, n), m.kt, transposed(m.v, n)]
    mask: Node | None = None
    for g in general:  # [s_z, s_x] → ATTENTION's [s_q, s_k]
        g = transposed(_matrix(g, n), n)
        mask = g if mask is None else _node(n, Op.AND, mask, g)
    bias = _bias(m, n)
    if bias is not None:
        bias = transposed(_matrix(bias, n), n)
        if mask is not None:
            bias = _node(n, Op.WHERE, mask, bias, _node(n, Op.CONST, value=-math.inf, dtype=bias.dtype))
        mask = bias
    if mask is not None:
        operands.append(mask)
    att = Node.at(n, Op.ATTENTION, tuple(operands), attrs)
    out = transposed(att, n)
    assert out.type == n.type, f"attention fusion changed the type {n.type} to {out.type}"
    return out


RULE = Rule("attention", _match, _rewrite, _check)
