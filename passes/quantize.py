"""Weight quantization: each matmul by a weight matrix → a block-quantized matmul (matmul_nbits).

    x · W     (W [K, N] computed from weights alone)  →  matmul_nbits(x, packed, scales[, zero points])
    W · x     (the paper's layout, W [N, K])          →  the same between transposes
    x · W + b (b [N] from weights alone)              →  matmul_nbits(x, …, b)        (options.bias)
    gather(T, ids, axis 0), T [N, K] a weight table   →  gather_nbits(packed, ids, …)  (options.embeddings)
    gather(T, ids, axis 1), T [K, N] (paper's layout) →  the same, transposed

The weights W are whatever the graph computes from parameters alone (GPT-2's per-head projections
concatenated by head batching, a transposed embedding): the pass evaluates those subgraphs with the
interpreter, quantizes the matrices at compile time (quantize_weights.py) and puts the packed arrays
in the PassContext's weights under new parameter names; parameters nothing reads any more drop out.

Embedding tables (gathers of a weight table by token ids) and the unembedding (a weight matmul
whose output is as wide as an embedding table is long, or that reads the same parameter) are
quantized only with `embeddings`: the first and last layers are where low-bit error costs most.
Tied weights are quantized once: GPT-2's W_e gathered as an embedding and multiplied as the
unembedding is one matrix, so both ops read the same packed arrays, stored once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pseudoformer.ir import Graph, Node, Op, interpreter
from pseudoformer.ir.block_coded import BLOCK, Codes, codes_of, matmul_nbits
from pseudoformer.ir.ops.quantized import ACCURACY_LEVELS, BITS, BLOCK_SIZES, operands
from pseudoformer.ir.types import DType, TensorType
from pseudoformer.passes.fold_constants import weight_only
from pseudoformer.passes.pass_base import Pass, PassContext
from pseudoformer.passes.quantize_weights import METHODS, Quantized, quantize
from pseudoformer.passes.quantized_params import lazy_quantized, rows_key
from pseudoformer.passes.rebuild import rebuild


@dataclass(frozen=True)
class QuantizeOptions:
    bits: int = 4
    block_size: int = 32
    symmetric: bool = False
    # onnxruntime's MatMulNBits: 4 quantizes the activations to int8 inside the op, the only level its CPU
    # kernels are fast at (int8 weights at 0 run 13× slower than fp32); 0 computes what the reference does
    accuracy_level: int = 4
    embeddings: bool = False  # also every embedding table (and the unembedding)
    # the unembedding (output projection), and an embedding tied to it, as onnxruntime-genai's builder
    # does by default: most of a small model's step reads it. False keeps them in fp32, for accuracy.
    output: bool = True
    method: str = "balanced"
    bias: bool = True  # a bias added to the product goes into the op
    # Only the matrices that arrived block-quantized (GGUF Q4_0, Q8_0: ir/block_coded.py), each in its own
    # format, embeddings included; every other weight stays as it is. The pipeline runs the pass so when a
    # model has such weights and no --quantize was asked for (backends/pipeline.run).
    only_prequantized: bool = False

    def problems(self) -> list[str]:
        out = []
        if self.bits not in BITS:
            out.append(f"{self.bits} bits is not supported (choose {', '.join(map(str, BITS))})")
        if self.block_size not in BLOCK_SIZES:
            out.append(f"block size {self.block_size} is not supported (choose {', '.join(map(str, BLOCK_SIZES))})")
        if self.accuracy_level not in ACCURACY_LEVELS:
            out.append(f"accuracy level {self.accuracy_level} is not one of {', '.join(map(str, ACCURACY_LEVELS))}")
        if self.method not in METHODS:
            out.append(f"unknown quantization method {self.method!r} (choose {', '.join(METHODS)})")
        if self.embeddings and not self.output:
            out.append("quantizing the embeddings and keeping the output projection in fp32 contradict each other")
        return out

    def describe(self) -> str:
        if self.only_prequantized:
            return "the checkpoint's own Q4_0/Q8_0 blocks, as they are"
        kind = "symmetric" if self.symmetric else "asymmetric"
        extra = ", embeddings too" if self.embeddings else "" if self.output else ", output projection fp32"
        return (f"int{self.bits}, blocks of {self.block_size}, {kind}, {self.method}, "
                f"accuracy level {self.accuracy_level}{extra}")


@dataclass
class _Site:
    node: Node
    weight: Node  # the operand computed from weights alone
    kind: str  # "right" (x · W), "left" (W · x), "gather" (rows), "gather_columns"


def quantize_graph(graph: Graph, weights: Mapping[str, np.ndarray], opts: QuantizeOptions, *, lazy: bool = False,
                   ) -> tuple[Graph, dict[str, np.ndarray], bool]:
    """The graph with its weight matmuls (and, by option, embeddings) block-quantized, and its weights.

    lazy: each matrix is quantized when its packed codes, scales or zero points are first loaded
    (LazyTensors, quantized_params.py), so that a writer holds one matrix's at a time; the same
    matrix read twice (a tied embedding and unembedding, one PARAM read as itself and transposed) is
    recognised by its parameter instead of by its values."""
    nodes = graph.nodes()
    static = weight_only(nodes)
    sites = _sites(nodes, static, opts)
    # A matrix that arrived block-quantized keeps its blocks (its own bits, blocks of 32): no second rounding.
    exact = {id(s): pieces for s in sites
             if (pieces := _block_coded(s.weight, s.kind in ("right", "gather_columns"), weights)) is not None}
    if opts.only_prequantized:
        sites = [s for s in sites if id(s) in exact]
    if not sites:
        return graph, dict(weights), False
    matrix: dict[int, np.ndarray] = {}
    if not lazy:
        wanted = {id(s.weight): s.weight for s in sites if id(s) not in exact}
        values = interpreter.run(Graph([], [(f"w{i}", w) for i, w in enumerate(wanted.values())], {}), {}, weights)
        matrix = dict(zip(wanted, values.values(), strict=True))
    taken = {p.attrs["name"] for p in graph.params()}
    out = dict(weights)
    made: dict[tuple, tuple[Node, ...]] = {}  # the same matrix (tied weights) → the same parameters
    replacement: dict[int, Node] = {}
    for site in sites:
        flip = site.kind in ("right", "gather_columns")  # [N, K]: blocks along K
        if id(site) in exact:
            pieces = exact[id(site)]
            key = ("blocks", *(id(c) for c in pieces))
            bits = pieces[0].bits
            k = int(site.weight.shape[0 if flip else 1])
            if key not in made:
                made[key] = _params(_from_blocks(pieces), _base_name(site.weight, taken), taken, out)
            replacement[id(site.node)] = _replace(site, made[key], k, opts, bits, BLOCK)
            continue
        if lazy:
            key = rows_key(site.weight, flip)
            n, k = site.weight.shape[::-1] if flip else site.weight.shape
            if key not in made:
                q: Any = lazy_quantized(site.weight, flip, weights, (int(n), int(k)), opts)
                made[key] = _params(q, _base_name(site.weight, taken), taken, out)
        else:
            w = np.asarray(matrix[id(site.weight)], dtype=np.float32)
            rows = np.ascontiguousarray(w.T if flip else w)
            n, k = rows.shape
            key = (rows.shape, hashlib.blake2b(rows.tobytes(), digest_size=16).digest())
            if key not in made:
                q = quantize(rows, bits=opts.bits, block_size=opts.block_size, symmetric=opts.symmetric,
                             method=opts.method)
                made[key] = _params(q, _base_name(site.weight, taken), taken, out)
        replacement[id(site.node)] = _replace(site, made[key], int(k), opts, opts.bits, opts.block_size)
    new, _ = rebuild(graph, lambda n, src: _with_operands(replacement[id(n)], n, src)
                     if id(n) in replacement else None)
    if opts.bias:
        new = _fuse_bias(new)
    used = {p.attrs["name"] for p in new.params()}
    return new, {k: v for k, v in out.items() if k in used}, True


def _sites(nodes: list[Node], static: set[int], opts: QuantizeOptions) -> list[_Site]:
    def table(n: Node) -> bool:
        return id(n) in static and n.type.rank == 2 and n.dtype.is_float

    # a table's rows gathered (row-major), or its columns (the paper's W_e[:, x[t]])
    embeddings = [_Site(n, n.src[0], "gather" if n.attrs["axis"] in (0, -2) else "gather_columns")
                  for n in nodes if n.op is Op.GATHER and table(n.src[0]) and id(n.src[1]) not in static]
    # the vocabulary: rows of the tables token ids index (not positions': ℓ_max may equal some width)
    vocab = {e.weight.shape[0 if e.kind == "gather" else 1] for e in embeddings if e.node.src[1].op is Op.INPUT}
    embedded = {p.attrs["name"] for e in embeddings for p in e.weight.walk() if p.op is Op.PARAM}
    sites = list(embeddings) if opts.embeddings or opts.only_prequantized else []
    output_params: set[str] = set()
    for n in nodes:
        if n.op is not Op.MATMUL:
            continue
        a, b = n.src
        if table(b) and id(a) not in static and a.type.rank >= 2:
            site = _Site(n, b, "right")
        elif table(a) and id(b) not in static and b.type.rank >= 2:
            site = _Site(n, a, "left")
        else:
            continue
        width = site.weight.shape[1 if site.kind == "right" else 0]
        unembedding = width in vocab or any(p.op is Op.PARAM and p.attrs["name"] in embedded
                                            for p in site.weight.walk())
        if opts.embeddings or opts.output or not unembedding:
            sites.append(site)
            if unembedding:
                output_params |= {p.attrs["name"] for p in site.weight.walk() if p.op is Op.PARAM}
    if opts.output and not opts.embeddings:  # an embedding tied to the output projection: the same packed arrays
        sites += [e for e in embeddings
                  if output_params & {p.attrs["name"] for p in e.weight.walk() if p.op is Op.PARAM}]
    return sites


def _block_coded(weight: Node, flip: bool, weights: Mapping[str, Any]) -> list[Codes] | None:
    """The blocks of the matrix [N, K] that `weight` (transposed if `flip`) is, row pieces in order, when
    it is block-coded parameters stacked along N (per-head projections concatenated), all of one format."""
    if weight.op is Op.TRANSPOSE and list(weight.attrs["perm"]) == [1, 0]:
        return _block_coded(weight.src[0], not flip, weights)
    if weight.op is Op.PARAM:
        codes = codes_of(weights.get(weight.attrs["name"]))
        return [codes] if codes is not None and codes.transposed == flip else None
    if weight.op is Op.CONCAT and weight.type.rank == 2 and weight.attrs["axis"] % 2 == (1 if flip else 0):
        pieces = [_block_coded(s, flip, weights) for s in weight.src]
        if all(p is not None for p in pieces):
            out = [c for p in pieces for c in p]  # type: ignore[union-attr]
            return out if len({c.format for c in out}) == 1 else None
    return None


@dataclass(frozen=True)
class _Blocks:
    packed: np.ndarray
    scales: np.ndarray
    zero_points: None = None


def _from_blocks(pieces: list[Codes]) -> _Blocks:
    """MatMulNBits' arrays for the stacked pieces: their codes reordered, nothing rounded (block_coded.py)."""
    rows = np.concatenate([c.read() for c in pieces]) if len(pieces) > 1 else pieces[0].read()
    return _Blocks(*matmul_nbits(rows, pieces[0].format))


