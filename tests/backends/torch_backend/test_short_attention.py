"""Attention under torch.compile (lowerings/attention.py `sdpa`): written out as softmax(s·QKᵀ)V where Dynamo
traces float32 on the CPU with at most SHORT keys and no mask, SDPA's one op otherwise; the same values and
gradients either way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pseudoformer  # noqa: E402
from pseudoformer.backends.torch.lowerings.attention import SHORT  # noqa: E402
from tests.backends.hf_cases import GPT2  # noqa: E402
from tests.models.hf_util import tokens  # noqa: E402

TINY = ["L=2", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", f"ell_max={SHORT + 16}", "N_V=11"]
SDPA = torch.nn.functional.scaled_dot_product_attention


def _traced(module: torch.nn.Module, x: torch.Tensor, dynamic: bool) -> tuple[Any, set[Any]]:
    """The module's logits and gradients under torch.compile (Dynamo's graph run as traced, backend "eager"),
    and the functions that graph calls."""
    calls: set[Any] = set()

    def backend(gm: torch.fx.GraphModule, _: Any) -> Any:
        calls.update(n.target for n in gm.graph.nodes if n.op == "call_function")
        return gm

    compiled = torch.compile(module, fullgraph=True, backend=backend, dynamic=dynamic)
    return _run(compiled, x), calls


def _run(module: Any, x: torch.Tensor) -> tuple[np.ndarray, list[np.ndarray]]:
    params = list(module.parameters())
    for p in params:
        p.grad = None
    y = module(x=x)["Y"]
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach().numpy(), [p.grad.numpy().copy() for p in params]


@pytest.mark.parametrize("seq", [9, SHORT])
def test_short_attention_is_written_out_under_torch_compile(seq: int) -> None:
    module = pseudoformer.compile(GPT2, defines=TINY, backend="torch")
    x = torch.from_numpy(tokens(2, seq, vocab=11, seed=seq))
    (y, grads), calls = _traced(module, x, dynamic=False)
    assert SDPA not in calls and torch.softmax in calls
    want_y, want_grads = _run(module, x)  # eager: SDPA
    np.testing.assert_allclose(y, want_y, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_longer_or_symbolic_lengths_keep_sdpa() -> None:
    module = pseudoformer.compile(GPT2, defines=TINY, backend="torch")
    x = torch.from_numpy(tokens(1, SHORT + 1, vocab=11, seed=1))
    (y, _), calls = _traced(module, x, dynamic=False)
    assert SDPA in calls and torch.softmax not in calls
    np.testing.assert_allclose(y, _run(module, x)[0], atol=1e-5, rtol=1e-5)



def test_symbolic_lengths_guard_on_short() -> None:
    module = pseudoformer.compile(GPT2, defines=TINY, backend="torch")
    calls: list[set[Any]] = []

    def backend(gm: torch.fx.GraphModule, _: Any) -> Any:
        calls.append({n.target for n in gm.graph.nodes if n.op == "call_function"})
        return gm

    compiled = torch.compile(module, fullgraph=True, backend=backend, dynamic=True)
    for seq in (9, 12, SHORT + 1):
        x = torch.from_numpy(tokens(2, seq, vocab=11, seed=seq))
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x=x)["Y"].numpy(), module(x=x)["Y"].detach().numpy(), atol=1e-5)
    # one graph for 9 and 12 keys (symbolic, guarded ≤ SHORT), written out; another beyond, with SDPA
    assert len(calls) == 2 and SDPA not in calls[0] and SDPA in calls[1]


def test_export_keeps_sdpa() -> None:
    module = pseudoformer.compile(GPT2, defines=TINY, backend="torch")
    seq = torch.export.Dim("seq", max=SHORT + 16)  # beyond SHORT: no guard on the length may be added
    exported = torch.export.export(module, (), {"x": torch.from_numpy(tokens(2, 9, vocab=11))},
                                   dynamic_shapes={"x": {1: seq}})
    targets = {str(n.target) for n in exported.graph.nodes}
    assert any("scaled_dot_product" in t for t in targets) and not any("softmax" in t for t in targets)
