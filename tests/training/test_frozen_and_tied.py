"""Training a subset of θ: LoRA's A and B only (the frozen weights get no gradient work), block-quantized
weights refused by name while a frozen quantized product still passes gradients, and a tied Llama
(W_u = W_eᵀ, SmolLM2's) trained as one tensor against torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.model import load
from pseudoformer.passes.autodiff import GRAD, AutodiffError, gradients
from pseudoformer.passes.manager import PassContext, named_pipeline, pipeline, run_passes
from pseudoformer.passes.quantize import QuantizeOptions
from pseudoformer.passes.training_step import Optimizer
from pseudoformer.training.compile import compile_step, tied_unembedding
from pseudoformer.training.runtimes import OrtSplitStep, make_runtime
from tests.training import torch_cases
from tests.training.torch_cases import compare

HERE = Path(__file__).parent


def _lora():  # type: ignore[no-untyped-def]
    return load(HERE / "lora_loss.alg", entry="LoRALoss", config="models/examples/lora.toml", seed=3)


def _is_update(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("A_q", "B_q", "A_v", "B_v")


def test_lora_trains_only_a_and_b_and_its_loss_falls() -> None:
    model = _lora()
    adapters = [k for k in model.weights if _is_update(k)]
    step = compile_step(model.graph, model.weights, train=adapters, optimizer=Optimizer("adamw"))
    assert sorted(step.trainable) == sorted(adapters)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split)
    text = np.tile(np.arange(8, dtype=np.int64), 2)[None].repeat(2, axis=0)  # a small repeated text
    losses = [rt.step({"x": text}, 5e-2) for _ in range(30)]
    assert losses[-1] < 0.95 * losses[0] and max(losses[-5:]) < min(losses[:5])  # rank 2 on q, v only: slowly
    got = rt.values()
    assert set(got) - {"t"} == {*adapters, *(f"{s}.{k}" for k in adapters for s in "mv")}
    assert all(not np.array_equal(got[k], model.weights[k]) for k in adapters)
    assert all(np.array_equal(step.frozen[k], model.weights[k]) for k in step.frozen)


def test_frozen_parameters_get_no_gradient_work() -> None:
    model = _lora()
    graph = run_passes(model.graph, pipeline(1))
    full = gradients(graph)
    lora = gradients(graph, [k for k in model.weights if _is_update(k)])
    ops = [n.op for n in lora.nodes()]
    assert Op.SCATTER_ADD not in ops  # the frozen embedding's scatter-add is never built
    assert Op.SCATTER_ADD in [n.op for n in full.nodes()]
    # no products for the frozen weights' gradients (the cotangents of the activations still flow back
    # through every layer, to the first layer's adapters)
    def products(g):  # type: ignore[no-untyped-def]
        return sum(n.op is Op.MATMUL for n in g.nodes())

    frozen_matrices = sum(len(v.shape) == 2 and not _is_update(k) for k, v in model.weights.items())
    assert products(full) - products(lora) >= frozen_matrices - 3  # W_e, W_p: a scatter and a slice, not products
    assert len(lora.nodes()) < 0.8 * len(full.nodes())
    # and the adapters' gradients are those of the full one
    x = np.array([[1, 5, 7, 2, 9, 3]], np.int64)
    a, b = run(lora, {"x": x}, model.weights), run(full, {"x": x}, model.weights)
    assert all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in a if k.startswith(GRAD))


def _quantized_gpt2():  # type: ignore[no-untyped-def]
    model = load(HERE / "gpt2_loss.alg", defines=["L=1", "H=2", "d_e=32", "d_mlp=64", "d_attn=16", "d_mid=16",
                                                  "N_V=20", "ell_max=16", "eps=1e-5"], seed=1)
    ctx = PassContext(weights=dict(model.weights), quantize=QuantizeOptions(bits=8, block_size=16, accuracy_level=0))
    graph = run_passes(run_passes(model.graph, pipeline(2)), named_pipeline("quantize"), ctx=ctx)
    assert ctx.weights is not None
    return graph, ctx.weights


def test_quantized_weights_are_refused_by_name_and_frozen_ones_pass_gradients() -> None:
    from tests.training.fd import numeric_grad, to_float64, wide

    qgraph, qweights = _quantized_gpt2()
    assert any(n.op is Op.MATMUL_NBITS for n in qgraph.nodes())
    with pytest.raises(AutodiffError, match=r"cannot train the block-quantized weight 'theta\..*\.scales'"):
        gradients(qgraph)
    # the first layer norm's γ lies before every quantized product: its gradient passes through all of them
    norms = [k for k in qweights if k.split(".")[-1].startswith(("gamma", "beta"))]
    x = {"x": np.array([[3, 1, 4, 1, 5, 9]])}
    got = run(to_float64(gradients(qgraph, norms)), wide(x), wide(qweights))
    for k in ("theta.layers.0.gamma_1", "theta.layers.0.gamma_2"):
        idx, fd = numeric_grad(qgraph, x, qweights, k, probes=8)
        np.testing.assert_allclose(got[GRAD + k].reshape(-1)[idx], fd, rtol=1e-6, atol=1e-8)


def test_a_tied_llama_trains_one_tensor_as_torch_does(tmp_path: Path) -> None:
    case = torch_cases.llama(tmp_path, tie_word_embeddings=True)
    ties = tied_unembedding(case.model.graph, True)
    assert ties == {"theta.W_u": "theta.W_e"}
    train = [k for k in case.model.weights if k not in ties]
    step = compile_step(case.model.graph, case.model.weights, train=train, optimizer=Optimizer("sgd"), ties=ties)
    assert "theta.W_u" not in step.trainable and "theta.W_u" not in step.frozen
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split)
    assert isinstance(rt, OrtSplitStep)  # the gradient graph, then θ and the state updated in place
    opt = torch.optim.SGD(case.hf.parameters(), lr=0.01)
    for i in range(5):
        x = case.tokens(2, 9, seed=i)
        ours = rt.step({"x": x}, 0.01)
        opt.zero_grad()
        loss = case.torch_loss(x)
        loss.backward()
        opt.step()
        assert abs(ours - float(loss.detach())) <= 1e-4 * abs(float(loss.detach()))
    want = case.torch_params()
    assert compare({k: v for k, v in rt.values().items() if k in train}, {k: want[k] for k in train}) == {}


@pytest.mark.parametrize("inline_bytes", [0, 1 << 16])
def test_frozen_weights_handed_to_onnxruntime_as_ortvalues_give_the_interpreters_steps(
        monkeypatch: pytest.MonkeyPatch, inline_bytes: int) -> None:
    """OrtStep gives onnxruntime each frozen weight over 64 KB as an OrtValue over the step's own array (the
    model declaring it as external data of an empty file); with the threshold at 0 every frozen weight of this
    small model goes that way. Three steps match the interpreter's, and the proto OrtStep keeps has no weights."""
    from pseudoformer.backends.onnx import sessions

    monkeypatch.setattr(sessions, "_INLINE_BYTES", inline_bytes)
    model = _lora()
    adapters = [k for k in model.weights if _is_update(k)]
    step = compile_step(model.graph, model.weights, train=adapters, optimizer=Optimizer("adamw"))
    ort_rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split)
    ref = make_runtime("interpreter", step.graph, step.frozen, step.state)
    assert len(ort_rt.proto.graph.initializer) == 0
    assert ort_rt.frozen == {} and (inline_bytes or set(ort_rt._frozen) == set(step.frozen))
    text = np.tile(np.arange(8, dtype=np.int64), 2)[None].repeat(2, axis=0)
    for _ in range(3):
        np.testing.assert_allclose(ort_rt.step({"x": text}, 5e-2), ref.step({"x": text}, 5e-2), rtol=1e-5)
    got, want = ort_rt.values(), ref.values()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)
