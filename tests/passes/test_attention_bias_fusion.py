"""Additive score biases fuse into the attention op (issue 12, item 8): ALiBi's m·(t_z − t_x) and a T5-style
learned bias w[t_x − t_z + ℓ_max], one ℓ × ℓ matrix per head, become the heads' [H, ℓ, ℓ] bias operand of a
single ATTENTION, beside `causal` where the mask is exact. The programs are in tests/passes/attention_biases/."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pseudoformer.backends.onnx import to_onnx
from pseudoformer.backends.onnx.runner import OnnxRunner
from pseudoformer.ir import DType, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.manager import PassContext, pipeline, run_passes
from tests.passes.attention_graphs import load_small

HERE = "tests/passes/attention_biases"
SIZES = {"H": 3, "d_x": 8, "d_attn": 4, "d_mid": 4}
PROGRAMS = {
    "alibi": (f"{HERE}/alibi.alg", "ALiBi", SIZES),
    "t5": (f"{HERE}/t5.alg", "T5Bias", {**SIZES, "ell_max": 12}),
}


def _graph(name: str):  # noqa: ANN202
    path, entry, hyper = PROGRAMS[name]
    return load_small(path, entry, **hyper).graph


def _optimised(graph):  # noqa: ANN001, ANN202
    ctx = PassContext()
    out = run_passes(graph, pipeline(2), check=True, ctx=ctx)
    assert not ctx.refusals, ctx.refusals
    return out


def _feed_and_weights(graph, seq: int, seed: int = 0):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(seed)
    weights = {p.attrs["name"]: rng.standard_normal(p.shape).astype(np.float32) for p in graph.params()}
    return {"X": rng.standard_normal((2, seq, SIZES["d_x"])).astype(np.float32)}, weights


def _score_ops(graph) -> Counter:  # noqa: ANN001
    """Softmaxes and float wheres: what a per-head score path would leave (an int64 range check may stay)."""
    return Counter(n.op for n in graph.nodes()
                   if n.op is Op.SOFTMAX or (n.op is Op.WHERE and n.dtype is not DType.int64))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_one_attention_with_the_heads_biases(name: str) -> None:
    g = _graph(name)
    out = _optimised(g)
    (att,) = [n for n in out.nodes() if n.op is Op.ATTENTION]
    assert not _score_ops(out)
    bias = att.src[3]
    assert bias.dtype is DType.float32 and bias.type.rank == 3 and bias.shape[0] == SIZES["H"]
    assert att.attrs["causal"] == (name == "alibi")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("seq", [1, 5, 12])
def test_fused_biases_mean_the_same(name: str, seq: int) -> None:
    g = _graph(name)
    feed, weights = _feed_and_weights(g, seq, seed=seq)
    want = run(g, feed, weights)["Y"]
    out = _optimised(g)
    np.testing.assert_allclose(run(out, feed, weights)["Y"], want, rtol=1e-5, atol=1e-5)
    got = OnnxRunner(to_onnx(out, weights)).run(feed)["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_bias_matters() -> None:
    """The comparison can fail: with the T5 biases zeroed the output moves far from the model's."""
    g = _graph("t5")
    feed, weights = _feed_and_weights(g, 7)
    out = _optimised(g)
    zeroed = {k: (np.zeros_like(v) if k.endswith(".w") else v) for k, v in weights.items()}
    assert any(k.endswith(".w") for k in weights)
    assert np.abs(run(out, feed, zeroed)["Y"] - run(g, feed, weights)["Y"]).max() > 1e-3


def test_t5_index_past_the_table_is_a_run_time_error() -> None:
    """ℓ > ℓ_max reads w[t_x − t_z + ℓ_max] outside its 2ℓ_max entries: an error, never a wrap-around."""
    g = _graph("t5")
    feed, weights = _feed_and_weights(g, PROGRAMS["t5"][2]["ell_max"] + 2)
    with pytest.raises(Exception, match="(?i)out of bounds|out of range"):
        run(_optimised(g), feed, weights)
