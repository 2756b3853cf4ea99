"""`generate --dtype float16` (generation/precision.py): the decoder in half precision, its cache in it.

On the CPU: tiny GPT-2 and Llama (grouped key/value heads) give the fp32 run's greedy tokens, with the first
step's scores within fp16's rounding of the fp32 ones, cached, uncached and with --contrib-ops; the cache's
buffers and values are fp16; with --contrib-ops the step decodes in place (GroupQueryAttention in fp16 over
fp16 buffers, the rotation inside) and every step's scores stay within FP16_SCORES of the fp32 interpreter's;
the real SmolLM2 (where its GGUF file is named) still answers "Paris", with --contrib-ops too. On CUDA
(`pytest -m cuda`): the fp16 tokens equal the CPU's fp32 tokens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pseudoformer.cli import main
from pseudoformer.generation.api import prepare
from pseudoformer.generation.sampling import Sampling
from tests.cli.test_cli import assert_user_error
from tests.gpu.cuda import cuda

MODELS = Path(__file__).resolve().parents[2] / "models"
GPT2 = ["L=2", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "ell_max=64", "N_V=50", "eps=1e-5"]
LLAMA = ["L=2", "H=4", "H_kv=2", "d_e=32", "d_mlp=48", "d_attn=8", "N_V=60", "eps=1e-5"]
# the contrib-graph record's Llama (tests/backends/contrib_graphs.py): heads of 16, so the rotation goes inside
LLAMA16 = ["L=2", "d_e=64", "H=4", "H_kv=2", "d_mlp=128", "N_V=100", "d_attn=16"]
PROMPT = [[4, 5, 6], [7, 8, 9]]
CASES = {"gpt2": ("gpt2.alg", GPT2), "llama": ("llama.alg", LLAMA)}
# fp16 against fp32 scores, relative to the largest score (at least 1), every step's: about fp16's rounding
# (measured on the CPU at most 4e-4 with --contrib-ops, 3e-4 without, on the three models here)
FP16_SCORES = 1e-3


def _generate(name: str, dtype: str, provider: str = "cpu", **options: object):  # type: ignore[no-untyped-def]
    alg, defines = CASES[name]
    prepared = prepare(MODELS / alg, defines=defines, seed=3, dtype=dtype, provider=provider, **options)
    out = prepared.generator.generate(PROMPT, max_new_tokens=10, keep_scores=True, sampling=Sampling(temperature=0))
    return prepared.generator, out


@pytest.mark.filterwarnings("ignore::pseudoformer.base.errors.ContribFallbackWarning")
@pytest.mark.parametrize("options", [{}, {"contrib_ops": True}, {"cache": False}], ids=["cache", "contrib", "uncached"])
@pytest.mark.parametrize("name", CASES)
def test_float16_gives_the_float32_tokens(name: str, options: dict) -> None:
    _, want = _generate(name, "float32", **options)
    generator, got = _generate(name, "float16", **options)
    assert got.tokens == want.tokens
    first, ref = got.scores[0], want.scores[0]
    assert first.dtype == np.float16
    scale = float(np.abs(ref).max())
    assert np.abs(first.astype(np.float32) - ref).max() <= 2e-3 * max(1.0, scale)
    if options.get("cache", True):
        assert all(s.key_type.dtype.value == "float16" for s in generator.decoder.slots)


@pytest.mark.parametrize("name", ["gpt2", "llama", "llama16"])
def test_float16_with_contrib_ops_decodes_in_place(name: str) -> None:
    """--dtype float16 --contrib-ops: every attention over the cache is GroupQueryAttention in fp16 (its rotation
    inside where heads are of 16), the cache fp16 buffers of every reserved position that the kernel appends to;
    greedy tokens are the fp32 interpreter's and each step's scores within FP16_SCORES of its."""
    from onnx import TensorProto

    from pseudoformer.generation.generator import Generator
    from pseudoformer.model import load

    alg, defines = CASES.get(name, ("llama.alg", LLAMA16))
    model = load(MODELS / alg, defines=defines, seed=3)
    half = Generator(model, dtype="float16", contrib_ops=True)
    runtime = half.runtime
    assert runtime.buffered  # type: ignore[attr-defined]
    graph = runtime.step_model.graph  # type: ignore[attr-defined]
    kernels = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    layers = model.config.hyperparameters["L"]
    assert len(kernels) == layers and not [n for n in graph.node if n.op_type == "Attention"]
    past = [i for i in graph.input if i.name.startswith("past") and i.name != "past_sequence_length"]
    assert len(past) == 2 * layers and {i.type.tensor_type.elem_type for i in past} == {TensorProto.FLOAT16}
    if name == "llama16":
        assert all(a.i == 1 for n in kernels for a in n.attribute if a.name == "do_rotary")
        assert not [n for n in graph.node if n.op_type == "RotaryEmbedding"]
    reference = Generator(model, backend="numpy")
    greedy = Sampling(temperature=0)
    got = half.generate(PROMPT, max_new_tokens=10, keep_scores=True, sampling=greedy)
    want = reference.generate(PROMPT, max_new_tokens=10, keep_scores=True, sampling=greedy)
    assert got.tokens == want.tokens
    for step, (a, b) in enumerate(zip(got.scores, want.scores, strict=True)):
        assert a.dtype == np.float16
        scale = max(1.0, float(np.abs(b).max()))
        assert np.abs(a.astype(np.float32) - b).max() <= FP16_SCORES * scale, step
    cache = runtime.values.cache  # type: ignore[attr-defined]
    assert cache and {v.data_type() for v in cache.values()} == {"tensor(float16)"}
    assert {v.shape()[2] for v in cache.values()} == {len(PROMPT[0]) + 10 - 1}  # every reserved position
    on_device = half.generate(PROMPT, max_new_tokens=10, sampling=greedy)  # greedy ids by ArgMax where the scores are
    assert on_device.tokens == want.tokens


def test_a_float16_step_s_rotary_angles_are_float32_past_2048() -> None:
    """The step counts positions from the past length, a size of the fp16 cache: they and their angles stay fp32
    (passes/float16.py's tables), so that position 3001 is not fp16's 3000 or 3002, an angle off by up to 1 rad."""
    from pseudoformer.ir import DType, Graph, Op
    from pseudoformer.ir.interpreter import run

    def angles(dtype: str) -> np.ndarray:
        """The angles of the step's rotation at position 3001 (a cache of 3001 positions), as the step computes them."""
        generator, _ = _generate("llama", dtype)
        step = generator.decoder.step
        cos = [n for n in step.nodes() if n.op is Op.COS]
        assert cos and all(n.dtype is DType.float32 for n in cos)
        feed = {"x": np.array([[5]], np.int64)}
        for s in generator.decoder.slots:
            for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type)):
                shape = [1 if d == "batch" else 3001 if isinstance(d, str) else d for d in t.shape]
                feed[name] = np.zeros(shape, t.dtype.value)
        graph = Graph(step.inputs, [("angles", cos[0].src[0])], {})
        return np.asarray(run(graph, feed, generator.weights)["angles"], np.float64)

    assert np.abs(angles("float16") - angles("float32")).max() <= 1e-3


