"""The IR's ops, each defined once in the registry (registry.py) by the module of its family.

Importing this package registers them all: leaves, elementwise ops, erf and GELU, matmul, data
movement, reductions, gather, scatter, run-time sizes, norms, attention, block-quantized weights,
tuples.
"""

from pseudoformer.ir.ops import (  # noqa: F401  (each module registers its ops)
    attention,
    elementwise,
    gather,
    gelu,
    leaves,
    matmul,
    movement,
    norms,
    quantized,
    reductions,
    scatter,
    sizes,
    tuples,
)
from pseudoformer.ir.ops.elementwise import RELATIONS
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    OPS,
    REQUIRED,
    Attr,
    EvalError,
    IRTypeError,
    NodeMaker,
    OpDef,
    attr_problem,
    infer_type,
    op_def,
)

__all__ = ["OPS", "RELATIONS", "REQUIRED", "Attr", "EvalError", "IRTypeError", "NodeMaker", "Op", "OpDef",
           "attr_problem", "infer_type", "op_def"]
