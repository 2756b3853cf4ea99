"""Shared pieces of the fusion-pass tests: small models, hand-built graphs, and the equality checks.

Every fused graph is held to the graph it came from: same outputs on the interpreter, and on
ONNX Runtime the same outputs as the interpreter, within 1e-5.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.types import DType, TensorType
from pseudoformer.ir.verify import verify
from pseudoformer.model import Model, load
from pseudoformer.passes.manager import passes, run_passes

F32 = DType.float32
TOL = 1e-5
L = 2  # layers in the small GPT-2 and BERT; the counts the tests expect are written in terms of it
SMALL = ["H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4", "ell_max=8", "N_V=11", "eps=1e-5", f"L={L}"]


def small(name: str, **extra: int) -> Model:
    """A packaged model at a small size, with no config file, so only these sizes apply."""
    defines = SMALL + [f"{k}={v}" for k, v in extra.items()]
    if name == "bert":
        defines.append("d_f=8")
    return load(name, config=os.devnull, defines=defines, seed=1)


def prepared(graph: Graph, optimised: bool) -> Graph:
    """The graph a fusion pass sees: after cse and simplify, or raw from the frontend.

    Named passes, not a level: once a level includes the fusions, it would leave nothing to fuse.
    """
    reg = passes()
    return run_passes(graph, [reg["cse"], reg["simplify"], reg["cse"]], check=True) if optimised else graph


def spread_weights(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights of unit scale: the random init's γ ≈ 1 and β ≈ 0 would hide a swapped γ and β."""
    rng = np.random.default_rng(seed)
    return {k: (0.5 * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in model.weights.items()}


def tokens(vocab: int = 11, batch: int = 2, seq: int = 7, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (batch, seq), dtype=np.int64)


def ops(graph: Graph) -> Counter:
    return Counter(n.op for n in graph.nodes())


def nodes_of(graph: Graph, op: Op) -> list[Node]:
    return [n for n in graph.nodes() if n.op is op]


def assert_same(before: Graph, after: Graph, inputs: dict[str, np.ndarray],
                weights: dict[str, np.ndarray]) -> None:
    verify(after)
    want, got = run(before, inputs, weights), run(after, inputs, weights)
    assert list(want) == list(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=TOL, atol=TOL, err_msg=name)


def onnx_ops(graph: Graph, inputs: dict[str, np.ndarray], weights: dict[str, np.ndarray]) -> Counter:
    """Lower to ONNX, check onnxruntime agrees with the interpreter, and count the ONNX op types."""
    from pseudoformer.backends.onnx import OnnxRunner, to_onnx

    model = to_onnx(graph, weights)
    want = run(graph, inputs, weights)
    got = OnnxRunner(model).run(inputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=TOL, atol=TOL, err_msg=name)
    return Counter(n.op_type for n in model.graph.node)


def random_inputs(graph: Graph, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for n in graph.inputs:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in n.shape)
        out[n.attrs["name"]] = (2 * rng.standard_normal(shape) + 0.5).astype(np.float32)
    return out


def random_params(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {p.attrs["name"]: rng.standard_normal(p.shape).astype(np.float32) for p in graph.params()}


# --- hand-built IR -------------------------------------------------------------------------------


def inp(name: str, *shape: int | str) -> Node:
    return Node(Op.INPUT, (), {"name": name, "type": TensorType(F32, tuple(shape))})


def param(name: str, *shape: int) -> Node:
    return Node(Op.PARAM, (), {"name": name, "type": TensorType(F32, tuple(shape))})


def const(value: float) -> Node:
    return Node(Op.CONST, (), {"value": value, "dtype": F32})


def op(o: Op, *src: Node, **attrs) -> Node:
    return Node(o, tuple(src), attrs)


def graph(inputs: list[Node], **outputs: Node) -> Graph:
    return Graph(inputs=inputs, outputs=list(outputs.items()), meta={"entry": "test"})

