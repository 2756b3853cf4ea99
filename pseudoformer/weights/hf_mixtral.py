"""HuggingFace Mixtral checkpoints -> models/mixtral.alg: Mistral's table (hf_llama.py) with the MLP replaced by
the router and the experts. A checkpoint stores each expert's w1 (gate), w3 (up) and w2 (down) as its own matrix,
block_sparse_moe.experts.{e}.w1.weight; they are stacked (hf_table.Stack) into mixtral.alg's three-index W_1, W_3
and W_2 of each layer's experts M_l."""

from __future__ import annotations

from dataclasses import replace

from .hf_llama import LAYER, MISTRAL
from .hf_table import Int, Stack, Tensor

_MOE = f"{LAYER}block_sparse_moe."

MIXTRAL = replace(
    MISTRAL,
    model_types=("mixtral",),
    label="mixtral",
    kind="mixtral",
    algorithms=("Mixtral",),
    config=(*MISTRAL.config, Int("E", "num_local_experts", 8), Int("k", "num_experts_per_tok", 2)),
    tensors=(
        *(t for t in MISTRAL.tensors if not (isinstance(t, Tensor) and t.hf.startswith(LAYER + "mlp."))),
        *(Stack(f"{_MOE}experts.{{e}}.{w}.weight", f"{LAYER}experts.{w}.weight", "E") for w in ("w1", "w2", "w3")),
        Tensor(f"{_MOE}gate.weight", f"{LAYER}M.W_r", 2),
        Tensor(f"{LAYER}experts.w1.weight", f"{LAYER}M.W_1", 3),
        Tensor(f"{LAYER}experts.w3.weight", f"{LAYER}M.W_3", 3),
        Tensor(f"{LAYER}experts.w2.weight", f"{LAYER}M.W_2", 3),
    ),
)
