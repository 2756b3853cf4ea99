"""GPT-NeoX and Phi-3 from HF configs with random weights (norms and biases perturbed), saved as checkpoints,
and our models/gpt_neox.alg and models/phi3.alg loaded from them."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Phi3Config, Phi3ForCausalLM, PreTrainedModel

from pseudoformer.model import Model, load

MODELS = Path(__file__).resolve().parents[2] / "models"
KINDS = ("gpt_neox", "phi3")
VOCAB = 61
# Phi-3's window, shorter than the sequences the tests run, so that it hides keys.
WINDOW = 5
# Heads of 16: a quarter of NeoX's (r = 4) rotated; Phi-3's whole heads rotated inside GroupQueryAttention.
TINY = {
    "gpt_neox": dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=96, max_position_embeddings=256, rotary_pct=0.25, rotary_emb_base=500.0,
                     bos_token_id=1, eos_token_id=2),
    "phi3": dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500.0,
                 sliding_window=WINDOW, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0),
}
HF = {"gpt_neox": (GPTNeoXConfig, GPTNeoXForCausalLM), "phi3": (Phi3Config, Phi3ForCausalLM)}


def hf_model(kind: str, seed: int = 0, **settings: object) -> PreTrainedModel:
    """A random model of `kind`, its norms and biases perturbed so that a misplaced one shows."""
    torch.manual_seed(seed)
    config_class, model_class = HF[kind]
    m = model_class(config_class(**{**TINY[kind], **settings})).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return m


def ours(kind: str, directory: Path) -> Model:
    return load(MODELS / f"{kind}.alg", weights=directory)
