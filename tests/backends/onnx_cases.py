"""Hand-built IR graphs for the ONNX backend tests, and the check that runs them against the oracle.

The graphs are small but use the paper's layout ([batch, features, positions], parameters with
no batch axis). Every op of the IR is tested on its own example (OpDef.example, ir/examples.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir import interpreter
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType, TensorType

F32, I64, BOOL = DType.float32, DType.int64, DType.bool
SIZES = [(1, 1), (2, 5), (3, 8)]  # (batch, seq) pairs every case is run at, from one model


def inp(name: str, dtype: DType, *shape) -> Node:
    return Node(Op.INPUT, (), {"name": name, "type": TensorType(dtype, tuple(shape))})


def param(name: str, *shape: int) -> Node:
    return Node(Op.PARAM, (), {"name": name, "type": TensorType(F32, tuple(shape))})


def const(value, dtype: DType = F32) -> Node:
    return Node(Op.CONST, (), {"value": value, "dtype": dtype})


def op(o: Op, *src: Node, scope: str = "", **attrs) -> Node:
    return Node(o, tuple(src), attrs, scope=scope)


def block(d: int = 8, vocab: int = 11, d_attn: int = 4, lmax: int = 16) -> Graph:
    """Embedding, layer norm, one causal attention head, GELU and tied unembedding (paper layout)."""
    x = inp("x", I64, "batch", "seq")
    W_e, W_p = param("W_e", d, vocab), param("W_p", d, lmax)
    e = op(Op.TRANSPOSE, op(Op.GATHER, W_e, x, axis=1), perm=(1, 0, 2), scope="embed")  # [b, d, seq]
    seq = op(Op.DIM, x, axis=1)
    pos = op(Op.GATHER, W_p, op(Op.ARANGE, seq, dim="seq"), axis=1, scope="embed")  # [d, seq]
    X = op(Op.ADD, e, pos, scope="embed")

    s = "layers.0/LayerNorm"
    mean = op(Op.REDUCE_MEAN, X, axes=(1,), keepdims=True, scope=s)
    dev = op(Op.SUB, X, mean, scope=s)
    var = op(Op.REDUCE_MEAN, op(Op.MUL, dev, dev, scope=s), axes=(1,), keepdims=True, scope=s)
    norm = op(Op.DIV, dev, op(Op.SQRT, op(Op.ADD, var, const(1e-5), scope=s), scope=s), scope=s)
    Y = op(Op.ADD, op(Op.MUL, norm, param("gamma", d, 1), scope=s), param("beta", d, 1), scope=s)

    s = "layers.0/Attention"
    Q, K, V = (
        op(Op.ADD, op(Op.MATMUL, param(f"W_{w}", d_attn, d), Y, scope=s), param(f"b_{w}", d_attn, 1), scope=s)
        for w in "qkv"
    )
    scores = op(Op.MATMUL, op(Op.TRANSPOSE, K, perm=(0, 2, 1), scope=s), Q, scope=s)  # [b, tz, tx]
    scale = op(Op.SQRT, op(Op.CAST, op(Op.DIM, K, axis=1, scope=s), dtype=F32, scope=s), scope=s)
    mask = op(Op.INDEX_MASK, seq, seq, rel="<=", dims=("seq", "seq"), scope=s)  # attend to tz <= tx
    masked = op(Op.WHERE, mask, op(Op.DIV, scores, scale, scope=s), const(-math.inf), scope=s)
    attn = op(Op.SOFTMAX, masked, axis=1, scope=s)
    mixed = op(Op.MATMUL, param("W_o", d, d_attn), op(Op.MATMUL, V, attn, scope=s), scope=s)
    H = op(Op.GELU, op(Op.ADD, X, mixed), approximate="tanh")

    unembed = op(Op.TRANSPOSE, param("W_e", d, vocab), perm=(1, 0))  # tied to the embedding
    logits = op(Op.MATMUL, unembed, H)  # [b, vocab, seq]
    probs = op(Op.SOFTMAX, logits, axis=1)
    peak = op(Op.REDUCE_MAX, logits, axes=(1,), keepdims=False)
    total = op(Op.REDUCE_SUM, probs, axes=(1, 2), keepdims=False)
    return Graph([x], [("P", probs), ("peak", peak), ("total", total), ("attn", attn)], {"entry": "Block"})


def block_params(d: int = 8, vocab: int = 11, d_attn: int = 4, lmax: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    p = {"W_e": w(d, vocab), "W_p": w(d, lmax), "gamma": 1 + w(d, 1, scale=0.1), "beta": w(d, 1, scale=0.1),
         "W_o": w(d, d_attn)}
    for n in "qkv":
        p[f"W_{n}"], p[f"b_{n}"] = w(d_attn, d), w(d_attn, 1, scale=0.1)
    return p


def block_inputs(batch: int, seq: int, vocab: int = 11, seed: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(0, vocab, (batch, seq), dtype=np.int64)}


def structure() -> Graph:
    """The remaining ops, each of whose results is an output, on x: float32[batch, 4, seq]."""
    x = inp("x", F32, "batch", 4, "seq")
    flags = inp("flags", BOOL, "batch", 1, "seq")
    seq = op(Op.DIM, x, axis=-1, scope="sizes")
    one, two = const(1, I64), const(2, I64)
    zero = const(0.0)
    a = op(Op.ABS, x)
    out: dict[str, Node] = {
        "neg": op(Op.NEG, x), "exp": op(Op.EXP, x), "log": op(Op.LOG, op(Op.ADD, a, const(1.0))),
        "sqrt": op(Op.SQRT, a), "tanh": op(Op.TANH, x), "erf": op(Op.ERF, x), "sin": op(Op.SIN, x),
        "cos": op(Op.COS, x), "relu": op(Op.RELU, x), "gelu": op(Op.GELU, x, approximate="none"),
        "pow": op(Op.POW, a, const(1.5)), "max": op(Op.MAX, x, zero), "min": op(Op.MIN, x, zero),
        "sub_div": op(Op.DIV, op(Op.SUB, x, const(0.25)), const(3.0)),
        "lt": op(Op.LT, x, zero), "le": op(Op.LE, x, zero), "gt": op(Op.GT, x, zero),
        "ge": op(Op.GE, x, zero), "eq": op(Op.EQ, x, x), "ne": op(Op.NE, x, zero),
        "and_not": op(Op.AND, op(Op.NOT, flags), op(Op.GT, x, zero)),
        "or": op(Op.OR, flags, op(Op.LT, x, zero)),
        "where": op(Op.WHERE, flags, x, op(Op.NEG, x)),
        "to_int": op(Op.CAST, op(Op.MUL, x, const(10.0)), dtype=I64),
        "to_float": op(Op.CAST, flags, dtype=F32),
        "int_div": op(Op.DIV, op(Op.SUB, seq, const(8, I64)), two),  # -7/2 is -3: truncation, not floor
        "tail": op(Op.SLICE, x, one, seq, axis=2, dim="seq-1", scope="sizes"),
        "split": op(Op.RESHAPE, x, shape=("batch", 2, 2, "seq")),
        "merged": op(Op.RESHAPE, op(Op.TRANSPOSE, x, perm=(0, 2, 1)), shape=("batch", "seq", 2, 2)),
        "cat": op(Op.CONCAT, x, op(Op.NEG, x), axis=1),
        "cat_seq": op(Op.CONCAT, x, x, axis=2),
        "squeezed": op(Op.SQUEEZE, op(Op.UNSQUEEZE, x, axes=(0, 2)), axes=(0,)),
        "pick": op(Op.GATHER, x, op(Op.ARANGE, two, dim=2), axis=1),
        # rows 3 and 1 of x replaced by −x's first two rows
        "put": op(Op.SCATTER, x, op(Op.SUB, const(3, I64), op(Op.MUL, op(Op.ARANGE, two, dim=2), two)),
                  op(Op.SLICE, op(Op.NEG, x), const(0, I64), two, axis=1, dim=2), axis=1),
        # a gather's transpose: rows 0, 1, 0 of x get x's first three rows added (row 0 twice), and rows
        # 0, 1, 2, 0 its four, indexed by a 2×2 table
        "add_at": op(Op.SCATTER_ADD, x, op(Op.MOD, op(Op.ARANGE, const(3, I64), dim=3), two),
                     op(Op.SLICE, x, const(0, I64), const(3, I64), axis=1, dim=3), axis=1),
        "add_at_table": op(Op.SCATTER_ADD, x, op(Op.RESHAPE, op(Op.MOD, op(Op.ARANGE, const(4, I64), dim=4),
                                                                  const(3, I64)), shape=(2, 2)),
                           op(Op.RESHAPE, x, shape=("batch", 2, 2, "seq")), axis=1),
        "sum_keep": op(Op.REDUCE_SUM, x, axes=(1,), keepdims=True),
        "mean_all": op(Op.REDUCE_MEAN, x, axes=(0, 1, 2), keepdims=False),
        "max_neg_axis": op(Op.REDUCE_MAX, x, axes=(-1,), keepdims=False),
        "max_of_nothing": op(Op.REDUCE_MAX, x, axes=(), keepdims=False),
        "softmax": op(Op.SOFTMAX, x, axis=-1),
        "prefix_sums": op(Op.CUMSUM, x, axis=2), "row_sums": op(Op.CUMSUM, x, axis=-2),
        "floor": op(Op.FLOOR, op(Op.MUL, x, const(3.0))), "ceil": op(Op.CEIL, op(Op.MUL, x, const(3.0))),
        # the floored remainder, with the sign of the divisor, on floats and on integers
        "mod": op(Op.MOD, op(Op.MUL, x, const(7.0)), const(-3.0)),
        "int_mod": op(Op.MOD, op(Op.SUB, seq, const(8, I64)), const(3, I64)),  # -7 mod 3 is 2
    }
    for rel in ("<", "<=", ">", ">=", "==", "!="):
        out[f"mask{rel}"] = op(Op.INDEX_MASK, seq, op(Op.ADD, seq, one), rel=rel, dims=("seq", "seq+1"))
    return Graph([x, flags], list(out.items()), {"entry": "Structure"})


def structure_inputs(batch: int, seq: int, seed: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((batch, 4, seq)).astype(np.float32),
        "flags": rng.random((batch, 1, seq)) < 0.5,
    }


def assert_matches(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], *, tol: float = 1e-5) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol, err_msg=name)
        else:
            assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
            np.testing.assert_array_equal(g, w, err_msg=name)


def lower_checked(graph: Graph, params: Mapping[str, np.ndarray], **kw) -> onnx.ModelProto:
    model = to_onnx(graph, params, check=False, **kw)
    onnx.checker.check_model(model, full_check=True)
    return model


def check_against_oracle(
    graph: Graph, params: Mapping[str, np.ndarray], inputs: Iterable[Mapping[str, np.ndarray]], **kw
) -> onnx.ModelProto:
    """Lower once, then run ORT and the interpreter on every input set; outputs must agree to 1e-5."""
    model = lower_checked(graph, params, **kw)
    runner = OnnxRunner(model)
    for feed in inputs:
        assert_matches(runner.run(feed), interpreter.run(graph, feed, params))
    return model
