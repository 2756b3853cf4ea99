"""Head batching: the H fused heads of Algorithm 5 become one projection per input and one 4-D ATTENTION.

    for h ∈ [H]:  Yʰ = ATTENTION(P(W^h_q, b^h_q, X)ᵀ, P(W^h_k, b^h_k, Z)ᵀ, P(W^h_v, b^h_v, Z)ᵀ[, M])ᵀ
    Y = [Y¹; …; Y^H]                                     CONCAT on the feature axis
  →
    Q = P([W¹_q; …; W^H_q], [b¹_q; …; b^H_q], X)         [.., H·d_attn, s_x], likewise K, V from Z
    Y = heads_to_rows(ATTENTION(rows_to_heads(Q), rows_to_heads(K), rows_to_heads(V)[, M]))

with P(W, b, X) = W X + b 1ᵀ (bias optional), rows_to_heads = reshape [.., H·d, s] → [.., H, d, s] then
transpose to [.., H, s, d], and heads_to_rows its inverse, so head 1's rows come first as in the
paper's row stack. Projections that read the same input (Q, K, V of self-attention; K, V of
cross-attention) share one matmul over their stacked weights and are sliced apart after it.

The weights are stacked with CONCAT of the per-head PARAMs rather than replaced by new PARAMs, so
checkpoint names stay as they are; ONNX Runtime folds a Concat of initializers into a constant.

Rotary embeddings: a projection may be rotated, ROTARY(W X + b 1ᵀ, c, s) (Llama's RoPE, made by
rules/rotary.py), with the same angles for every head; the rotation then applies to the stacked
heads after the split, [.., H, d, s], the angles broadcasting over the head axis. A partial rotation
of each head's first r rows (GPT-NeoX's, rules/partial_rotary.py) is batched alike, its rotary_dim kept.

Per-head norms: a projection may be RMS-normed over each head's rows before its rotation,
ROTARY(RMS_NORM(W X + b 1ᵀ, γ), c, s) (Qwen3's and Gemma 3's q/k norms), γ shared by the heads; the norm
then applies to the stacked heads after the split, over d, before the rotation.

Masks: one mask shared by the heads is shared by the batched attention; masks that differ by head
(ALiBi's per-head slopes, a bias learned per head) are stacked along the head axis, [H, s_q, s_k].

Grouped-query attention: when the heads' keys and values are shared by groups of G consecutive heads
(Llama's W_k^{⌈h/G⌉}, after CSE one K and one V node per group), only the H_kv = H / G distinct
key/value projections are stacked, and the attention is the grouped 4-D form (q [.., H, s, d], k and
v [.., H_kv, s, d]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pseudoformer.ir import Node, Op
from pseudoformer.ir.types import DType
from pseudoformer.passes.pass_base import Pass
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.attention import swap_last
from pseudoformer.passes.rules.matching import describe, escaping, same

KINDS = ("q", "k", "v")


@dataclass
class _Proj:
    """W X + B for one head and one of q, k, v, perhaps rotated by angles (c, s) in its first rotary_dim
    rows (0: all of them); B is [d, 1] or absent."""

    w: Node
    b: Node | None
    x: Node
    rot: tuple[Node, Node] | None = None
    rotary_dim: int = 0
    norm: tuple[Node, float] | None = None  # (γ, ε) of an RMS norm over the head's rows, before the rotation


@dataclass
class HeadsMatch:
    src: tuple[Node, ...]  # the row stack's operands, rebuilt
    heads: list[Node] = field(default_factory=list)  # the ATTENTION nodes, in row-stack order
    projs: list[dict[str, _Proj]] = field(default_factory=list)
    kv_heads: list[int] = field(default_factory=list)  # the heads whose k and v are distinct (all, without GQA)
    interior: list[Node] = field(default_factory=list)
    problem: str | None = None


def _is_swap(n: Node) -> bool:
    return n.op is Op.TRANSPOSE and list(n.attrs["perm"]) == swap_last(n.type.rank)


def _projection(t: Node, interior: list[Node]) -> _Proj | None:
    """t = (W X + B)ᵀ, or ROTARY(W X + B, c, s)ᵀ, with W a matrix and B a [d, 1] column (or no B)."""
    if not _is_swap(t):
        return None
    p = t.src[0]
    found = [t, p]
    rot, rotary_dim = None, 0
    if p.op is Op.ROTARY and not p.attrs.get("heads", 0) and p.attrs["axis"] % p.type.rank == p.type.rank - 2:
        rot, rotary_dim, p = (p.src[1], p.src[2]), int(p.attrs.get("rotary_dim", 0)), p.src[0]
        found.append(p)
    norm = None
    if p.op is Op.RMS_NORM and p.attrs["axis"] % p.type.rank == p.type.rank - 2:
        norm, p = (p.src[1], float(p.attrs["eps"])), p.src[0]
        found.append(p)
    b = None
    if p.op is Op.ADD:
        mm = [i for i, s in enumerate(p.src) if s.op is Op.MATMUL]
        if not mm:
            return None
        b, p = p.src[1 - mm[-1]], p.src[mm[-1]]
        found.append(p)
        if b.shape != (p.shape[-2], 1):
            return None
    if p.op is not Op.MATMUL:
        return None
    w, x = p.src
    if w.type.rank != 2 or x.type.rank != p.type.rank:
        return None
    interior += found
    return _Proj(w, b, x, rot, rotary_dim, norm)


def _match(n: Node, src: tuple[Node, ...], ctx: Context) -> HeadsMatch | None:
    if n.op is not Op.CONCAT or n.type.rank < 2 or n.attrs["axis"] % n.type.rank != n.type.rank - 2:
        return None
    if not all(_is_swap(y) and y.src[0].op is Op.ATTENTION and y.src[0].type.rank == y.type.rank for y in src):
        return None  # not a row stack of fused heads (yet): nothing to say
    m = HeadsMatch(src=src)
    for h, y in enumerate(src):
        att = y.src[0]
        m.heads.append(att)
        m.interior += [y, att]
        projs = {kind: _projection(t, m.interior) for kind, t in zip(KINDS, att.src[:3], strict=True)}
        missing = [kind for kind, p in projs.items() if p is None]
        if missing:
            m.problem = f"head {h + 1}'s {', '.join(missing)} is not a projection (W X + b 1ᵀ)ᵀ"
            return m
        m.projs.append(projs)  # type: ignore[arg-type]
    return m


def _groups(m: HeadsMatch) -> str | None:
    """Find the heads with distinct keys and values (m.kv_heads); why they form no grouped batch, if not."""
    # After CSE a shared projection's weight is one PARAM node, whatever the attention fusion made around it.
    first_of: dict[tuple[int, int], int] = {}
    group = [first_of.setdefault((id(p["k"].w), id(p["v"].w)), h) for h, p in enumerate(m.projs)]
    m.kv_heads = sorted(set(group))
    n_kv = len(m.kv_heads)
    if n_kv == len(m.heads):
        return None
    size = len(m.heads) // n_kv
    if len(m.heads) % n_kv or any(group[h] != m.kv_heads[h // size] for h in range(len(m.heads))):
        return f"the {len(m.heads)} heads share {n_kv} keys and values, but not in groups of consecutive heads"
    if len({id(p["k"].w) for p in m.projs}) != n_kv or len({id(p["v"].w) for p in m.projs}) != n_kv:
        return "the heads share keys and values in different groups"
    return None


def _check(m: HeadsMatch, ctx: Context) -> str | None:
    if m.problem is not None:
        return m.problem
    if len(m.heads) < 2:
        return "one head: there is nothing to batch"
    why = _groups(m)
    if why is not None:
        return why
    first, p0 = m.heads[0], m.projs[0]
    for h, (att, projs) in enumerate(zip(m.heads, m.projs, strict=True)):
        if att.attrs["scale"] != first.attrs["scale"] or att.attrs["causal"] != first.attrs["causal"]:
            return f"head {h + 1} has scale/causal {att.attrs['scale']}/{att.attrs['causal']}, head 1 " \
                   f"{first.attrs['scale']}/{first.attrs['causal']}"
        for attr in ("window", "softcap"):
            if att.attrs.get(attr, 0) != first.attrs.get(attr, 0):
                return f"head {h + 1} has {attr} {att.attrs.get(attr, 0)}, head 1 {first.attrs.get(attr, 0)}"
        if len(att.src) != len(first.src):
            return f"head {h + 1} is {'' if len(att.src) == 4 else 'not '}masked and head 1 is" \
                   f"{'' if len(first.src) == 4 else ' not'}"
        if len(att.src) == 4 and (att.src[3].dtype, att.src[3].type.rank) != (first.src[3].dtype,
                                                                                first.src[3].type.rank):
            return f"head {h + 1}'s mask {att.src[3].type} and head 1's {first.src[3].type} do not stack"
        for kind in KINDS:
            a, b = projs[kind], p0[kind]
            if a.x is not b.x:
                return f"head {h + 1}'s {kind} reads another input than head 1's"
            if a.w.type != b.w.type or (a.b is None) != (b.b is None):
                return f"head {h + 1}'s {kind} projection {a.w.type} differs in size or bias from head 1's {b.w.type}"
            if (a.rot is None) != (b.rot is None) or a.rotary_dim != b.rotary_dim or (a.rot and b.rot and any(
                    x is not y for x, y in zip(a.rot, b.rot, strict=True))):
                return f"head {h + 1}'s {kind} is rotated differently from head 1's"
            if (a.norm is None) != (b.norm is None) or (a.norm and b.norm and (
                    a.norm[0] is not b.norm[0] or a.norm[1] != b.norm[1])):
                return f"head {h + 1}'s {kind} is normed differently from head 1's"
    leak = escaping(ctx, m.src, m.interior)
    if leak is not None:
        return f"a per-head value is used outside the heads' row stack: {describe(leak)}"
    return None


def _node(like: Node, op: Op, src: tuple[Node, ...], **attrs: object) -> Node:
    return Node.at(like, op, src, attrs)


def _stack(like: Node, parts: list[Node]) -> Node:
    """The rows of `parts` stacked; a stack of unsqueezed vectors is the unsqueeze of their stack."""
    if all(p.op is Op.UNSQUEEZE and list(p.attrs["axes"]) == [1] and p.src[0].type.rank == 1 for p in parts):
        return _node(like, Op.UNSQUEEZE, (_stack(like, [p.src[0] for p in parts]),), axes=[1])
    return parts[0] if len(parts) == 1 else _node(like, Op.CONCAT, tuple(parts), axis=0)


def _heads_of(m: HeadsMatch, kind: str) -> list[dict[str, _Proj]]:
    """The projections of the heads with distinct `kind`: all for q, the H_kv groups' for k and v."""
    return m.projs if kind == "q" else [m.projs[h] for h in m.kv_heads]


