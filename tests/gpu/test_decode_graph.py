"""generate --cuda-graph (generation/step_values.py): the decode step on a session of its own, its sizes fixed, that
onnxruntime's CUDA provider captures as one CUDA graph and replays per token.

On the CPU the same two sessions run without a graph: the tokens and every step's scores are those of the step
without it, the prompt runs on the first session and every later token on the decode session, which is made once
per batch and capacity. What the CUDA provider needs to capture a step is checked on the graph onnxruntime makes of
it (its basic optimizations, the sizes fixed): no Shape or Size left, and every input the CUDA provider reads on
the host (HOST_INPUTS: a Reshape's shape, a Pad's pads, GroupQueryAttention's total length, …) a constant, so that
no value crosses between host and device within the step; the step written without --cuda-graph fails that check,
and a compiled model's forward at fixed sizes (benchmarks/gpu.py's forward rows "CUDA graph") passes it.
On CUDA (`pytest -m cuda`): the captured step gives the tokens of the step without it, on the real SmolLM2 too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest

from pseudoformer.base.errors import BackendError
from pseudoformer.generation.generator import Generator
from pseudoformer.generation.runtimes import OnnxRuntime
from pseudoformer.generation.sampling import Sampling
from pseudoformer.model import load
from tests.cli.test_cli import assert_user_error
from tests.gpu.cuda import cuda
from tests.gpu.test_generate_float16 import (
    CHAT,
    GPT2,
    LLAMA,
    LLAMA16,
    MODELS,
    PROMPT,
    SMOLLM2,
    _smollm2_answer,
)

# The inputs onnxruntime's CUDA kernels take in host memory (their kernel definitions' OrtMemTypeCPUInput), by op:
# a value computed on the device there is copied to the host within the step, which a CUDA graph cannot capture.
HOST_INPUTS = {"Reshape": (1,), "Expand": (1,), "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4), "Range": (0, 1, 2),
               "Tile": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "ReduceSum": (1,), "ReduceMean": (1,),
               "ReduceMax": (1,), "ConstantOfShape": (0,), "Split": (1,), "TopK": (1,), "Trilu": (1,),
               "CumSum": (1,), "OneHot": (1,), "Resize": (1, 2, 3), "GroupQueryAttention": (6,)}
CASES = {"gpt2": ("gpt2.alg", GPT2), "llama": ("llama.alg", LLAMA), "llama16": ("llama.alg", LLAMA16)}
GREEDY = Sampling(temperature=0)


# and the last int4 (MatMulNBits), as gpu.py's decode rows are
NAMES = [*CASES, "llama16 int4"]


def _pair(name: str, **options: Any) -> tuple[Generator, OnnxRuntime, OnnxRuntime]:
    """A float16 --contrib-ops generator, its runtime, and a runtime of the same decoder with --cuda-graph (built on
    the CPU, where the options' check would refuse it: the same sessions, without the capture)."""
    base, _, quantize = name.partition(" ")
    alg, defines = CASES[base]
    generator = Generator(load(MODELS / alg, defines=defines, seed=3), dtype="float16", contrib_ops=True,
                          quantize=quantize or None, **options)
    plain = generator.runtime
    assert isinstance(plain, OnnxRuntime) and plain.buffered
    captured = OnnxRuntime(generator.decoder, generator.output, generator.weights,
                           replace(generator.options, cuda_graph=True))
    return generator, plain, captured


class _Counted:
    """A session whose IO-binding runs are counted (onnxruntime's InferenceSession cannot be given attributes)."""

    def __init__(self, session: Any) -> None:
        self.session, self.runs = session, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def run_with_iobinding(self, binding: Any, *args: Any) -> None:
        self.runs += 1
        self.session.run_with_iobinding(binding, *args)


@pytest.mark.parametrize("name", NAMES)
def test_the_decode_session_gives_the_step_s_tokens_and_scores(name: str) -> None:
    generator, plain, captured = _pair(name)
    want = generator.generate(PROMPT, max_new_tokens=9, keep_scores=True, sampling=GREEDY)
    generator.runtime = captured
    captured.reserve(len(PROMPT), len(PROMPT[0]) + 8)  # as generate does: the decode session made with the buffers
    values = captured.values
    decoder = values.decoder
    assert decoder is not None and decoder.session is not captured.runner.session
    assert values._sizes() == {"batch": 2, "seq": 1, "past": len(PROMPT[0]) + 8}
    decoder.session = counted = _Counted(decoder.session)
    captured.runner.session = first = _Counted(captured.runner.session)
    values.session = first  # the prompt's binding is made on the first session as it now is
    got = generator.generate(PROMPT, max_new_tokens=9, keep_scores=True, sampling=GREEDY)
    assert got.tokens == want.tokens
    for step, (a, b) in enumerate(zip(got.scores, want.scores, strict=True)):
        scale = max(1.0, float(np.abs(b.astype(np.float32)).max()))
        assert np.abs(a.astype(np.float32) - b.astype(np.float32)).max() <= 2e-3 * scale, step
    assert (first.runs, counted.runs) == (1, 8)  # the prompt on the first session, every later token replayed
    assert generator.generate(PROMPT, max_new_tokens=9, sampling=GREEDY).tokens == want.tokens  # ArgMax on the device


def test_the_decode_session_is_made_per_batch_and_capacity() -> None:
    generator, _, captured = _pair("llama16")
    one_token = generator.generate([[4], [9]], max_new_tokens=6, sampling=GREEDY).tokens
    generator.runtime = captured
    # a prompt of one token: the first session, with the kernel's total the capacity, reads each row's length
    assert generator.generate([[4], [9]], max_new_tokens=6, sampling=GREEDY).tokens == one_token
    want = generator.generate(PROMPT, max_new_tokens=6, sampling=GREEDY).tokens
    first = captured.values.decoder
    assert generator.generate(PROMPT, max_new_tokens=6, sampling=GREEDY).tokens == want
    assert captured.values.decoder is first  # the same buffers and binding: a captured graph stays valid
    one = generator.generate(PROMPT[:1], max_new_tokens=6, sampling=GREEDY).tokens
    assert captured.values.decoder is not first and captured.values._sizes()["batch"] == 1
    assert one == want[:1]


def _host_reads(path: Path, sizes: dict[str, int], tmp_path: Path) -> list[str]:
    """What, in the graph onnxruntime makes of the step at `path` with `sizes` fixed (its basic optimizations, the
    level every provider runs), the CUDA provider would read on the host from a value that is not a constant."""
    options = onnxruntime.SessionOptions()
    for dim, size in sizes.items():
        options.add_free_dimension_override_by_name(dim, size)
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(tmp_path / "optimized.onnx"), load_external_data=False).graph
    constants = {i.name for i in graph.initializer}
    found = [f"{n.op_type} {n.name or n.output[0]}" for n in graph.node if n.op_type in ("Shape", "Size")]
    for n in graph.node:
        for i in HOST_INPUTS.get(n.op_type, ()):
            if i < len(n.input) and n.input[i] and n.input[i] not in constants:
                found.append(f"{n.op_type} {n.name or n.output[0]} input {i} ({n.input[i]})")
    return found


