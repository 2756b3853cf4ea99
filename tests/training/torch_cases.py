"""HF models from configs (random weights, no downloads) and our loss models over the same weights, with
torch's loss, gradients and optimizer steps to compare against."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from pseudoformer.model import Model, load
from pseudoformer.weights.hf_checkpoint import TABLES
from pseudoformer.weights.hf_engine import plan
from pseudoformer.weights.tensor_ref import in_memory
from tests.models.llama_cases import hf_model

HERE = Path(__file__).parent
GPT2_SMALL = dict(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=101, bos_token_id=0, eos_token_id=0)
GROUP = "theta."


@dataclass
class Case:
    hf: Any  # the torch model
    model: Model  # our loss model, its weights those of `hf`
    kind: str  # the HF model_type
    vocab: int

    def to_ours(self, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """HF-named tensors (weights or their gradients: the mapping only moves values) under our names."""
        mapped = plan(TABLES[self.kind], in_memory(tensors), self.hf.config.to_dict(), group=GROUP[:-1])
        return {p.name: np.array(a) for p, a in mapped.stream()}

    def torch_loss(self, x: np.ndarray) -> torch.Tensor:
        """−Σ_t log P[x[t+1], t] per example, averaged over the batch, as our loss algorithms write it."""
        t = torch.from_numpy(x)
        logp = torch.log_softmax(self.hf(t).logits, dim=-1)
        return -logp[:, :-1].gather(-1, t[:, 1:, None]).sum(dim=(1, 2)).mean()

    def torch_grads(self, x: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        self.hf.zero_grad()
        loss = self.torch_loss(x)
        loss.backward()
        grads = {n: p.grad.detach().numpy().copy() for n, p in self.hf.named_parameters()}
        return float(loss.detach()), self.to_ours(grads)

    def torch_params(self) -> dict[str, np.ndarray]:
        return self.to_ours({n: p.detach().numpy().copy() for n, p in self.hf.named_parameters()})

    def tokens(self, batch: int, seq: int, seed: int) -> np.ndarray:
        return np.random.default_rng(seed).integers(0, self.vocab, size=(batch, seq), dtype=np.int64)


def _ours(loss_alg: str, base: str, directory: Path, skip: tuple[str, ...] = (), extra: tuple[str, ...] = (),
          **kw: Any) -> Model:
    """Our loss model, with the weights a HF checkpoint gives the model it calls (θ : GPT2), under the group
    (`extra` defines more hyperparameters, `kw` goes to load)."""
    plain = load(base, weights=directory)
    defines = [f"{k}={v}" for k, v in plain.config.hyperparameters.items() if k not in ("ell_gen", "tau", *skip)]
    model = load(HERE / loss_alg, defines=[*defines, *extra], **kw)
    weights = {GROUP + k: v for k, v in plain.weights.items()}
    # a tied checkpoint loads as one matrix (pseudoformer/tied_weights.py): the loss model has both names
    for a, b in (("W_e", "W_u"), ("W_u", "W_e")):
        if GROUP + a in model.weights and GROUP + a not in weights and GROUP + b in weights:
            weights[GROUP + a] = np.ascontiguousarray(weights[GROUP + b].T)
    model.weights = weights
    return model


def gpt2(directory: Path, seed: int = 0) -> Case:
    torch.manual_seed(seed)
    hf = GPT2LMHeadModel(GPT2Config(**GPT2_SMALL)).eval()  # eval: no dropout; gradients all the same
    with torch.no_grad():  # non-trivial layer norms and biases, so that a swapped one shows
        for name, p in hf.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(directory)
    return Case(hf, _ours("gpt2_loss.alg", "models/gpt2.alg", directory), "gpt2", GPT2_SMALL["vocab_size"])


def llama(directory: Path, seed: int = 0, **sizes: object) -> Case:
    hf = hf_model("llama", seed, **sizes)
    hf.save_pretrained(directory)
    return Case(hf, _ours("llama_loss.alg", "models/llama.alg", directory,
                                ("bos_token", "eos_token", "ell_max")), "llama", hf.config.vocab_size)


def compare(ours: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], rtol: float = 1e-4,
            floor: float = 1e-6) -> dict[str, float]:
    """Per tensor: max |ours − want| / max |want| where > rtol (max |want| below `floor`: an exact zero
    gradient, which both sides only approximate, and then the absolute difference is held to floor)."""
    bad = {}
    for k, w in want.items():
        scale = float(np.abs(w).max())
        err = float(np.abs(ours[k] - w).max())
        if (scale >= floor and err / scale > rtol) or (scale < floor and err > floor):
            bad[k] = err / max(scale, floor)
    return bad