def _base_name(weight: Node, taken: set[str]) -> str:
    """The quantized matrix's name: its parameter's, or the dotted prefix its parameters share."""
    names = sorted({p.attrs["name"] for p in weight.walk() if p.op is Op.PARAM})
    if len(names) == 1:
        return names[0]
    parts = [n.split(".") for n in names]
    common = []
    for pieces in zip(*parts, strict=False):
        if len(set(pieces)) > 1:
            break
        common.append(pieces[0])
    return ".".join([*common, "packed"]) if common else "packed"


def _params(q: Quantized | Any, base: str, taken: set[str], out: dict[str, np.ndarray]) -> tuple[Node, ...]:
    arrays = {"quant": q.packed, "scales": q.scales}
    if q.zero_points is not None:
        arrays["zero_points"] = q.zero_points
    nodes = []
    for suffix, arr in arrays.items():
        name = f"{base}.{suffix}"
        while name in taken:
            name += "_"
        taken.add(name)
        out[name] = arr
        nodes.append(Node(Op.PARAM, (), {"name": name, "type": TensorType(DType(arr.dtype.name), arr.shape)}))
    return tuple(nodes)


def _replace(site: _Site, params: tuple[Node, ...], k: int, opts: QuantizeOptions, bits: int, block_size: int,
             ) -> Node:
    """A template: the new node over the original node's operands (swapped in by _with_operands)."""
    attrs = {"bits": bits, "block_size": block_size, "K": k}
    n = site.node
    if site.kind.startswith("gather"):
        g = Node.at(n, Op.GATHER_NBITS, (params[0], n.src[1], *params[1:]), attrs)
        if site.kind == "gather":
            return g
        r = n.src[1].type.rank  # [*ids, K] → [K, *ids], as the columns came out
        return Node.at(n, Op.TRANSPOSE, (g,), {"perm": [r, *range(r)]})
    x = n.src[0] if site.kind == "right" else n.src[1]
    attrs["accuracy_level"] = opts.accuracy_level
    if site.kind == "right":
        return Node.at(n, Op.MATMUL_NBITS, (x, *params), attrs)
    swap = [*range(x.type.rank - 2), x.type.rank - 1, x.type.rank - 2]
    xt = Node.at(n, Op.TRANSPOSE, (x,), {"perm": swap})
    y = Node.at(n, Op.MATMUL_NBITS, (xt, *params), attrs)
    return Node.at(n, Op.TRANSPOSE, (y,), {"perm": swap})


