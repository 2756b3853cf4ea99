"""The decode step as onnxruntime-genai runs a decoder: its input and output names, per-row positions and padding.

genai drives one graph for the prompt and every step (past_present_share_buffer false: the cache grows
by Concat, as passes/kv_cache.py derives it), with

    input_ids [batch, seq]            the new tokens (a right-padded batch of prompts)
    attention_mask [batch, past+seq]  1 for a token, 0 for padding, over every position so far
    position_ids [batch, seq]         each row's own positions (a padded row continues after its last token)
    past_key_values.%d.key/value      [batch, kv_heads, past, head_size]
  → logits [batch, seq, vocab], present.%d.key/value [batch, kv_heads, past+seq, head_size]

The step graph counts positions from the cache's length (past + arange(seq)): one position per column,
shared by the rows. Here those positions become position_ids, so that each row may have its own:

    add(arange(seq), past)            → position_ids                            (RoPE's angles, ALiBi, …)
    slice(table, past, past+seq)      → gather(table, position_ids)             (a learned position table)

and what computes from them gains the batch axis in front (elementwise ops, unsqueeze, transpose), until
it meets a value that has the batch axis already, where it is aligned to it ([batch, 1, …, *shape]).
The attention_mask is ANDed into the mask of every cached attention, as passes/padding_mask.py does for
a whole sequence. An op the positions pass through that is none of these is refused, naming it.

With `lengths` (the number of positions), for `--contrib-ops`: the step is left as it is but for the names,
with attention_mask and no position_ids, and asks the onnx-contrib pipeline (its meta) to drive each
GroupQueryAttention by attention_mask as genai's own builder does (passes/rules/group_query_attention_lengths.py):
the kernel keeps the cache compact per row and finds each row's positions from the mask's counts. Nothing
then reads the past's length, so genai may bind one buffer as past and present (past_present_share_buffer).
"""

from __future__ import annotations

from pseudoformer.base.errors import CompileError
from pseudoformer.ir import Graph, Node, Op, TensorType
from pseudoformer.ir.ops import op_def
from pseudoformer.ir.types import DType
from pseudoformer.passes.kv_cache import IncrementalDecoder, NotCacheableError
from pseudoformer.passes.padding_mask import mask_keys
from pseudoformer.passes.rules.group_query_attention_lengths import META as LENGTHS_META

INPUT_IDS, ATTENTION_MASK, POSITION_IDS, LOGITS = "input_ids", "attention_mask", "position_ids", "logits"
PAST_KEY, PAST_VALUE = "past_key_values.%d.key", "past_key_values.%d.value"
PRESENT_KEY, PRESENT_VALUE = "present.%d.key", "present.%d.value"


