"""GPT-2 and BERT compiled to ONNX with HuggingFace's random weights, run on ONNX Runtime, against HF.

Small configs check the numbers at three batch/sequence sizes from one file, and what the file
says about itself (weight names, dim names, metadata). Two acceptance tests then take the real
gpt2-small and bert-base sizes through the `pseudoformer compile` command, as a user would.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from hf_cases import (
    BERT,
    BERT_SMALL,
    GPT2,
    GPT2_SMALL,
    SIZES,
    perturbed,
    small_bert_mlm,
    small_bert_model,
    small_gpt2,
)
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

import pseudoformer
from pseudoformer.backends.onnx import OnnxRunner
from pseudoformer.cli import main
from pseudoformer.deploy import CompiledModel, compile
from tests.models.hf_util import log_softmax, save_hf, tokens

TOL = 1e-4


def _hf_logits(hf: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.from_numpy(x)).logits.numpy()


def _assert_log_probs_match(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    err = np.abs(log_softmax(got) - log_softmax(want)).max()
    assert err <= TOL, f"max log-prob error {err:.3g}"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[GPT2LMHeadModel, CompiledModel]:
    hf = small_gpt2()
    d = save_hf(hf, tmp_path_factory.mktemp("gpt2-hf"))
    return hf, compile(GPT2, weights=d)


@pytest.fixture(scope="module")
def bert_mlm(tmp_path_factory: pytest.TempPathFactory) -> tuple[BertForMaskedLM, CompiledModel, CompiledModel]:
    """One checkpoint, compiled once per entry: the MLM logits and the encoder's hidden states."""
    hf = small_bert_mlm()
    d = save_hf(hf, tmp_path_factory.mktemp("bert-mlm-hf"))
    return hf, compile(BERT, weights=d), compile(BERT, weights=d, entry="BERTEncoder")


@pytest.mark.parametrize("shape", SIZES)
def test_gpt2_log_probs_match_hf(gpt2: tuple, shape: tuple[int, int]) -> None:
    hf, compiled = gpt2
    x = tokens(*shape, vocab=GPT2_SMALL["vocab_size"], seed=sum(shape))
    got = compiled.run(x=x)["Y"]
    want = _hf_logits(hf, x)
    _assert_log_probs_match(got, want)
    assert np.abs(got - want).max() <= TOL


@pytest.mark.parametrize("shape", SIZES)
def test_bert_mlm_log_probs_match_hf(bert_mlm: tuple, shape: tuple[int, int]) -> None:
    hf, compiled, _ = bert_mlm
    x = tokens(*shape, vocab=BERT_SMALL["vocab_size"], seed=sum(shape))
    _assert_log_probs_match(compiled.run(x=x)["Y"], _hf_logits(hf, x))


@pytest.mark.parametrize("shape", SIZES)
def test_bert_encoder_of_an_mlm_checkpoint_matches_hf_hidden_states(bert_mlm: tuple, shape: tuple[int, int]) -> None:
    hf, _, compiled = bert_mlm
    x = tokens(*shape, vocab=BERT_SMALL["vocab_size"], seed=sum(shape) + 1)
    with torch.no_grad():
        want = hf.bert(torch.from_numpy(x)).last_hidden_state.numpy()
    got = compiled.run(x=x)["X_hat"]
    assert got.shape == want.shape == (*shape, BERT_SMALL["hidden_size"])
    assert np.abs(got - want).max() <= TOL


def test_bert_model_checkpoint_hidden_states_match_hf(tmp_path: Path) -> None:
    hf = small_bert_model()
    compiled = compile(BERT, weights=save_hf(hf, tmp_path), entry="BERTEncoder")
    runner = OnnxRunner(compiled.onnx)
    for shape in SIZES:
        x = tokens(*shape, vocab=BERT_SMALL["vocab_size"], seed=sum(shape) + 2)
        with torch.no_grad():
            want = hf(torch.from_numpy(x)).last_hidden_state.numpy()
        assert np.abs(runner.run({"x": x})["X_hat"] - want).max() <= TOL, shape


