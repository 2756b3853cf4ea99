"""Rewrites of inductor's post-grad graph, run as its `post_grad_custom_post_pass` under `--torch-compile`
(training/torch_compile.py): what autograd's backward of our lowered module writes, and inductor fuses
poorly on the CPU, written as the cheaper computation it is.

The IR's rules (passes/rules/) cannot reach these: the forms only appear in the joint graph AOTAutograd
derives, after Dynamo has traced our module (a gather's backward is a scatter-add into zeros, a tied
weight's two gradients are summed by autograd). Each rule lives in its own module, opens with its
formula, and says why it refused when the operator matched but a check did not (`RuleSet.refusals`).

`RuleSet` is the pass: every node tried against each rule in order, `hits` counting the rewrites by rule
name (as Inductor counts its pattern hits), `refusals` the reasons. Its `uuid` is the hash of these files
and the rules' names, so that inductor's FX graph cache, which keys on it, recompiles when a rule changes;
a graph served from that cache was rewritten when it was first compiled, and counts no hit.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pseudoformer.backends.torch.guard import require_torch

torch = require_torch()

from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files  # noqa: E402

from pseudoformer.backends.torch.inductor_rules import (  # noqa: E402
    scatter_add_onto_zeros,
    sparse_into_product,
    tanh_as_sigmoid,
)
from pseudoformer.backends.torch.inductor_rules.rule import FxRule  # noqa: E402

RULES: tuple[FxRule, ...] = (scatter_add_onto_zeros.RULE, sparse_into_product.RULE, tanh_as_sigmoid.RULE)


class RuleSet(CustomGraphPass):
    """The post-grad pass: `rules` tried at each node of the graph, first match wins."""

    def __init__(self, rules: tuple[FxRule, ...] = RULES) -> None:
        self.rules = rules
        self.hits: Counter[str] = Counter()
        self.refusals: Counter[tuple[str, str]] = Counter()  # (rule, reason) → how many nodes

    def __call__(self, graph: torch.fx.Graph) -> None:
        order = list(graph.nodes)
        alive = set(order)  # a rewrite may erase nodes the walk has yet to reach (the tanh rule, its readers)
        for node in order:
            if node not in alive or node.op != "call_function":
                continue
            for rule in self.rules:
                if node.target not in rule.targets:
                    continue
                match = rule.match(node)
                if match is None:
                    continue
                if isinstance(match, str):
                    self.refusals[(rule.name, match)] += 1
                    continue
                rule.rewrite(graph, node, match)
                self.hits[rule.name] += 1
                alive = set(graph.nodes)
                break
        graph.lint()

    def uuid(self) -> str:
        files = get_hash_for_files(tuple(sorted(str(p) for p in Path(__file__).parent.glob("*.py"))))
        return f"{files.hex() if isinstance(files, bytes) else files}:{','.join(r.name for r in self.rules)}"
