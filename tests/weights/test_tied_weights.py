"""A checkpoint that ties its unembedding to its embedding is loaded, computed and stored with one matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import pseudoformer
from pseudoformer.tied_weights import transposed_twins
from tests.weights.test_weights_llama import N_V, SIZES, _save

LLAMA = Path(__file__).resolve().parents[2] / "models" / "llama.alg"
TOKENS = np.array([[3, 17, 42, 99, 5, 0]])


def _checkpoint(tmp_path: Path, tied: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**SIZES, tie_word_embeddings=tied)).eval()
    _save(hf, tmp_path)
    return hf


def _initializers(path: Path) -> dict[str, list[int]]:
    m = onnx.load(str(path), load_external_data=False)
    return {t.name: list(t.dims) for t in m.graph.initializer}


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_unembedding_is_the_embedding_read_transposed(tmp_path: Path, tied: bool) -> None:
    hf = _checkpoint(tmp_path, tied)
    model = pseudoformer.load(LLAMA, weights=tmp_path)
    assert (len(model.weights) == len({*model.weights} | {"W_e", "W_u"}) - 1) is tied  # one of the pair, tied
    with torch.no_grad():
        want = hf(torch.tensor(TOKENS)).logits.numpy()  # [batch, seq, N_V]
    got = model.run(x=TOKENS)[model.output_names[0]]  # [batch, seq, N_V], as deployed
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    out = tmp_path / "m.onnx"
    pseudoformer.compile(LLAMA, weights=tmp_path).save(out)
    tables = [n for n, dims in _initializers(out).items() if sorted(dims) == sorted([N_V, SIZES["hidden_size"]])]
    assert len(tables) == (1 if tied else 2), tables


def test_int4_quantizes_the_tied_pair_once_and_keep_output_fp32_keeps_it(tmp_path: Path) -> None:
    _checkpoint(tmp_path, True)
    out = tmp_path / "q.onnx"
    compiled = pseudoformer.compile(LLAMA, weights=tmp_path, quantize="int4")
    compiled.save(out)
    m = onnx.load(str(out))
    ops = {n.op_type for n in m.graph.node}
    assert {"GatherBlockQuantized", "MatMulNBits"} <= ops
    # the embedding's packed codes are the unembedding's: one table of N_V rows of codes
    codes = [t.name for t in m.graph.initializer if t.data_type == onnx.TensorProto.UINT8 and t.dims[0] == N_V
             and t.name.endswith(".quant")]
    assert len(codes) == 1, codes
    floats = [n for n, dims in _initializers(out).items() if sorted(dims) == sorted([N_V, SIZES["hidden_size"]])]
    assert floats == []
    kept = pseudoformer.compile(LLAMA, weights=tmp_path, quantize="int4", quantize_output=False)
    kept.save(out)
    m = onnx.load(str(out))
    assert "GatherBlockQuantized" not in {n.op_type for n in m.graph.node}
    floats = [n for n, dims in _initializers(out).items() if sorted(dims) == sorted([N_V, SIZES["hidden_size"]])]
    assert len(floats) == 1
    y = compiled.run(x=TOKENS)[compiled.model.output_names[0]]
    y32 = kept.run(x=TOKENS)[kept.model.output_names[0]]
    assert y.shape == y32.shape and np.isfinite(y).all()


def test_only_equal_transposes_are_twins() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = a.T.copy()
    b[2, 1] += 1e-6  # the first row and column agree, a later one does not
    assert transposed_twins({"a": a, "b": a.T.copy()}) == {"b": "a"}
    assert transposed_twins({"a": a, "b": b}) == {}
    assert transposed_twins({"a": a, "c": a.copy()}) == {}  # equal but not transposed: not a tie of this kind
