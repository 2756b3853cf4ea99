"""torch (imported through the guard) and the torch dtype of each IR dtype, for lower.py and the lowerings."""

from __future__ import annotations

from pseudoformer.backends.torch.guard import require_torch
from pseudoformer.ir.types import DType

torch = require_torch()

TORCH_DTYPE = {DType.float32: torch.float32, DType.float16: torch.float16, DType.float64: torch.float64,
               DType.int64: torch.int64, DType.uint8: torch.uint8, DType.bool: torch.bool}
