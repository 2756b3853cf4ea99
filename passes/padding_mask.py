"""Padding: an `attention_mask` model input that hides padded keys from every attention over them.

    attention(Q, K, V, M)  →  attention(Q, K, V, M ∧ keep[b, 1, 1, t'])   keep = attention_mask ≠ 0
    attention(Q, K, V, B)  →  attention(Q, K, V, where(keep[b, 1, 1, t'], B, −∞))   for a float bias B

The paper's algorithms take one unpadded sequence; a batch of sequences of different lengths is
padded on the right to one length, and HuggingFace models take `attention_mask` (1 real, 0 pad) for
it. This pass adds that input, one per token input (`attention_mask` when the model has one token
input, `<name>_attention_mask` otherwise), and ANDs it into the mask of every fused attention whose
keys are that input's positions: self-attention over it, and the decoder's cross-attention over
the encoder's. Outputs at real positions then equal the unpadded run's; outputs at padded positions
are whatever the padding computes, as in HuggingFace. (Left padding would leave a causal query
with no key to see; pad on the right.)
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node, Op, TensorType
from pseudoformer.ir.types import DType


class PaddingMaskError(ValueError):
    """The graph has no fused attention over a token input's positions to mask."""


def mask_input_name(token_input: str, n_token_inputs: int) -> str:
    return "attention_mask" if n_token_inputs == 1 else f"{token_input}_attention_mask"


def _token_inputs(graph: Graph) -> list[Node]:
    return [n for n in graph.inputs if n.dtype is DType.int64 and n.type.rank == 2 and isinstance(n.shape[1], str)]


def padding_mask_inputs(graph: Graph) -> list[str]:
    """The names of the mask inputs add_padding_masks gives `graph`."""
    tokens = _token_inputs(graph)
    return [mask_input_name(t.attrs["name"], len(tokens)) for t in tokens]


def mask_keys(n: Node, src: tuple[Node, ...], keep: Node) -> Node:
    """The attention `n` over operands `src` with the keys where `keep` [batch, S] is false masked out, on
    top of its own mask or bias if it has one."""
    # [batch, S] → [batch, 1, …, 1, S]: broadcast over heads and queries
    pad = Node.at(n, Op.UNSQUEEZE, (keep,), {"axes": list(range(1, n.src[1].type.rank - 1))})
    if len(src) == 3:
        mask = pad
    elif src[3].dtype is DType.bool:
        mask = Node.at(n, Op.AND, (src[3], pad))
    else:  # an additive bias: −∞ at the padded keys
        ninf = Node(Op.CONST, (), {"value": float("-inf"), "dtype": src[3].dtype})
        mask = Node.at(n, Op.WHERE, (pad, src[3], ninf))
    return Node.at(n, Op.ATTENTION, (*src[:3], mask), dict(n.attrs))


def add_padding_masks(graph: Graph) -> Graph:
    """`graph` with an attention_mask input per token input, applied to every attention over its keys."""
    tokens = _token_inputs(graph)
    if not tokens:
        raise PaddingMaskError("the model has no token-sequence input ([batch, positions] ids) to pad")
    keep: dict[str, tuple[Node, Node]] = {}  # positions dim → (mask input, keep [batch, positions])
    for t in tokens:
        name = mask_input_name(t.attrs["name"], len(tokens))
        m = Node(Op.INPUT, (), {"name": name, "type": TensorType(DType.int64, t.shape)})
        zero = Node(Op.CONST, (), {"value": 0, "dtype": DType.int64})
        keep[t.shape[1]] = (m, Node(Op.NE, (m, zero)))
    memo: dict[int, Node] = {}
    masked = 0

    def get(n: Node) -> Node:
        nonlocal masked
        if id(n) in memo:
            return memo[id(n)]
        src = tuple(get(s) for s in n.src)
        out = n if all(a is b for a, b in zip(src, n.src, strict=True)) else \
            Node.at(n, n.op, src, dict(n.attrs), type=n.type)
        if n.op is Op.ATTENTION and n.src[1].shape[-2] in keep:
            out = mask_keys(n, src, keep[n.src[1].shape[-2]][1])
            masked += 1
        memo[id(n)] = out
        return out

    for n in graph.nodes():
        get(n)
    if masked == 0:
        raise PaddingMaskError("no fused attention reads the token inputs' positions as keys (padding masks are "
                               "applied to fused attention ops: compile at -O2)")
    inputs = [*graph.inputs, *(m for m, _ in keep.values())]
    return Graph(inputs=inputs, outputs=[(name, get(n)) for name, n in graph.outputs],
                 meta=dict(graph.meta))
