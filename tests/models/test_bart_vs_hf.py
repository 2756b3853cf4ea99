"""models/bart.alg against HuggingFace BartForConditionalGeneration and BartModel with the same random weights.

The checkpoints go through save_pretrained (safetensors) and our loader, so the mapping in
pseudoformer/weights/hf_bart.py is what is tested, on the numpy interpreter and on ONNX Runtime.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import BartConfig, BartForConditionalGeneration, BartModel

from pseudoformer.base.errors import UsageError
from pseudoformer.cli import main
from pseudoformer.deploy import compile
from pseudoformer.model import load
from pseudoformer.weights import WeightsError, hf_hyperparameters, load_weights, read_hf_config
from tests.models.hf_util import log_softmax, ours, save_hf, tokens

BART = str(Path(__file__).resolve().parents[2] / "models" / "bart.alg")
TOL = 1e-4
SMALL = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=101, max_position_embeddings=64)
# facebook/bart-base; BartConfig's own defaults are bart-large's.
BASE = dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12, decoder_attention_heads=12,
            encoder_ffn_dim=3072, decoder_ffn_dim=3072, vocab_size=50265, max_position_embeddings=1024)
BART_BASE_CONFIG = BASE | {"bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}
# (batch, encoder length ℓ_z, decoder length ℓ_x)
SHAPES = [(2, 16, 9), (1, 7, 1), (3, 33, 20), (1, 1, 5), (2, 64, 64)]


def _hf(cls: type, config: BartConfig, seed: int) -> torch.nn.Module:
    """HF initialises biases to 0, layer norms to (1, 0) and final_logits_bias to 0; shift them all so a
    dropped or swapped one shows."""
    torch.manual_seed(seed)
    m = cls(config).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        if hasattr(m, "final_logits_bias"):
            m.final_logits_bias.normal_(0.0, 0.1)
    return m


def _inputs(b: int, lz: int, lx: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    return tokens(b, lz, vocab, seed=lz), tokens(b, lx, vocab, seed=1000 + lx)


def _hf_logits(hf: torch.nn.Module, z: np.ndarray, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(input_ids=torch.from_numpy(z), decoder_input_ids=torch.from_numpy(x)).logits.numpy()


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= TOL, f"max logit error {np.abs(got - want).max():.3g}"
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= TOL


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    hf = _hf(BartForConditionalGeneration, BartConfig(**SMALL), seed=0)
    d = save_hf(hf, tmp_path_factory.mktemp("bart-small"))
    return hf, d, ours(BART, d), compile(BART, weights=d)


@pytest.mark.parametrize("shape", SHAPES)
def test_small_bart_matches_hf_on_the_interpreter(small: tuple, shape: tuple[int, int, int]) -> None:
    hf, _, model, _ = small
    z, x = _inputs(*shape, vocab=SMALL["vocab_size"])
    got = model.run(z=z, x=x)["Y"]
    assert got.shape == (shape[0], shape[2], SMALL["vocab_size"])
    _assert_close(got, _hf_logits(hf, z, x))


@pytest.mark.parametrize("shape", SHAPES)
def test_small_bart_matches_hf_on_onnx_runtime(small: tuple, shape: tuple[int, int, int]) -> None:
    hf, _, _, compiled = small
    z, x = _inputs(*shape, vocab=SMALL["vocab_size"])
    _assert_close(compiled.run(z=z, x=x)["Y"], _hf_logits(hf, z, x))


def test_checkpoint_sets_the_hyperparameters(small: tuple) -> None:
    _, d, model, _ = small
    hyper = model.config.hyperparameters
    assert (hyper["d_e"], hyper["H"], hyper["L_enc"], hyper["L_dec"], hyper["d_mlp"]) == (32, 4, 2, 2, 64)
    assert (hyper["N_V"], hyper["ell_max"], hyper["eps"]) == (101, 64, 1e-5)
    hf_hyper = hf_hyperparameters(read_hf_config(d))
    assert (hf_hyper["bos_token"], hf_hyper["eos_token"], hf_hyper["decoder_start_token"]) == (0, 2, 2)
    # The two offset rows of BART's position tables are not ours.
    assert model.weights["W_enc_p"].shape == model.weights["W_dec_p"].shape == (32, 64)


def test_decoder_is_causal_and_reads_the_encoder(small: tuple) -> None:
    _, _, model, _ = small
    z, x = _inputs(1, 8, 6, vocab=SMALL["vocab_size"])
    y = model.run(z=z, x=x)["Y"]
    x2 = x.copy()
    x2[0, 4:] = (x2[0, 4:] + 1) % SMALL["vocab_size"]
    np.testing.assert_allclose(model.run(z=z, x=x2)["Y"][0, :4], y[0, :4], rtol=1e-6, atol=1e-6)
    z2 = z.copy()
    z2[0, -1] = (z2[0, -1] + 1) % SMALL["vocab_size"]
    assert np.abs(model.run(z=z2, x=x)["Y"] - y).max() > 1e-4


def test_bart_model_checkpoint_has_zero_logits_bias(tmp_path: Path) -> None:
    """A BartModel save has no final_logits_bias: b_u is zero, as when HF loads it for generation."""
    hf = _hf(BartModel, BartConfig(**SMALL), seed=3)
    d = save_hf(hf, tmp_path)
    assert not any(k.startswith("model.") or k == "final_logits_bias" for k in load_file(d / "model.safetensors"))
    model = ours(BART, d)
    assert not model.weights["b_u"].any()
    z, x = _inputs(2, 11, 7, vocab=SMALL["vocab_size"])
    with torch.no_grad():
        hidden = hf(input_ids=torch.from_numpy(z), decoder_input_ids=torch.from_numpy(x)).last_hidden_state
        want = (hidden @ hf.shared.weight.T).numpy()
    _assert_close(model.run(z=z, x=x)["Y"], want)


def _expected(model) -> dict:
    return {k: (v.shape, "float32") for k, v in model.weights.items()}


def _rewrite(directory: Path, edit) -> None:  # noqa: ANN001
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors")


def test_missing_tensor_is_one_clear_error(small: tuple, tmp_path: Path) -> None:
    hf, _, model, _ = small
    d = save_hf(hf, tmp_path)
    _rewrite(d, lambda t: t.pop("model.decoder.layers.1.fc1.weight"))
    with pytest.raises(WeightsError) as info:
        load_weights(d, _expected(model))
    assert info.value.summary == f"weights '{d}' do not fit the model: 1 missing"
    assert info.value.problems == ["layers.1.W_mlp3: missing, expected shape (64, 32)"]
    with pytest.raises(UsageError, match=r"1 missing.*'bart' checkpoint\)\n  layers\.1\.W_mlp3: missing"):
        load(BART, weights=d)


def test_every_problem_is_listed_in_one_error(small: tuple, tmp_path: Path) -> None:
    hf, _, model, _ = small
    d = save_hf(hf, tmp_path)

    def damage(t: dict) -> None:
        del t["model.encoder.layers.0.self_attn.k_proj.bias"]
        t["model.encoder.layers.1.fc2.weight"] = t["model.encoder.layers.1.fc2.weight"][:, :-1].copy()
        t["model.encoder.embed_positions.weight"] = t["model.encoder.embed_positions.weight"][:-1].copy()
        t["lm_head.weight"] = t["model.shared.weight"] + 1
        t["classification_head.dense.weight"] = np.zeros((32, 32), np.float32)

    _rewrite(d, damage)
    with pytest.raises(WeightsError) as info:
        load_weights(d, _expected(model))
    text = str(info.value)
    assert "4 missing" in info.value.summary and "2 mis-shaped" in info.value.summary  # k_proj.bias: 4 heads
    assert "1 unknown" in info.value.summary and "1 untied" in info.value.summary
    assert "layers.0.W_enc.heads.3.b_k: missing" in text
    assert "layers.1.W_mlp2: mis-shaped, expected (32, 64), got (32, 63) (from model.encoder.layers.1.fc2.weight)" in text
    assert "W_enc_p: mis-shaped, expected (32, 64), got (32, 63)" in text
    assert "lm_head.weight: untied" in text and "classification_head.dense.weight: unknown" in text


def test_unsupported_settings_are_all_named_at_once() -> None:
    with pytest.raises(WeightsError) as info:
        hf_hyperparameters({"model_type": "bart", "activation_function": "relu", "scale_embedding": True,
                            "decoder_attention_heads": 8, "encoder_attention_heads": 16})
    assert len(info.value.problems) == 3
    for key in ("activation_function", "scale_embedding", "decoder_attention_heads"):
        assert key in str(info.value)


def test_toml_is_bart_base() -> None:
    toml = tomllib.loads(Path(BART).with_suffix(".toml").read_text(encoding="utf-8"))["hyperparameters"]
    hf = hf_hyperparameters({"model_type": "bart", **BART_BASE_CONFIG})
    assert {k: toml[k] for k in hf} == hf


@pytest.mark.slow
def test_bart_base_size_matches_hf(tmp_path: Path) -> None:
    """facebook/bart-base's hyperparameters (139M parameters), random weights, one shape."""
    hf = _hf(BartForConditionalGeneration, BartConfig(**BASE), seed=5)
    d = save_hf(hf, tmp_path)
    model = ours(BART, d)
    # HF counts its tied embedding once; ours drops the 2 offset rows of each position table and
    # holds final_logits_bias (a buffer in HF) as the parameter b_u.
    n_hf = sum(p.numel() for p in hf.parameters())
    assert sum(w.size for w in model.weights.values()) == n_hf - 2 * 2 * 768 + 50265
    z, x = _inputs(2, 12, 8, vocab=BASE["vocab_size"])
    got = model.run(z=z, x=x)["Y"]
    _assert_close(got, _hf_logits(hf, z, x))


def test_cli_check_compile_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = ["-D", "L_enc=1", "-D", "L_dec=1", "-D", "d_e=16", "-D", "H=2", "-D", "d_attn=8", "-D", "d_mid=8",
             "-D", "d_mlp=32", "-D", "N_V=50", "-D", "ell_max=32"]
    assert main(["check", BART]) == 0
    assert "ok (BART, EDInference)" in capsys.readouterr().out
    onnx_path, out = tmp_path / "bart.onnx", tmp_path / "y.npz"
    assert main(["compile", BART, *small, "-o", str(onnx_path)]) == 0
    assert main(["run", str(onnx_path), "--input", "z=[[0, 31, 7, 2]]", "--input", "x=[[2, 0, 9]]",
                 "-o", str(out)]) == 0
    y = np.load(out)["Y"]
    assert y.shape == (1, 3, 50)
    want = load(BART, defines=[a for a in small if a != "-D"]).run(z=np.array([[0, 31, 7, 2]]),
                                                                     x=np.array([[2, 0, 9]]))["Y"]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
