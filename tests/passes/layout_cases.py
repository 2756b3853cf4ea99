"""Hand-built graphs for the layout tests: the forms the fusion passes leave in the paper's layout
(LAYER_NORM over axis 1, ATTENTION fed by transposes, heads split by reshapes), one already
row-major, and random feeds and weights for any graph."""

from __future__ import annotations

import numpy as np

from pseudoformer.ir import DType, Graph, Node, Op, TensorType

F32, I64, BOOL = DType.float32, DType.int64, DType.bool
D, DV, DA = 6, 5, 4  # model width, value width, query/key width


def inp(name: str, dtype: DType, *shape) -> Node:
    return Node(Op.INPUT, (), {"name": name, "type": TensorType(dtype, tuple(shape))})


def param(name: str, *shape: int) -> Node:
    return Node(Op.PARAM, (), {"name": name, "type": TensorType(F32, tuple(shape))})


def op(o: Op, *src: Node, **attrs) -> Node:
    return Node(o, tuple(src), attrs)


def swap(x: Node) -> Node:
    r = x.type.rank
    return op(Op.TRANSPOSE, x, perm=[*range(r - 2), r - 1, r - 2])


def project(x: Node, name: str, out: int, inner: int) -> Node:
    """W X + b 1ᵀ in the paper's layout: W [out, in], X [b, in, s], b as a [out, 1] column."""
    w, b = param(f"W_{name}", out, inner), param(f"b_{name}", out)
    return op(Op.ADD, op(Op.MATMUL, w, x), op(Op.UNSQUEEZE, b, axes=[1]))


def ln_graph(paper_output: bool) -> Graph:
    x = inp("x", F32, "batch", "seq", D)
    ln = op(Op.LAYER_NORM, swap(x), param("gamma", D), param("beta", D), axis=1, eps=1e-5)
    return Graph([x], [("y", ln if paper_output else swap(ln))], {"entry": "LN"})


def single_head_graph(mask: str) -> Graph:
    """ATTENTION(Qᵀ, Kᵀ, Vᵀ)ᵀ between row-major input and output, as attention fusion leaves one head."""
    x = inp("x", F32, "batch", "seq", D)
    xc = swap(x)
    q, k, v = project(xc, "q", DA, D), project(xc, "k", DA, D), project(xc, "v", DV, D)
    extra = [inp("mask", BOOL, "seq", "seq")] if mask == "input" else []
    att = op(Op.ATTENTION, swap(q), swap(k), swap(v), *extra, scale=0.5, causal=mask == "causal")
    y = swap(project(swap(att), "o", D, DV))
    return Graph([x, *extra], [("y", y)], {"entry": "Head"})


def mha_graph(heads: int = 2) -> Graph:
    """Head batching's form: one projection per q, k, v, reshaped to [b, H, d, s] and swapped to [b, H, s, d]."""
    x = inp("x", F32, "batch", "seq", D)
    xc = swap(x)
    d = D // heads

    def split(t: Node) -> Node:
        return swap(op(Op.RESHAPE, t, shape=("batch", heads, d, "seq")))

    q, k, v = (split(project(xc, n, D, D)) for n in "qkv")
    att = op(Op.ATTENTION, q, k, v, scale=d ** -0.5, causal=True)
    merged = op(Op.RESHAPE, swap(att), shape=("batch", D, "seq"))
    return Graph([x], [("y", swap(project(merged, "o", D, D)))], {"entry": "MHA"})


def row_major_graph() -> Graph:
    """What a performance engineer writes: X Wᵀ + b, normalised and soft-maxed over the last axis."""
    x = inp("x", F32, "batch", "seq", D)
    h = op(Op.ADD, op(Op.MATMUL, x, op(Op.TRANSPOSE, param("W", DA, D), perm=[1, 0])), param("b", DA))
    ln = op(Op.LAYER_NORM, h, param("gamma", DA), param("beta", DA), axis=-1, eps=1e-5)
    mean = op(Op.REDUCE_MEAN, ln, axes=[-1], keepdims=True)
    return Graph([x], [("p", op(Op.SOFTMAX, op(Op.SUB, ln, mean), axis=-1))], {"entry": "RowMajor"})


def hand_params(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {p.attrs["name"]: (rng.standard_normal(p.shape) * 0.5 + (p.attrs["name"] == "gamma")).astype(np.float32)
            for p in graph.params()}


def feed(graph: Graph, batch: int, seq: int, seed: int = 0, ints: int = 5) -> dict[str, np.ndarray]:
    """Random inputs: the first sequence-like dim is `seq` long, any other one seq + 2, so that a
    layout mix-up between two lengths shows as a shape error rather than passing by coincidence."""
    rng = np.random.default_rng(seed)
    lengths: dict[str, int] = {"batch": batch}
    out = {}
    for n in graph.inputs:
        shape = []
        for dim in n.type.shape:
            if isinstance(dim, str):
                dim = lengths.setdefault(dim, seq if len(lengths) == 1 else seq + 2)
            shape.append(dim)
        if n.dtype is I64:
            out[n.attrs["name"]] = rng.integers(0, ints, size=shape)
        elif n.dtype is BOOL:
            m = rng.random(shape) < 0.6
            m[..., 0] = True  # every query sees a key; a fully masked row is nan by definition
            out[n.attrs["name"]] = m
        else:
            out[n.attrs["name"]] = rng.standard_normal(shape).astype(np.float32)
    return out