def test_initializers_carry_our_dotted_names_and_tied_w_e_is_stored_once(gpt2: tuple) -> None:
    _, compiled = gpt2
    inits = compiled.onnx.graph.initializer
    names = [t.name for t in inits]
    assert len(names) == len(set(names))
    assert set(names) == set(compiled.model.weights)
    assert {"W_e", "W_p", "layers.0.W.heads.0.W_q", "layers.1.W.heads.3.b_v", "layers.0.W_mlp1",
            "gamma", "beta"} <= set(names)
    # W_e is both the embedding and (transposed) the unembedding; HF's lm_head.weight must not
    # come back as a second vocabulary-sized table.
    vocab = GPT2_SMALL["vocab_size"]
    assert [t.name for t in inits if vocab in t.dims] == ["W_e"]
    n_params = sum(int(np.prod(t.dims)) for t in inits)
    assert n_params == sum(w.size for w in compiled.model.weights.values())


def _dims(v: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]


def test_dim_params_are_batch_and_seq(gpt2: tuple) -> None:
    _, compiled = gpt2
    g = compiled.onnx.graph
    assert [(i.name, _dims(i)) for i in g.input] == [("x", ["batch", "seq"])]
    assert [(o.name, _dims(o)) for o in g.output] == [("Y", ["batch", "seq", GPT2_SMALL["vocab_size"]])]


def test_metadata_says_where_the_model_came_from(gpt2: tuple, tmp_path: Path) -> None:
    _, compiled = gpt2
    # Read back from disk: the metadata is for whoever finds the file later.
    saved = onnx.load(str(compiled.save(tmp_path / "gpt2.onnx")))
    meta = {p.key: p.value for p in saved.metadata_props}
    assert {"source", "source_sha256", "entry", "hyperparameters", "pseudoformer_version"} <= set(meta)
    assert meta["source"] == "gpt2.alg"
    assert meta["source_sha256"] == hashlib.sha256(GPT2.read_bytes()).hexdigest()
    assert meta["entry"] == "GPT2"
    assert meta["pseudoformer_version"] == pseudoformer.__version__
    hyper = json.loads(meta["hyperparameters"])
    assert hyper["d_e"] == GPT2_SMALL["n_embd"] and hyper["L"] == GPT2_SMALL["n_layer"]
    assert hyper["N_V"] == GPT2_SMALL["vocab_size"] and hyper["ell_max"] == GPT2_SMALL["n_positions"]


# ---- acceptance: real sizes, through the command line

def _compile_and_compare(hf: torch.nn.Module, source: Path, output: str, workdir: Path, vocab: int,
                         capsys: pytest.CaptureFixture[str]) -> None:
    weights = save_hf(hf, workdir / "hf")
    out = workdir / output
    # The command's own entry point, in-process: a subprocess would add a second Python and its imports
    # to a test that is already the slowest here (tests/cli runs the installed script itself).
    assert main(["compile", str(source), "--weights", str(weights), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    # HF's parameters() counts the tied embedding/unembedding once; a second copy of W_e (~90 MiB
    # at these sizes) would push the file well past that, a 1 MiB slack covers the graph itself.
    assert out.stat().st_size <= 4 * sum(p.numel() for p in hf.parameters()) + 2**20
    runner = OnnxRunner(out)  # from the path, as a deployment would load it
    for shape in SIZES:
        x = tokens(*shape, vocab=vocab, seed=sum(shape) + 11)
        _assert_log_probs_match(runner.run({"x": x})["Y"], _hf_logits(hf, x))


@pytest.mark.slow
def test_acceptance_gpt2_small_size_compiled_by_the_cli_matches_hf(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """GPT2Config() defaults (124M parameters, random weights): compile once, run at three sizes."""
    torch.manual_seed(7)
    hf = perturbed(GPT2LMHeadModel(GPT2Config()), seed=8)
    _compile_and_compare(hf, GPT2, "gpt2.onnx", tmp_path, hf.config.vocab_size, capsys)


@pytest.mark.slow
def test_acceptance_bert_base_size_compiled_by_the_cli_matches_hf(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """BertConfig() defaults (110M parameters, random weights) with the MLM head."""
    torch.manual_seed(9)
    hf = perturbed(BertForMaskedLM(BertConfig()), seed=10)
    _compile_and_compare(hf, BERT, "bert.onnx", tmp_path, hf.config.vocab_size, capsys)