def genai_step(dec: IncrementalDecoder, decoder_input: str, output: str, *, log: bool = False,
               lengths: int | None = None) -> Graph:
    """The step graph of `dec` with genai's interface; `log` takes the log of an output of probabilities
    (genai samples from the softmax of what it is given); `lengths`: the GroupQueryAttention form over
    that many positions (the module's docstring), for the onnx-contrib pipeline to make."""
    if dec.encoder is not None:
        raise CompileError([NotCacheableError("onnxruntime-genai's decoder folder takes a decoder only; "
                                              "this model has an encoder input")])
    step = dec.step
    x = step.input(decoder_input)
    seq = x.shape[1]
    past = {s.past_key: PAST_KEY % i for i, s in enumerate(dec.slots)}
    past |= {s.past_value: PAST_VALUE % i for i, s in enumerate(dec.slots)}
    present = {s.present_key: PRESENT_KEY % i for i, s in enumerate(dec.slots)}
    present |= {s.present_value: PRESENT_VALUE % i for i, s in enumerate(dec.slots)}
    replace: dict[int, Node] = {id(x): Node(Op.INPUT, (), {"name": INPUT_IDS, "type": x.type})}
    for n in step.inputs:
        if n.attrs["name"] in past:
            replace[id(n)] = Node(Op.INPUT, (), {"name": past[n.attrs["name"]], "type": n.type})
    positions = Node(Op.INPUT, (), {"name": POSITION_IDS, "type": TensorType(DType.int64, ("batch", seq))})
    keys_dim = _keys_dim(step, seq)
    mask = Node(Op.INPUT, (), {"name": ATTENTION_MASK, "type": TensorType(DType.int64, ("batch", keys_dim))})
    keep = Node(Op.NE, (mask, Node(Op.CONST, (), {"value": 0, "dtype": DType.int64})))
    rewrite = _Rewrite(replace, positions, keep, seq, {id(n) for n in step.inputs if n.attrs["name"] in past},
                       plain=lengths is not None)
    for n in step.nodes():
        rewrite.node(n)
    if lengths is not None:
        meta = {**step.meta, LENGTHS_META: {"mask": ATTENTION_MASK, "positions": int(lengths)}}
        inputs = [replace[id(x)], mask, *(replace[id(n)] for n in step.inputs if n.attrs["name"] in past)]
        return Graph(inputs=inputs, outputs=_outputs(step, rewrite, output, present, log), meta=meta)
    if not rewrite.used_positions:
        raise CompileError([NotCacheableError(f"{step.meta.get('entry', 'the model')}'s step computes no positions "
                                              "from the cache's length: there is nothing for position_ids to give")])
    inputs = [replace[id(x)], mask, positions]
    inputs += [replace[id(n)] for n in step.inputs if n.attrs["name"] in past]
    return Graph(inputs=inputs, outputs=_outputs(step, rewrite, output, present, log), meta=dict(step.meta))


def _outputs(step: Graph, rewrite: _Rewrite, output: str, present: dict[str, str], log: bool) -> list:
    outputs = []
    for name, n in step.outputs:
        value = rewrite.get(n)
        if name == output:
            outputs.append((LOGITS, Node(Op.LOG, (value,)) if log else value))
        elif name in present:
            outputs.append((present[name], value))
    return sorted(outputs, key=lambda o: _output_order(o[0]))


def _output_order(name: str) -> tuple[int, int, str]:
    if name == LOGITS:
        return (0, 0, name)
    return (1, int(name.split(".")[1]), name)


def _keys_dim(step: Graph, seq: str) -> object:
    """The run-time dim of the cached attentions' keys (past + seq, as the Concat names it)."""
    for n in step.nodes():
        if n.op is Op.ATTENTION and n.src[1].op is Op.CONCAT and n.src[0].shape[-2] == seq:
            return n.src[1].shape[-2]
    raise CompileError([NotCacheableError("the step has no attention over the cache to mask")])