def _project(m: HeadsMatch, n: Node) -> dict[str, Node]:
    """Each of q, k, v for all (distinct) heads as [.., H·d, s], with one matmul per distinct (input, has-bias)."""
    groups: dict[tuple[int, bool], list[str]] = {}
    for kind in KINDS:
        p = m.projs[0][kind]
        groups.setdefault((id(p.x), p.b is not None), []).append(kind)
    out: dict[str, Node] = {}
    for kinds in groups.values():
        p0 = m.projs[0][kinds[0]]
        w = _stack(n, [projs[k].w for k in kinds for projs in _heads_of(m, k)])
        y = _node(n, Op.MATMUL, (w, p0.x))
        if p0.b is not None:
            y = _node(n, Op.ADD, (y, _stack(n, [projs[k].b for k in kinds for projs in _heads_of(m, k)])))
        if len(kinds) == 1:
            out[kinds[0]] = y
            continue
        axis, start = y.type.rank - 2, 0
        for k in kinds:
            rows = len(_heads_of(m, k)) * m.projs[0][k].w.shape[0]
            bounds = (_node(n, Op.CONST, (), value=start, dtype=DType.int64),
                      _node(n, Op.CONST, (), value=start + rows, dtype=DType.int64))
            out[k] = _node(n, Op.SLICE, (y, *bounds), axis=axis, dim=rows)
            start += rows
    return out


