"""The IR's ops, each defined once in the registry (registry.py) by the module of its family.

Importing this package imports every module in it, and each family module registers its ops: a new
family is a new module here, with no list to add it to.
"""

from pseudoformer.base.submodules import import_submodules
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

import_submodules(__name__, __path__)

__all__ = ["OPS", "RELATIONS", "REQUIRED", "Attr", "EvalError", "IRTypeError", "NodeMaker", "Op", "OpDef",
           "attr_problem", "infer_type", "op_def"]
