"""Each layer's parameters read by calling the layer, for FSDP2 (`fully_shard` per layer, training/distributed.py).

The lowered module reads every parameter with a `get_attr` from its one forward (lower.py), so a layer module
(`layers.3`, a plain container) is never called, and FSDP2, which gathers a module's shards in a hook before the
module's forward, would leave its parameters sharded. `call_layers` makes each named layer a `Layer` whose
forward returns its parameters, and rewrites the graph to call it once, just before its first parameter is
read, taking the parameters from the call's result. The numbers are the same; FSDP2 then gathers each layer's
shards when the graph reaches it (sharded with reshard_after_forward=False, as the tensors the call returns are
used after it).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from pseudoformer.backends.torch.guard import require_torch

torch = require_torch()
from torch import fx, nn  # noqa: E402


class Layer(nn.Module):
    """A container of parameters whose forward returns them, in the order of `names`."""

    names: tuple[str, ...] = ()

    def forward(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.get_parameter(n) for n in self.names)


def call_layers(module: fx.GraphModule, layers: Sequence[str]) -> None:
    """Rewrite `module` in place: the parameters under each of `layers` (qualified module names) read through
    one call of that layer."""
    graph = module.graph
    for prefix in layers:
        layer = module.get_submodule(prefix)
        names = tuple(n for n, _ in layer.named_parameters())
        if not names:
            continue
        layer.__class__ = type("Layer", (Layer,), {"names": names})
        reads = [n for n in graph.nodes if n.op == "get_attr" and n.target.startswith(prefix + ".")]
        if not reads:
            continue
        with graph.inserting_before(reads[0]):
            call = graph.call_module(prefix, ())
        for n in reads:
            with graph.inserting_before(n):
                got = graph.call_function(operator.getitem, (call, names.index(n.target[len(prefix) + 1:])))
            n.replace_all_uses_with(got)
            graph.erase_node(n)
    graph.lint()
    module.recompile()