@pytest.mark.parametrize("name", NAMES)
def test_the_step_for_cuda_graphs_reads_only_constants_on_the_host(name: str, tmp_path: Path) -> None:
    generator, plain, captured = _pair(name)
    captured.reserve(2, 16)
    sizes = captured.values._sizes()
    assert _host_reads(captured.step_path, sizes, tmp_path) == []
    # the step written for a changing length reads the past length on the host (the kernel's total, the padding)
    assert _host_reads(plain.step_path, sizes, tmp_path)


@pytest.mark.filterwarnings("ignore::pseudoformer.base.errors.ContribFallbackWarning")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_compiled_forward_of_fixed_sizes_reads_only_constants_on_the_host(name: str, dtype: str,
                                                                          tmp_path: Path) -> None:
    """A compiled model (fp16 with --contrib-ops, as gpu.py's forward) in a session of fixed sizes: what the
    CUDA provider captures for gpu.py's forward rows "CUDA graph" (docs/gpu.md)."""
    from pseudoformer import compile as compile_model

    alg, defines = CASES[name]
    model = compile_model(MODELS / alg, defines=defines, dtype=dtype, contrib_ops=dtype == "float16").onnx
    onnx.save(model, tmp_path / "model.onnx")
    assert _host_reads(tmp_path / "model.onnx", {"batch": 2, "seq": 16}, tmp_path) == []


def test_cuda_graphs_need_the_cache_in_buffers() -> None:
    alg, defines = CASES["gpt2"]
    generator = Generator(load(MODELS / alg, defines=defines, seed=3), dtype="float16")  # Attention, a cache of values
    with pytest.raises(BackendError, match="cache in buffers"):
        OnnxRuntime(generator.decoder, generator.output, generator.weights, replace(generator.options, cuda_graph=True))


def test_a_step_of_several_tokens_after_the_prompt_is_refused() -> None:
    _, _, captured = _pair("llama16")
    captured.reserve(1, 12)
    _, cache = captured.prefill({"x": np.array([[4, 5, 6]], np.int64)})
    with pytest.raises(BackendError, match="one token per row"):
        captured.step({"x": np.array([[7, 8]], np.int64)}, cache)


