"""The mapping engine plans from names and shapes and reads each HF tensor once, when its turn comes.

A later compile streams a 7B checkpoint through this plan and must never hold the model twice: so the
plan itself reads nothing, `stream` reads each HF tensor once (a projection cut into heads included) and
lets it go before the next, and only a tied copy's check reads data before that.
"""

from __future__ import annotations

import gc
import weakref
from collections import Counter

import numpy as np
import pytest
from transformers import GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from weights_testlib import gpt2_config, gpt2_expected, sd

from pseudoformer.weights import hf_gpt2, hf_llama
from pseudoformer.weights.errors import Problem
from pseudoformer.weights.hf_engine import _pattern, plan
from pseudoformer.weights.tensor_ref import TensorRef


class Counted:
    """A checkpoint in memory whose tensors count their reads and hand out fresh arrays each time."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays, self.reads = arrays, Counter[str]()
        self.live: dict[str, weakref.ref] = {}

    def read(self, name: str) -> np.ndarray:
        self.reads[name] += 1
        array = self.arrays[name].copy()
        self.live[name] = weakref.ref(array)
        return array

    def refs(self) -> dict[str, TensorRef]:
        return {n: TensorRef(a.shape, a.dtype, lambda n=n: self.read(n)) for n, a in self.arrays.items()}


@pytest.fixture
def gpt2() -> tuple[Counted, dict]:
    model = GPT2LMHeadModel(gpt2_config())
    state = sd(model)
    state["lm_head.weight"] = state["transformer.wte.weight"].copy()  # an older save's tied copy
    return Counted(state), model.config.to_dict()


def test_planning_reads_nothing_and_knows_every_shape(gpt2) -> None:
    checkpoint, config = gpt2
    mapped = plan(hf_gpt2.TABLE, checkpoint.refs(), config, gpt2_expected())
    assert not checkpoint.reads and not mapped.problems
    assert {n: p.shape for n, p in mapped.tensors.items()} == {n: s for n, (s, _) in gpt2_expected().items()}
    assert mapped.tensors["layers.1.W.heads.2.W_k"].origin == "transformer.h.1.attn.c_attn.weight"


def test_stream_reads_each_tensor_once_and_lets_it_go(gpt2) -> None:
    checkpoint, config = gpt2
    mapped = plan(hf_gpt2.TABLE, checkpoint.refs(), config, gpt2_expected())
    assert mapped.verify() == []
    tied = dict(checkpoint.reads)
    assert tied == {"transformer.wte.weight": 1, "lm_head.weight": 1}  # only the tie's check read data
    checkpoint.reads.clear()
    seen = []
    for planned, array in mapped.stream():
        # The HF tensors read before this one are gone: nothing holds more than the tensor at hand.
        gc.collect()
        alive = [n for n, ref in checkpoint.live.items() if ref() is not None and n != planned.origin]
        assert alive == [], (planned.name, alive)
        assert array.shape == planned.shape
        seen.append(planned.name)
        del array
    assert sorted(seen) == sorted(gpt2_expected())
    assert set(checkpoint.reads.values()) == {1}  # c_attn once for all its 3 × H pieces
    assert "lm_head.weight" not in checkpoint.reads


def test_the_streamed_values_are_the_loaded_ones(gpt2) -> None:
    checkpoint, config = gpt2
    mapped = plan(hf_gpt2.TABLE, checkpoint.refs(), config, gpt2_expected())
    state = checkpoint.arrays
    got = {p.name: np.array(a) for p, a in mapped.stream()}
    np.testing.assert_array_equal(got["W_e"], state["transformer.wte.weight"].T)
    dh = gpt2_config().n_embd // gpt2_config().n_head
    c_attn = state["transformer.h.0.attn.c_attn.weight"]
    d_e = c_attn.shape[0]
    np.testing.assert_array_equal(got["layers.0.W.heads.1.W_v"], c_attn[:, 2 * d_e + dh:2 * d_e + 2 * dh].T)


def test_group_prefixes_every_name(gpt2) -> None:
    checkpoint, config = gpt2
    expected = {f"theta.{n}": v for n, v in gpt2_expected().items()}
    mapped = plan(hf_gpt2.TABLE, checkpoint.refs(), config, expected, group="theta")
    assert mapped.tensors.keys() == expected.keys()


def test_an_unequal_tied_copy_is_found_by_verify_only(gpt2) -> None:
    checkpoint, config = gpt2
    checkpoint.arrays["lm_head.weight"] = checkpoint.arrays["lm_head.weight"] + 1
    mapped = plan(hf_gpt2.TABLE, checkpoint.refs(), config, gpt2_expected())
    assert mapped.problems == []
    [problem] = mapped.verify()
    assert (problem.name, problem.kind) == ("lm_head.weight", "untied")


def test_shape_problems_are_found_without_reading() -> None:
    config = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    checkpoint = Counted(sd(LlamaForCausalLM(config)))
    checkpoint.arrays["model.layers.0.self_attn.k_proj.weight"] = np.zeros((5, 16), np.float32)
    checkpoint.arrays["model.norm.weight"] = np.zeros((16, 1), np.float32)
    mapped = plan(hf_llama.LLAMA, checkpoint.refs(), config.to_dict())
    assert not checkpoint.reads
    assert sorted(mapped.problems) == [
        Problem("model.layers.0.self_attn.k_proj.weight", "invalid",
                "axis 0 of shape (5, 16) does not split into 1 x 2 heads"),
        Problem("model.norm.weight", "invalid", "expected a 1-d tensor, got shape (16, 1)"),
    ]
    assert "layers.0.W.g.0.W_k" not in mapped.tensors and "gamma" not in mapped.tensors


@pytest.mark.parametrize(("pattern", "name", "groups"), [
    ("h.{l}.ln_{i:1|2}.weight", "h.11.ln_2.weight", {"l": "11", "i": "2"}),
    ("h.{l}.ln_{i:1|2}.weight", "h.1.ln_3.weight", None),
    ("pooler.{_:*}", "pooler.dense.bias", {"_": "dense.bias"}),
    ("wte.weight", "wteXweight", None),  # the dot is a dot
])
def test_name_patterns(pattern: str, name: str, groups: dict | None) -> None:
    m = _pattern(pattern).fullmatch(name)
    assert (m.groupdict() if m else None) == groups


def test_blocks_of_different_head_counts() -> None:
    """A packed projection whose blocks have different head counts (Phi-3's qkv_proj: H queries, then H_kv
    keys and H_kv values) and one cut in two halves without heads (its gate_up_proj)."""
    from dataclasses import replace

    from pseudoformer.weights.hf_table import Heads, Tensor

    packed = replace(hf_llama.LLAMA, tensors=(
        Tensor("layers.{l}.self_attn.qkv_proj.weight", "layers.{l}.W.{part}", 2,
               heads=Heads(("H", "H_kv", "H_kv"), 0, ("heads.{h}.W_q", "g.{h}.W_k", "g.{h}.W_v"))),
        Tensor("layers.{l}.mlp.gate_up_proj.weight", "layers.{l}.{part}", 2, heads=Heads(1, 0, ("W_1", "W_3"))),
    ))
    config = {"model_type": "llama", "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2}
    qkv = np.arange((4 + 2 + 2) * 4 * 16, dtype=np.float32).reshape(32, 16)
    gate_up = np.arange(2 * 24 * 16, dtype=np.float32).reshape(48, 16)
    checkpoint = Counted({"model.layers.0.self_attn.qkv_proj.weight": qkv, "model.layers.0.mlp.gate_up_proj.weight":
                          gate_up})
    mapped = plan(packed, checkpoint.refs(), config)
    got = {p.name: np.array(a) for p, a in mapped.stream()}
    assert sorted(got) == sorted([*(f"layers.0.W.heads.{h}.W_q" for h in range(4)),
                                  *(f"layers.0.W.g.{g}.W_{kv}" for g in range(2) for kv in "kv"),
                                  "layers.0.W_1", "layers.0.W_3"])
    np.testing.assert_array_equal(got["layers.0.W.heads.3.W_q"], qkv[12:16])
    np.testing.assert_array_equal(got["layers.0.W.g.1.W_k"], qkv[20:24])
    np.testing.assert_array_equal(got["layers.0.W.g.0.W_v"], qkv[24:28])
    np.testing.assert_array_equal(got["layers.0.W_3"], gate_up[24:])
    bad = Counted({"model.layers.0.self_attn.qkv_proj.weight": qkv[:30]})
    [problem] = plan(packed, bad.refs(), config).problems
    assert problem.detail == "axis 0 of shape (30, 16) does not split into 4 + 2 + 2 heads"
