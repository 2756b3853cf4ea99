"""The TVM decode step's VM overhead (backends/tvm/specialise.py, build.pipeline): a step of one token for one
row runs a function specialised to those sizes, which calls main's kernels and gives main's numbers with far
fewer VM builtin calls; reshapes are views or fused (fusion.py), not copying kernels; the key/value cache stays
in TVM's tensors.

The call counts are the VM's own (TVMModel.call_counts): the same on every machine, whatever its load."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM)

from pseudoformer.backends.tvm.specialise import SPECIALISED, function_for
from pseudoformer.generation import Generator, Sampling
from pseudoformer.model import load
from pseudoformer.passes.kv_buffers import LENGTH
from pseudoformer.passes.quantize import QuantizeOptions

TINY = ["L=2", "H=4", "H_kv=2", "d_e=64", "d_mlp=96", "N_V=100", "d_attn=16"]
INT4 = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=0)


@pytest.fixture(scope="module", params=["fp32", "int4"])
def generators(request: pytest.FixtureRequest) -> dict[str, Generator]:
    model = load("models/llama.alg", defines=TINY, seed=3)
    quantize = INT4 if request.param == "int4" else None
    return {b: Generator(model, backend=b, quantize=quantize) for b in ("numpy", "tvm")}


def _decode_feed(gen: Generator, past: int) -> dict[str, np.ndarray]:
    """One token after `past` positions, in cache buffers of past + 1 (the step the generator compiled)."""
    rng = np.random.default_rng(1)
    feed: dict[str, np.ndarray] = {"x": rng.integers(0, 100, (1, 1)), LENGTH: np.array(past, dtype=np.int64)}
    for n in gen.runtime.step_graph.inputs:  # type: ignore[attr-defined]
        name = n.attrs["name"]
        if name not in feed:
            shape = [1 if d == "batch" else past + 1 if isinstance(d, str) else d for d in n.type.shape]
            feed[name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def test_one_token_runs_the_specialised_function_with_mains_numbers_and_fewer_vm_calls(generators: dict) -> None:
    step = generators["tvm"].runtime.step_model
    feed = _decode_feed(generators["tvm"], past=6)
    assert function_for(step.meta, [np.shape(feed[n]) for n in step.input_names]) == SPECIALISED
    two_rows = {k: np.concatenate([v, v]) if v.ndim else v for k, v in feed.items()}
    assert function_for(step.meta, [np.shape(two_rows[n]) for n in step.input_names]) == "main"
    main, special = step.run(feed, function="main"), step.run(feed)
    for name, want in main.items():  # the same kernels on the same inputs
        np.testing.assert_allclose(special[name], want, rtol=1e-6, atol=1e-6, err_msg=name)
    counts = {f: step.call_counts(feed, function=f) for f in ("main", SPECIALISED)}
    # the VM's own shape function (shape_func*: the sizes it computes at run time) is not a kernel of ours
    kernels = {f: {k: v for k, v in c.items() if not k.startswith(("vm.", "shape_func"))} for f, c in counts.items()}
    assert kernels["main"] == kernels[SPECIALISED]
    assert not [k for k in kernels["main"] if k.startswith("reshape")], "a reshape ran as a copying kernel"
    # reshapes of symbolic shape fuse with their neighbours (fusion.py): the rotation's kernel takes its reshape
    assert [k for k in kernels["main"] if k.startswith("fused_") and "reshape" in k], kernels["main"]
    builtins = {f: sum(v for k, v in c.items() if k.startswith("vm.")) for f, c in counts.items()}
    shapes = {f: c.get("vm.builtin.make_shape", 0) for f, c in counts.items()}
    assert shapes[SPECIALISED] < 0.35 * shapes["main"], shapes  # those left: of the cache's length
    # no builtin call the specialisation adds: the shapes it no longer builds are gone from the total too
    assert builtins[SPECIALISED] <= builtins["main"] - (shapes["main"] - shapes[SPECIALISED]), builtins


def test_generation_on_tvm_gives_the_interpreters_tokens_and_scores(generators: dict) -> None:
    """One row (the specialised step), then two; the cache in buffers (test_tvm_cache_buffers.py)."""
    greedy = Sampling(temperature=0)
    prompts = np.random.default_rng(5).integers(0, 100, (2, 7))
    for prompt in (prompts[:1], prompts):
        want, got = (generators[b].generate(prompt, max_new_tokens=8, sampling=greedy, keep_scores=True)
                     for b in ("numpy", "tvm"))
        assert got.tokens == want.tokens
        for step, (g, w) in enumerate(zip(got.scores, want.scores, strict=True)):
            assert np.abs(g - w).max() <= 1e-4 * max(1.0, np.abs(w).max()), step


def test_the_cache_stays_in_tvm_tensors_between_steps(generators: dict) -> None:
    """In buffers that the step writes in place (test_tvm_cache_buffers.py): the loop's cache is their length."""
    import tvm

    gen = generators["tvm"]
    prompt = np.random.default_rng(6).integers(0, 100, (1, 4))
    gen.runtime.reserve(1, 8)
    address = {k: np.from_dlpack(v).ctypes.data for k, v in gen.runtime.buffers.values.items()}
    _, cache = gen.runtime.prefill({"x": prompt})
    assert cache == {LENGTH: 4}
    scores, cache = gen.runtime.step({"x": prompt[:, -1:]}, cache)
    assert isinstance(scores, np.ndarray) and scores.shape == (1, 1, 100) and cache == {LENGTH: 5}
    held = gen.runtime.buffers.values
    assert {k: np.from_dlpack(v).ctypes.data for k, v in held.items()} == address  # written in place
    assert all(isinstance(v, tvm.runtime.Tensor) and v.shape[2] >= 5 for v in held.values())


def test_specialising_wants_the_weights_as_arguments_and_a_dim_of_the_inputs(generators: dict) -> None:
    from pseudoformer.backends.tvm.build import compile_graph
    from pseudoformer.base.errors import BackendError

    gen = generators["tvm"]
    step, weights = gen.decoder.step, gen.weights
    with pytest.raises(BackendError, match="params='args'"):
        compile_graph(step, weights, tvm_params="bind", specialise={"seq": 1})
    with pytest.raises(BackendError, match="cannot specialise nowhere"):
        compile_graph(step, weights, specialise={"nowhere": 1})
