"""Loading HF checkpoints with one copy per tensor: blocked transposes, no second copy to own buffers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from transformers import BertForMaskedLM, GPT2LMHeadModel
from weights_testlib import bert_config, bert_expected, gpt2_config, gpt2_expected, sd

from pseudoformer.weights import load_weights
from pseudoformer.weights.loader import contiguous


# Shapes on both sides of the 4 MiB from which the copy gets a mapping of its own.
@pytest.mark.parametrize("shape", [(300, 500), (64, 2**10 + 3), (1000, 65), (3, 4), (1100, 1001)])
@pytest.mark.parametrize("src", ["float32", "float16", "float64"])
def test_contiguous_is_ascontiguousarray(shape, src):
    a = np.random.default_rng(0).standard_normal(shape).astype(src)
    views = [a.T, a[:, 1::2].T, a[1:, :].T, a.T[:, : shape[0] // 2], a[:, ::-1], a[::2]]
    if src != "float32":
        views.append(a)  # contiguous, but of another dtype
    for view in views:
        got = contiguous(view, np.dtype(np.float32))
        assert got.flags.c_contiguous and got.flags.writeable
        assert got.dtype == np.float32 and got.shape == view.shape
        np.testing.assert_array_equal(got, np.ascontiguousarray(view, dtype=np.float32))
        if view.flags.c_contiguous and view.dtype == np.float32:  # (4, 1) columns are, for instance
            assert got is view
        else:
            assert not np.shares_memory(got, a)


def test_contiguous_keeps_an_array_that_already_is():
    a = np.zeros((4, 5), np.float32)
    assert contiguous(a, np.dtype(np.float32)) is a


def _disjoint(w: dict[str, np.ndarray]) -> None:
    for (m, a), (n, b) in itertools.combinations(w.items(), 2):
        assert not np.shares_memory(a, b), (m, n)


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_hf_weights_are_contiguous_writable_and_disjoint(save_hf, kind):
    if kind == "gpt2":
        directory, model = save_hf(GPT2LMHeadModel, gpt2_config())
        expected = gpt2_expected()
    else:
        directory, model = save_hf(BertForMaskedLM, bert_config())
        expected = bert_expected()
    w = load_weights(directory, expected)
    assert w.keys() == expected.keys()
    for name, (shape, _) in expected.items():
        assert w[name].shape == shape and w[name].dtype == np.float32, name
        assert w[name].flags.c_contiguous and w[name].flags.writeable, name
    # Views of one tensor the file held (a projection split into heads) may share its buffer, but
    # never its bytes: writing one weight changes no other.
    _disjoint(w)
    before = {k: v.copy() for k, v in w.items()}
    first = next(iter(w))
    w[first][...] = 0
    assert all(np.array_equal(w[k], before[k]) for k in w if k != first)
    # ... and the file stays what it was.
    again = load_weights(directory, expected)
    assert all(np.array_equal(again[k], before[k]) for k in w)
    hf = sd(model)
    if kind == "gpt2":
        np.testing.assert_array_equal(again["W_e"], hf["transformer.wte.weight"].T)
        np.testing.assert_array_equal(again["layers.1.W_mlp1"], hf["transformer.h.1.mlp.c_fc.weight"].T)
    else:
        np.testing.assert_array_equal(again["W_e"], hf["bert.embeddings.word_embeddings.weight"].T)
        np.testing.assert_array_equal(again["layers.0.W_mlp2"], hf["bert.encoder.layer.0.output.dense.weight"])
