"""models/transformer.alg against the original Transformer built from torch.nn.Transformer.

torch.nn.Transformer is the encoder-decoder stack of "Attention is all you need" (post-norm, ReLU);
the rest is written here from the paper: the shared embedding multiplied by √d_model, the
sinusoidal positional encoding of section 3.5, and the pre-softmax projection tied to the
embedding. nn.Transformer adds a layer norm after each stack, which the paper's post-norm model
does not have, so those two are Identity. The positional encoding computed by the model's own
lines is also checked against the formula at the configured size.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from pseudoformer.cli import main
from pseudoformer.deploy import compile
from pseudoformer.ir import Op
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from pseudoformer.weights import save_weights
from tests.models.hf_util import tokens

TRANSFORMER = Path(__file__).resolve().parents[2] / "models" / "transformer.alg"
BASE = tomllib.loads(TRANSFORMER.with_suffix(".toml").read_text(encoding="utf-8"))["hyperparameters"]
TOL = 1e-4
SMALL = dict(L_enc=2, L_dec=3, H=4, d_e=32, d_mlp=64, d_attn=8, d_mid=8, N_V=101, ell_max=64, eps=1e-6)
SHAPES = [(2, 16, 9), (1, 7, 1), (3, 33, 20), (1, 1, 5), (2, 64, 64)]  # (batch, ℓ_z, ℓ_x)


def positional_encoding(positions: int, d_model: int) -> np.ndarray:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^{2i/d_model}), PE(pos, 2i+1) = cos(…); [pos, feature], float64."""
    pos = np.arange(positions, dtype=np.float64)[:, None]
    angle = pos / 10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    pe = np.empty((positions, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


class Reference(torch.nn.Module):
    """The Transformer of Vaswani et al. around torch.nn.Transformer; returns next-token probabilities."""

    def __init__(self, hp: dict, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.d = hp["d_e"]
        self.transformer = torch.nn.Transformer(
            hp["d_e"], hp["H"], hp["L_enc"], hp["L_dec"], hp["d_mlp"], dropout=0.0, activation="relu",
            layer_norm_eps=hp["eps"], batch_first=True, norm_first=False)
        self.transformer.encoder.norm = torch.nn.Identity()
        self.transformer.decoder.norm = torch.nn.Identity()
        self.embedding = torch.nn.Embedding(hp["N_V"], hp["d_e"])
        with torch.no_grad():
            torch.nn.init.normal_(self.embedding.weight, std=self.d**-0.5)  # as the paper's code initialises it
            for name, p in self.transformer.named_parameters():  # non-trivial biases and layer norms
                if name.endswith("bias") or "norm" in name:
                    p.add_(torch.randn_like(p) * 0.1)
        self.eval()

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        pe = torch.from_numpy(positional_encoding(ids.shape[1], self.d)).float()
        return self.embedding(ids) * math.sqrt(self.d) + pe

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        causal = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        out = self.transformer(self.embed(z), self.embed(x), tgt_mask=causal, tgt_is_causal=True)
        return torch.softmax(out.double() @ self.embedding.weight.double().T, dim=-1)


def _attention(w: dict, prefix: str, mha: torch.nn.MultiheadAttention, heads: int) -> None:
    """nn.MultiheadAttention stacks W_q; W_k; W_v in in_proj_weight [3 d, d]; each splits into heads by rows."""
    weight, bias = mha.in_proj_weight.detach().numpy(), mha.in_proj_bias.detach().numpy()
    d = weight.shape[1]
    dh = d // heads
    for k, part in enumerate("qkv"):
        for h in range(heads):
            rows = slice(k * d + h * dh, k * d + (h + 1) * dh)
            w[f"{prefix}.heads.{h}.W_{part}"], w[f"{prefix}.heads.{h}.b_{part}"] = weight[rows], bias[rows]
    w[f"{prefix}.W_o"], w[f"{prefix}.b_o"] = mha.out_proj.weight.detach().numpy(), mha.out_proj.bias.detach().numpy()


def _put(w: dict, names: tuple[str, str], module: torch.nn.Module) -> None:
    w[names[0]], w[names[1]] = module.weight.detach().numpy(), module.bias.detach().numpy()


def our_weights(ref: Reference, heads: int) -> dict[str, np.ndarray]:
    w = {"W_e": ref.embedding.weight.detach().numpy().T}
    for n, layer in enumerate(ref.transformer.encoder.layers):
        p = f"layers.{n}."
        _attention(w, p + "W_enc", layer.self_attn, heads)
        for i, module in ((1, layer.norm1), (2, layer.norm2)):
            _put(w, (f"{p}gamma_{i}", f"{p}beta_{i}"), module)
        for i, module in ((1, layer.linear1), (2, layer.linear2)):
            _put(w, (f"{p}W_mlp{i}", f"{p}b_mlp{i}"), module)
    for n, layer in enumerate(ref.transformer.decoder.layers):
        p = f"layers.{n}."
        _attention(w, p + "W_dec", layer.self_attn, heads)
        _attention(w, p + "W_e_d", layer.multihead_attn, heads)
        for i, module in ((3, layer.norm1), (4, layer.norm2), (5, layer.norm3)):
            _put(w, (f"{p}gamma_{i}", f"{p}beta_{i}"), module)
        for i, module in ((3, layer.linear1), (4, layer.linear2)):
            _put(w, (f"{p}W_mlp{i}", f"{p}b_mlp{i}"), module)
    return w


def _defines(hp: dict) -> list[str]:
    return [f"{k}={v}" for k, v in hp.items()]


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= TOL, f"max probability error {np.abs(got - want).max():.3g}"
    err = np.abs(np.log(got) - np.log(want)).max()
    assert err <= TOL, f"max log-probability error {err:.3g}"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    ref = Reference(SMALL, seed=0)
    path = tmp_path_factory.mktemp("transformer") / "weights.safetensors"
    save_weights(our_weights(ref, SMALL["H"]), path)
    defines = _defines(SMALL)
    return ref, load(TRANSFORMER, defines=defines, weights=path), compile(TRANSFORMER, defines=defines, weights=path)


def _inputs(b: int, lz: int, lx: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    return tokens(b, lz, vocab, seed=lz), tokens(b, lx, vocab, seed=100 + lx)


def _reference(ref: Reference, z: np.ndarray, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return ref(torch.from_numpy(z), torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("shape", SHAPES)
def test_transformer_matches_torch_on_the_interpreter(small: tuple, shape: tuple[int, int, int]) -> None:
    ref, model, _ = small
    z, x = _inputs(*shape, vocab=SMALL["N_V"])
    got = model.run(z=z, x=x)["P"]
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)
    _assert_close(got, _reference(ref, z, x))


@pytest.mark.parametrize("shape", SHAPES)
def test_transformer_matches_torch_on_onnx_runtime(small: tuple, shape: tuple[int, int, int]) -> None:
    ref, _, compiled = small
    z, x = _inputs(*shape, vocab=SMALL["N_V"])
    _assert_close(compiled.run(z=z, x=x)["P"], _reference(ref, z, x))


def test_transformer_matches_torch_on_tvm(small: tuple) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.deploy_tvm import compile_model

    ref, model, _ = small
    compiled = compile_model(model)
    for shape in SHAPES[:3]:
        z, x = _inputs(*shape, vocab=SMALL["N_V"])
        _assert_close(compiled.run(z=z, x=x)["P"], _reference(ref, z, x))


def test_each_attention_layer_is_one_fused_attention(small: tuple) -> None:
    """-O2: the encoder's self-attention, the decoder's causal self-attention and its cross-attention are
    one ATTENTION op each, heads batched; the only softmax left is the output distribution's."""
    _, model, _ = small
    ops = Counter(n.op for n in optimize(model.graph, 2).nodes())
    assert ops[Op.ATTENTION] == SMALL["L_enc"] + 2 * SMALL["L_dec"]
    assert ops[Op.SOFTMAX] == 1 and ops[Op.WHERE] == 0


def _positional_encoding_lines() -> list[str]:
    """Lines 1–2 of transformer.alg, the ones that compute W_p, exactly as the model file has them."""
    lines = TRANSFORMER.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if "The sinusoidal positional encoding" in line) + 1
    body = lines[start:start + 2]
    assert [re.match(r"\s*(\d+)\s", line).group(1) for line in body] == ["1", "2"]
    return body


def test_positional_encoding_is_the_formula(tmp_path: Path) -> None:
    """The model's own W_p lines, run as an algorithm of their own at the configured size (512 × 512)."""
    source = tmp_path / "pe.alg"
    source.write_text("\n".join([
        "Algorithm: W_p ← SinusoidalPositions()",
        "  Output: W_p ∈ ℝ^{d_e × ℓ_max}",
        "  Hyperparameters: d_e, ℓ_max ∈ ℕ",
        *_positional_encoding_lines(),
        "  3  return W_p",
    ]) + "\n", encoding="utf-8")
    d, ell_max = BASE["d_e"], BASE["ell_max"]
    want = positional_encoding(ell_max, d)  # [pos, feature], as the interface delivers a matrix
    defines = [f"d_e={d}", f"ell_max={ell_max}"]
    got = load(source, defines=defines).run()["W_p"]
    onnx_got = compile(source, defines=defines).run()["W_p"]
    assert got.shape == onnx_got.shape == (ell_max, d)
    # float32 angles pos·ω carry a relative error of ~1e-7, so the error grows with the position.
    np.testing.assert_allclose(got[:64], want[:64], rtol=0, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_allclose(onnx_got, want, rtol=0, atol=1e-4)
    assert (got[0, 0::2] == 0).all() and (got[0, 1::2] == 1).all()  # sin 0 and cos 0 at pos = 0


@pytest.mark.slow
def test_base_size_matches_torch(tmp_path: Path) -> None:
    """The base model's sizes (transformer.toml: 63M parameters with a 37000-token vocabulary), one shape."""
    hp = {k: BASE[k] for k in SMALL}
    ref = Reference(hp, seed=1)
    path = tmp_path / "weights.safetensors"
    save_weights(our_weights(ref, hp["H"]), path)
    model = load(TRANSFORMER, weights=path)
    assert model.config.hyperparameters["d_e"] == 512 and model.config.hyperparameters["N_V"] == 37000
    assert sum(w.size for w in model.weights.values()) == sum(p.numel() for p in ref.parameters())
    z, x = _inputs(2, 12, 8, vocab=hp["N_V"])
    _assert_close(model.run(z=z, x=x)["P"], _reference(ref, z, x))


def test_cli_check_compile_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = [a for k, v in SMALL.items() for a in ("-D", f"{k}={v}")]
    assert main(["check", str(TRANSFORMER)]) == 0
    assert "ok (Transformer)" in capsys.readouterr().out
    onnx_path, out = tmp_path / "transformer.onnx", tmp_path / "p.npz"
    assert main(["compile", str(TRANSFORMER), *small, "-o", str(onnx_path)]) == 0
    assert main(["run", str(onnx_path), "--input", "z=[[5, 31, 7, 2]]", "--input", "x=[[1, 0, 9]]",
                 "-o", str(out)]) == 0
    p = np.load(out)["P"]
    assert p.shape == (1, 3, SMALL["N_V"])
    want = load(TRANSFORMER, defines=_defines(SMALL)).run(z=np.array([[5, 31, 7, 2]]), x=np.array([[1, 0, 9]]))["P"]
    np.testing.assert_allclose(p, want, rtol=1e-4, atol=1e-7)
