"""matmul_nbits and gather_nbits: the packing read back bit by bit, the reference against plain numpy,
the typing rule's refusals, the decomposition against the reference, and the IR text round trip."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Graph, Node, Op, TensorType, interpreter
from pseudoformer.ir.ops import IRTypeError
from pseudoformer.ir.ops.quantized import dequantize, k_blocks, pack
from pseudoformer.ir.printer import format_graph
from pseudoformer.ir.text_parser import parse
from pseudoformer.ir.verify import verify
from pseudoformer.passes.decompose import decompose

F32, I64, U8 = DType.float32, DType.int64, DType.uint8
CASES = [(bits, bs, k) for bits in (4, 8) for bs, k in ((16, 16), (16, 40), (32, 96), (64, 50))]


def leaf(op: Op, name: str, arr_or_type) -> Node:
    t = arr_or_type if isinstance(arr_or_type, TensorType) else \
        TensorType(DType(arr_or_type.dtype.name), arr_or_type.shape)
    return Node(op, (), {"name": name, "type": t})


def codes(rng, n: int, k: int, bits: int, bs: int, symmetric: bool):
    kb = k_blocks(k, bs)
    q = rng.integers(0, 1 << bits, (n, kb, bs))
    z = None if symmetric else rng.integers(0, 1 << bits, (n, kb))
    s = rng.random((n, kb)).astype(np.float32) + 0.1
    return q, z, s


def naive(q, z, s, k: int, bits: int) -> np.ndarray:
    """W = (q − z) · s, written out element by element from the unpacked codes."""
    n, kb, bs = q.shape
    w = np.zeros((n, k), np.float32)
    for i in range(n):
        for j in range(k):
            b = j // bs
            zero = (1 << (bits - 1)) if z is None else z[i, b]
            w[i, j] = (q[i, b, j % bs] - zero) * s[i, b]
    return w


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize(("bits", "bs", "k"), CASES)
def test_dequantize_reads_back_what_pack_wrote(bits, bs, k, symmetric) -> None:
    rng = np.random.default_rng(bits * 1000 + bs + k)
    q, z, s = codes(rng, 5, k, bits, bs, symmetric)
    packed, zp = pack(q, z, k, bits)
    assert packed.dtype == np.uint8 and packed.shape == (5, k_blocks(k, bs), bs * bits // 8)
    assert (zp is None) == symmetric
    if zp is not None:
        assert zp.shape == (5, k_blocks(k_blocks(k, bs) * bits, 8))
    np.testing.assert_array_equal(dequantize(packed, s, zp, k=k, bits=bits, block_size=bs), naive(q, z, s, k, bits))


def test_four_bit_codes_pair_low_nibble_first() -> None:
    q = np.arange(16).reshape(1, 1, 16)
    packed, _ = pack(q, None, 16, 4)
    assert packed.tolist() == [[[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]]]


def test_padding_past_k_holds_the_zero_point() -> None:
    q = np.full((1, 1, 16), 3)
    packed, zp = pack(q, np.array([[9]]), 10, 4)
    flat = [(b >> s) & 15 for b in packed[0, 0] for s in (0, 4)]
    assert flat == [3] * 10 + [9] * 6 and zp.tolist() == [[9]]


def graph_of(rng, bits: int, bs: int, k: int, symmetric: bool, bias: bool):
    q, z, s = codes(rng, 6, k, bits, bs, symmetric)
    packed, zp = pack(q, z, k, bits)
    params = {"w.quant": packed, "w.scales": s}
    if zp is not None:
        params["w.zero_points"] = zp
    if bias:
        params["b"] = rng.standard_normal(6).astype(np.float32)
    weights = [leaf(Op.PARAM, name, arr) for name, arr in params.items() if name != "b"]
    x = leaf(Op.INPUT, "x", TensorType(F32, ("batch", "seq", k)))
    ids = leaf(Op.INPUT, "ids", TensorType(I64, ("batch", "seq")))
    attrs = {"bits": bits, "block_size": bs, "K": k}
    extra = (leaf(Op.PARAM, "b", params["b"]),) if bias else ()
    mm = Node(Op.MATMUL_NBITS, (x, *weights, *extra), {**attrs, "accuracy_level": 0})
    g = Node(Op.GATHER_NBITS, (weights[0], ids, *weights[1:]), attrs)
    feed = {"x": rng.standard_normal((2, 3, k)).astype(np.float32), "ids": rng.integers(0, 6, (2, 3))}
    w = naive(q, z, s, k, bits)
    want = {"y": feed["x"] @ w.T + (params["b"] if bias else 0), "e": w[feed["ids"]]}
    return Graph([x, ids], [("y", mm), ("e", g)], {"entry": "Q"}), params, feed, want


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize(("bits", "bs", "k"), CASES)
def test_reference_and_decomposition_agree_with_numpy(bits, bs, k, symmetric, bias) -> None:
    rng = np.random.default_rng(k + bits)
    graph, params, feed, want = graph_of(rng, bits, bs, k, symmetric, bias)
    verify(graph)
    got = interpreter.run(graph, feed, params)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["e"], want["e"])
    formula, changed = decompose(graph, lambda n: False)
    assert changed and not {Op.MATMUL_NBITS, Op.GATHER_NBITS} & {n.op for n in formula.nodes()}
    verify(formula)
    by_formula = interpreter.run(formula, feed, params)
    np.testing.assert_allclose(by_formula["y"], got["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(by_formula["e"], got["e"])


def test_ir_text_round_trips() -> None:
    graph, *_ = graph_of(np.random.default_rng(0), 4, 16, 40, False, True)
    text = format_graph(graph)
    assert "uint8[6, 3, 8]" in text and "matmul_nbits %x" in text and "gather_nbits" in text
    assert format_graph(parse(text)) == text


def test_the_typing_rule_refuses_mismatched_operands() -> None:
    x = leaf(Op.INPUT, "x", TensorType(F32, ("batch", 40)))
    packed = leaf(Op.PARAM, "p", TensorType(U8, (6, 3, 8)))
    scales = leaf(Op.PARAM, "s", TensorType(F32, (6, 3)))
    attrs = {"bits": 4, "block_size": 16, "K": 40}
    Node(Op.MATMUL_NBITS, (x, packed, scales), attrs)  # well-typed
    bad = [
        ((x, packed, scales), {**attrs, "K": 64}),  # K says 4 blocks
        ((x, packed, scales), {**attrs, "bits": 8}),  # 8 bits take 16 bytes a block
        ((x, packed, leaf(Op.PARAM, "s2", TensorType(F32, (6, 2)))), attrs),
        ((x, packed, scales, leaf(Op.PARAM, "z", TensorType(U8, (6, 3)))), attrs),  # 3 nibbles: 2 bytes
        ((x, packed, scales, leaf(Op.PARAM, "b", TensorType(F32, (5,)))), attrs),
        ((leaf(Op.INPUT, "y", TensorType(F32, ("batch", 41))), packed, scales), attrs),
    ]
    for src, a in bad:
        with pytest.raises(IRTypeError):
            Node(Op.MATMUL_NBITS, src, a)
    with pytest.raises(IRTypeError):  # a gather takes no bias
        Node(Op.GATHER_NBITS, (packed, leaf(Op.INPUT, "i", TensorType(I64, (2,))), scales,
                               leaf(Op.PARAM, "b", TensorType(F32, (6,)))), attrs)
