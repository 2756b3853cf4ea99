"""Derive the incremental decoder (prefill + decode step with a key/value cache) from a full decoder.

Algorithm 14 re-runs the decoder on the whole sequence every step. When every computation is
position-wise except causal attention, the outputs for new positions depend on earlier positions
only through the keys and values of each causal attention, so

    attention(Q_new, K_all, V_all) with K_all = [K_past, K_new], V_all = [V_past, V_new]

gives the same columns as the full run (causal is bottom-right aligned, ir/ops/attention.py). The step graph
takes the new tokens and K_past, V_past per attention, and returns the outputs for the new positions
and K_all, V_all (the next step's past). Positions enter through `dim(x)` only (learned position
tables sliced to ℓ, sinusoid arguments from arange): those become past + new.

For an encoder–decoder, every value computed from the encoder input alone (the cross-attention keys
and values) is computed once by an encoder graph and fed to prefill and step as inputs.

A causal attention may also carry a mask or score bias computed from positions alone (ALiBi, a strided
mask): the step computes it at the full length and keeps the new queries' rows (kv_cache_masks.py).

Anything else that mixes positions (attention that is not causal, a reduction over positions, a mask
the attention fusion left unfused, a mask that reads the tokens) makes the derivation refuse, naming
the source line.

The step here concatenates: present = [past; new] is a new value, so a step copies its whole cache. The same
step with its cache in buffers of a fixed capacity (a length L in, each attention writing its new keys and
values into the buffers at L and attending over their first L + new positions, the presents being the
buffers written) is kv_buffers.py's, whose docstring states that interface's contract: L + new ≤ capacity
(the interpreter refuses a step past the end), and a buffer given to the step is written, not read again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pseudoformer.base.errors import AlgError, CompileError, Pos
from pseudoformer.ir import Graph, Node, Op, TensorType
from pseudoformer.ir.ops import op_def
from pseudoformer.passes.kv_cache_masks import reads_tokens, step_operand

PAST = "past"  # the run-time dim of the cache: positions already decoded


class NotCacheableError(AlgError):
    """The decoder's output at a position depends on later positions (or in a way no cache keeps)."""


@dataclass(frozen=True)
class CacheSlot:
    past_key: str
    past_value: str
    present_key: str
    present_value: str
    key_type: TensorType  # of the cached keys, with the position dim PAST
    value_type: TensorType


@dataclass(frozen=True)
class IncrementalDecoder:
    prefill: Graph  # decoder inputs [+ encoder values] → outputs, present K/V
    step: Graph  # new tokens, past K/V [+ encoder values] → outputs for the new tokens, present K/V
    encoder: Graph | None  # encoder inputs → the values prefill and step take as encoder.{i}
    slots: tuple[CacheSlot, ...]
    positions: str  # the run-time dim of the decoder input's positions ("seq", "seq_x")


def derive_incremental(graph: Graph, decoder_input: str) -> IncrementalDecoder:
    """Split `graph` into prefill and step graphs caching the keys/values of its causal attention."""
    x = graph.input(decoder_input)
    if x.type.rank < 2 or not isinstance(x.shape[1], str):
        raise ValueError(f"the decoder input {decoder_input} has no run-time position axis: {x.type}")
    seq = x.shape[1]
    encoder, graph = _split_encoder(graph, x)
    errors: list[AlgError] = []
    attentions: list[Node] = []
    for n in graph.nodes():
        why = _why_not_position_wise(n, seq, attentions)
        if why:
            errors.append(_error(_in_root(graph, n), why, n))
    if errors:
        raise CompileError(errors)
    if not attentions:
        raise CompileError([NotCacheableError(f"{graph.meta.get('entry', 'the model')} has no causal attention over "
                                              f"{decoder_input}: there is nothing to cache")])
    slots = tuple(_slot(i, a) for i, a in enumerate(attentions))
    prefill = _with_present(graph, attentions, slots)
    step = _step_graph(graph, x, seq, attentions, slots)
    return IncrementalDecoder(prefill=prefill, step=step, encoder=encoder, slots=slots, positions=seq)


def _slot(i: int, a: Node) -> CacheSlot:
    k, v = a.src[1].type, a.src[2].type
    return CacheSlot(f"past.{i}.key", f"past.{i}.value", f"present.{i}.key", f"present.{i}.value",
                     TensorType(k.dtype, (*k.shape[:-2], PAST, k.shape[-1])),
                     TensorType(v.dtype, (*v.shape[:-2], PAST, v.shape[-1])))


