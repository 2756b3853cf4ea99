"""GroupQueryAttention over a cache → the same kernel driven by onnxruntime-genai's attention_mask.

    group_query_attention(QKV, K_past, V_past, cos(θ(P)), sin(θ(P)); cached, rotary)     P = past + arange(s)
      ⟶  group_query_attention(QKV, K_past, V_past, cos(θ(N)), sin(θ(N)), attention_mask; cached, rotary, lengths)
                                                                                    N = arange(positions)

What genai's own builder writes (its make_attention_mask_reformatting for GroupQueryAttention): the kernel
reads each row's length from the attention mask (seqlens_k = Σ mask − 1, total = the mask's width) and
keeps the cache compact, each row's keys at the front of its rows, so that a right-padded batch continues
every row from its own last token with no mask over the keys; it finds each row's positions from the same
lengths and looks the rotation's angles up in tables of every position, θ computed at N instead of P.

Exact where the mask is all ones: the lengths are then past + s for every row and the positions P, the
attention the rule matched. With padding, the step is the kernel's (ir/ops/fused_kernels.py, `lengths`):
its past must be the compact cache its previous step returned, which is what genai feeds back. That is
why the rule runs only on a step genai_interface.py asks it for (its graph's meta names the mask input and
the number of positions), never on a graph whose caller passes keys with padding in their midst.

Refused, with the reason: a GroupQueryAttention without a cache, with the last-position cut, or whose
rotation stays outside the kernel (a partial one: its positions would still be the cache's length); and
tables computed from anything but P, or through an op that has positions in its attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.ir.ops import op_def
from pseudoformer.ir.ops.fused_kernels import gqa_operands
from pseudoformer.ir.types import DType
from pseudoformer.passes.rule import Context, Rule

# what genai_interface.genai_step puts in a step graph's meta to ask for this rule
META = "kv_lengths"


@dataclass
class Match:
    att: Node
    src: tuple[Node, ...]


def is_positions(n: Node) -> bool:
    """past + arange(s): the step's positions, counted from the cache's length (passes/kv_cache.py)."""
    return n.op is Op.ADD and any(a.op is Op.ARANGE and b.op is Op.DIM and b.src[0].op is Op.INPUT
                                  for a, b in (n.src, n.src[::-1]))


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.GROUP_QUERY_ATTENTION or not n.attrs.get("cached") or n.attrs.get("lengths"):
        return None
    return Match(n, src)


def _constant(n: Node, seen: dict[int, bool]) -> bool:
    """Whether `n` reads no input (nor an input's size)."""
    if id(n) not in seen:
        seen[id(n)] = n.op is not Op.INPUT and all(_constant(s, seen) for s in n.src)
    return seen[id(n)]


def _reads_positions_only(n: Node, seen: dict[int, bool], constant: dict[int, bool]) -> bool:
    """Whether `n` is computed from constants, parameters and the positions P alone, P through ops that
    compute each position from itself (elementwise, unsqueeze: no position counts in attributes)."""
    if id(n) not in seen:
        if is_positions(n) or _constant(n, constant):
            seen[id(n)] = True
        elif not (op_def(n.op).elementwise or n.op is Op.UNSQUEEZE):
            seen[id(n)] = False
        else:
            seen[id(n)] = all(_reads_positions_only(s, seen, constant) for s in n.src)
    return seen[id(n)]


def check(m: Match, ctx: Context) -> str | None:
    qkv, _, tables = gqa_operands(m.src, m.att.attrs)
    if m.att.attrs.get("last") or (len(qkv) == 3 and qkv[0].shape[1] != qkv[1].shape[1]):
        return "the queries are the last position alone; genai's step gives the logits of every new position"
    if not tables:
        return "the rotation is not inside the kernel (a partial rotation stays outside), and outside it " \
               "would rotate at the cache's length, not at each row's"
    seen: dict[int, bool] = {}
    constant: dict[int, bool] = {}
    if not all(_reads_positions_only(t, seen, constant) for t in tables):
        return "the rotation's tables are computed from more than the positions past + arange(s), or " \
               "through an op with positions in its attributes"
    return None


def every_position(t: Node, count: int, memo: dict[int, Node]) -> Node:
    """`t` computed at the positions 0 … count − 1 instead of P (a table of every position)."""
    if id(t) in memo:
        return memo[id(t)]
    if is_positions(t):
        out = Node.at(t, Op.ARANGE, (Node(Op.CONST, (), {"value": count, "dtype": DType.int64}),), {"dim": count})
    elif not t.src:
        out = t
    else:
        src = tuple(every_position(s, count, memo) for s in t.src)
        out = t if all(a is b for a, b in zip(src, t.src, strict=True)) else \
            Node.at(t, t.op, src, dict(t.attrs))
    memo[id(t)] = out
    return out


def rule(mask: Node, count: int) -> Rule:
    """The rule for a step whose attention mask is the input `mask` and whose positions are < `count`."""
    memo: dict[int, Node] = {}  # the tables of every position, shared by the layers that share P's tables

    def rewrite(m: Match, root: Node) -> Node:
        qkv, past, tables = gqa_operands(m.src, m.att.attrs)
        full = [every_position(t, count, memo) for t in tables]
        out = Node.at(root, Op.GROUP_QUERY_ATTENTION, (*qkv, *past, *full, mask), {**m.att.attrs, "lengths": True})
        assert out.type == root.type, f"the lengths form changed the type {root.type} to {out.type}"
        return out

    return Rule("group_query_attention_lengths", match, rewrite, check)
