"""HuggingFace GPT-2 and BERT at small sizes, with random weights, for the ONNX backend's model tests."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel

MODELS = Path(__file__).resolve().parents[2] / "models"  # not cwd-relative: pytest may run from anywhere
GPT2, BERT = MODELS / "gpt2.alg", MODELS / "bert.alg"
SIZES = [(2, 16), (1, 7), (3, 33)]  # (batch, seq) pairs every compiled model is run at

# bos/eos default to 50256, outside this vocabulary, which transformers warns about on every load.
GPT2_SMALL = dict(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=101, bos_token_id=0, eos_token_id=0)
BERT_SMALL = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                  vocab_size=101, max_position_embeddings=64)


def perturbed(m: torch.nn.Module, seed: int) -> torch.nn.Module:
    """HF initialises biases to 0 and layer norms to (1, 0); shift them so a dropped or swapped one shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "ln_" in name or "LayerNorm" in name or "token_type" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return m.eval()


def small_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return perturbed(GPT2LMHeadModel(GPT2Config(**GPT2_SMALL)), seed + 1)


def small_bert_mlm(seed: int = 2) -> BertForMaskedLM:
    torch.manual_seed(seed)
    return perturbed(BertForMaskedLM(BertConfig(**BERT_SMALL)), seed + 1)


def small_bert_model(seed: int = 4) -> BertModel:
    torch.manual_seed(seed)
    return perturbed(BertModel(BertConfig(**BERT_SMALL)), seed + 1)
