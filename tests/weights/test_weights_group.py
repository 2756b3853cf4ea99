"""A checkpoint of a model fills a parameter group typed as that model (`θ : GPT2`), for every family.

groups/wrapped.alg wraps each model as a loss algorithm would (`Parameters: θ : GPT2`, then
`GPT2(x | θ)`). Loaded with the model's HF checkpoint, each must compute what the model itself does
with the same checkpoint, exactly: the same graph under other names, with the same weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from weights_testlib import bert_config, gpt2_config, save_hf_model

import pseudoformer
from pseudoformer.base.errors import UsageError
from pseudoformer.weights import save_weights

WRAPPED = str(Path(__file__).with_name("groups") / "wrapped.alg")
LLAMA_SIZES = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5)
BART_SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, vocab_size=101,
                  max_position_embeddings=64)

# family: (the packaged model, its HF class, its config, the group's name in ours)
FAMILIES = {
    "GPT2": ("gpt2", transformers.GPT2LMHeadModel, lambda: gpt2_config(), "theta"),
    "BERT": ("bert", transformers.BertForMaskedLM, lambda: bert_config(), "theta"),
    "BART": ("bart", transformers.BartForConditionalGeneration, lambda: transformers.BartConfig(**BART_SIZES),
             "theta_hat"),
    "Llama": ("llama", transformers.LlamaForCausalLM, lambda: transformers.LlamaConfig(**LLAMA_SIZES), "theta"),
    "Mistral": ("mistral", transformers.MistralForCausalLM,
                lambda: transformers.MistralConfig(**LLAMA_SIZES, sliding_window=5), "theta"),
    "Qwen2": ("qwen2", transformers.Qwen2ForCausalLM, lambda: transformers.Qwen2Config(**LLAMA_SIZES), "theta"),
    "GPTNeoX": ("gpt_neox", transformers.GPTNeoXForCausalLM, lambda: transformers.GPTNeoXConfig(
        **{k: v for k, v in LLAMA_SIZES.items() if k not in ("num_key_value_heads", "rms_norm_eps")},
        rotary_pct=0.5), "theta"),
    "Phi3": ("phi3", transformers.Phi3ForCausalLM,
             lambda: transformers.Phi3Config(**LLAMA_SIZES, sliding_window=5, pad_token_id=0), "theta"),
    "Mixtral": ("mixtral", transformers.MixtralForCausalLM,
                lambda: transformers.MixtralConfig(**LLAMA_SIZES, num_local_experts=4, num_experts_per_tok=2), "theta"),
    "Gemma2": ("gemma2", transformers.Gemma2ForCausalLM,
               lambda: transformers.Gemma2Config(**LLAMA_SIZES, head_dim=8, sliding_window=5), "theta"),
    "Gemma3": ("gemma3", transformers.Gemma3ForCausalLM,
               lambda: transformers.Gemma3TextConfig(**LLAMA_SIZES, head_dim=8, sliding_window=5), "theta"),
    "Qwen3": ("qwen3", transformers.Qwen3ForCausalLM,
              lambda: transformers.Qwen3Config(**LLAMA_SIZES, head_dim=8), "theta"),
}
# A packaged model whose name is not its model_type.
MODEL_TYPES = {"gemma3": "gemma3_text"}


def _inputs(family: str) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(0).integers(0, 101, size=(2, 9))
    return {"z": ids[:, :7], "x": ids} if family == "BART" else {"x": ids}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for family, (_, cls, config, _) in FAMILIES.items():
        out[family] = tmp_path_factory.mktemp(family.lower())
        save_hf_model(out[family], cls, config())
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_checkpoint_fills_the_group_typed_as_its_model(checkpoints: dict[str, Path], family: str) -> None:
    source, _, _, group = FAMILIES[family]
    plain = pseudoformer.load(source, weights=checkpoints[family])
    wrapped = pseudoformer.load(WRAPPED, entry=f"Wrapped{family}", weights=checkpoints[family])
    assert wrapped.weights.keys() == {f"{group}.{name}" for name in plain.weights}
    for name, array in plain.weights.items():
        np.testing.assert_array_equal(wrapped.weights[f"{group}.{name}"], array, err_msg=name)
    ours, theirs = wrapped.run(_inputs(family)), plain.run(_inputs(family))
    np.testing.assert_array_equal(ours["Y"], theirs[plain.output_names[0]])


def test_gpt2_group_logits_equal_hf(checkpoints: dict[str, Path]) -> None:
    """Not only equal to our plain model: equal to HF's own logits for the checkpoint."""
    hf = transformers.GPT2LMHeadModel.from_pretrained(checkpoints["GPT2"]).eval()
    x = _inputs("GPT2")["x"]
    with torch.no_grad():
        expected = hf(torch.from_numpy(x)).logits.numpy()
    got = pseudoformer.load(WRAPPED, entry="WrappedGPT2", weights=checkpoints["GPT2"]).run(x=x)["Y"]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_our_safetensors_of_the_model_fills_the_group(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    plain = pseudoformer.load("gpt2", weights=checkpoints["GPT2"])
    save_weights(plain.weights, tmp_path / "gpt2.safetensors")
    sizes = [f"{k}={v}" for k, v in plain.graph.meta["hyperparameters"].items()]  # no config.json here
    wrapped = pseudoformer.load(WRAPPED, entry="WrappedGPT2", weights=tmp_path / "gpt2.safetensors", defines=sizes)
    np.testing.assert_array_equal(wrapped.run(x=_inputs("GPT2")["x"])["Y"], plain.run(x=_inputs("GPT2")["x"])["Y"])
    # ... and a file of the wrapper's own names (as a training run saves it) still loads as it is.
    save_weights(wrapped.weights, tmp_path / "wrapped.safetensors")
    again = pseudoformer.load(WRAPPED, entry="WrappedGPT2", weights=tmp_path / "wrapped.safetensors", defines=sizes)
    assert all(np.array_equal(again.weights[k], v) for k, v in wrapped.weights.items())


def test_two_groups_of_the_family_are_refused(checkpoints: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match=r"Blend has 2 parameter groups .* \(θ : GPT2, φ : GPT2\)"):
        pseudoformer.load(WRAPPED, entry="Blend", weights=checkpoints["GPT2"])


def test_the_checkpoint_fills_only_its_group(checkpoints: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match=r"1 missing .*mapped onto the parameter group theta\)\n  b: missing"):
        pseudoformer.load(WRAPPED, entry="Adapted", weights=checkpoints["GPT2"])


def test_a_checkpoint_of_another_family_names_the_misfit(checkpoints: dict[str, Path]) -> None:
    # A BERT checkpoint for a GPT-2 group: no group of its family, so its names stay unmapped and misfit.
    with pytest.raises(UsageError, match="do not fit the model"):
        pseudoformer.load(WRAPPED, entry="WrappedGPT2", weights=checkpoints["BERT"])


def test_every_family_has_its_wrapper_here() -> None:
    """A family added to hf_checkpoint.FAMILIES is tested here too (its wrapper in groups/wrapped.alg)."""
    from pseudoformer.weights.hf_checkpoint import TABLES

    assert {MODEL_TYPES.get(source, source) for source, *_ in FAMILIES.values()} == set(TABLES)
    for family, (source, *_) in FAMILIES.items():
        assert family in TABLES[MODEL_TYPES.get(source, source)].algorithms
