"""GGUF files (llama.cpp's format) as --weights: Llama, Mistral and Qwen2 written by gguf's writer as llama.cpp's
converter writes them (tests/weights/gguf_testlib.py), in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, against
transformers reading the same file (load_gguf_checkpoint: what from_pretrained(dir, gguf_file=…) loads, which
dequantizes with gguf's code and undoes llama.cpp's q/k permutation). Q4_0 and Q8_0 compile to MatMulNBits with
the file's own blocks, bit for bit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.generation import Generator, Sampling
from pseudoformer.ir.block_coded import codes_of, matmul_nbits
from pseudoformer.ir.ops.quantized import dequantize
from pseudoformer.model import load
from pseudoformer.quantization import options
from tests.models.hf_util import log_softmax
from tests.models.llama_cases import KINDS, MODELS, hf_model
from tests.weights.gguf_testlib import write_gguf

# head_dim = d_e / H, which transformers' GGUF reader assumes for Qwen2 (it reads no key_length there)
SIZES = dict(hidden_size=64, intermediate_size=96, head_dim=16)
X = np.array([[1, 5, 9, 20, 33, 7, 60, 2], [3, 3, 41, 17, 8, 0, 12, 59]])
# Both sides dequantize the same blocks in float32 and compute in float32: only summation order differs.
TOL = 1e-4


def make(tmp: Path, kind: str, fmt: Q, *, tied: bool = False, seed: int = 0) -> tuple[Path, torch.nn.Module]:
    """A GGUF of a random `kind` model, every matrix in `fmt`, and transformers' model read from that file."""
    path = tmp / f"{kind}-{fmt.name}.gguf"
    write_gguf(path, hf_model(kind, seed=seed, tie_word_embeddings=tied, **SIZES), kind, lambda name, shape: fmt)
    config = AutoConfig.from_pretrained(tmp, gguf_file=path.name)
    ref = AutoModelForCausalLM.from_config(config).eval()
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=ref)["tensors"]
    assert not ref.load_state_dict(tensors, strict=False).missing_keys or tied
    return path, ref


def hf_logits(ref: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return ref(torch.from_numpy(x), attention_mask=torch.ones(x.shape, dtype=torch.long)).logits.numpy()


def close(got: np.ndarray, want: np.ndarray, tol: float = TOL) -> None:
    assert got.shape == want.shape
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= tol


@pytest.mark.parametrize("fmt", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1])
@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_transformers_reading_the_same_file(tmp_path: Path, kind: str, fmt: Q) -> None:
    path, ref = make(tmp_path, kind, fmt)
    model = load(MODELS / f"{kind}.alg", weights=path)
    close(model.run(x=X)["Y"], hf_logits(ref, X))


@pytest.mark.parametrize("fmt", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K])
def test_k_formats_dequantize_as_transformers_does(tmp_path: Path, fmt: Q) -> None:
    """The K formats (blocks of 256) with random codes and scales (gguf_testlib.random_blocks): the same
    logits as transformers reading the file, so the same dequantized weights."""
    path = tmp_path / f"{fmt.name}.gguf"
    write_gguf(path, hf_model("llama", hidden_size=256, intermediate_size=512, head_dim=64), "llama",
               lambda name, shape: fmt)
    ref = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)).eval()
    ref.load_state_dict(load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=ref)["tensors"])
    want = hf_logits(ref, X)
    # random codes make logits of ±100: float32's rounding grows with them (1e-4 at |logit| ≤ 10)
    close(load(MODELS / "llama.alg", weights=path).run(x=X)["Y"], want, TOL * max(1.0, np.abs(want).max() / 10))