def _with_operands(template: Node, old: Node, src: tuple[Node, ...]) -> Node:
    """The template with the old node's operands replaced by their rebuilt versions."""
    swap = {id(o): s for o, s in zip(old.src, src, strict=True)}
    memo: dict[int, Node] = {}

    def build(n: Node) -> Node:
        if id(n) in swap:
            return swap[id(n)]
        if n.op is Op.PARAM or id(n) in memo:
            return memo.get(id(n), n)
        memo[id(n)] = Node.at(n, n.op, tuple(build(s) for s in n.src), dict(n.attrs))
        return memo[id(n)]

    return build(template)


def _fuse_bias(graph: Graph) -> Graph:
    """add(matmul_nbits(x, …), b) → matmul_nbits(x, …, b), b [N] from weights alone, when the add is
    the product's one reader (the op adds the bias as it writes its output); and add(add(r,
    matmul_nbits(x, …)), b) → add(r, matmul_nbits(x, …, b)), a residual added before the bias (GPT-2's
    X + W_mlp2 h + b_mlp2), when the inner add has no other reader."""
    c = graph.consumers()
    static = weight_only(graph.nodes())

    def takes(mm: Node, b: Node, reader: Node, n: Node) -> bool:
        return mm.op is Op.MATMUL_NBITS and operands(mm).bias is None and c.only_user(mm, reader) \
            and id(b) in static and b.shape == (mm.shape[-1],) and b.dtype == mm.dtype and n.shape == mm.shape

    def biased(mm: Node, new_mm: Node, new_b: Node, n: Node) -> Node:
        return Node.at(n, Op.MATMUL_NBITS, (*new_mm.src, new_b), dict(mm.attrs))

    def fuse(n: Node, src: tuple[Node, ...]) -> Node | None:
        if n.op is not Op.ADD:
            return None
        for i in (0, 1):
            mm, b = n.src[i], n.src[1 - i]
            if takes(mm, b, n, n):
                return biased(mm, src[i], src[1 - i], n)
        for i in (0, 1):
            inner, b = n.src[i], n.src[1 - i]
            if inner.op is not Op.ADD or src[i].op is not Op.ADD or not c.only_user(inner, n):
                continue
            for j in (0, 1):
                mm = inner.src[j]
                if takes(mm, b, inner, n) and inner.shape == n.shape and src[i].src[j].op is Op.MATMUL_NBITS:
                    fused = biased(mm, src[i].src[j], src[1 - i], n)
                    pair = (src[i].src[1 - j], fused) if j else (fused, src[i].src[1 - j])
                    return Node.at(n, Op.ADD, pair, dict(inner.attrs))
        return None

    return rebuild(graph, fuse)[0]



def _quantize(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    if ctx.weights is None or ctx.quantize is None:
        raise ValueError("the quantize pass needs the weights and its options (PassContext.weights, .quantize)")
    graph, ctx.weights, changed = quantize_graph(graph, ctx.weights, ctx.quantize, lazy=ctx.lazy)
    for n in graph.nodes():  # what stays float, said where `inspect --refusals` shows it
        if n.op is Op.EXPERT_MATMUL:
            ctx.refusals.append(("quantize", "the experts' matrices stay float: there is no block-quantized product "
                                 "with each token's own expert (expert_matmul)", n.span, n.scope))
    return graph, changed


PASSES = [
    Pass("quantize", _quantize, "weight matmuls → block-quantized matmul_nbits (embeddings, unembedding by option); "
         "bits, scales and zero points computed at compile time"),
]