def _error(n: Node, why: str, inner: Node | None = None) -> NotCacheableError:
    pos = Pos(n.span.file, n.span.line, n.span.col) if n.span else None
    inner = inner or n
    notes = ()
    if inner is not n and inner.span is not None:
        notes = (f"it happens inside {inner.scope.split('/')[-1] or 'a callee'}, at {inner.span}",)
    where = f" (in {inner.scope})" if inner.scope else ""
    return NotCacheableError(f"no key/value cache can reproduce this: {why}{where}", pos, notes=notes)


def _in_root(graph: Graph, n: Node) -> Node:
    """The first node downstream of n written in the entry's own file (the line that called the
    algorithm n comes from), so the error points at the user's call, not into a library file."""
    root = graph.meta.get("source")
    if root is None or n.span is None or n.span.file == str(root):
        return n
    consumers = graph.consumers()
    frontier, seen = [n], {id(n)}
    while frontier:
        nxt = []
        for m in frontier:
            for u in consumers.of(m):
                if u.span is not None and u.span.file == str(root):
                    return u
                if id(u) not in seen:
                    seen.add(id(u))
                    nxt.append(u)
        frontier = nxt
    return n


def _why_not_position_wise(n: Node, seq: str, attentions: list[Node]) -> str | None:
    """None if output column t of n needs only column t of its operands (or n is causal attention)."""
    if not any(seq in s.shape for s in n.src):
        return None
    if n.op is Op.ATTENTION:
        src = n.src
        if src[1].shape[-2] != seq:
            return None if src[0].shape[-2] == seq else "queries from encoder positions"
        if len(src) > 3 and reads_tokens(src[3], seq):
            return "the attention's mask depends on the tokens, not on their positions alone"
        if not n.attrs["causal"]:
            return "attention over the decoder's positions is not causal, so earlier outputs see later tokens"
        attentions.append(n)
        return None
    if n.op is Op.DIM:
        return None  # the sequence length: rewritten to past + new
    # Every other op says in the registry how its output positions come from its operands'.
    rule = op_def(n.op).positions
    if rule is None:
        return f"{n.op.value} of values that vary by position"
    why = rule(n, seq)
    return why if isinstance(why, str) else None


def _split_encoder(graph: Graph, x: Node) -> tuple[Graph | None, Graph]:
    """Values computed from the other inputs only become inputs `encoder.{i}` of the decoder graphs."""
    others = [n for n in graph.inputs if n is not x]
    if not others:
        return None, graph
    depends: dict[int, str] = {}  # id → "x" (reads x, perhaps also others), "enc" (others only)
    for n in graph.nodes():
        if n.op is Op.INPUT:
            depends[id(n)] = "x" if n is x else "enc"
        else:
            kinds = {depends.get(id(s)) for s in n.src} - {None}
            depends[id(n)] = "x" if "x" in kinds else "enc" if kinds else None  # type: ignore[assignment]
    frontier: list[Node] = []
    for n in graph.nodes():
        if depends.get(id(n)) == "x":
            frontier += [s for s in n.src if depends.get(id(s)) == "enc" and s not in frontier]
    frontier += [n for _, n in graph.outputs if depends.get(id(n)) == "enc" and n not in frontier]
    names = [f"encoder.{i}" for i in range(len(frontier))]
    encoder = Graph(inputs=others, outputs=list(zip(names, frontier, strict=True)),
                    meta=dict(graph.meta))
    replace = {id(n): Node(Op.INPUT, (), {"name": name, "type": n.type}) for name, n in zip(names, frontier, strict=True)}
    decoder = _substitute(graph, replace, inputs=[x, *replace.values()])
    return encoder, decoder


def _substitute(graph: Graph, replace: dict[int, Node], *, inputs: list[Node]) -> Graph:
    memo: dict[int, Node] = dict(replace)

    def get(n: Node) -> Node:
        if id(n) not in memo:
            src = tuple(get(s) for s in n.src)
            memo[id(n)] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else \
                Node.at(n, n.op, src, dict(n.attrs), type=n.type)
        return memo[id(n)]

    for n in graph.nodes():  # topological order, so the recursion in get() stays shallow
        get(n)
    return Graph(inputs=inputs, outputs=[(name, get(n)) for name, n in graph.outputs], meta=dict(graph.meta))