@pytest.mark.parametrize("fmt", [Q.Q4_0, Q.Q8_0])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_q4_0_and_q8_0_compile_to_matmul_nbits_with_the_files_blocks(tmp_path: Path, kind: str, fmt: Q) -> None:
    """Without --quantize the file's blocks become MatMulNBits (and the tied embedding GatherBlockQuantized);
    with --quantize int8 they keep their own format. At accuracy level 0 onnxruntime computes with exactly
    the dequantized weights transformers uses, so the logits agree to float32 rounding."""
    path, ref = make(tmp_path, kind, fmt, tied=True)
    model = load(MODELS / f"{kind}.alg", weights=path)
    want = hf_logits(ref, X)
    plain = lower(model)
    ops = Counter(n.op_type for n in plain.graph.node)
    assert ops["MatMulNBits"] == 2 * 4 + 1 and ops["GatherBlockQuantized"] == 1 and ops["MatMul"] == 0
    bits = {a.i for n in plain.graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
    assert bits == {4 if fmt == Q.Q4_0 else 8}
    # accuracy level 4 (the default, onnxruntime's fast kernels) quantizes the activations to int8
    close(run_onnx(plain, {"x": X})["Y"], want, 0.05)
    exact = lower(model, quantize=options("int8", accuracy_level=0))
    bits = {a.i for n in exact.graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
    assert bits == {4 if fmt == Q.Q4_0 else 8}
    close(run_onnx(exact, {"x": X})["Y"], want)


@pytest.mark.parametrize("fmt", [Q.Q4_0, Q.Q8_0])
def test_blocks_dequantize_bit_for_bit_as_gguf_does(fmt: Q) -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((48, 96)) * np.linspace(0.01, 3, 96)).astype(np.float32)
    blocks = gguf.quants.quantize(w, fmt)
    packed, scales = matmul_nbits(blocks, fmt.name)
    bits = 4 if fmt == Q.Q4_0 else 8
    ours = dequantize(packed, scales, None, k=96, bits=bits, block_size=32)
    np.testing.assert_array_equal(ours, gguf.quants.dequantize(blocks, fmt))


def test_q_and_k_rows_are_unpermuted_and_the_blocks_follow_them(tmp_path: Path) -> None:
    path, ref = make(tmp_path, "llama", Q.Q4_0)
    model = load(MODELS / "llama.alg", weights=path)
    q = ref.model.layers[1].self_attn.q_proj.weight.detach().numpy()
    k = ref.model.layers[0].self_attn.k_proj.weight.detach().numpy()
    d = SIZES["head_dim"]
    for name, want in (("layers.1.W.heads.2.W_q", q[2 * d:3 * d]), ("layers.0.W.g.1.W_k", k[d:2 * d])):
        got = model.weights[name]
        np.testing.assert_array_equal(got, want)
        codes = codes_of(got)
        assert codes is not None and not codes.transposed
        packed, scales = matmul_nbits(codes.read(), "Q4_0")
        np.testing.assert_array_equal(dequantize(packed, scales, None, k=64, bits=4, block_size=32), want)


def greedy_equals_hf(ref: torch.nn.Module, alg: Path, path: Path) -> None:
    """16 greedy tokens of `alg` with the file's weights equal HF's generate: on the interpreter (with the
    dequantized blocks) and on onnxruntime at accuracy level 0 (with the blocks)."""
    prompt = [5, 17, 3, 44, 9, 12, 30]
    x = torch.tensor([prompt])
    with torch.no_grad():
        want = ref.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=16,
                            min_new_tokens=16, eos_token_id=None, pad_token_id=0)[:, len(prompt):].tolist()
    model = load(alg, weights=path)
    greedy = Sampling(temperature=0)
    for gen in (Generator(model, backend="numpy"),
                Generator(model, backend="onnx", quantize=options("int8", accuracy_level=0))):
        assert gen.generate(prompt, max_new_tokens=16, sampling=greedy).tokens == want


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_equals_transformers(tmp_path: Path, kind: str) -> None:
    path, ref = make(tmp_path, kind, Q.Q8_0, seed=3)
    greedy_equals_hf(ref, MODELS / f"{kind}.alg", path)
