"""Stack rules (hf_table.Stack): a checkpoint's tensors of one per expert become one tensor of one more axis before
the tensor rules apply, so a three-index parameter (Mixtral's W_1 ∈ ℝ^{E × d_mlp × d_e}) is mapped by one rule.
The stacked tensor is read when it is loaded, each member once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .hf_table import Context, Stack
from .tensor_ref import TensorRef

Named = dict[str, tuple[str, TensorRef]]  # short name -> (stored name, tensor)


def stacked(rules: list[Stack], short: Named, ctx: Context, pattern: Callable, problem: Callable) -> Named:
    """`short` with each complete group of members replaced by their stack; a group with members missing,
    out of range or of different shapes is a problem, and its members stay (so they are also reported)."""
    out = dict(short)
    for rule in rules:
        count = int(ctx.hyper[rule.count])
        groups: dict[tuple, dict[int, str]] = {}
        for name in short:
            m = pattern(rule.hf).fullmatch(name)
            if m is not None:
                others = tuple(sorted((k, v) for k, v in m.groupdict().items() if k != "e"))
                groups.setdefault(others, {})[int(m.group("e"))] = name
        for others, members in groups.items():
            into = rule.into.format(**dict(others))
            refs = [short[members[e]] for e in range(count) if e in members]
            shapes = {ref.shape for _, ref in refs}
            if sorted(members) != list(range(count)) or len(shapes) != 1:
                have = ", ".join(str(e) for e in sorted(members))
                problem(into, "invalid", f"needs {rule.count} = {count} tensors {rule.hf} (e = 0 … {count - 1}) of "
                        f"one shape; the checkpoint has e = {have} of shapes {sorted(shapes)}")
                continue
            (shape,) = shapes
            ref = TensorRef((count, *shape), np.result_type(*(r.dtype for _, r in refs)),
                            lambda refs=refs: np.stack([r.load() for _, r in refs]))
            for name in members.values():
                del out[name]
            out[into] = (f"{refs[0][0]} … ({count} stacked)", ref)
    return out


def stack_rules(tensors: tuple, ctx: Context) -> list[Stack]:
    return [r for r in tensors if isinstance(r, Stack) and r.when(ctx)]



