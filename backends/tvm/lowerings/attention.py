"""ATTENTION → our CPU kernel (attention_kernel.py), called with call_tir; other attention takes its formula.

Taken: the batched form of rank 4 (q [b, H, s_q, d], k and v [b, H_kv, s_k, ·], H_kv dividing H), no mask
operand (causal, window and soft-cap are attributes the kernel applies). The kernel computes in float32; a
float16 model's operands are cast to it and the result back (the float16 pass runs after decompose, so the
node it sees was float32 when it was accepted). A mask operand (padding, ALiBi's bias), the packed form and
a GPU target go by parts (passes/decompose.py): the matmul and softmax schedules cover them. The kernel is
marked opaque, so fusion leaves it whole.

BUFFERED_ATTENTION → the same rows over cache buffers (attention_kernel.buffered_attention_func), float32 only
(a cast of a buffer would copy it), called with call_tir_inplace: the kernel writes the new keys and values into
the buffers the step was given and returns them, as the op allows (its buffers are graph inputs nothing else
reads, which the verifier holds). The cache's length goes to the kernel as a size. GET takes a result of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.attention_kernel import attention_func, buffered_attention_func
from pseudoformer.backends.tvm.fusion import OPAQUE  # fusion leaves our kernels whole
from pseudoformer.backends.tvm.lowerings.registry import R, lowers, relax
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering


CPU_ONLY = frozenset({Op.ATTENTION, Op.BUFFERED_ATTENTION})  # a GPU target decomposes these (build.prepare's accepts)


def _takes(n: Node) -> bool:
    if len(n.src) != 3 or n.attrs.get("q_heads", 0):
        return False
    q, k, v = (s.type for s in n.src)
    if any(t.rank != 4 or t.dtype not in (DType.float32, DType.float16) for t in (q, k, v)):
        return False
    (bq, hq, _, d), (bk, hk, sk, dk), (bv, hv, sv, dv) = q.shape, k.shape, v.shape
    static = all(isinstance(x, int) for x in (hq, hk, hv, d, dk, dv))
    return static and bq == bk == bv and hk == hv and hq % hk == 0 and d == dk and sk == sv


@lowers(Op.ATTENTION, when=_takes)
def _attention(lw: RelaxLowering, n: Node) -> Any:
    q, k, v = (_float32(lw, lw.tensor(s), s) for s in n.src)
    kernel, hq, dv = _kernel(lw, n, "attention", attention_func)
    b, _, sq, _ = lw.shape(q)
    y = R.call_tir(kernel, [q, k, v], relax.TensorType([b, hq, sq, dv], "float32"))
    return y if n.dtype is DType.float32 else R.astype(lw.emit(y), n.dtype.value)


def _kernel(lw: RelaxLowering, n: Node, name: str, make: Callable[..., Any]) -> tuple[Any, int, int]:
    """The kernel `make` builds for n's heads, sizes and attributes, added to the module once; and hq, d_v."""
    hq, d = int(n.src[0].shape[1]), int(n.src[0].shape[3])
    hk, dv = int(n.src[1].shape[1]), int(n.src[2].shape[3])
    a = n.attrs
    options = {"scale": float(a["scale"]), "causal": bool(a["causal"]), "window": int(a.get("window", 0)),
               "softcap": float(a.get("softcap", 0.0))}
    key = (name, hq, hk, d, dv, *options.values())
    if key not in lw.notes:
        func = make(hq, hk, d, dv, **options).with_attr("op_pattern", OPAQUE)
        lw.notes[key] = lw.bb.add_func(func, f"{name}_{hq}x{hk}x{d}")
    return lw.notes[key], hq, dv


def _float32(lw: RelaxLowering, x: Any, n: Node) -> Any:
    return x if n.dtype is DType.float32 else lw.emit(R.astype(x, "float32"))


def _takes_buffered(n: Node) -> bool:
    q, k, v, kb, vb = (s.type for s in n.src[:5])
    if any(t.rank != 4 or t.dtype is not DType.float32 for t in (q, k, v, kb, vb)):
        return False
    hq, hk, d, dv = q.shape[1], k.shape[1], q.shape[3], v.shape[3]
    return all(isinstance(x, int) for x in (hq, hk, d, dv)) and hq % hk == 0


@lowers(Op.BUFFERED_ATTENTION, when=_takes_buffered)
def _buffered_attention(lw: RelaxLowering, n: Node) -> Any:
    q, k, v, kb, vb = (lw.tensor(s) for s in n.src[:5])
    past = lw.size(n.src[5])
    kernel, hq, dv = _kernel(lw, n, "buffered_attention", buffered_attention_func)
    b, _, sq, _ = lw.shape(q)
    out = relax.TensorType([b, hq, sq, dv], "float32")
    # outputs: o (new), the key and value buffers (operands 3 and 4, written in place)
    return R.call_tir_inplace(kernel, [q, k, v, kb, vb, relax.prim_value(past)], [-1, 3, 4], [out, kb.ty, vb.ty])


@lowers(Op.GET)
def _get(lw: RelaxLowering, n: Node) -> Any:
    return relax.TupleGetItem(lw.tensor(n.src[0]), n.attrs["index"])
