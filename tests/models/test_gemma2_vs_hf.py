"""Gemma 2 (models/gemma2.alg) against HF's Gemma2ForCausalLM with the same random weights: log-probabilities
within 1e-4 on the interpreter, ONNX Runtime and TVM on sequences past the window, greedy generation equal to
HF's, one soft-capped attention op per layer, windowed in the local layers only, and the options. The checks every family shares (logits on three backends,
greedy generation, the cache) are in test_gemma_qwen3_vs_hf.py; the fixtures in conftest.py."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest

from pseudoformer.deploy import lower
from pseudoformer.model import Model
from tests.models import gemma_qwen3_cases as cases

KIND = "gemma2"


def test_the_caps_are_reached(checkpoint: tuple, tmp_path: Path) -> None:
    """The tiny sizes' scores and logits pass the caps, so that a cap misplaced or left out would show."""
    hf = cases.hf_model(KIND, attn_logit_softcapping=1e4, final_logit_softcapping=1e4)
    hf.load_state_dict(checkpoint[0].state_dict())
    x = cases.tokens(2, 11, vocab=cases.TINY["vocab_size"], seed=13)
    with pytest.raises(AssertionError):
        cases.assert_close(cases.hf_logits(hf, x), cases.hf_logits(checkpoint[0], x))


def test_each_layer_is_one_soft_capped_attention_windowed_in_the_local_layers(model: Model) -> None:
    """Layers alternate local (window w) and global from the first, all soft-capped at c, scaled by 1/√s;
    no Softmax, no per-head op: packed Q/K/V, O, gate, up and down MatMuls and four RMSNormalization a layer."""
    hp = model.config.hyperparameters
    layers, w, c = hp["L"], hp["w"], hp["c"]
    att = cases.attentions(model)
    assert [(a.attrs.get("window", 0), a.attrs["softcap"], a.attrs["causal"], len(a.src)) for a in att] == \
        [(w, c, True, 3), (0, c, True, 3)] * (layers // 2)
    assert [a.attrs["scale"] for a in att] == pytest.approx([hp["s"] ** -0.5] * layers)
    ops = cases.onnx_ops(model)
    assert ops["Attention"] == layers and ops["Softmax"] == 0 and ops["Reshape"] == 0
    assert ops["RMSNormalization"] == 4 * layers + 1 and ops["RotaryEmbedding"] == 2 * layers
    assert ops["MatMul"] == 5 * layers + 1 and ops["Tanh"] == 1  # the logits' cap; the scores' is the attention's


def test_int4_and_contrib_ops(model: Model) -> None:
    cases.check_quantized_and_contrib(model)


def test_contrib_ops_pass_the_soft_cap_to_the_kernel(model: Model) -> None:
    """onnxruntime's GroupQueryAttention has a softcap (and a local_window_size): every layer is the kernel's,
    nothing falls back (the numbers: test_int4_and_contrib_ops)."""
    hp = model.config.hyperparameters
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        contrib = lower(model, contrib_ops=True)
    gqa = [n for n in contrib.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == hp["L"] and not [n for n in contrib.graph.node if n.op_type == "Attention"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in gqa]
    assert [a.get("local_window_size", -1) for a in attrs] == [hp["w"], -1] * (hp["L"] // 2)
    assert [a["softcap"] for a in attrs] == pytest.approx([hp["c"]] * hp["L"])


def test_contrib_ops_say_once_which_layers_stay_standard(checkpoint: tuple, model: Model, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """Where the kernel cannot compute a layer as the graph does (here: float16, which it is not taken in),
    --contrib-ops keeps that layer's standard Attention and the compile says so in one note, with the reason."""
    from pseudoformer.base.errors import ContribFallbackWarning
    from pseudoformer.cli import main

    with pytest.warns(ContribFallbackWarning, match=r"4 attention op\(s\) stay standard .*float32 only") as caught:
        ops = cases.onnx_ops(model, contrib_ops=True, dtype="float16")
    assert len(caught) == 1 and ops["Attention"] == model.config.hyperparameters["L"]
    assert main(["compile", "models/gemma2.alg", "--weights", str(checkpoint[1]), "--contrib-ops",
                 "--dtype", "float16", "-o", str(tmp_path / "g.onnx")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "float32 only" in notes[0]
