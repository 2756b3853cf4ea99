"""What the compiled torch.nn.Module promises besides its numbers: state_dict() round-trips through our
safetensors and the HF writer; torch.compile(fullgraph=True) traces it with no graph break; torch.export
takes a dynamic batch and sequence; `python -m pseudoformer` is the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pseudoformer  # noqa: E402
from pseudoformer.deploy_torch import load_ours, our_weights  # noqa: E402
from pseudoformer.training.outputs import export_hf, save_checkpoint  # noqa: E402
from pseudoformer.weights.safetensors_io import read_safetensors  # noqa: E402
from tests.backends.hf_cases import GPT2, GPT2_SMALL, small_gpt2  # noqa: E402
from tests.models.hf_util import save_hf, tokens  # noqa: E402

TINY = ["L=2", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "ell_max=40", "N_V=11"]


def _logits(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(x=torch.from_numpy(x))["Y"].numpy()


def test_state_dict_round_trips_through_our_safetensors_and_the_hf_writer(tmp_path: Path) -> None:
    source = save_hf(small_gpt2(), tmp_path / "hf")
    module = pseudoformer.compile(GPT2, weights=source, backend="torch")
    with torch.no_grad():  # weights no checkpoint has: a round trip that drops one shows
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    x = tokens(2, 9, vocab=GPT2_SMALL["vocab_size"], seed=3)
    want = _logits(module, x)
    ours = our_weights(module)
    assert set(ours) == set(pseudoformer.load(GPT2, weights=source).weights)
    save_checkpoint(tmp_path / "ckpt", ours)
    again = pseudoformer.compile(GPT2, weights=source, backend="torch")
    assert np.abs(_logits(again, x) - want).max() > 1e-3  # the perturbation showed
    load_ours(again, read_safetensors(tmp_path / "ckpt" / "model.safetensors"))
    np.testing.assert_array_equal(_logits(again, x), want)
    export_hf(source, ours, tmp_path / "exported")
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "exported").eval()
    with torch.no_grad():
        got = hf(torch.from_numpy(x)).logits.numpy()
    assert np.abs(got - want).max() <= 1e-4


def test_torch_compile_traces_the_whole_model_in_one_graph() -> None:
    module = pseudoformer.compile(GPT2, defines=TINY, backend="torch")
    x = torch.from_numpy(tokens(2, 7, vocab=11))
    explained = torch._dynamo.explain(module)(x=x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(module, fullgraph=True, backend="eager", dynamic=True)
    for shape in [(2, 7), (3, 12)]:
        x = tokens(*shape, vocab=11, seed=shape[1])
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x=torch.from_numpy(x))["Y"].numpy(), _logits(module, x), atol=1e-6)


def test_torch_export_takes_a_dynamic_batch_and_sequence() -> None:
    module = pseudoformer.compile(GPT2, defines=TINY, backend="torch")
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=40)
    x = torch.from_numpy(tokens(2, 7, vocab=11))
    exported = torch.export.export(module, (), {"x": x}, dynamic_shapes={"x": {0: batch, 1: seq}})
    for shape in [(1, 1), (3, 40), (5, 9)]:
        x = tokens(*shape, vocab=11, seed=sum(shape))
        got = exported.module()(x=torch.from_numpy(x))["Y"].detach().numpy()
        np.testing.assert_allclose(got, _logits(module, x), atol=1e-6)


def test_python_dash_m_runs_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "pseudoformer", "check", str(GPT2)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ok (" in done.stdout


def test_float16_computes_in_half_with_the_float32_results_nearby() -> None:
    full, half = (pseudoformer.compile(GPT2, defines=TINY, backend="torch", dtype=d) for d in ("float32", "float16"))
    assert {p.dtype for p in half.parameters()} == {torch.float16}
    x = tokens(2, 9, vocab=11, seed=4)
    with torch.no_grad():
        got = half(x=torch.from_numpy(x))["Y"]
    assert got.dtype == torch.float16
    assert np.abs(got.float().numpy() - _logits(full, x)).max() < 2e-2


def test_the_compile_command_says_the_module_is_for_python(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pseudoformer.cli import main

    assert main(["compile", str(GPT2), "-D", "L=1", "--backend", "torch", "-o", str(tmp_path / "m.onnx")]) == 1
    assert 'pseudoformer.compile(FILE, backend="torch")' in capsys.readouterr().err
