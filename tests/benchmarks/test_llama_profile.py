"""benchmarks/common/llama_profile.py: our generator profiled as it runs, with the standard ops and with contrib_ops
(whose cache lives in buffers the profiled session must bind the same way)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.common.llama_profile import profile_ours, summarize
from pseudoformer.generation import Generator
from pseudoformer.model import load


@pytest.mark.parametrize("contrib", [False, True])
def test_profile_of_a_tiny_llama(tmp_path: Path, contrib: bool) -> None:
    model = load("models/llama.alg", defines=["L=2", "d_e=64", "H=4", "H_kv=2", "d_attn=16", "d_mlp=128", "N_V=100"])
    gen = Generator(model, threads=1, contrib_ops=contrib)
    prompt = np.random.default_rng(0).integers(0, 100, (1, 6))
    want = gen.generate(prompt, max_new_tokens=5, sampling=None, seed=0).tokens
    summary = summarize(profile_ours(gen, prompt, tmp_path, new=5, threads=1))
    attention = "GroupQueryAttention" if contrib else "Attention"
    assert summary["step_ms"] > 0 and summary["step"][attention] > 0 and summary["prefill"][attention] > 0
    assert gen.generate(prompt, max_new_tokens=5, sampling=None, seed=0).tokens == want  # its own session is back
