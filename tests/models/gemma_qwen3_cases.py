"""Gemma 2, Gemma 3 (text) and Qwen3 from HF configs with random weights (norms, the q/k norms and the scales
perturbed), saved as checkpoints, and models/{gemma2,gemma3,qwen3}.alg loaded from them.

The sizes are tiny, the windows shorter than the sequences the tests run and the soft-caps small enough that
random weights reach them: Gemma 2's layers alternate (local, global, ...), Gemma 3's have a global layer every
third (P = 3), a RoPE base of their own on the local layers and linear scaling on the global ones."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    PreTrainedModel,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.generation import Generator, Sampling
from pseudoformer.ir import Node, Op
from pseudoformer.model import Model, load
from pseudoformer.optimize import optimize
from pseudoformer.passes.quantize import QuantizeOptions
from tests.models.hf_util import log_softmax, tokens

MODELS = Path(__file__).resolve().parents[2] / "models"
WINDOW = 5
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, initializer_range=0.1)
GEMMA = dict(sliding_window=WINDOW, query_pre_attn_scalar=12, hidden_activation="gelu_pytorch_tanh")
EXTRA = {
    "gemma2": dict(**GEMMA, num_hidden_layers=4, attn_logit_softcapping=1.5, final_logit_softcapping=4.0,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0}, tie_word_embeddings=False),
    "gemma3": dict(**GEMMA, num_hidden_layers=6, sliding_window_pattern=3, tie_word_embeddings=False,
                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 2000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 30.0}}),
    "qwen3": dict(num_hidden_layers=2, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                  tie_word_embeddings=False),
}
HF = {"gemma2": (Gemma2Config, Gemma2ForCausalLM), "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
      "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
KINDS = tuple(HF)
LAYERS = {kind: int(extra["num_hidden_layers"]) for kind, extra in EXTRA.items()}  # type: ignore[call-overload]


def hf_config(kind: str, **changes: object) -> object:
    config_class, _ = HF[kind]
    return config_class(**{**TINY, **EXTRA[kind], **changes})


def hf_model(kind: str, seed: int = 0, **changes: object) -> PreTrainedModel:
    """A random model of `kind`, its norms perturbed so that a misplaced one (or a γ read as 1 + γ) shows."""
    torch.manual_seed(seed)
    _, model_class = HF[kind]
    m = model_class(hf_config(kind, **changes)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return m


def ours(kind: str, directory: Path) -> Model:
    return load(MODELS / f"{kind}.alg", weights=directory)


# ---- the checks every family's tests run (tests/models/test_{gemma2,gemma3,qwen3}_vs_hf.py) ----------------

TOL = 1e-4
SHAPES = [(2, 11), (1, 1), (3, 3 * WINDOW + 2)]  # the last well past the window
NEW = 32
PROMPT = [5, 17, 3, 44, 9, 12, 30]  # longer than the window
BATCH = [[1, 2, 3, 4, 5, 6, 9], [60, 7, 7, 7, 8, 2, 9], [33, 21, 13, 8, 5, 3, 9]]


def checkpoint(kind: str, directory: Path, seed: int = 0) -> tuple[PreTrainedModel, Path]:
    hf = hf_model(kind, seed=seed)
    hf.save_pretrained(directory)
    return hf, directory


def hf_logits(hf: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.from_numpy(x), attention_mask=torch.ones(x.shape, dtype=torch.long)).logits.numpy()


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= TOL


def check_logits(hf: torch.nn.Module, model: Model, run: Callable[[np.ndarray], np.ndarray]) -> None:
    for shape in SHAPES:
        x = tokens(*shape, vocab=TINY["vocab_size"], seed=sum(shape))
        assert_close(run(x), hf_logits(hf, x))


def hf_greedy(hf: torch.nn.Module, prompts: list[list[int]], n: int = NEW) -> list[list[int]]:
    x = torch.tensor(prompts)
    with torch.no_grad():
        out = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                          eos_token_id=None, pad_token_id=0)
    return out[:, x.shape[1]:].tolist()


def check_generate(hf: torch.nn.Module, model: Model, backend: str) -> None:
    """Greedy decoding with the derived cache equals HF generate, one prompt and a batch, past the window."""
    gen = Generator(model, backend=backend)
    greedy = Sampling(temperature=0)
    assert len(PROMPT) > WINDOW
    want = hf_greedy(hf, [PROMPT])
    assert len(set(want[0])) > 3, "a run of one token would not show a wrong position"
    assert gen.generate(PROMPT, max_new_tokens=NEW, sampling=greedy).tokens == want
    assert gen.generate(BATCH, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, BATCH)


def check_cache(model: Model) -> None:
    """One cache slot per layer, holding the H_kv key/value heads."""
    gen = Generator(model, backend="numpy")
    hp = model.config.hyperparameters
    assert gen.decoder is not None and len(gen.decoder.slots) == hp["L"]
    for slot in gen.decoder.slots:
        for t in (slot.key_type, slot.value_type):
            assert t.shape[1] == hp["H_kv"] and t.shape[-1] == hp["d_attn"]


def onnx_ops(model: Model, **options: object) -> Counter:
    return Counter(n.op_type for n in lower(model, **options).graph.node)


def attentions(model: Model) -> list[Node]:
    """The -O2 graph's attention ops, in layer order."""
    return [n for n in optimize(model.graph, 2).nodes() if n.op is Op.ATTENTION]


def angles(x: Node) -> Node:
    """The cosine table that rotates x, an attention's queries or keys (through transposes and reshapes)."""
    while x.op is not Op.ROTARY:
        x = x.src[0]
    return x.src[1]


def check_quantized_and_contrib(model: Model) -> None:
    """--quantize int4 and --contrib-ops, alone and together: greedy decoding on onnxruntime equals the
    interpreter's on the same quantized graph (accuracy level 0: the reference's arithmetic), scores within
    1e-4; contrib ops alone give the standard file's logits."""
    x = tokens(2, 3 * WINDOW, vocab=TINY["vocab_size"], seed=7)
    np.testing.assert_allclose(run_onnx(lower(model, contrib_ops=True), {"x": x})["Y"],
                               run_onnx(lower(model), {"x": x})["Y"], rtol=1e-5, atol=1e-5)
    int4 = QuantizeOptions(bits=4, block_size=16, accuracy_level=0)
    want = Generator(model, backend="numpy", quantize=int4).generate(x, max_new_tokens=8, keep_scores=True, seed=0)
    for contrib in (False, True):
        got = Generator(model, quantize=int4, contrib_ops=contrib).generate(x, max_new_tokens=8, keep_scores=True,
                                                                            seed=0)
        assert got.tokens == want.tokens
        assert max(np.abs(u - v).max() for u, v in zip(got.scores, want.scores, strict=True)) < 1e-4