class _Rewrite:
    """The step, node by node: `batched` values have the batch axis in front of their original shape."""

    def __init__(self, replace: dict[int, Node], positions: Node, keep: Node, seq: str, past_inputs: set[int],
                 plain: bool = False) -> None:
        self.plain = plain  # rename the inputs only: positions and attention as they are (the lengths form)
        self.memo: dict[int, Node] = dict(replace)
        self.batched: set[int] = set()  # ids of new nodes that carry the extra batch axis
        self.positions, self.keep, self.seq, self.past_inputs = positions, keep, seq, past_inputs
        self.used_positions = False
        self.aligned: dict[tuple[int, int], Node] = {}  # one alignment of a value per rank, shared by its users

    def get(self, n: Node) -> Node:
        return self.memo[id(n)]

    def _is_past_length(self, n: Node) -> bool:
        return n.op is Op.DIM and id(n.src[0]) in self.past_inputs

    def node(self, n: Node) -> None:
        if id(n) in self.memo:
            return
        self.memo[id(n)] = self._rewrite(n)

    def _rewrite(self, n: Node) -> Node:
        if self.plain:
            src = tuple(self.get(s) for s in n.src)
            return n if all(a is b for a, b in zip(src, n.src, strict=True)) else self._node(n, src)
        if n.op is Op.ADD and any(a.op is Op.ARANGE and a.attrs["dim"] == self.seq and self._is_past_length(b)
                                  for a, b in (n.src, n.src[::-1])):
            self.used_positions = True
            return self._mark(self.positions)
        src = tuple(self.get(s) for s in n.src)
        if n.op is Op.SLICE and n.attrs["dim"] == self.seq and self._is_past_length(n.src[1]):
            return self._rows_of_table(n, src[0])
        if n.op is Op.ATTENTION and n.src[1].op is Op.CONCAT and n.src[0].shape[-2] == self.seq:
            return self._masked_attention(n, src)
        carried = [i for i, s in enumerate(src) if id(s) in self.batched]
        if not carried:
            return n if all(a is b for a, b in zip(src, n.src, strict=True)) else self._node(n, src)
        return self._carry(n, src, carried)

    def _mark(self, n: Node) -> Node:
        self.batched.add(id(n))
        return n

    def _node(self, n: Node, src: tuple[Node, ...], attrs: dict | None = None) -> Node:
        return Node.at(n, n.op, src, dict(n.attrs) if attrs is None else attrs)

    def _rows_of_table(self, n: Node, table: Node) -> Node:
        """Rows [past, past + seq) of a position table → the rows position_ids name, batch axis in front."""
        self.used_positions = True
        axis = n.attrs["axis"] % table.type.rank
        rows = Node.at(n, Op.GATHER, (table, self.positions), {"axis": axis})
        if axis:  # gather puts [batch, seq] where the axis was: move the batch axis to the front
            rank = rows.type.rank
            perm = [axis, *range(axis), *range(axis + 1, rank)]
            rows = Node.at(n, Op.TRANSPOSE, (rows,), {"perm": perm})
        return self._mark(rows)

    def _masked_attention(self, n: Node, src: tuple[Node, ...]) -> Node:
        if any(id(s) in self.batched for s in src):
            raise CompileError([_refusal(n, "an attention operand")])
        return mask_keys(n, src, self.keep)

    def _carry(self, n: Node, src: tuple[Node, ...], carried: list[int]) -> Node:
        """n with operands that gained the batch axis: the batch axis kept in front, or aligned to a value
        that has it."""
        if n.op is Op.ROTARY:  # the angles meet the queries or keys, which have the batch axis
            x, c, s = src
            if 0 in carried:
                raise CompileError([_refusal(n, "the rotated values")])
            return self._node(n, (x, *(self._align(t, x.type.rank) if i in carried else t
                                        for i, t in ((1, c), (2, s)))))
        if op_def(n.op).elementwise:
            rank = n.type.rank
            if n.shape and n.shape[0] == "batch":  # an operand has the batch axis already: join it there
                return self._node(n, tuple(self._align(s, rank) if i in carried else s for i, s in enumerate(src)))
            return self._mark(self._node(n, tuple(self._align(s, rank + 1) if i in carried else s
                                                  for i, s in enumerate(src))))
        if n.op is Op.UNSQUEEZE:
            axes = [a + 1 if a >= 0 else a for a in n.attrs["axes"]]
            return self._mark(self._node(n, src, {**n.attrs, "axes": axes}))
        if n.op is Op.TRANSPOSE:
            perm = [0, *(p + 1 for p in n.attrs["perm"])]
            return self._mark(self._node(n, src, {**n.attrs, "perm": perm}))
        raise CompileError([_refusal(n, f"{n.op.value}")])

    def _align(self, value: Node, rank: int) -> Node:
        """[batch, *shape] → [batch, 1, …, 1, *shape] of `rank` axes, to broadcast against [batch, …]."""
        have = value.type.rank
        if have == rank:
            return value
        if have > rank:
            raise CompileError([_refusal(value, "a value of fewer axes than the positions")])
        key = (id(value), rank)
        if key not in self.aligned:
            self.aligned[key] = Node.at(value, Op.UNSQUEEZE, (value,), {"axes": list(range(1, 1 + rank - have))})
        return self.aligned[key]


def _refusal(n: Node, what: str) -> NotCacheableError:
    from pseudoformer.base.errors import Pos

    pos = Pos(n.span.file, n.span.line, n.span.col) if n.span else None
    return NotCacheableError(f"onnxruntime-genai gives each row its own positions (position_ids), and they "
                             f"cannot flow through {what} here", pos)

