"""The checkpoint writers stream: a .safetensors file is written a tensor at a time with no copy of the set
(safetensors' own save_file joined every tensor into one bytes object first), and the HF export holds one HF
tensor and its index map at a time, not the checkpoint's every element (it held the whole checkpoint as
float32 plus a float64 index of every element: 5.2× the weights). Peaks are numpy's allocations, traced."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import GPT2Config, GPT2LMHeadModel

from pseudoformer.model import load
from pseudoformer.training.outputs import export_hf
from pseudoformer.weights.safetensors_io import read_safetensors, save_weights


def _peak(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_save_weights_adds_no_copy_of_the_set(tmp_path: Path) -> None:
    weights = {f"w{i}": np.random.default_rng(i).standard_normal((512, 1024)).astype(np.float32) for i in range(8)}
    one = weights["w0"].nbytes
    peak = _peak(lambda: save_weights(weights, tmp_path / "w.safetensors"))
    assert peak < one, (peak, one)
    back = load_file(str(tmp_path / "w.safetensors"))
    assert all(np.array_equal(back[k], v) for k, v in weights.items())


def test_the_hf_export_holds_a_tensor_at_a_time(tmp_path: Path) -> None:
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_embd=256, n_head=4, n_layer=6, n_positions=64, vocab_size=4000)).save_pretrained(
        tmp_path / "hf")
    ours = {k: np.asarray(v, np.float32) + 1 for k, v in load("models/gpt2.alg", weights=tmp_path / "hf").weights.items()}
    source = read_safetensors(tmp_path / "hf" / "model.safetensors")
    total = sum(a.nbytes for a in source.values())
    largest = max(a.nbytes for a in source.values())
    peak = _peak(lambda: export_hf(tmp_path / "hf", ours, tmp_path / "out"))
    # the tensor being written and its int32 index map, and the mapping's own small change
    assert peak < 2.5 * largest and peak < total / 2, (peak, largest, total)
    exported = read_safetensors(tmp_path / "out" / "model.safetensors")
    assert sorted(exported) == sorted(source)
    assert np.array_equal(exported["transformer.wte.weight"], source["transformer.wte.weight"] + 1)
    assert np.array_equal(exported["transformer.h.1.attn.c_attn.weight"],
                          source["transformer.h.1.attn.c_attn.weight"] + 1)
