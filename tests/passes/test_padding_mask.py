"""The attention_mask input: right-padded batches give, at real positions, what HF gives with its
attention_mask and what the unpadded sequences give one at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
)

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from pseudoformer.passes.padding_mask import PaddingMaskError, add_padding_masks
from tests.models.test_bart_vs_hf import SMALL as BART_SMALL
from tests.models.test_bart_vs_hf import _hf as bart_hf

LENGTHS = [9, 5, 2]  # three rows padded on the right to 9


def _batch(vocab: int, lengths: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).integers(0, vocab, size=(len(lengths), max(lengths)))
    mask = (np.arange(max(lengths))[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return x, mask


def _both(graph, weights, feed) -> list[dict[str, np.ndarray]]:
    return [run(graph, feed, weights), OnnxRunner(to_onnx(graph, weights)).run(feed)]


def _real(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return a[mask.astype(bool)]


def test_bert_encoder_matches_hf_with_its_attention_mask(tmp_path) -> None:
    torch.manual_seed(0)
    hf = BertModel(BertConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                              vocab_size=101, max_position_embeddings=64), add_pooling_layer=False).eval()
    hf.save_pretrained(tmp_path)
    model = load("models/bert.alg", entry="BERTEncoder", weights=tmp_path)
    graph = add_padding_masks(optimize(model.graph, 2))
    verify(graph)
    assert [n.attrs["name"] for n in graph.inputs] == ["x", "attention_mask"]
    x, mask = _batch(101, LENGTHS)
    with torch.no_grad():
        want = hf(torch.from_numpy(x), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    for got in _both(graph, model.weights, {"x": x, "attention_mask": mask}):
        assert np.abs(_real(got["X_hat"], mask) - _real(want, mask)).max() <= 1e-4
    # and each row as if it were alone
    alone = run(optimize(model.graph, 2), {"x": x[1:2, :LENGTHS[1]]}, model.weights)["X_hat"]
    np.testing.assert_allclose(got["X_hat"][1, :LENGTHS[1]], alone[0], atol=1e-5, rtol=0)


def test_gpt2_right_padding_matches_hf(tmp_path) -> None:
    torch.manual_seed(1)
    hf = GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=101)).eval()
    hf.save_pretrained(tmp_path)
    model = load("models/gpt2.alg", weights=tmp_path)
    graph = add_padding_masks(optimize(model.graph, 2))
    x, mask = _batch(101, LENGTHS, seed=1)
    with torch.no_grad():
        want = hf(torch.from_numpy(x), attention_mask=torch.from_numpy(mask)).logits.numpy()
    for got in _both(graph, model.weights, {"x": x, "attention_mask": mask}):
        assert np.abs(_real(got["Y"], mask) - _real(want, mask)).max() <= 1e-4


def test_bart_pads_both_sequences(tmp_path) -> None:
    config = BartConfig(**BART_SMALL, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, pad_token_id=1)
    hf = bart_hf(BartForConditionalGeneration, config, seed=2)
    hf.save_pretrained(tmp_path)
    model = load("models/bart.alg", weights=tmp_path)
    graph = add_padding_masks(optimize(model.graph, 2))
    assert [n.attrs["name"] for n in graph.inputs][-2:] == ["z_attention_mask", "x_attention_mask"]
    z, zm = _batch(101, [7, 3, 6], seed=3)
    x, xm = _batch(101, LENGTHS, seed=4)
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(z), attention_mask=torch.from_numpy(zm), decoder_input_ids=torch.from_numpy(x),
                  decoder_attention_mask=torch.from_numpy(xm)).logits.numpy()
    for got in _both(graph, model.weights, {"z": z, "x": x, "z_attention_mask": zm, "x_attention_mask": xm}):
        assert np.abs(_real(got["Y"], xm) - _real(want, xm)).max() <= 1e-4


def test_padding_masks_on_tvm_match_the_interpreter() -> None:
    pytest.importorskip("tvm", reason="the TVM backend needs pip install pseudoformer[tvm]")
    from pseudoformer.backends.tvm.build import compile_graph

    model = load("models/bert.alg", entry="BERTEncoder", defines=["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4",
                                                                 "d_mid=4", "ell_max=16", "N_V=11"])
    graph = add_padding_masks(optimize(model.graph, 2))
    x, mask = _batch(11, LENGTHS, seed=5)
    want = run(graph, {"x": x, "attention_mask": mask}, model.weights)["X_hat"]
    got = compile_graph(graph, model.weights).run({"x": x, "attention_mask": mask})["X_hat"]
    assert np.abs(_real(got, mask) - _real(want, mask)).max() <= 1e-4


def test_unfused_attention_is_refused_with_the_reason() -> None:
    model = load("models/bert.alg", entry="BERTEncoder", defines=["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4",
                                                                 "d_mid=4", "ell_max=16", "N_V=11"])
    with pytest.raises(PaddingMaskError, match="-O2"):
        add_padding_masks(model.graph)


def test_compile_api_and_cli_take_the_mask(tmp_path, capsys) -> None:
    from pseudoformer.base.errors import UsageError
    from pseudoformer.cli import main
    from pseudoformer.deploy import compile

    defines = ["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4", "ell_max=16", "N_V=11"]
    compiled = compile("models/bert.alg", entry="BERTEncoder", defines=defines, padding_mask=True)
    assert [i.name for i in compiled.onnx.graph.input] == ["x", "attention_mask"]
    x, mask = _batch(11, LENGTHS, seed=6)
    got = compiled.run(x=x, attention_mask=mask)["X_hat"]
    want = run(add_padding_masks(optimize(compiled.model.graph, 2)), {"x": x, "attention_mask": mask},
               compiled.model.weights)["X_hat"]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    with pytest.raises(UsageError, match="attention_mask"):
        compiled.run(x=x)
    out = tmp_path / "m.onnx"
    argv = ["compile", "models/bert.alg", "--entry", "BERTEncoder", *sum((["-D", d] for d in defines), []),
            "--padding-mask", "-o", str(out)]
    assert main(argv) == 0 and out.exists()
    assert "attention_mask" in capsys.readouterr().err
    assert main([*argv[:-2], "--backend", "tvm", "-o", str(tmp_path / "m.so")]) == 1
    assert "--padding-mask is for the onnx backend" in capsys.readouterr().err
