"""Our rewrites of inductor's post-grad graph (backends/torch/inductor_rules/), Before/Expected as inductor
sees them: each formula written in torch, compiled with the rule set, hits its rule the expected number of
times, and computes what eager torch does (values and gradients); a near miss is refused with its reason and
computes the same. Inductor's FX graph cache is off here, so that each compile runs the rules (a graph served
from the cache counts no hit)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch._inductor.config as inductor_config  # noqa: E402

from pseudoformer.backends.torch.inductor_rules import RULES, RuleSet  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_compiles():  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    with inductor_config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def run(fn, *args: torch.Tensor, rules: RuleSet | None = None):  # type: ignore[no-untyped-def]
    """fn's value and its float arguments' gradients of Σ value·w (w fixed), eager and compiled with `rules`."""
    rules = rules if rules is not None else RuleSet()
    out = []
    for f in (fn, torch.compile(fn, options={"post_grad_custom_post_pass": rules}, dynamic=False, fullgraph=True)):
        xs = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
        y = f(*xs)
        (y * torch.linspace(0.5, 1.5, y.numel()).reshape(y.shape)).sum().backward()
        out.append([y.detach(), *[x.grad for x in xs if x.requires_grad]])
    return out, rules


def close(got: list, want: list, tol: float = 1e-6) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=tol, atol=tol)


def test_a_gathers_backward_is_a_select_against_the_index() -> None:
    def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return -torch.log_softmax(logits, -1).gather(-1, target[..., None]).sum(-1)

    logits, target = torch.randn(3, 5, 40), torch.randint(0, 40, (3, 5))
    (eager, compiled), rules = run(loss, logits, target)
    close(compiled, eager)
    assert rules.hits == {"scatter_add_onto_zeros": 1}


def test_two_entries_a_row_are_refused_and_still_right() -> None:
    def picks(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, -1).gather(-1, target).sum(-1)

    logits, target = torch.randn(4, 30), torch.randint(0, 30, (4, 2))
    (eager, compiled), rules = run(picks, logits, target)
    close(compiled, eager)
    assert rules.hits["scatter_add_onto_zeros"] == 0
    assert rules.refusals == {("scatter_add_onto_zeros", "the index [4, 2] is not one entry per row of [4, 30] "
                                                         "along axis 1"): 1}


def test_a_tied_embeddings_lookup_gradient_goes_into_the_products() -> None:
    def logits(e: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:  # e: [d, V], the paper's W_e, tied
        h = torch.index_select(e, 1, ids).T  # [tokens, d]
        return torch.tanh(h) @ e

    e, ids = torch.randn(16, 70), torch.tensor([3, 9, 3, 0, 69, 9])  # repeated tokens: sums into one column
    (eager, compiled), rules = run(logits, e, ids)
    close(compiled, eager, 2e-6)
    assert rules.hits["sparse_into_product"] == 1


def test_gelus_tanh_becomes_the_sigmoid_forward_and_backward() -> None:
    x = torch.cat([torch.randn(2000) * 3, torch.tensor([-60.0, -12.0, -1e-6, 0.0, 1e-6, 12.0, 60.0])])
    (eager, compiled), rules = run(lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x)
    close(compiled, eager, 2e-6)
    assert rules.hits == {"tanh_as_sigmoid": 2}  # the forward graph's 1 + tanh, the backward's both forms
    # float64 truth: no worse than inductor's tanh (Sleef's) by more than rounding (1 − σ for σ(−2u) was 3.5× worse)
    ref = x.double().requires_grad_(True)
    y = torch.nn.functional.gelu(ref, approximate="tanh")
    (y * torch.linspace(0.5, 1.5, y.numel(), dtype=torch.float64)).sum().backward()
    (_, plain), _ = run(lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x, rules=RuleSet(()))
    for ours, theirs, truth in zip(compiled, plain, [y.detach(), ref.grad], strict=True):
        assert (ours.double() - truth).abs().max() <= 2 * (theirs.double() - truth).abs().max() + 2e-7


def test_a_tanh_read_for_itself_is_left() -> None:
    """The forward's tanh is the output's, and stays; the backward recomputes it only for 1 − tanh², rewritten."""
    (eager, compiled), rules = run(lambda t: torch.tanh(t) * 3 + 1, torch.randn(50) * 1e-3)
    close(compiled, eager)
    assert rules.hits["tanh_as_sigmoid"] == 1
    assert ("tanh_as_sigmoid", "the tanh is read other than as 1 + tanh or 1 − tanh²") in rules.refusals


def test_the_cache_key_changes_with_the_rules() -> None:
    assert RuleSet().uuid() == RuleSet(RULES).uuid() != RuleSet(()).uuid()
    assert [r.name for r in RULES] == ["scatter_add_onto_zeros", "sparse_into_product", "tanh_as_sigmoid"]
