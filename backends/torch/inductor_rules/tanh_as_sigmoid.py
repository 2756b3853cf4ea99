"""tanh read only through 1 + tanh and 1 − tanh² → the logistic sigmoid, which is what those two are.

    1 + tanh(u)           ⟶   2 · σ(2u)
    1 − tanh(u) · tanh(u) ⟶   4 · σ(2u) · σ(−2u)

GELU's tanh approximation, 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³))), is what reads a tanh so: its
forward the first form, its backward (inductor's decomposition of gelu_backward, the tanh recomputed) both.
Inductor's CPU kernels compute tanh with Sleef's tanhf (1-ulp) and σ with one exp and one division: the
GELU's forward and backward of a GPT-2 small layer ([8, 128, 3072]) take 11.3 ms with tanh, 6.7 ms so
(inductor under torch.compile, "Intel(R) Xeon(R) Processor", 2 threads, 2026-11-28), about 55 ms of a step's
twelve layers.

Exact identities; in float32 the forms on the right are as accurate or more: 1 + tanh(u) loses all relative
precision as u → −∞ (tanh rounds to −1; 2σ(2u) keeps its magnitude), 1 − tanh² loses it as |u| grows, where
4σ(2u)σ(−2u) keeps it (each factor is computed, not 1 − σ, which would cancel as σ → 1). On [8, 128, 3072]
normal inputs against float64, the GELU's gradient is within 7.6e-7 this way and 7.9e-7 with tanh (the forward
5.1e-7 and 4.2e-7); tests/backends/torch_backend/test_inductor_rules.py holds it to 2× tanh's error (1 − σ
was 3.5×). Where the tanh is read otherwise its own relative precision near 0 may matter (σ's form 2σ(2u) − 1
cancels there), so it is left.

Check (why it refuses): every reader of the tanh must be 1 + tanh, or tanh · tanh read only by 1 − (·).
"""

from __future__ import annotations

from typing import Any

import torch

from pseudoformer.backends.torch.inductor_rules.rule import FxRule, aten, emit, erase


def _is(n: torch.fx.Node, target: Any, *args: Any) -> bool:
    return n.op == "call_function" and n.target is target and list(n.args) == list(args) and not n.kwargs


def match(n: torch.fx.Node) -> Any:
    ones, squares = [], []
    for user in n.users:
        if _is(user, aten.add.Tensor, n, 1) or _is(user, aten.add.Tensor, 1, n):
            ones.append(user)
        elif _is(user, aten.mul.Tensor, n, n) and all(_is(s, aten.sub.Tensor, 1, user) for s in user.users):
            squares.extend(user.users)
        else:
            return "the tanh is read other than as 1 + tanh or 1 − tanh²"
    return ones, squares


def rewrite(graph: torch.fx.Graph, n: torch.fx.Node, m: tuple[list, list]) -> None:
    ones, squares = m
    (u,) = n.args
    first = min([*ones, *squares], key=_order(graph))
    s = emit(graph, first, aten.sigmoid.default, emit(graph, first, aten.mul.Tensor, u, 2.0))
    for one in ones:
        one.replace_all_uses_with(emit(graph, one, aten.mul.Tensor, s, 2.0))
    for minus in squares:  # σ(−2u) for 1 − σ(2u): the subtraction would cancel as σ(2u) → 1
        rest = emit(graph, minus, aten.sigmoid.default, emit(graph, minus, aten.mul.Tensor, u, -2.0))
        minus.replace_all_uses_with(emit(graph, minus, aten.mul.Tensor, emit(graph, minus, aten.mul.Tensor, s, rest), 4.0))
    squared = {x for sq in squares for x in sq.args if isinstance(x, torch.fx.Node)}
    erase(graph, *ones, *squares, *squared, n)


def _order(graph: torch.fx.Graph) -> Any:
    position = {node: i for i, node in enumerate(graph.nodes)}
    return lambda node: position[node]


RULE = FxRule("tanh_as_sigmoid", (aten.tanh.default,), match, rewrite)
