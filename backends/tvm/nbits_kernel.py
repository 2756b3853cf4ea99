"""One block-quantized product as a stand-alone TVM function, for benchmarks, tests of each CPU's code
path and the GPU script: the same TE computation (nbits.py) and schedule as inside a model.

`build(shape, target)` compiles y [M, N] = x [M, K] · Wᵀ for symbolic M; `random_operands` makes
weights in the layout the kernel reads (4 bits: Q4_0's nibble order, as build.py re-packs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.nbits import matmul_dequantized, matmul_nbits, split_nibbles
from pseudoformer.backends.tvm.schedule import schedule_passes
from pseudoformer.ir.ops.quantized import dequantize, k_blocks, pack

tvm = require_tvm()
from tvm import te, tirx  # noqa: E402


@dataclass(frozen=True)
class Shape:
    n: int  # outputs
    k: int  # inputs (a multiple of block_size: the model pads x otherwise)
    bits: int = 4
    block_size: int = 32
    zero_points: bool = False

    @property
    def weight_bytes(self) -> int:
        kb = k_blocks(self.k, self.block_size)
        zp = self.n * -(-kb * self.bits // 8) if self.zero_points else 0
        return self.n * kb * self.block_size * self.bits // 8 + self.n * kb * 4 + zp


def scheduled(shape: Shape, target: Any) -> Any:
    """The IRModule of main(x, packed, scales[, zero points], y), scheduled for `target` as in a model:
    our rule on a CPU, dlight's on a GPU (nbits.matmul_dequantized). Sizes are int64, as Relax's are."""
    kb = k_blocks(shape.k, shape.block_size)

    def i64(*dims: int) -> tuple[Any, ...]:
        return tuple(tirx.IntImm("int64", d) for d in dims)

    m = tirx.Var("m", "int64")
    x = te.placeholder((m, *i64(kb * shape.block_size)), "float32", "x")
    p = te.placeholder(i64(shape.n, kb, shape.block_size * shape.bits // 8), "uint8", "packed")
    s = te.placeholder(i64(shape.n, kb), "float32", "scales")
    z = te.placeholder(i64(shape.n, -(-kb * shape.bits // 8)), "uint8", "zero_points") if shape.zero_points else None
    kernel = matmul_nbits if target.kind.name == "llvm" else matmul_dequantized
    y = kernel(x, p, s, z, bits=shape.bits, block_size=shape.block_size, split=shape.bits == 4)
    func = te.create_prim_func([x, p, s, *([z] if z is not None else []), y])
    with target:
        return tvm.transform.Sequential(schedule_passes(target))(tvm.IRModule({"main": func}))


def build(shape: Shape, target: Any) -> Any:
    """The compiled function main(x, packed, scales[, zero points], y) for `target` (a tvm Target)."""
    return tvm.compile(scheduled(shape, target), target=target)


def random_operands(shape: Shape, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """(packed, scales[, zero points]) as the kernel reads them, and W [N, K] they stand for."""
    rng = np.random.default_rng(seed)
    kb = k_blocks(shape.k, shape.block_size)
    q = rng.integers(0, 1 << shape.bits, (shape.n, kb, shape.block_size), dtype=np.uint8)
    zp = rng.integers(0, 1 << shape.bits, (shape.n, kb), dtype=np.uint8) if shape.zero_points else None
    packed, zpk = pack(q, zp, shape.k, shape.bits)
    scales = rng.uniform(0.001, 0.02, (shape.n, kb)).astype(np.float32)
    w = dequantize(packed, scales, zpk, k=shape.k, bits=shape.bits, block_size=shape.block_size)
    ours = split_nibbles(packed) if shape.bits == 4 else packed
    return [ours, scales, *([zpk] if zpk is not None else [])], w


def assembly(lib: Any) -> str:
    """The kernel's machine code as LLVM prints it (to see which vector registers it uses)."""
    for m in [lib.mod, *lib.mod.imports]:
        if m.kind == "llvm":
            return str(m.inspect_source("asm"))
    return ""
