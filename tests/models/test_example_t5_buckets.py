"""models/examples/t5_buckets.alg against numpy: T5's bidirectional relative position buckets as its
reference implementation computes them (exact below B/4, logarithmic up to M, the last bucket past it), a
learned bias per bucket and head, in a pre-RMS-norm encoder."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    HeadRule,
    assert_fused,
    f64,
    grid,
    t5_encoder,
    token_lm_tests,
    tokens,
)

SHAPES = [(2, 9), (1, 20), (3, 1)]  # 20 positions: offsets past M = 12 share the last bucket


def bucket(n: np.ndarray, buckets: int, max_distance: int) -> np.ndarray:
    """T5's relative_position_bucket, bidirectional, of n = key position − query position."""
    half = buckets // 2
    out = (n > 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) where the exact bucket is taken
        far = exact + (np.log(n / exact) / math.log(max_distance / exact) * (half - exact)).astype(np.int64)
    far = np.minimum(far, half - 1)
    return out + np.where(n < exact, n, far)


def reference(model: Model, x: np.ndarray, buckets=bucket) -> np.ndarray:  # noqa: ANN001
    w, hp = model.weights, model.config.hyperparameters

    def rule(layer: int) -> HeadRule:
        def bias(h: int, ell: int) -> dict[str, np.ndarray]:
            tx, tz = grid(ell)
            table = f64(w, f"layers.{layer}.W.heads.{h - 1}.W_qkv.w")
            return {"bias": table[buckets(tz - tx, hp["B"], hp["M"])]}
        return bias

    return np.stack([t5_encoder(row, w, hp, rule) for row in x])


def test_the_buckets_are_t5s() -> None:
    """The formula above is HF transformers' T5 bucketing, on T5's settings (32, 128) and on the config's."""
    torch = pytest.importorskip("torch")
    from transformers.models.t5.modeling_t5 import T5Attention

    n = np.arange(-300, 301)
    for buckets, distance in ((32, 128), (16, 12)):
        want = T5Attention._relative_position_bucket(torch.from_numpy(n), True, buckets, distance).numpy()
        np.testing.assert_array_equal(bucket(n, buckets, distance), want)


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests(
    "t5_buckets", reference, shapes=SHAPES, tvm_shape=(2, 20))


def test_the_buckets_matter(model: Model) -> None:
    """With exact offsets (clipped) instead of log buckets, the long sequence is far from the model."""
    x = tokens(1, 20, vocab=model.config.hyperparameters["N_V"], seed=6)
    exact = lambda n, b, m: np.clip(n, -(b // 2) + 1, b // 2 - 1) + b // 2 - 1  # noqa: E731
    assert np.abs(model.run(x=x)["P"] - reference(model, x, buckets=exact)).max() > 1e-3


def test_one_fused_attention_per_layer(model: Model) -> None:
    """The gathered biases are the attention's bias operand; the buckets are computed once for all heads."""
    assert_fused(model, attentions=model.config.hyperparameters["L"])
