"""One ONNX lowering per IR op; importing this package registers them all (registry.py)."""

from pseudoformer.backends.onnx.lowerings import (  # noqa: F401  (each module registers its lowerings)
    attention,
    elementwise,
    glu,
    movement,
    norms,
    quantized,
    reductions,
    rotary,
    sizes,
)
from pseudoformer.backends.onnx.lowerings.registry import LOWERINGS, accepts

__all__ = ["LOWERINGS", "accepts"]
