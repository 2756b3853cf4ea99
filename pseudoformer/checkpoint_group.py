"""Which parameter group a checkpoint of one model fills, when the entry wraps that model.

A loss algorithm over GPT-2 declares `Parameters: θ : GPT2` and calls `GPT2(x | θ)`; its parameters
are GPT-2's under the group's name (`theta.W_e`, `theta.layers.0.W.W_o`, ...). A checkpoint of the
model (a HF directory, or a .safetensors of ours written for the model itself) then fills that group.
"""

from __future__ import annotations

from collections.abc import Mapping

from pseudoformer.base.errors import UsageError
from pseudoformer.frontend.entry import find_entry
from pseudoformer.frontend.modules import Program
from pseudoformer.frontend.names import parse_name
from pseudoformer.weights.hf_checkpoint import table_for


def checkpoint_group(prog: Program, entry: str | None, hf_config: Mapping[str, object] | None) -> str | None:
    """The group's name in our parameter names (``theta`` for ``θ``), or None: the checkpoint's names are
    the entry's own.

    A HF checkpoint fills the one top-level group typed as a model of its family (``θ : GPT2`` for a
    gpt2 checkpoint, ``θ : Llama`` / ``Mistral`` / ``Qwen2`` for the Llama layout); other parameters of
    the entry are not the checkpoint's. A .safetensors of ours fills a group only when that group is all
    the entry's parameters, since its names do not say which model they are.
    """
    alg = find_entry(prog, entry)
    groups = [d for d in alg.params if d.kind == "alg_group"]
    if hf_config is not None:
        table = table_for(hf_config)
        groups = [d for d in groups if d.alg in table.algorithms]
        what = f"a {hf_config.get('model_type')!r} checkpoint"
    else:
        if len(groups) != len(alg.params):
            return None
        what = "a weights file"
    if len(groups) > 1:
        listed = ", ".join(f"{d.name} : {d.alg}" for d in groups)
        raise UsageError(f"{alg.name} has {len(groups)} parameter groups that {what} could fill ({listed}); "
                         "--weights fills one model's parameters and cannot tell which")
    return parse_name(groups[0].name).ascii() if groups else None
