"""Gradients and optimizer trajectories of GPT-2 and Llama against torch (HF models built from configs,
the same weights and batches): gradients within 1e-4 relative per parameter on the interpreter,
onnxruntime and TVM; 20 steps of SGD and of AdamW with the loss within 1e-4 relative at every step and
the final parameters within 1e-4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.autodiff import GRAD, gradients
from pseudoformer.passes.manager import named_pipeline, pipeline, run_passes
from pseudoformer.passes.training_step import Optimizer
from pseudoformer.training.compile import compile_step
from pseudoformer.training.runtimes import OrtSplitStep, make_runtime
from tests.gpu.cuda import CUDA_MARKS
from tests.training import torch_cases
from tests.training.torch_cases import Case, compare

CASES = {"gpt2": torch_cases.gpt2, "llama": torch_cases.llama}


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    return CASES[request.param](tmp_path_factory.mktemp(request.param))


def _grad_graph(case: Case):  # type: ignore[no-untyped-def]
    return gradients(run_passes(run_passes(case.model.graph, pipeline(2)), named_pipeline("training")))


def _run(backend: str, graph, weights, x):  # type: ignore[no-untyped-def]
    if backend == "interpreter":
        return run(graph, {"x": x}, weights)
    if backend == "onnxruntime":
        return OnnxRunner(to_onnx(graph, weights)).run({"x": x})
    from pseudoformer.backends.tvm.build import compile_graph

    return compile_graph(graph, weights).run({"x": x})


@pytest.mark.parametrize("backend", ["interpreter", "onnxruntime", "tvm"])
def test_gradients_match_torch(case: Case, backend: str) -> None:
    x = case.tokens(3, 11, seed=5)
    out = _run(backend, _grad_graph(case), case.model.weights, x)
    loss, want = case.torch_grads(x)
    assert abs(float(out["loss"]) - loss) <= 1e-5 * abs(loss)
    assert set(want) == set(case.model.weights)
    assert compare({k: out[GRAD + k] for k in want}, want) == {}


def _torch_optimizer(case: Case, opt: Optimizer, lr: float) -> torch.optim.Optimizer:
    params = list(case.hf.parameters())
    if opt.kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, betas=(opt.beta1, opt.beta2), eps=opt.eps,
                             weight_decay=opt.weight_decay)


# GPT-2's key biases have an exactly zero gradient (softmax ignores a shift of every score of a query),
# which both sides compute as rounding noise; AdamW's m/√v turns noise into full-size steps, so the two
# trajectories of those biases are noise too. They stay frozen in the AdamW comparison.
def _trainable(case: Case, opt: Optimizer) -> list[str]:
    return [k for k in case.model.weights if not (opt.kind == "adamw" and ".b_k" in k)]


@pytest.mark.parametrize("provider", ["cpu", pytest.param("cuda", marks=CUDA_MARKS)])
@pytest.mark.parametrize("opt", [Optimizer("sgd"), Optimizer("adamw", clip=1.0)], ids=["sgd", "adamw"])
def test_twenty_steps_follow_torch(tmp_path: Path, opt: Optimizer, provider: str) -> None:
    """provider "cuda" (`pytest -m cuda`): the step, its parameters and state on the GPU, TF32 off."""
    for make in CASES.values():
        case = make(tmp_path / make.__name__)
        lr = 0.01 if opt.kind == "sgd" else 1e-3
        train = _trainable(case, opt)
        step = compile_step(case.model.graph, case.model.weights, train=train, optimizer=opt)
        rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split, provider=provider)
        assert isinstance(rt, OrtSplitStep)  # the gradient graph, then θ and the state updated in place
        torch_opt = _torch_optimizer(case, opt, lr)
        for i in range(20):
            x = case.tokens(2, 9, seed=100 + i)
            ours = rt.step({"x": x}, lr)
            torch_opt.zero_grad()
            loss = case.torch_loss(x)
            loss.backward()
            if opt.kind == "adamw":
                _zero_key_bias_grads(case)
                torch.nn.utils.clip_grad_norm_(case.hf.parameters(), opt.clip)
            torch_opt.step()
            assert abs(ours - float(loss.detach())) <= 1e-4 * abs(float(loss.detach())), (make.__name__, i)
        got, want = rt.values(), case.torch_params()
        for k in train:
            assert np.abs(got[k] - want[k]).max() <= 1e-4 * max(1.0, float(np.abs(want[k]).max())), k


def _zero_key_bias_grads(case: Case) -> None:
    """Keep torch's GPT-2 key biases where they are, as ours stay frozen (c_attn's bias packs q, k, v)."""
    for name, p in case.hf.named_parameters():
        if name.endswith("c_attn.bias") and p.grad is not None:
            d = p.shape[0] // 3
            p.grad[d:2 * d] = 0
