"""The Llama decoder as models/llama.alg's RoPE, GQAttention and SwiGLU lines elaborate (-O0, the paper's
layout), built by hand: the IR the Llama fusions (rotary, SwiGLU, grouped head batching) are written for,
so they can be tested on their own, with the parameter names llama.alg's declarations give."""

from __future__ import annotations

import math

from pseudoformer.ir import DType, Graph, Node, Op
from pseudoformer.ir.types import TensorType

F32, I64 = DType.float32, DType.int64
TINY = dict(L=2, H=4, H_kv=2, d_e=16, d_attn=4, d_mlp=12, N_V=23, eps=1e-5, b=10000.0)


def node(op: Op, *src: Node, **attrs: object) -> Node:
    return Node(op, src, attrs)


def const(value: float | int, dtype: DType = F32) -> Node:
    return node(Op.CONST, value=value, dtype=dtype)


def param(name: str, *shape: int) -> Node:
    return node(Op.PARAM, name=name, type=TensorType(F32, shape))


def rms_norm(x: Node, gamma: Node, eps: float) -> Node:
    """Σ_i e[i]² / d_e, then e / √(r + ε) ⊙ γ, as variants.alg's rms_norm elaborates."""
    d = x.shape[1]
    r = node(Op.REDUCE_SUM, node(Op.DIV, node(Op.MUL, x, x), const(float(d))), axes=[1], keepdims=False)
    root = node(Op.UNSQUEEZE, node(Op.SQRT, node(Op.ADD, r, const(eps))), axes=[1])
    return node(Op.MUL, node(Op.DIV, x, root), node(Op.UNSQUEEZE, gamma, axes=[1]))


def angles(length: Node, d: int, b: float) -> Node:
    """θ[i, t] = (t − 1) · b^{−2(i−1)/d} over i ∈ [d/2] and t ∈ [ℓ]: [d/2, ℓ]."""
    t = node(Op.UNSQUEEZE, node(Op.CAST, node(Op.ARANGE, length, dim="seq"), dtype=F32), axes=[0])
    i = node(Op.CAST, node(Op.ARANGE, const(d // 2, I64), dim=d // 2), dtype=F32)
    freq = node(Op.POW, const(b), node(Op.MUL, i, const(-2.0 / d)))
    return node(Op.MUL, t, node(Op.UNSQUEEZE, freq, axes=[1]))


def rope(x: Node, length: Node, b: float) -> Node:
    """[x₁ cos θ − x₂ sin θ ; x₂ cos θ + x₁ sin θ] of x [batch, d, ℓ], the halves sliced along d."""
    d = x.shape[1]
    theta = angles(length, d, b)
    c, s = node(Op.COS, theta), node(Op.SIN, theta)
    bounds = [const(0, I64), const(d // 2, I64), const(d, I64)]
    x1 = node(Op.SLICE, x, bounds[0], bounds[1], axis=1, dim=d // 2)
    x2 = node(Op.SLICE, x, bounds[1], bounds[2], axis=1, dim=d // 2)
    top = node(Op.SUB, node(Op.MUL, x1, c), node(Op.MUL, x2, s))
    bottom = node(Op.ADD, node(Op.MUL, x2, c), node(Op.MUL, x1, s))
    return node(Op.CONCAT, top, bottom, axis=1)


def causal_mask(n: Node, window: int = 0) -> Node:
    """keep[t, t'] = [[t ≤ t']] (and t' − t < w): keys × queries."""
    keep = node(Op.INDEX_MASK, n, n, rel="<=", dims=["seq", "seq"])
    if window:
        t = node(Op.UNSQUEEZE, node(Op.ARANGE, n, dim="seq"), axes=[1])
        t2 = node(Op.UNSQUEEZE, node(Op.ARANGE, n, dim="seq"), axes=[0])
        keep = node(Op.AND, keep, node(Op.LT, node(Op.SUB, t2, t), const(window, I64)))
    return keep


def gq_attention(x: Node, length: Node, prefix: str, hp: dict, bias: bool, window: int) -> Node:
    """Algorithm 5 with each K/V head shared by G = H / H_kv consecutive query heads."""
    heads, kv, d, d_e = hp["H"], hp["H_kv"], hp["d_attn"], x.shape[1]
    group = heads // kv

    def proj(kind: str, family: str, i: int) -> Node:
        y = node(Op.MATMUL, param(f"{prefix}.{family}.{i}.W_{kind}", d, d_e), x)
        if bias:
            y = node(Op.ADD, y, node(Op.UNSQUEEZE, param(f"{prefix}.{family}.{i}.b_{kind}", d), axes=[1]))
        return y

    ys = []
    for h in range(heads):
        q = rope(proj("q", "heads", h), length, hp["b"])
        k = rope(proj("k", "g", h // group), length, hp["b"])
        v = proj("v", "g", h // group)
        s = node(Op.MATMUL, node(Op.TRANSPOSE, k, perm=[0, 2, 1]), q)
        s = node(Op.WHERE, node(Op.NOT, causal_mask(length, window)), const(-math.inf), s)
        a = node(Op.SOFTMAX, node(Op.DIV, s, const(math.sqrt(d))), axis=1)
        ys.append(node(Op.MATMUL, v, a))
    return node(Op.MATMUL, param(f"{prefix}.W_o", d_e, heads * d), node(Op.CONCAT, *ys, axis=1))


def llama(hp: dict | None = None, *, bias: bool = False, window: int = 0) -> Graph:
    """Logits Y [batch, seq, N_V] of token ids x [batch, seq]."""
    hp = {**TINY, **(hp or {})}
    d_e, d_mlp, eps = hp["d_e"], hp["d_mlp"], hp["eps"]
    x = node(Op.INPUT, name="x", type=TensorType(I64, ("batch", "seq")))
    length = node(Op.DIM, x, axis=1)
    h = node(Op.TRANSPOSE, node(Op.GATHER, param("W_e", d_e, hp["N_V"]), x, axis=1), perm=[1, 0, 2])
    for layer in range(hp["L"]):
        pre = f"layers.{layer}"
        xt = rms_norm(h, param(f"{pre}.gamma_1", d_e), eps)
        h = node(Op.ADD, h, gq_attention(xt, length, f"{pre}.W", hp, bias, window))
        xt = rms_norm(h, param(f"{pre}.gamma_2", d_e), eps)
        gate = node(Op.SILU, node(Op.MATMUL, param(f"{pre}.W_1", d_mlp, d_e), xt))
        up = node(Op.MATMUL, param(f"{pre}.W_3", d_mlp, d_e), xt)
        h = node(Op.ADD, h, node(Op.MATMUL, param(f"{pre}.W_2", d_e, d_mlp), node(Op.MUL, gate, up)))
    h = rms_norm(h, param("gamma", d_e), eps)
    y = node(Op.MATMUL, param("W_u", hp["N_V"], d_e), h)
    return Graph([x], [("Y", node(Op.TRANSPOSE, y, perm=[0, 2, 1]))], {"entry": "Llama"})
