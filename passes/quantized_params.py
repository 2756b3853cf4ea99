"""A weight matrix's quantized parameters as LazyTensors: quantized when a writer first loads one of them.

Quantizing every matrix of a model up front holds the model in fp32 and its quantized copy at once (and
the interpreter's stacked per-head projections besides). Lazily, the writer (backends/onnx/save.py)
loads the packed codes, then the scales, then the zero points of one matrix: the first load quantizes
it (quantize_weights.quantize), the others take the result, and once each has been loaded the result is
dropped, so memory holds one matrix's work at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pseudoformer.ir import Graph, Node, Op, interpreter
from pseudoformer.ir.lazy_tensor import LazyTensor
from pseudoformer.ir.ops.quantized import k_blocks
from pseudoformer.passes.quantize_weights import Quantized, quantize

if TYPE_CHECKING:
    from pseudoformer.passes.quantize import QuantizeOptions


def rows_key(weight: Node, flip: bool) -> tuple:
    """What identifies the matrix quantized from `weight` (transposed if `flip`) without its values: a
    parameter read through any number of 2-d transposes is one matrix whichever way it is read."""
    n = weight
    while n.op is Op.TRANSPOSE and list(n.attrs["perm"]) == [1, 0]:
        flip, n = not flip, n.src[0]
    return ("param", n.attrs["name"], flip) if n.op is Op.PARAM else ("node", id(weight), flip)


@dataclass(frozen=True)
class LazyQuantized:
    packed: LazyTensor
    scales: LazyTensor
    zero_points: LazyTensor | None


def lazy_quantized(weight: Node, flip: bool, weights: Mapping[str, np.ndarray], shape: tuple[int, int],
                   opts: QuantizeOptions) -> LazyQuantized:
    """The quantized parameters of `weight` (computed from `weights`), [N, K] after `flip`, as LazyTensors."""
    n, k = shape
    kb = k_blocks(k, opts.block_size)
    sub = Graph([], [("w", weight)], {"entry": "weights"})
    parts = ["packed", "scales"] + ([] if opts.symmetric else ["zero_points"])
    cache: dict[str, Quantized] = {}
    pending: set[str] = set()

    def part(name: str) -> np.ndarray:
        if "q" not in cache:
            w = np.asarray(interpreter.run(sub, {}, weights)["w"], dtype=np.float32)
            cache["q"] = quantize(w.T if flip else w, bits=opts.bits,  # a view: quantize copies a chunk at a time
                                  block_size=opts.block_size, symmetric=opts.symmetric, method=opts.method)
            pending.update(parts)
        value = getattr(cache["q"], name)
        pending.discard(name)
        if not pending:  # every part has been taken: let the matrix's work go
            cache.clear()
        return value

    per_byte = 8 // opts.bits
    packed = LazyTensor((n, kb, opts.block_size // per_byte), np.dtype(np.uint8), lambda: part("packed"))
    scales = LazyTensor((n, kb), np.dtype(np.float32), lambda: part("scales"))
    zero_points = None if opts.symmetric else LazyTensor((n, -(-kb // per_byte)), np.dtype(np.uint8),
                                                         lambda: part("zero_points"))
    return LazyQuantized(packed, scales, zero_points)
