"""Every model in models/, every gallery entry, and each HF family, compiled to a torch.nn.Module
(`compile(..., backend="torch")`): within 1e-5 of the interpreter, and within 1e-4 of HF in log-probabilities.

The module is compiled once per model and run at several sizes, which its symbolic dims promise.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pseudoformer  # noqa: E402
from pseudoformer.deploy_torch import to_module  # noqa: E402
from pseudoformer.model import load  # noqa: E402
from tests.backends.test_onnx_models import CASES, _louder  # noqa: E402
from tests.backends.torch_backend.torch_util import run_module  # noqa: E402
from tests.models.examples_numpy import EXAMPLES, load_example  # noqa: E402
from tests.models.hf_util import log_softmax, save_hf, tokens  # noqa: E402

TOL, HF_TOL = 1e-5, 1e-4
GALLERY = sorted(p.stem for p in EXAMPLES.glob("*.alg"))


def _close(got: dict, want: dict, tol: float = TOL) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        err = float(np.abs(got[name] - w).max()) if w.size else 0.0
        assert err <= tol, f"{name}: max error {err:.3g}"


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_model_matches_the_interpreter_at_every_size(name: str, level: int) -> None:
    case = CASES[name]
    model = load(case.source, entry=case.entry, config=os.devnull, defines=[f"{k}={v}" for k, v in case.hyper.items()])
    model.weights = _louder(model.weights, seed=len(name))
    module = to_module(model, opt_level=level)
    for i, size in enumerate(case.sizes):
        feeds = case.feeds(np.random.default_rng(i), size)
        _close(run_module(module, feeds), model.run(**feeds))


def _gallery_feeds(model: pseudoformer.Model, batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for n in model.graph.inputs:
        name, t = n.attrs["name"], n.type
        shape = [{"batch": batch, "seq": seq}.get(d, d) if isinstance(d, str) else d for d in t.shape]
        if t.dtype.value == "int64":
            feeds[name] = rng.integers(0, 50, shape, dtype=np.int64)
        elif name == "p":  # prefix_lm's prefix length
            feeds[name] = rng.integers(1, seq + 1, shape).astype(np.float32)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", GALLERY)
def test_every_gallery_entry_matches_the_interpreter(name: str) -> None:
    model = load_example(name)
    module = to_module(model)
    for seed, (batch, seq) in enumerate([(2, 9), (1, 5)]):
        feeds = _gallery_feeds(model, batch, seq, seed)
        _close(run_module(module, feeds), model.run(**feeds))


def _hf(kind: str) -> torch.nn.Module:
    if kind in ("gpt2", "bert"):
        from tests.backends.hf_cases import small_bert_mlm, small_gpt2

        return small_gpt2() if kind == "gpt2" else small_bert_mlm()
    if kind in ("llama", "mistral", "qwen2"):
        from tests.models.llama_cases import hf_model
    elif kind in ("gpt_neox", "phi3"):
        from tests.models.neox_phi3_cases import hf_model
    elif kind == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM

        from tests.models.test_mixtral_vs_hf import TINY

        torch.manual_seed(0)
        return MixtralForCausalLM(MixtralConfig(**TINY)).eval()
    else:
        from tests.models.gemma_qwen3_cases import hf_model
    return hf_model(kind)


FAMILIES = ["gpt2", "bert", "llama", "mistral", "qwen2", "gpt_neox", "phi3", "gemma2", "gemma3", "qwen3", "mixtral"]
MODELS = Path(__file__).resolve().parents[3] / "models"


@pytest.mark.parametrize("kind", FAMILIES)
def test_each_hf_family_matches_hf(kind: str, tmp_path: Path) -> None:
    hf = _hf(kind)
    source = {"bert": "bert.alg", "gpt2": "gpt2.alg"}.get(kind, f"{kind}.alg")
    module = pseudoformer.compile(MODELS / source, weights=save_hf(hf, tmp_path), backend="torch")
    assert isinstance(module, torch.nn.Module)
    vocab = hf.config.vocab_size
    for shape in [(2, 11), (1, 1), (3, 17)]:
        x = tokens(*shape, vocab=vocab, seed=sum(shape))
        with torch.no_grad():
            want = hf(torch.from_numpy(x), attention_mask=torch.ones(x.shape, dtype=torch.long)).logits.numpy()
            got = module(x=torch.from_numpy(x))["Y"].numpy()
        err = float(np.abs(log_softmax(got) - log_softmax(want)).max())
        assert err <= HF_TOL, f"{kind} {shape}: max log-prob error {err:.3g}"


def test_bart_matches_hf(tmp_path: Path) -> None:
    """The encoder–decoder family: BART's logits given z and x, as tests/models/test_bart_vs_hf.py checks the
    interpreter and ONNX Runtime."""
    from transformers import BartConfig, BartForConditionalGeneration

    from tests.models.test_bart_vs_hf import SHAPES, SMALL, _hf, _hf_logits, _inputs

    hf = _hf(BartForConditionalGeneration, BartConfig(**SMALL), seed=0)
    module = pseudoformer.compile(MODELS / "bart.alg", weights=save_hf(hf, tmp_path), backend="torch")
    for shape in SHAPES[:3]:
        z, x = _inputs(*shape, vocab=SMALL["vocab_size"])
        with torch.no_grad():
            got = module(z=torch.from_numpy(z), x=torch.from_numpy(x))["Y"].numpy()
        want = _hf_logits(hf, z, x)
        err = float(np.abs(log_softmax(got) - log_softmax(want)).max())
        assert err <= HF_TOL, f"bart {shape}: max log-prob error {err:.3g}"
