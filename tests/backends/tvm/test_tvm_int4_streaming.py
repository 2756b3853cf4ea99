"""TVM's int4 build from a bf16 checkpoint, a tensor at a time (issue 30's scale rung): the same weights and
the same outputs as the in-memory path, each matrix quantized once, and no two float32 matrices alive at once.

The in-memory path is the one before streaming: the checkpoint loaded whole as float32 arrays, the quantize
pass run over arrays (quantize_graph with lazy=False: every matrix at once), then TVM given the arrays."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm.relax", reason="the TVM backend needs apache-tvm: pip install pseudoformer[tvm]")

import pseudoformer  # noqa: E402  (after the skip)
import pseudoformer.passes.quantized_params as quantized_params  # noqa: E402
from pseudoformer.backends.options import CompileOptions  # noqa: E402
from pseudoformer.backends.pipeline import model_passes, run  # noqa: E402
from pseudoformer.backends.tvm.build import compile_graph  # noqa: E402
from pseudoformer.backends.tvm.weight_values import stream  # noqa: E402
from pseudoformer.generation import Generator, Sampling  # noqa: E402
from pseudoformer.ir.lazy_tensor import LazyTensor  # noqa: E402
from pseudoformer.passes.quantize import QuantizeOptions  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common.checkpoints import write_checkpoint  # noqa: E402

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "rms_norm_eps": 1e-5,
         "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "vocab_size": 96,
         "hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "max_position_embeddings": 64, "rope_theta": 10000.0, "tie_word_embeddings": True}
# blocks of 32 with zero points, the tied table quantized too: bench_int4.py's options
OPTS = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("llama_bf16")
    write_checkpoint(where, LLAMA)
    return where


def _in_memory(checkpoint: Path, int8: bool) -> object:
    """The path before streaming: float32 arrays, every matrix quantized up front, TVM given arrays."""
    model = pseudoformer.load("llama", weights=checkpoint)
    assert not any(isinstance(v, LazyTensor) for v in model.weights.values())
    options = CompileOptions(opt_level=2, quantize=OPTS, lazy_weights=False)
    graph, weights = run(model.graph, model_passes(options), weights=model.weights, options=options)
    assert not any(isinstance(v, LazyTensor) for v in weights.values())
    return compile_graph(graph, weights, int8_activations=int8)


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8-activations"])
def test_streamed_tvm_int4_build_equals_the_in_memory_one(checkpoint: Path, int8: bool) -> None:
    streamed = pseudoformer.compile("llama", weights=checkpoint, backend="tvm", quantize=OPTS,
                                    int8_activations=int8)
    assert any(isinstance(v, LazyTensor) for v in streamed.model.weights.values())  # read tensor by tensor
    eager = _in_memory(checkpoint, int8)
    s, e = streamed.compiled, eager  # type: ignore[attr-defined]
    assert s.meta["params"] == e.meta["params"]
    x = np.random.default_rng(0).integers(0, LLAMA["vocab_size"], (1, 9))
    out_s, out_e = s.run({"x": x}), e.run({"x": x})
    for name in out_e:
        np.testing.assert_array_equal(out_s[name], out_e[name])
    for name in e.meta["params"]:  # after a run: views of TVM's tensors, the same bytes
        np.testing.assert_array_equal(s.weights[name], e.weights[name])


def test_tvm_int4_generation_from_a_checkpoint_gives_the_interpreter_tokens(checkpoint: Path) -> None:
    lazy = pseudoformer.load("llama", weights=checkpoint, lazy_weights=True)
    gen = Generator(lazy, backend="tvm", quantize=OPTS)
    ref = Generator(pseudoformer.load("llama", weights=checkpoint), backend="numpy", quantize=OPTS)
    prompt = np.random.default_rng(3).integers(0, LLAMA["vocab_size"], (1, 6))
    greedy = Sampling(temperature=0)
    got = gen.generate(prompt, max_new_tokens=6, sampling=greedy, keep_scores=True)
    want = ref.generate(prompt, max_new_tokens=6, sampling=greedy, keep_scores=True)
    assert got.tokens == want.tokens
    for g, w in zip(got.scores, want.scores, strict=True):
        assert np.abs(g - w).max() <= 1e-4 * max(1.0, np.abs(w).max())


def test_streamed_build_quantizes_each_matrix_once_and_one_at_a_time(checkpoint: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The quantizer sees one float32 matrix per call, each matrix once (the tied table too, though TVM reads
    it twice: gathered, and multiplied in rows of 16), and no matrix of an earlier call is still alive."""
    calls: list[tuple[int, ...]] = []
    alive: list[weakref.ref] = []
    most_alive = 0
    real = quantized_params.quantize

    def counting(w: np.ndarray, **kw: object) -> object:
        nonlocal most_alive
        gc.collect()
        most_alive = max(most_alive, sum(r() is not None for r in alive))
        base = w.base if w.base is not None else w  # quantize is given a view (transposed) of the matrix
        alive.append(weakref.ref(base))
        calls.append(tuple(w.shape))
        return real(w, **kw)

    monkeypatch.setattr(quantized_params, "quantize", counting)
    model = pseudoformer.load("llama", weights=checkpoint, lazy_weights=True)
    gen = Generator(model, backend="tvm", quantize=OPTS, int8_activations=True)
    assert calls, "the generator's weights were made without the lazy quantizer"
    layers, d, m, v = LLAMA["num_hidden_layers"], LLAMA["hidden_size"], LLAMA["intermediate_size"], \
        LLAMA["vocab_size"]
    kv = d // LLAMA["num_attention_heads"] * LLAMA["num_key_value_heads"]
    assert calls.count((v, d)) == 1, calls  # the tied table: once, for both of its readers
    assert (len(calls) - 1) % layers == 0, calls
    # every weight matrix once: per layer q, k, v (apart or packed), o, gate, up, down
    assert sum(a * b for a, b in calls) == v * d + layers * (2 * d * d + 2 * kv * d + 3 * m * d), calls
    assert most_alive == 0, f"{most_alive} float32 matrices of earlier calls still alive"
    x = np.random.default_rng(0).integers(0, v, (1, 4))
    assert gen.generate(x, max_new_tokens=2, sampling=Sampling(temperature=0)).tokens


def test_stream_loads_each_source_once() -> None:
    from pseudoformer.backends.tvm.weight_values import derive

    loads: list[str] = []

    def lazy(name: str, value: float) -> LazyTensor:
        def compute() -> np.ndarray:
            loads.append(name)
            return np.full((2, 3), value, np.float32)
        return LazyTensor((2, 3), np.dtype(np.float32), compute)

    a, b = lazy("a", 1.0), lazy("b", 2.0)
    values = {"twice": derive(lambda u: 2 * u, (2, 3), np.float32, a), "sum": derive(np.add, (2, 3), np.float32, a, b),
              "b": b, "plain": np.ones(4, np.float32)}
    assert not loads  # nothing computed before it is streamed
    out = dict(stream(values, list(values)))
    assert sorted(loads) == ["a", "b"]
    np.testing.assert_array_equal(out["sum"], np.full((2, 3), 3.0, np.float32))
    np.testing.assert_array_equal(out["twice"], np.full((2, 3), 2.0, np.float32))
    assert derive(lambda u: u + 1, (4,), np.float32, np.ones(4, np.float32)).tolist() == [2.0] * 4  # arrays: now