def test_the_cache_is_float16_on_the_device() -> None:
    generator, _ = _generate("llama", "float16")
    runtime = generator.runtime
    _, cache = runtime.prefill({"x": np.array(PROMPT, np.int64)})
    values = [v for v in cache.values() if hasattr(v, "data_type")]
    assert values and all(v.data_type() == "tensor(float16)" for v in values)


def test_float16_is_the_onnx_backend_s(cli) -> None:  # type: ignore[no-untyped-def]
    base = ["generate", str(MODELS / "gpt2.alg"), *[a for d in GPT2 for a in ("-D", d)], "--prompt-ids", "1 2",
            "--max-new-tokens", "2"]
    assert_user_error(cli(*base, "--backend", "numpy", "--dtype", "float16"), "is for the onnx backend")
    assert_user_error(cli(*base, "--dtype", "float8"), "unknown dtype 'float8'")
    # bfloat16: no arithmetic kernels in onnxruntime's CPU provider, so refused in one line naming what works
    assert_user_error(cli(*base, "--dtype", "bfloat16"), "--dtype bfloat16 is not offered", "use float16")


SMOLLM2 = os.environ.get("PSEUDOFORMER_SMOLLM2_GGUF")
CHAT = "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"


def _smollm2_answer(capsys: pytest.CaptureFixture[str], *extra: str) -> list[str]:
    capsys.readouterr()
    assert main(["generate", str(MODELS / "llama.alg"), "--weights", str(SMOLLM2), "--prompt", CHAT,
                 "--max-new-tokens", "8", "--temperature", "0", "--tokenizer", str(SMOLLM2), *extra]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF: set PSEUDOFORMER_SMOLLM2_GGUF")
def test_smollm2_in_float16_answers_paris(capsys: pytest.CaptureFixture[str]) -> None:
    want = _smollm2_answer(capsys)
    assert "Paris" in want[1]
    assert _smollm2_answer(capsys, "--dtype", "float16") == want
    assert _smollm2_answer(capsys, "--dtype", "float16", "--contrib-ops") == want  # decoded in place, in fp16


@cuda
@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF: set PSEUDOFORMER_SMOLLM2_GGUF")
def test_smollm2_in_float16_on_cuda_answers_as_the_cpu_in_float32(capsys: pytest.CaptureFixture[str]) -> None:
    want = _smollm2_answer(capsys)
    assert "Paris" in want[1]
    assert _smollm2_answer(capsys, "--dtype", "float16", "--provider", "cuda") == want
    assert _smollm2_answer(capsys, "--dtype", "float16", "--provider", "cuda", "--contrib-ops") == want


@cuda
@pytest.mark.filterwarnings("ignore::pseudoformer.base.errors.ContribFallbackWarning")
@pytest.mark.parametrize("options", [{}, {"contrib_ops": True}], ids=["cache", "contrib"])
@pytest.mark.parametrize("name", CASES)
def test_float16_on_cuda_gives_the_cpu_s_float32_tokens(name: str, options: dict) -> None:
    _, want = _generate(name, "float32", **options)
    generator, got = _generate(name, "float16", provider="cuda", **options)
    assert generator.runtime.device == "cuda"
    assert got.tokens == want.tokens
    if options.get("contrib_ops"):  # GroupQueryAttention's fp16 kernel appends to fp16 buffers on the GPU
        cache = generator.runtime.values.cache
        assert generator.runtime.buffered and cache
        assert {(v.device_name(), v.data_type()) for v in cache.values()} == {("cuda", "tensor(float16)")}
