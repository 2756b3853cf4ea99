"""The CPU attention kernel (backends/tvm/attention_kernel.py) and its lowering (lowerings/attention.py).

The kernel against the interpreter's attend: grouped-query, multi-query and plain heads, causal or not, a
sliding window, a soft-cap, one query (decode) and many (prefill), d not a multiple of 16, d_v ≠ d, on the
serial path and the parallel one. The lowering: a model's attention compiles to this one kernel on a CPU
(the keys' transposed copy and the separate softmax kernels are gone) with the interpreter's outputs, while a
mask operand and a GPU target still take attention by parts."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM)

from pseudoformer.backends.tvm.attention_kernel import MIN_PARALLEL_WORK, attention_func, vector_lanes
from pseudoformer.backends.tvm.build import compile_graph, make_target, prepare
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.ops.attention import attend
from pseudoformer.model import load

tvm = pytest.importorskip("tvm")

CASES = {  # hq, hkv, d, dv, causal, window, softcap, b, s_q, s_k
    "decode-gqa": (9, 3, 64, 64, True, 0, 0.0, 1, 1, 129),
    "decode-mqa-batch2": (4, 1, 32, 32, True, 0, 0.0, 2, 1, 17),
    "prefill-gqa": (6, 2, 64, 64, True, 0, 0.0, 2, 7, 7),
    "cached-prefill": (4, 2, 16, 16, True, 0, 0.0, 1, 5, 12),
    "cross-not-causal": (4, 4, 24, 40, False, 0, 0.0, 1, 5, 9),
    "window": (6, 2, 64, 64, True, 3, 0.0, 1, 6, 10),
    "softcap": (4, 2, 16, 16, True, 0, 5.0, 1, 4, 4),
    "odd-width": (3, 3, 6, 5, True, 0, 0.0, 1, 3, 3),
    "parallel": (8, 2, 64, 64, True, 0, 0.0, 1, 64, 64),
}


def _run(case: tuple, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    hq, hkv, d, dv, causal, window, softcap, b, sq, sk = case
    func = attention_func(hq, hkv, d, dv, scale=d ** -0.5, causal=causal, window=window, softcap=softcap)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=make_target("llvm"))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, hq, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, sk, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, sk, dv)).astype(np.float32)
    out = tvm.runtime.tensor(np.full((b, hq, sq, dv), np.nan, np.float32))
    lib["main"](*(tvm.runtime.tensor(a) for a in (q, k, v)), out)
    want = attend(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), None, d ** -0.5, causal,
                  window=window, softcap=softcap)
    return out.numpy(), want


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_kernel_is_the_reference_attention(case: tuple) -> None:
    got, want = _run(case)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_small_calls_run_serially_and_large_ones_split() -> None:
    hq, hkv, d, dv, *_ , b, sq, sk = CASES["parallel"]
    assert b * hq * sq * sk * (d + dv) >= MIN_PARALLEL_WORK  # the parallel case is over the threshold…
    hq, hkv, d, dv, *_, b, sq, sk = CASES["decode-gqa"]
    assert b * hq * sq * sk * (d + dv) < MIN_PARALLEL_WORK  # …and a decode step under it
    script = attention_func(9, 3, 64, 64, scale=0.125, causal=True).script()
    assert script.count("T.parallel(") == 1 and f"< T.int64({MIN_PARALLEL_WORK})" in script


def test_vector_lanes_divide_the_width() -> None:
    assert [vector_lanes(w) for w in (64, 24, 6, 5, 128)] == [16, 8, 2, 1, 16]


def test_grouped_heads_must_divide() -> None:
    with pytest.raises(ValueError, match="do not share"):
        attention_func(9, 2, 64, 64, scale=0.125, causal=True)


TINY = ["L=2", "H=4", "H_kv=2", "d_e=64", "d_mlp=96", "N_V=100", "d_attn=16"]


def _step_and_feed() -> tuple:
    from pseudoformer.generation import Generator

    gen = Generator(load("models/llama.alg", defines=TINY, seed=3), backend="numpy")
    step = gen.decoder.step  # type: ignore[union-attr]
    rng = np.random.default_rng(1)
    feed = {"x": rng.integers(0, 100, (2, 3))}
    for n in step.inputs:
        if n.attrs["name"] != "x":
            shape = [2 if d == "batch" else 5 if isinstance(d, str) else d for d in n.type.shape]
            feed[n.attrs["name"]] = rng.standard_normal(shape).astype(np.float32)
    return step, gen.weights, feed


def test_a_models_attention_is_one_kernel_on_a_cpu_and_by_parts_on_a_gpu() -> None:
    step, weights, feed = _step_and_feed()
    cpu, _ = prepare(step, weights)
    gpu, _ = prepare(step, weights, target_kind="cuda")
    assert sum(n.op is Op.ATTENTION for n in cpu.nodes()) == 2  # one a layer
    assert not [n for n in gpu.nodes() if n.op is Op.ATTENTION]
    assert sum(n.op is Op.SOFTMAX for n in gpu.nodes()) == 2
    model = compile_graph(step, weights)
    kernels = model.call_counts(feed)
    assert kernels.get("attention_4x2x16") == 2, kernels
    assert not [k for k in kernels if "softmax" in k], kernels
    got, want = model.run(feed), run(step, feed, weights)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_whole_models_attention_is_the_plain_kernel() -> None:
    model = load("models/llama.alg", defines=TINY, seed=3)
    compiled = compile_graph(model.graph, model.weights, opt_level=2)  # -O2 fuses attention
    feed = {model.graph.inputs[0].attrs["name"]: np.random.default_rng(2).integers(0, 100, (2, 6))}
    assert compiled.call_counts(feed).get("attention_4x2x16") == 2
    got = compiled.run(feed)
    for name, value in run(model.graph, feed, model.weights).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
