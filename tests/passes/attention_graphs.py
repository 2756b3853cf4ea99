"""Hand-built attention graphs in the paper's layout, for the spellings and refusals the frontend never emits,
and the shared plumbing of the attention tests: loading small models, the cleanup passes, feeds, comparison."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable

import numpy as np

from pseudoformer.ir import DType, Graph, Node, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.types import TensorType
from pseudoformer.model import Model, load
from pseudoformer.passes.cse import cse
from pseudoformer.passes.simplify import simplify

F32 = DType.float32
TINY = dict(L=2, H=3, d_e=6, d_mlp=8, d_attn=2, d_mid=2, ell_max=16, N_V=7)
SIZES = [(1, 1), (2, 5), (3, 8)]  # (batch, sequence length)


def load_small(path: str, entry: str | None = None, **hyper: float) -> Model:
    return load(path, entry=entry, config=os.devnull, defines=[f"{k}={v}" for k, v in hyper.items()])


def cleaned(graph: Graph) -> Graph:
    """CSE and simplification to a fixed point: what the pipeline runs before and after the attention passes."""
    changed = True
    while changed:
        graph, a = cse(graph)
        graph, b = simplify(graph)
        changed = a or b
    return graph


def ops(graph: Graph) -> Counter:
    return Counter(n.op for n in graph.nodes())


def attention_nodes(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes() if n.op is Op.ATTENTION]


def feeds(graph: Graph, batch: int, seq: int, seed: int = 0, **lengths: int) -> dict[str, np.ndarray]:
    """Random inputs; symbolic dims are `batch`, then `lengths[name]`, else `seq`."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in graph.inputs:
        shape = [batch if d == "batch" else lengths.get(d, seq) if isinstance(d, str) else d for d in n.type.shape]
        if n.dtype is DType.int64:
            out[n.attrs["name"]] = rng.integers(0, 5, size=shape)
        elif n.dtype is DType.bool:
            m = rng.random(shape) < 0.6
            m[..., 0] = True  # every query sees a key; a fully masked row is NaN by definition
            out[n.attrs["name"]] = m
        else:
            out[n.attrs["name"]] = rng.standard_normal(shape).astype(np.float32)
    return out


def random_params(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {p.attrs["name"]: rng.standard_normal(p.shape).astype(np.float32) for p in graph.params()}


def assert_same(a: Graph, b: Graph, feed: dict, params: dict, tol: float = 1e-5) -> None:
    want, got = run(a, feed, params), run(b, feed, params)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=k)


# --- building graphs by hand --------------------------------------------------------------------


def inp(name: str, shape: tuple, dtype: DType = F32) -> Node:
    return Node(Op.INPUT, (), {"name": name, "type": TensorType(dtype, shape)})


def param(name: str, shape: tuple) -> Node:
    return Node(Op.PARAM, (), {"name": name, "type": TensorType(F32, shape)})


def const(value: float | bool | int, dtype: DType = F32) -> Node:
    return Node(Op.CONST, (), {"value": value, "dtype": dtype})


def node(op: Op, *src: Node, **attrs: object) -> Node:
    return Node(op, src, attrs)


NEG_INF = const(-math.inf)


def proj(name: str, x: Node, rows: int) -> Node:
    """W X + b 1ᵀ in the paper's layout."""
    w, b = param(f"{name}.W", (rows, x.shape[-2])), param(f"{name}.b", (rows,))
    return node(Op.ADD, node(Op.MATMUL, w, x), node(Op.UNSQUEEZE, b, axes=[1]))


def causal(x: Node, rel: str = "<=") -> Node:
    """INDEX_MASK over x's positions × x's positions."""
    n = node(Op.DIM, x, axis=2)
    return node(Op.INDEX_MASK, n, n, rel=rel, dims=[x.shape[2], x.shape[2]])


def masked(keep: Node, s: Node) -> Node:
    """The frontend's spelling of line 5: where(¬M, −∞, S)."""
    return node(Op.WHERE, node(Op.NOT, keep), NEG_INF, s)


def scaled(s: Node, d: int = 2) -> Node:
    return node(Op.DIV, s, const(math.sqrt(d)))


def head(name: str, x: Node, z: Node, scores: Callable[[Node], Node] = scaled, *, d_attn: int = 2,
         d_v: int = 3, axis: int = 1) -> Node:
    """Ṽ = V · softmax(scores(Kᵀ Q), axis) with Q from x and K, V from z."""
    q, k, v = proj(f"{name}.q", x, d_attn), proj(f"{name}.k", z, d_attn), proj(f"{name}.v", z, d_v)
    s = node(Op.MATMUL, node(Op.TRANSPOSE, k, perm=[0, 2, 1]), q)
    return node(Op.MATMUL, v, node(Op.SOFTMAX, scores(s), axis=axis))


def graph(inputs: list[Node], *outputs: Node) -> Graph:
    return Graph(inputs=inputs, outputs=[(f"Y{i}", o) for i, o in enumerate(outputs)])


def self_input(d: int = 4) -> Node:
    return inp("X", ("batch", d, "seq"))