def _with_present(graph: Graph, attentions: list[Node], slots: tuple[CacheSlot, ...]) -> Graph:
    present = []
    for a, s in zip(attentions, slots, strict=True):
        present += [(s.present_key, a.src[1]), (s.present_value, a.src[2])]
    return Graph(inputs=list(graph.inputs), outputs=[*graph.outputs, *present], meta=dict(graph.meta))


def _step_graph(graph: Graph, x: Node, seq: str, attentions: list[Node], slots: tuple[CacheSlot, ...]) -> Graph:
    past_inputs = []
    for s in slots:
        past_inputs += [Node(Op.INPUT, (), {"name": s.past_key, "type": s.key_type}),
                        Node(Op.INPUT, (), {"name": s.past_value, "type": s.value_type})]
    past_len = Node(Op.DIM, (past_inputs[0],), {"axis": past_inputs[0].type.rank - 2})
    new_len = Node(Op.DIM, (x,), {"axis": 1})
    total = Node(Op.ADD, (past_len, new_len))
    slot_of = {id(a): i for i, a in enumerate(attentions)}
    memo: dict[int, Node] = {}

    def get(n: Node) -> Node:
        if id(n) in memo:
            return memo[id(n)]
        out = _step_node(n, get, seq, total, past_len, slot_of, past_inputs)
        memo[id(n)] = out
        return out

    # What the step computes: everything but the masks of cached attention, which step_operand rebuilds
    # at the full length (their own nodes, run at the step's length, would be the wrong positions).
    needed: set[int] = set()
    stack = [n for _, n in graph.outputs]
    while stack:
        m = stack.pop()
        if id(m) not in needed:
            needed.add(id(m))
            stack.extend(m.src[:3] if id(m) in slot_of else m.src)
    for n in graph.nodes():
        if id(n) in needed:
            get(n)
    outputs = [(name, get(n)) for name, n in graph.outputs]
    for a, s in zip(attentions, slots, strict=True):
        new = get(a)
        outputs += [(s.present_key, new.src[1]), (s.present_value, new.src[2])]
    inputs = [*graph.inputs, *past_inputs]
    return Graph(inputs=inputs, outputs=outputs, meta=dict(graph.meta))


def _step_node(n: Node, get: Callable[[Node], Node], seq: str, total: Node, past_len: Node, slot_of: dict[int, int],
               past_inputs: list[Node]) -> Node:
    if n.op is Op.INPUT:
        return n
    if n.op is Op.DIM and n.src[0].shape[n.attrs["axis"]] == seq:
        return total  # ℓ in the full run is every position so far
    if n.op is Op.ATTENTION and id(n) in slot_of:
        src = tuple(get(s) for s in n.src[:3])
        i = slot_of[id(n)]
        pk, pv = past_inputs[2 * i], past_inputs[2 * i + 1]
        axis = n.src[1].type.rank - 2
        k = Node.at(n, Op.CONCAT, (pk, src[1]), {"axis": axis})
        v = Node.at(n, Op.CONCAT, (pv, src[2]), {"axis": axis})
        mask = [step_operand(m, seq, k.shape[axis], total, past_len) for m in n.src[3:]]
        return Node.at(n, n.op, (src[0], k, v, *mask), dict(n.attrs))
    src = tuple(get(s) for s in n.src)
    if n.op is Op.SLICE and n.attrs["dim"] == seq and seq not in n.src[0].shape:
        # rows [0, ℓ) of a position table → rows [past, past + new)
        if src[2] is not total or n.src[1].op is not Op.CONST or n.src[1].attrs["value"] != 0:
            raise CompileError([_error(n, "a slice of positions that does not start at the first one")])
        return Node.at(n, n.op, (src[0], past_len, total), dict(n.attrs))
    if n.op is Op.ARANGE and n.attrs["dim"] == seq:
        if src[0] is not total:
            raise CompileError([_error(n, "a range of positions that does not run to the sequence length")])
        new_len = total.src[1]  # total = past + dim(new tokens)
        new = Node.at(n, Op.ARANGE, (new_len,), dict(n.attrs))
        return Node.at(n, Op.ADD, (new, past_len))
    if n.op is Op.INDEX_MASK and seq in n.shape:
        raise CompileError([_error(n, "a mask over positions that is not fused into a causal attention")])
    if all(a is b for a, b in zip(src, n.src, strict=True)):
        return n
    return Node.at(n, n.op, src, dict(n.attrs))

