"""The reference interpreter against hand-written numpy, op by op, plus its argument checking."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.interpreter import InterpreterError, erf, erfc, gelu, run
from pseudoformer.ir.verify import verify

F32, F16, I64, BOOL = DType.float32, DType.float16, DType.int64, DType.bool
rng = np.random.default_rng(0)


def inp(name: str, dtype: DType, *shape: int | str) -> Node:
    return Node(Op.INPUT, attrs={"name": name, "type": TensorType(dtype, tuple(shape))})


def param(name: str, dtype: DType, *shape: int) -> Node:
    return Node(Op.PARAM, attrs={"name": name, "type": TensorType(dtype, tuple(shape))})


def const(value: float | int | bool, dtype: DType) -> Node:
    return Node(Op.CONST, attrs={"value": value, "dtype": dtype})


def run1(inputs: list[Node], out: Node, feed: dict[str, np.ndarray], params: dict | None = None) -> np.ndarray:
    g = Graph(inputs, [("y", out)])
    verify(g)  # every graph the oracle runs here is one the verifier accepts
    return run(g, feed, params or {})["y"]


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


UNARY = [
    (Op.NEG, np.negative), (Op.EXP, np.exp), (Op.TANH, np.tanh), (Op.SIN, np.sin), (Op.COS, np.cos),
    (Op.ABS, np.abs), (Op.RELU, lambda v: np.maximum(v, 0)),
]


@pytest.mark.parametrize(("op", "fn"), UNARY, ids=[o.value for o, _ in UNARY])
def test_unary(op: Op, fn) -> None:
    x = inp("x", F32, 2, 3)
    xv = randn(2, 3)
    got = run1([x], Node(op, (x,)), {"x": xv})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, fn(xv))


def test_log_and_sqrt_keep_nan_for_negative_operands() -> None:
    x = inp("x", F32, 3)
    xv = np.array([4.0, 0.0, -1.0], np.float32)
    np.testing.assert_array_equal(run1([x], Node(Op.SQRT, (x,)), {"x": xv}), [2.0, 0.0, np.nan])
    got = run1([x], Node(Op.LOG, (x,)), {"x": xv})
    assert got[0] == np.log(np.float32(4)) and got[1] == -np.inf and np.isnan(got[2])


BINARY = [
    (Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply), (Op.DIV, np.divide),
    (Op.MAX, np.maximum), (Op.MIN, np.minimum), (Op.LT, np.less), (Op.LE, np.less_equal),
    (Op.GT, np.greater), (Op.GE, np.greater_equal), (Op.EQ, np.equal), (Op.NE, np.not_equal),
]


@pytest.mark.parametrize(("op", "fn"), BINARY, ids=[o.value for o, _ in BINARY])
def test_binary_broadcasts_like_numpy(op: Op, fn) -> None:
    a, b = inp("a", F32, 2, 1, 3), inp("b", F32, 4, 1)
    av, bv = randn(2, 1, 3), randn(4, 1)
    bv[0, 0] = av[0, 0, 0]  # so that the equality ops see a tie
    got = run1([a, b], Node(op, (a, b)), {"a": av, "b": bv})
    want = fn(av, bv)
    assert got.shape == (2, 4, 3) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_pow_with_scalar_constant() -> None:
    x = inp("x", F32, 3)
    xv = np.array([1.5, -2.0, 0.0], np.float32)
    got = run1([x], Node(Op.POW, (x, const(3.0, F32))), {"x": xv})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, xv**3)


def test_integer_division_truncates_toward_zero() -> None:
    a, b = inp("a", I64, 4), inp("b", I64, 4)
    got = run1([a, b], Node(Op.DIV, (a, b)), {"a": np.array([7, -7, 7, -7]), "b": np.array([2, 2, -2, -2])})
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [3, -3, -3, 3])


def test_logical_ops_and_where() -> None:
    p, q = inp("p", BOOL, 4), inp("q", BOOL, 4)
    pv, qv = np.array([1, 1, 0, 0], bool), np.array([1, 0, 1, 0], bool)
    np.testing.assert_array_equal(run1([p, q], Node(Op.AND, (p, q)), {"p": pv, "q": qv}), pv & qv)
    np.testing.assert_array_equal(run1([p, q], Node(Op.OR, (p, q)), {"p": pv, "q": qv}), pv | qv)
    np.testing.assert_array_equal(run1([p], Node(Op.NOT, (p,)), {"p": pv}), ~pv)
    x = inp("x", F32, 4)
    xv = randn(4)
    got = run1([p, x], Node(Op.WHERE, (p, x, const(-math.inf, F32))), {"p": pv, "x": xv})
    np.testing.assert_array_equal(got, np.where(pv, xv, np.float32(-np.inf)))
    assert got.dtype == np.float32


def test_const_and_cast() -> None:
    x = inp("x", F32, 3)
    xv = np.array([-1.7, 0.2, 2.9], np.float32)
    got = run1([x], Node(Op.CAST, (x,), {"dtype": I64}), {"x": xv})
    assert got.dtype == np.int64 and got.tolist() == [-1, 0, 2]
    got = run1([x], Node(Op.CAST, (x,), {"dtype": F16}), {"x": xv})
    assert got.dtype == np.float16
    c = run1([], const(0.125, F32), {})
    assert c.shape == () and c.dtype == np.float32 and c == np.float32(0.125)


def test_matmul_broadcasts_batch_dims() -> None:
    a, w = inp("a", F32, "batch", 2, 3), param("W", F32, 3, 4)
    av, wv = randn(5, 2, 3), randn(3, 4)
    got = run1([a], Node(Op.MATMUL, (a, w)), {"a": av}, {"W": wv})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, av @ wv, rtol=1e-6)


def test_transpose_unsqueeze_squeeze() -> None:
    x = inp("x", F32, 2, 3, 4)
    xv = randn(2, 3, 4)
    got = run1([x], Node(Op.TRANSPOSE, (x,), {"perm": (2, 0, 1)}), {"x": xv})
    np.testing.assert_array_equal(got, xv.transpose(2, 0, 1))
    u = Node(Op.UNSQUEEZE, (x,), {"axes": (0, -1)})
    assert u.shape == (1, 2, 3, 4, 1)
    got = run1([x], u, {"x": xv})
    assert got.shape == (1, 2, 3, 4, 1)
    got = run1([x], Node(Op.SQUEEZE, (u,), {"axes": (0, 4)}), {"x": xv})
    np.testing.assert_array_equal(got, xv)


def test_reshape_takes_symbolic_dims_from_the_operand() -> None:
    x = inp("x", F32, "batch", 6, "seq")
    r = Node(Op.RESHAPE, (x,), {"shape": ("batch", 2, 3, "seq")})
    xv = randn(4, 6, 5)
    got = run1([x], r, {"x": xv})
    np.testing.assert_array_equal(got, xv.reshape(4, 2, 3, 5))


def test_concat_with_symbolic_dims() -> None:
    a, b = inp("a", F32, 2, "past"), inp("b", F32, 2, "seq")
    c = Node(Op.CONCAT, (a, b), {"axis": 1})
    assert c.shape == (2, "past+seq")
    av, bv = randn(2, 3), randn(2, 1)
    np.testing.assert_array_equal(run1([a, b], c, {"a": av, "b": bv}), np.concatenate([av, bv], 1))


@pytest.mark.parametrize(("op", "fn"), [(Op.REDUCE_SUM, np.sum), (Op.REDUCE_MAX, np.max),
                                        (Op.REDUCE_MEAN, np.mean)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(op: Op, fn, keepdims: bool) -> None:
    x = inp("x", F32, 2, 3, 4)
    xv = randn(2, 3, 4)
    got = run1([x], Node(op, (x,), {"axes": (0, -1), "keepdims": keepdims}), {"x": xv})
    want = fn(xv, axis=(0, 2), keepdims=keepdims)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_reduce_mean_of_ints_stays_int() -> None:
    x = inp("x", I64, 4)
    got = run1([x], Node(Op.REDUCE_MEAN, (x,), {"axes": (0,)}), {"x": np.array([1, 2, 3, 5])})
    assert got.dtype == np.int64 and got == 2


def test_softmax_is_stable_and_keeps_nan_rows() -> None:
    x = inp("x", F32, 3, 4)
    xv = np.array([[1000, 1001, 1002, 1003], [-1, 0, 1, 2], [-np.inf] * 4], np.float32)
    got = run1([x], Node(Op.SOFTMAX, (x,), {"axis": -1}), {"x": xv})
    e = np.exp(np.array([-3, -2, -1, 0], np.float64))
    np.testing.assert_allclose(got[0], e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(got[1], e / e.sum(), rtol=1e-6)
    assert np.isnan(got[2]).all()
    assert got.dtype == np.float32


def test_gather_is_numpy_take() -> None:
    # The paper's embedding lookup: W_e[:, x] with W_e [d, V] and token ids [batch, seq].
    w, x = param("W_e", F32, 4, 10), inp("x", I64, "batch", "seq")
    wv, xv = randn(4, 10), rng.integers(0, 10, (2, 3))
    g = Node(Op.GATHER, (w, x), {"axis": 1})
    assert g.shape == (4, "batch", "seq")
    got = run1([x], g, {"x": xv}, {"W_e": wv})
    np.testing.assert_array_equal(got, np.take(wv, xv, axis=1))


def test_gather_out_of_range_names_the_node() -> None:
    w, x = param("W_e", F32, 4, 10), inp("x", I64, 3)
    with pytest.raises(InterpreterError, match="gather"):
        run1([x], Node(Op.GATHER, (w, x), {"axis": 1}), {"x": np.array([0, 10, 1])}, {"W_e": randn(4, 10)})


def test_dim_arange_slice_and_index_mask() -> None:
    x = inp("x", F32, "batch", 8, "seq")
    xv = randn(2, 8, 5)
    n = Node(Op.DIM, (x,), {"axis": -1})
    got = run1([x], n, {"x": xv})
    assert got.shape == () and got.dtype == np.int64 and got == 5
    np.testing.assert_array_equal(run1([x], Node(Op.ARANGE, (n,), {"dim": "seq"}), {"x": xv}), np.arange(5))
    s = Node(Op.SLICE, (x, const(0, I64), n), {"axis": 1, "dim": "seq"})
    np.testing.assert_array_equal(run1([x], s, {"x": xv}), xv[:, 0:5])
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    for rel, fn in [("<", np.less), ("<=", np.less_equal), (">", np.greater), (">=", np.greater_equal),
                    ("==", np.equal), ("!=", np.not_equal)]:
        m = Node(Op.INDEX_MASK, (n, n), {"rel": rel, "dims": ("seq", "seq")})
        got = run1([x], m, {"x": xv})
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, fn(i, j))


def test_index_mask_is_rectangular() -> None:
    a, b = inp("a", F32, "q"), inp("b", F32, "k")
    m = Node(Op.INDEX_MASK, (Node(Op.DIM, (a,), {"axis": 0}), Node(Op.DIM, (b,), {"axis": 0})),
             {"rel": "<=", "dims": ("q", "k")})
    got = run1([a, b], m, {"a": randn(2), "b": randn(3)})
    np.testing.assert_array_equal(got, np.arange(2)[:, None] <= np.arange(3)[None, :])


def test_masked_self_attention_in_the_papers_layout() -> None:
    """Algorithm 4/5 with a unidirectional mask: X [batch, d, seq], one head, weights [d_attn, d]."""
    d, dk = 6, 4
    x = inp("X", F32, "batch", d, "seq")
    wq, wk, wv = param("W_q", F32, dk, d), param("W_k", F32, dk, d), param("W_v", F32, d, d)
    q, k, v = (Node(Op.MATMUL, (w, x)) for w in (wq, wk, wv))  # [batch, dk, seq]
    kt = Node(Op.TRANSPOSE, (k,), {"perm": (0, 2, 1)})
    s = Node(Op.DIV, (Node(Op.MATMUL, (kt, q)), const(math.sqrt(dk), F32)))  # [batch, t_z, t_x]
    n = Node(Op.DIM, (x,), {"axis": 2})
    mask = Node(Op.INDEX_MASK, (n, n), {"rel": "<=", "dims": ("seq", "seq")})
    s = Node(Op.WHERE, (mask, s, const(-math.inf, F32)))
    a = Node(Op.SOFTMAX, (s,), {"axis": 1})
    y = Node(Op.MATMUL, (v, a))
    xv = randn(2, d, 5)
    pv = {"W_q": randn(dk, d), "W_k": randn(dk, d), "W_v": randn(d, d)}
    got = run1([x], y, {"X": xv}, pv)
    Q, K, V = (pv[name] @ xv for name in ("W_q", "W_k", "W_v"))
    S = np.einsum("bkt,bku->btu", K, Q) / np.float32(math.sqrt(dk))
    S = np.where(np.arange(5)[:, None] <= np.arange(5)[None, :], S, -np.inf)
    A = np.exp(S - S.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    assert got.dtype == np.float32 and got.shape == (2, d, 5)
    np.testing.assert_allclose(got, V @ A, rtol=1e-5, atol=1e-6)


# --- erf and gelu ---


def test_erf_matches_math_erf_on_a_dense_grid() -> None:
    xs = np.linspace(-9.0, 9.0, 180_001)
    want = np.array([math.erf(v) for v in xs])
    got = erf(xs)
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    assert rel.max() < 1e-14
    tiny = np.array([1e-300, -1e-30, 1e-10, 0.0])
    np.testing.assert_allclose(erf(tiny), [math.erf(v) for v in tiny], rtol=1e-15)


def test_erfc_keeps_relative_accuracy_in_the_tail() -> None:
    xs = np.linspace(-5.0, 26.0, 62_001)
    want = np.array([math.erfc(v) for v in xs])
    assert (np.abs(erfc(xs) - want) / want).max() < 1e-13
    assert erfc(np.array([27.5, 40.0, 1e10])).tolist() == [0.0, 0.0, 0.0]  # underflow, not NaN


def test_erf_special_values() -> None:
    got = erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2]) and math.copysign(1, got[3]) == -1
    assert erfc(np.array([np.inf, -np.inf])).tolist() == [0.0, 2.0]
    assert erf(0.5).shape == () and erf(0.5) == math.erf(0.5)
    got = run1([], Node(Op.ERF, (const(0.5, F32),)), {})
    assert got.shape == () and got.dtype == np.float32 and got == np.float32(math.erf(0.5))


def test_erf_op_rounds_once_to_float32() -> None:
    x = inp("x", F32, 2001)
    xv = np.linspace(-5, 5, 2001).astype(np.float32)
    got = run1([x], Node(Op.ERF, (x,)), {"x": xv})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array([math.erf(v) for v in xv.astype(np.float64)], np.float32))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_formulas(approximate: str) -> None:
    xv = np.linspace(-12, 12, 4001).astype(np.float32)
    x = inp("x", F32, 4001)
    got = run1([x], Node(Op.GELU, (x,), {"approximate": approximate}), {"x": xv})
    v = xv.astype(np.float64)
    if approximate == "none":
        # x/2 (1 + erf(x/sqrt2)), written with erfc so that the reference itself is exact for x << 0
        want = np.array([0.5 * t * math.erfc(-t / math.sqrt(2)) for t in v])
    else:
        want = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)


def test_gelu_defaults_to_exact_and_agrees_with_torch() -> None:
    # The oracle is GELU in float64, rounded once. Ours must sit within an ulp of it; torch's float32
    # erf is vectorised differently per CPU (AVX-512's differs by ~8e-7 near x = 3.5), so torch is held
    # to the oracle at its own accuracy, not to ours: both agree with the exact function, whatever CPU.
    torch = pytest.importorskip("torch")
    xv = randn(10_000) * 4
    x = inp("x", F32, 10_000)
    got = run1([x], Node(Op.GELU, (x,)), {"x": xv})
    x64 = xv.astype(np.float64)
    exact = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=3e-7)
    want = torch.nn.functional.gelu(torch.from_numpy(xv)).numpy()
    np.testing.assert_allclose(want, exact, rtol=1e-5, atol=3e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-6)
    want = torch.nn.functional.gelu(torch.from_numpy(xv), approximate="tanh").numpy()
    np.testing.assert_allclose(gelu(xv, "tanh"), want, rtol=1e-5, atol=3e-6)


def test_float16_graph_stays_float16() -> None:
    x = inp("x", F16, 2, 3)
    h = Node(Op.SOFTMAX, (Node(Op.GELU, (Node(Op.MUL, (x, x)),)),), {"axis": -1})
    h = Node(Op.REDUCE_MEAN, (Node(Op.ERF, (h,)),), {"axes": (1,)})
    got = run1([x], h, {"x": randn(2, 3, dtype=np.float16)})
    assert got.dtype == np.float16 and got.shape == (2,)


# --- graphs, outputs and argument checking ---


def test_outputs_come_back_in_graph_order_and_may_be_inputs() -> None:
    x = inp("x", F32, 3)
    e = Node(Op.EXP, (x,))
    n = Node(Op.NEG, (e,))
    xv = randn(3)
    out = run(Graph([x], [("neg", n), ("x", x), ("exp", e)]), {"x": xv}, {})
    assert list(out) == ["neg", "x", "exp"]
    np.testing.assert_array_equal(out["exp"], np.exp(xv))
    np.testing.assert_array_equal(out["neg"], -np.exp(xv))
    np.testing.assert_array_equal(out["x"], xv)


def test_every_bad_argument_is_reported_at_once() -> None:
    x, m = inp("x", F32, "batch", 3), inp("m", BOOL, "batch", 3)
    w, b = param("W", F32, 3, 3), param("b", F32, 3)
    y = Node(Op.ADD, (Node(Op.MATMUL, (x, w)), b))
    g = Graph([x, m], [("y", Node(Op.WHERE, (m, y, const(0.0, F32))))])
    with pytest.raises(InterpreterError) as err:
        run(g, {"x": randn(2, 3).astype(np.float64), "z": randn(1)}, {"W": randn(3, 4)})
    msg = str(err.value)
    for part in ["unknown input 'z'", "missing input 'm'", "input 'x': dtype float64", "param 'W'",
                 "missing param 'b'"]:
        assert part in msg


def test_symbolic_dims_must_agree_across_inputs() -> None:
    x, m = inp("x", F32, "batch", "seq"), inp("m", F32, "batch", "seq")
    g = Graph([x, m], [("y", Node(Op.ADD, (x, m)))])
    with pytest.raises(InterpreterError, match="'seq'"):
        run(g, {"x": randn(2, 3), "m": randn(2, 4)}, {})
    with pytest.raises(InterpreterError, match="rank"):
        run(g, {"x": randn(2, 3), "m": randn(2, 3, 1)}, {})


def test_concrete_dims_of_inputs_are_checked() -> None:
    x = inp("x", F32, "batch", 4)
    with pytest.raises(InterpreterError, match="expected float32\\[batch, 4\\]"):
        run1([x], Node(Op.NEG, (x,)), {"x": randn(2, 5)})


def test_a_result_contradicting_its_type_is_caught_at_its_node() -> None:
    # arange claims length 'seq' but counts to the batch size: the types lie about the run.
    x = inp("x", F32, "batch", "seq")
    bad = Node(Op.ARANGE, (Node(Op.DIM, (x,), {"axis": 0}),), {"dim": "seq"})
    g = Graph([x], [("y", bad)])
    run(g, {"x": randn(3, 3)}, {})  # consistent when batch == seq
    with pytest.raises(InterpreterError, match="arange.*'seq'"):
        run(g, {"x": randn(2, 3)}, {})


def test_a_param_used_twice_and_an_intermediate_used_twice() -> None:
    x, w = inp("x", F32, 2, 2), param("W", F32, 2, 2)
    h = Node(Op.MATMUL, (x, w))
    y = Node(Op.MATMUL, (Node(Op.MUL, (h, h)), param("W", F32, 2, 2)))
    xv, wv = randn(2, 2), randn(2, 2)
    out = run(Graph([x], [("y", y), ("h", h)]), {"x": xv}, {"W": wv, "unused": randn(1)})
    np.testing.assert_allclose(out["y"], ((xv @ wv) ** 2) @ wv, rtol=1e-6)
    np.testing.assert_allclose(out["h"], xv @ wv, rtol=1e-6)