def _masks(m: HeadsMatch, n: Node) -> Node:
    """The heads' masks for the batched attention, whose head axis sits just before the queries' axis.

    One mask shared by every head stays as it is if it is a [s_q, s_k] matrix, and gets a head axis of 1
    if it also varies by example; per-head masks (ALiBi's slopes) are stacked along a new head axis."""
    masks = [att.src[3] for att in m.heads]
    if all(same(x, masks[0]) for x in masks[1:]):
        masks = masks[:1]
        if masks[0].type.rank <= 2:
            return masks[0]
    axis = max(masks[0].type.rank - 2, 0)
    parts = [_node(n, Op.UNSQUEEZE, (x,), axes=[axis]) for x in masks]
    return parts[0] if len(parts) == 1 else _node(n, Op.CONCAT, tuple(parts), axis=axis)


def _rewrite(m: HeadsMatch, n: Node) -> Node:
    heads = len(m.heads)
    stacked = _project(m, n)
    operands = []
    for kind in KINDS:
        y = stacked[kind]
        *lead, rows, s = y.shape
        count = len(_heads_of(m, kind))
        split = _node(n, Op.RESHAPE, (y,), shape=[*lead, count, rows // count, s])
        norm, rot, rotary_dim = m.projs[0][kind].norm, m.projs[0][kind].rot, m.projs[0][kind].rotary_dim
        if norm is not None:  # over each head's d rows, γ [d] shared by the heads
            split = _node(n, Op.RMS_NORM, (split, norm[0]), axis=split.type.rank - 2, eps=norm[1])
        if rot is not None:  # [.., H, d, s] rotated along d, the angles [d/2, s] shared by the heads
            partial = {"rotary_dim": rotary_dim} if rotary_dim else {}
            split = _node(n, Op.ROTARY, (split, *rot), axis=split.type.rank - 2, **partial)
        operands.append(_node(n, Op.TRANSPOSE, (split,), perm=swap_last(split.type.rank)))
    if len(m.heads[0].src) == 4:
        operands.append(_masks(m, n))
    att = _node(n, Op.ATTENTION, tuple(operands), **m.heads[0].attrs)
    back = _node(n, Op.TRANSPOSE, (att,), perm=swap_last(att.type.rank))  # [.., H, d_v, s_x]
    *lead, _, d_v, s_x = back.shape
    out = _node(n, Op.RESHAPE, (back,), shape=[*lead, heads * d_v, s_x])
    assert out.type == n.type, f"head batching changed the type {n.type} to {out.type}"
    return out


RULE = Rule("head_batching", _match, _rewrite, _check)


batch_heads = Pass.from_rules("head_batching", "Algorithm 5's H heads → one projection per Q/K/V (packed), one 4-D "
                              "attention op", [RULE])
