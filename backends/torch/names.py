"""Our parameter names as nn.Module names, one to one.

A parameter `layers.0.W.heads.1.W_q` is the nn.Parameter `W_q` of the module `layers` → `0` → `W` → `heads`
→ `1`: nested modules following the dots, as HF models, PEFT and FSDP expect, so that `state_dict()` and
`named_parameters()` use our names as they are. One spelling changes: a part that is already an attribute of
nn.Module or torch.fx.GraphModule (`training`, `forward`, `graph`, `code`, …), or that ends in `_`, gets one
more `_` at its end (`training` → `training_`, `b_` → `b__`); `our_name` takes it off again. A name with an
empty part (`a..b`), or one that is both a parameter and a module (`W` and `W.x`), has no spelling: a
BackendError says so.
"""

from __future__ import annotations

from collections.abc import Iterable

from pseudoformer.backends.torch.guard import require_torch
from pseudoformer.base.errors import BackendError

torch = require_torch()
from torch import fx  # noqa: E402

_TAKEN = frozenset(dir(fx.GraphModule)) | frozenset(vars(torch.nn.Module())) | frozenset(vars(fx.GraphModule(
    torch.nn.Module(), fx.Graph())))


def _part(p: str) -> str:
    return f"{p}_" if p in _TAKEN or p.endswith("_") else p


def torch_name(ours: str) -> str:
    """The nn.Module name of our parameter `ours`."""
    parts = ours.split(".")
    if any(not p for p in parts):
        raise BackendError(f"parameter {ours!r} has an empty part: no nn.Module name spells it")
    return ".".join(_part(p) for p in parts)


def our_name(name: str) -> str:
    """Our name of the nn.Module parameter `name` (torch_name's inverse)."""
    return ".".join(p[:-1] if p.endswith("_") else p for p in name.split("."))


def check_names(ours: Iterable[str]) -> None:
    """Refuse names one of which is a prefix module of another (`W` and `W.x`)."""
    names = {torch_name(n) for n in ours}
    modules = {name.rsplit(".", k)[0] for name in names for k in range(1, name.count(".") + 1)}
    clash = sorted(names & modules)
    if clash:
        raise BackendError(f"parameter {our_name(clash[0])!r} is also the module of another parameter: "
                           "nn.Module names cannot spell both")