def test_cuda_graph_is_generate_s_with_what_it_needs(cli) -> None:  # type: ignore[no-untyped-def]
    alg, defines = CASES["llama"]
    base = ["generate", str(MODELS / alg), *[a for d in defines for a in ("-D", d)], "--prompt-ids", "1 2",
            "--max-new-tokens", "2", "--cuda-graph"]
    assert_user_error(cli(*base), "it needs --provider cuda --dtype float16 --contrib-ops")
    assert_user_error(cli(*base, "--dtype", "float16", "--contrib-ops"), "it needs --provider cuda")
    assert_user_error(cli(*base, "--no-cache", "--backend", "numpy"), "--backend onnx")
    from pseudoformer import compile as compile_model

    with pytest.raises(Exception, match="--cuda-graph is generate's"):
        compile_model(MODELS / alg, defines=defines, cuda_graph=True)


@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF: set PSEUDOFORMER_SMOLLM2_GGUF")
def test_smollm2_s_decode_session_answers_paris() -> None:
    """The real SmolLM2 (9 heads of 64 over 3, its rotation inside the kernel) on the CPU: the decode session gives
    the step's answer."""
    from pseudoformer.tokenizer import open_tokenizer

    generator = Generator(load(MODELS / "llama.alg", weights=SMOLLM2), dtype="float16", contrib_ops=True)
    tokenizer = open_tokenizer(SMOLLM2)
    prompt = [list(tokenizer.encode(CHAT))]
    want = generator.generate(prompt, max_new_tokens=8, sampling=GREEDY).tokens
    assert "Paris" in tokenizer.decode(want[0])
    generator.runtime = OnnxRuntime(generator.decoder, generator.output, generator.weights,
                                    replace(generator.options, cuda_graph=True))
    assert generator.generate(prompt, max_new_tokens=8, sampling=GREEDY).tokens == want


@cuda
@pytest.mark.parametrize("name", CASES)
def test_the_captured_step_on_cuda_gives_the_step_s_tokens(name: str) -> None:
    alg, defines = CASES[name]
    model = load(MODELS / alg, defines=defines, seed=3)
    options = {"dtype": "float16", "contrib_ops": True, "provider": "cuda"}
    want = Generator(model, **options).generate(PROMPT, max_new_tokens=12, sampling=GREEDY).tokens
    graphed = Generator(load(MODELS / alg, defines=defines, seed=3), cuda_graph=True, **options)
    for _ in range(2):  # the second generation replays the graph captured in the first (the same buffers)
        assert graphed.generate(PROMPT, max_new_tokens=12, sampling=GREEDY).tokens == want


@cuda
@pytest.mark.filterwarnings("ignore::pseudoformer.base.errors.ContribFallbackWarning")
def test_a_compiled_forward_captured_on_cuda_replays_with_new_inputs() -> None:
    """gpu.py's forward "CUDA graph": captured at its first runs, the graph reads whatever the bound input holds."""
    from pseudoformer import compile as compile_model
    from pseudoformer.backends.onnx import OnnxRunner

    alg, defines = CASES["gpt2"]
    model = compile_model(MODELS / alg, defines=defines, dtype="float16", contrib_ops=True).onnx
    plain = OnnxRunner(model, provider="cuda")
    runner = OnnxRunner(model, provider="cuda", sizes={"batch": 2, "seq": 16}, cuda_graph=True)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, (2, 16))
    value = onnxruntime.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    want = plain.run({"x": x})[plain.output_names[0]]
    logits = onnxruntime.OrtValue.ortvalue_from_shape_and_type(list(want.shape), np.float16, "cuda", 0)
    binding = runner.session.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_ortvalue_output(runner.output_names[0], logits)
    for _ in range(3):  # a run, the capture, a replay
        runner.session.run_with_iobinding(binding)
        assert np.abs(logits.numpy().astype(np.float32) - want).max() <= 5e-3 * max(1.0, float(np.abs(want).max()))
    x = rng.integers(0, 50, (2, 16))
    value.update_inplace(x)
    runner.session.run_with_iobinding(binding)
    want = plain.run({"x": x})[plain.output_names[0]]
    assert np.abs(logits.numpy().astype(np.float32) - want).max() <= 5e-3 * max(1.0, float(np.abs(want).max()))


@cuda
@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF: set PSEUDOFORMER_SMOLLM2_GGUF")
def test_smollm2_with_cuda_graphs_answers_as_the_cpu_in_float32(capsys: pytest.CaptureFixture[str]) -> None:
    want = _smollm2_answer(capsys)
    assert "Paris" in want[1]
    assert _smollm2_answer(capsys, "--dtype", "float16", "--provider", "cuda", "--contrib-ops", "--cuda-graph") == want
