"""Llama 3's RoPE scaling in a GGUF: llama.cpp's converter writes it as rope_freqs.weight, the factor each
frequency is divided by (LlamaModel.generate_extra_tensors; gguf_testlib.llama3_rope_freqs is its loop), and
--weights reads it back as HF's rope_scaling {rope_type: llama3, …}, which llama.alg's RoPE computes. The
references: HF's own llama3 frequencies (transformers' ROPE_INIT_FUNCTIONS) and HF's LlamaForCausalLM with the
original rope_scaling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from pseudoformer.base.errors import UsageError
from pseudoformer.model import load
from pseudoformer.weights.gguf_checkpoint import gguf_config
from pseudoformer.weights.gguf_rope import llama3_scaling
from tests.models.hf_util import log_softmax
from tests.models.llama_cases import MODELS, hf_model
from tests.weights.gguf_testlib import llama3_rope_freqs, write_gguf
from tests.weights.test_weights_gguf import TOL, close, hf_logits

# ℓ_0 = 100 at base 500 and head_dim 16: wavelengths 6.3 and 14 unscaled, 30 and 65 in the band, the rest ÷ κ
TINY_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 100, "rope_theta": 500.0}
X = np.random.default_rng(0).integers(0, 61, (2, 48))


def hf_inv_freq(rope: dict, dim: int) -> np.ndarray:
    config = LlamaConfig(hidden_size=dim * 4, num_attention_heads=4, head_dim=dim, max_position_embeddings=1 << 17,
                         rope_parameters=rope)
    return ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")[0].numpy()


@pytest.mark.parametrize(("rope", "dim"), [
    ({"factor": 8.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}, 128),  # Llama 3.1
    ({"factor": 32.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}, 64),  # Llama 3.2 1B
    ({"factor": 8.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0}, 16),  # one in the band
    ({"factor": 4.0, "original_max_position_embeddings": 300, "rope_theta": 10000.0, "low_freq_factor": 2.0,
      "high_freq_factor": 8.0}, 16),  # α ≠ 1
    ({"factor": 8.0, "original_max_position_embeddings": 1000, "rope_theta": 10000.0, "low_freq_factor": 1.9,
      "high_freq_factor": 2.0}, 16),  # none in the band: a step
])
def test_the_factors_give_back_hfs_frequencies(rope: dict, dim: int) -> None:
    rope = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0, **rope}
    factors = llama3_rope_freqs(rope, dim)
    scaling = llama3_scaling(factors, rope["rope_theta"], dim)
    assert isinstance(scaling, dict) and scaling["factor"] == rope["factor"]
    got = hf_inv_freq({**scaling, "rope_theta": rope["rope_theta"]}, dim)
    np.testing.assert_allclose(got, hf_inv_freq(rope, dim), rtol=1e-5)
    if dim >= 64:  # enough frequencies in the band: Llama's own numbers come back
        assert scaling["original_max_position_embeddings"] == pytest.approx(8192, rel=1e-5)
        assert scaling["high_freq_factor"] == pytest.approx(4.0, rel=1e-5)


def test_all_ones_is_no_scaling() -> None:
    assert llama3_scaling(np.ones(8, np.float32), 10000.0, 16) == {}


@pytest.mark.parametrize(("factors", "why"), [
    (np.linspace(1, 3, 8), "not Llama 3's bands"),
    (np.linspace(3, 1, 8), "not Llama 3's bands"),
    (np.ones(5), "5 factors for RoPE's 8 frequencies"),
    (np.array([1, 1, 0.5, 1, 1, 1, 1, 1]), "not all finite numbers ≥ 1"),
])
def test_other_factors_are_refused_saying_why(factors: np.ndarray, why: str) -> None:
    assert why in llama3_scaling(factors.astype(np.float32), 10000.0, 16)


def test_logits_equal_hf_llama_with_llama3_scaling(tmp_path: Path) -> None:
    model = hf_model("llama", hidden_size=64, intermediate_size=96, head_dim=16, rope_parameters=TINY_LLAMA3)
    path = tmp_path / "llama31.gguf"
    write_gguf(path, model, "llama", lambda name, shape: Q.F32)
    scaling = gguf_config(path)["rope_scaling"]
    assert scaling["rope_type"] == "llama3" and scaling["factor"] == 8.0
    assert scaling["original_max_position_embeddings"] == pytest.approx(100, rel=1e-5)
    want = hf_logits(model, X)
    close(load(MODELS / "llama.alg", weights=path).run(x=X)["Y"], want)
    # the scaling shows at these positions: HF without it is 10 tolerances off
    unscaled = hf_model("llama", hidden_size=64, intermediate_size=96, head_dim=16,
                        rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    unscaled.load_state_dict(model.state_dict())
    assert np.abs(log_softmax(hf_logits(unscaled, X)) - log_softmax(want)).max() > 10 * TOL


def test_factors_of_another_shape_are_refused_by_name(tmp_path: Path) -> None:
    model = hf_model("llama", hidden_size=64, intermediate_size=96, head_dim=16)
    path = tmp_path / "odd.gguf"
    write_gguf(path, model, "llama", lambda name, shape: Q.F32, rope_freqs=np.linspace(1, 3, 8).astype(np.float32))
    with pytest.raises(UsageError, match="rope_freqs.weight scales RoPE's frequencies, but its factors are not "
                                           "Llama 3's bands"):
        load(MODELS / "llama.alg", weights=path)
