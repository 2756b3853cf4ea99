"""HuggingFace GPT-2 checkpoints -> gpt2.alg: the mapping table.

HF's GPT-2 uses Conv1D layers whose weights are stored [in, out] (y = x W), while the paper writes
y = W x with W in R^{out x in}; so every matrix is transposed. The fused c_attn projection holds
q|k|v side by side along its output axis (the last), each block split into heads of n_embd / n_head
consecutive columns. gpt2.alg unembeds with W_eᵀ: a separate lm_head can only be dropped if it
equals wte (transformers 5 leaves a tied one out of the save; older saves carry it).
"""

from __future__ import annotations

from .hf_table import (
    Allowed,
    Derived,
    Divisible,
    Flag,
    Float,
    Heads,
    Ignore,
    Int,
    Table,
    Tensor,
    Tie,
    Transpose,
    head_size,
)

T = (Transpose(),)
# GPT-2's tanh approximation of GELU goes by two names in HF; both are the function gpt2.alg uses.
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")

TABLE = Table(
    model_types=("gpt2",),
    label="GPT-2",
    kind="gpt2",
    prefix="transformer.",
    algorithms=("GPT2",),
    config=(
        Int("d_e", "n_embd", 768),
        Int("H", "n_head", 12),
        Int("L", "n_layer", 12),
        Int("ell_max", "n_positions", 1024),
        Int("N_V", "vocab_size", 50257),
        Int("d_mlp", "n_inner", lambda h: 4 * int(h["d_e"])),
        Float("eps", "layer_norm_epsilon", 1e-5),
        Derived("d_attn", head_size),
        Derived("d_mid", head_size),
    ),
    refusals=(
        Allowed("activation_function", "gelu_new", TANH_GELU, "gpt2.alg uses the tanh GELU ('gelu_new')"),
        Flag("scale_attn_by_inverse_layer_idx", False,
             "attention scores are scaled by 1/sqrt(d_attn) only"),
        Flag("scale_attn_weights", True, "the paper's attention always scales by 1/sqrt(d_attn)"),
        Flag("add_cross_attention", False, "gpt2.alg is decoder-only, without cross-attention"),
        Divisible("d_e", "H"),
    ),
    tensors=(
        Tie(sources=("wte.weight",), copies=("lm_head.weight",), ours="W_e", transforms=T,
            message="shape {shape}, not equal to wte.weight, but the model unembeds with W_e "
                    "(tie_word_embeddings = false is not supported)"),
        Tensor("wpe.weight", "W_p", 2, T),
        Tensor("ln_f.weight", "gamma", 1),
        Tensor("ln_f.bias", "beta", 1),
        Tensor("h.{l}.ln_{i:1|2}.weight", "layers.{l}.gamma_{i}", 1),
        Tensor("h.{l}.ln_{i:1|2}.bias", "layers.{l}.beta_{i}", 1),
        Tensor("h.{l}.attn.c_attn.weight", "layers.{l}.W.heads.{h}.W_{part}", 2, T, Heads("H", -1, ("q", "k", "v"))),
        Tensor("h.{l}.attn.c_attn.bias", "layers.{l}.W.heads.{h}.b_{part}", 1, (), Heads("H", -1, ("q", "k", "v"))),
        Tensor("h.{l}.attn.c_proj.weight", "layers.{l}.W.W_o", 2, T),
        Tensor("h.{l}.attn.c_proj.bias", "layers.{l}.W.b_o", 1),
        Tensor("h.{l}.mlp.c_fc.weight", "layers.{l}.W_mlp1", 2, T),
        Tensor("h.{l}.mlp.c_fc.bias", "layers.{l}.b_mlp1", 1),
        Tensor("h.{l}.mlp.c_proj.weight", "layers.{l}.W_mlp2", 2, T),
        Tensor("h.{l}.mlp.c_proj.bias", "layers.{l}.b_mlp2", 1),
        # Causal-mask buffers that older transformers versions saved with the weights.
        Ignore("h.{l}.attn.{b:bias|masked_bias}"),
    ),
)
