"""Helpers for comparing our models with HuggingFace implementations built from configs (no downloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pseudoformer.model import Model, load


def log_softmax(a: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    m = a.max(-1, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(-1, keepdims=True))


def save_hf(model: torch.nn.Module, directory: Path) -> Path:
    model.save_pretrained(directory)
    return directory


def ours(source: str, weights: Path, entry: str | None = None) -> Model:
    return load(source, entry=entry, weights=weights)


def tokens(batch: int, seq: int, vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, seq), dtype=np.int64)
