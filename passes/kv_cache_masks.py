"""The mask or score bias of a cached attention in the decode step: the full run's, rows of the new positions.

A fused attention may carry a mask or additive bias computed from positions alone (ALiBi's m·(t_z − t_x),
a strided [[(t_x − t_z) mod s = 0]], a prefix length given per example), [.., ℓ, ℓ] over queries × keys.
In the step, the queries are the new positions and the keys every position so far, so the operand is

    M_step = M(ℓ = past + new)[.., past : past + new, :]

the same subgraph built at the full length — every position from the first, the run-time dim renamed
to the keys' — of which the rows of the new queries are kept. An operand that reads the tokens themselves
(their embeddings, a padding of the sequence) is not a function of positions, and the derivation refuses it.
"""

from __future__ import annotations

from typing import Any

from pseudoformer.ir import Node, Op


def reads_tokens(mask: Node, seq: str) -> bool:
    """Whether the operand depends on the values of an input that varies by position (the decoder's
    tokens); their count (a DIM of them) is a position and may be read."""
    seen: set[int] = set()
    stack = [mask]
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op is Op.DIM:
            continue
        seen.add(id(m))
        if m.op is Op.INPUT and seq in m.shape:
            return True
        stack.extend(m.src)
    return False


def step_operand(mask: Node, seq: str, keys: str, total: Node, past_len: Node) -> Node:
    """The operand for the step's queries (dim `seq`) over its keys (dim `keys`, past + new); `total`
    and `past_len` are the step's run-time sizes."""
    full = _at_full_length(mask, seq, keys, total)
    rows = mask.type.rank - 2
    if rows < 0 or mask.shape[rows] != seq:
        return full  # the same for every query: broadcast over them
    return Node.at(mask, Op.SLICE, (full, past_len, total), {"axis": rows, "dim": seq})


def _at_full_length(root: Node, seq: str, keys: str, total: Node) -> Node:
    memo: dict[int, Node] = {}

    def rename(value: Any) -> Any:
        if value == seq:
            return keys
        if isinstance(value, (list, tuple)):
            return type(value)(rename(v) for v in value)
        return value

    for n in root.walk():  # operands before users
        if n.op in (Op.INPUT, Op.PARAM, Op.CONST):
            memo[id(n)] = n
        elif n.op is Op.DIM and n.src[0].shape[n.attrs["axis"]] == seq:
            memo[id(n)] = total  # ℓ of the full run: every position so far
        else:
            src = tuple(memo[id(s)] for s in n.src)
            attrs = {k: rename(v) for k, v in n.attrs.items()}
            memo[id(n)] = Node.at(n, n.op, src, attrs)
    return memo[id(root)]
