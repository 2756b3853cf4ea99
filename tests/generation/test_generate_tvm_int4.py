"""int4 generation on TVM (our kernels, backends/tvm/nbits.py) with the key/value cache, against the
interpreter running the same quantized decoder and onnxruntime's int4 path (MatMulNBits,
GroupQueryAttention with --contrib-ops): the same tokens, and scores within 1e-4 of the interpreter's.

Every backend computes in float32 here: accuracy level 0, which onnxruntime computes as the reference
does and TVM always does."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm.relax", reason="the TVM backend needs apache-tvm: pip install pseudoformer[tvm]")

from pseudoformer.generation import Generator, Sampling  # noqa: E402  (after the skip)
from pseudoformer.model import load  # noqa: E402
from pseudoformer.passes.quantize import QuantizeOptions  # noqa: E402

TINY = ["L=2", "H=4", "H_kv=2", "d_e=64", "d_mlp=96", "N_V=100", "d_attn=16"]
MODELS = {
    "llama": ("models/llama.alg", TINY),
    "qwen2": ("models/qwen2.alg", TINY),  # biases in the packed projection
    "gpt2": ("models/gpt2.alg", ["L=2", "H=4", "d_e=64", "d_mlp=128", "d_attn=16", "d_mid=16", "N_V=101"]),
}
# 4 bits with zero points, blocks of 32, the tied table too; GPT-2 also symmetric in blocks of 16 (K = 64, 128)
OPTIONS = {"llama": QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=0),
           "qwen2": QuantizeOptions(bits=4, block_size=64, embeddings=True, accuracy_level=0),
           "gpt2": QuantizeOptions(bits=4, block_size=16, symmetric=True, embeddings=True, accuracy_level=0)}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_int4_generation_on_tvm_gives_the_interpreter_and_onnxruntime_tokens(name: str) -> None:
    path, defines = MODELS[name]
    model = load(path, defines=defines)
    opts = OPTIONS[name]
    prompt = np.random.default_rng(5).integers(0, 100, (2, 5))
    greedy = Sampling(temperature=0)
    runs = {}
    for backend, contrib in (("numpy", False), ("onnx", name != "gpt2"), ("tvm", False)):
        gen = Generator(model, backend=backend, quantize=opts, contrib_ops=contrib)
        runs[backend] = gen.generate(prompt, max_new_tokens=8, sampling=greedy, keep_scores=True)
    want = runs["numpy"]
    for backend in ("onnx", "tvm"):
        assert runs[backend].tokens == want.tokens, backend
    for step, (g, w) in enumerate(zip(runs["tvm"].scores, want.scores, strict=True)):
        assert np.abs(g - w).max() <= 1e-4 * max(1.0, np.abs(w).max()), step
