"""The paper's Algorithm 8 (models/paper/edtransformer.alg) against HuggingFace BART made into Algorithm 8.

BART is Algorithm 8 but for a handful of settings, and each can be turned into the paper's:
ReLU instead of GELU, no embedding layer norm (layernorm_embedding replaced by Identity), layer
norm without ε (every LayerNorm's eps set to 0; Algorithm 6 has none), one positional table for
encoder and decoder (the decoder's tied to the encoder's), no embedding scale, no logits bias, and a
separate unembedding W_u (lm_head untied from the token embedding). Algorithm 8 returns
probabilities, so P is compared with softmax of HF's logits.

The per-layer weights are mapped by pseudoformer's BART mapping (tests/models/test_bart_vs_hf.py
checks it against HF on its own); W_p and W_u, where the two models differ, are mapped here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration

from pseudoformer.deploy import compile
from pseudoformer.model import load
from pseudoformer.weights import save_weights
from pseudoformer.weights.hf_bart import POSITION_OFFSET, TABLE
from pseudoformer.weights.hf_engine import plan
from pseudoformer.weights.tensor_ref import in_memory
from tests.models.hf_util import tokens

ALG8 = str(Path(__file__).resolve().parents[2] / "models" / "paper" / "edtransformer.alg")
TOL = 1e-4
D_E, H, L_ENC, L_DEC, D_MLP, N_V, ELL_MAX = 32, 4, 2, 3, 64, 101, 64
SHAPES = [(2, 16, 9), (1, 7, 1), (3, 33, 20), (1, 1, 5), (2, 64, 64)]  # (batch, ℓ_z, ℓ_x)


def _algorithm_8_in_hf(seed: int = 0) -> BartForConditionalGeneration:
    torch.manual_seed(seed)
    config = BartConfig(d_model=D_E, encoder_layers=L_ENC, decoder_layers=L_DEC, encoder_attention_heads=H,
                        decoder_attention_heads=H, encoder_ffn_dim=D_MLP, decoder_ffn_dim=D_MLP, vocab_size=N_V,
                        max_position_embeddings=ELL_MAX, activation_function="relu", scale_embedding=False)
    m = BartForConditionalGeneration(config).eval()
    bart = m.model
    with torch.no_grad():
        bart.encoder.layernorm_embedding = torch.nn.Identity()
        bart.decoder.layernorm_embedding = torch.nn.Identity()
        bart.decoder.embed_positions.weight = bart.encoder.embed_positions.weight  # one W_p
        m.lm_head.weight = torch.nn.Parameter(torch.randn_like(m.lm_head.weight) * 0.02)  # W_u, not W_eᵀ
        for name, p in m.named_parameters():  # non-trivial biases and layer norms
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    for module in m.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 0.0
    assert not m.final_logits_bias.any()
    assert m.lm_head.weight is not bart.shared.weight and bart.encoder.embed_tokens.weight is bart.shared.weight
    return m


def _our_weights(hf: BartForConditionalGeneration) -> dict[str, np.ndarray]:
    tensors = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    # Algorithm 8's ReLU is a variant bart.alg refuses; the names and splits do not depend on it.
    mapped = plan(TABLE, in_memory(tensors), {**hf.config.to_dict(), "activation_function": "gelu"})
    # The one thing the BART mapping objects to is the point of this model: W_u is not W_eᵀ.
    assert [(p.name, p.kind) for p in mapped.verify()] == [("lm_head.weight", "untied")]
    w = {k: v.load() for k, v in mapped.tensors.items() if k not in ("W_enc_p", "W_dec_p", "b_u")}
    # BART looks position t (from 0) up in row t + 2 of its table: W_p is rows 2: transposed.
    w["W_p"] = tensors["model.encoder.embed_positions.weight"][POSITION_OFFSET:].T
    w["W_u"] = tensors["lm_head.weight"]  # nn.Linear's [out, in] is the paper's W_u ∈ ℝ^{N_V × d_e}
    return w


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    hf = _algorithm_8_in_hf()
    path = tmp_path_factory.mktemp("alg8") / "alg8.safetensors"
    save_weights(_our_weights(hf), path)
    defines = [f"{k}={v}" for k, v in dict(L_enc=L_ENC, L_dec=L_DEC, H=H, d_e=D_E, d_mlp=D_MLP, d_attn=D_E // H,
                                          d_mid=D_E // H, N_V=N_V, ell_max=ELL_MAX).items()]
    return hf, load(ALG8, defines=defines, weights=path), compile(ALG8, defines=defines, weights=path)


def _hf_probabilities(hf: BartForConditionalGeneration, z: np.ndarray, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        logits = hf(input_ids=torch.from_numpy(z), decoder_input_ids=torch.from_numpy(x)).logits
    return torch.softmax(logits.double(), dim=-1).numpy()


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)
    assert np.abs(got - want).max() <= TOL, f"max probability error {np.abs(got - want).max():.3g}"
    err = np.abs(np.log(got) - np.log(want)).max()
    assert err <= TOL, f"max log-probability error {err:.3g}"


@pytest.mark.parametrize("shape", SHAPES)
def test_algorithm_8_matches_hf_on_the_interpreter(models: tuple, shape: tuple[int, int, int]) -> None:
    hf, model, _ = models
    z, x = tokens(shape[0], shape[1], N_V, seed=shape[1]), tokens(shape[0], shape[2], N_V, seed=100 + shape[2])
    _assert_close(model.run(z=z, x=x)["P"], _hf_probabilities(hf, z, x))


@pytest.mark.parametrize("shape", SHAPES)
def test_algorithm_8_matches_hf_on_onnx_runtime(models: tuple, shape: tuple[int, int, int]) -> None:
    hf, _, compiled = models
    z, x = tokens(shape[0], shape[1], N_V, seed=shape[1]), tokens(shape[0], shape[2], N_V, seed=100 + shape[2])
    _assert_close(compiled.run(z=z, x=x)["P"], _hf_probabilities(hf, z, x))
