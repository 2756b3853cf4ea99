"""Deploying with the PyTorch backend: `pseudoformer.compile(..., backend="torch")` → a torch.nn.Module.

The module is a torch.fx GraphModule (backends/torch/): `module(**inputs)` returns the outputs by name, in the
ONNX backend's layout ([batch, positions, features]); its parameters are the model's, under our names
(backends/torch/names.py), so `state_dict()` is a checkpoint by our names, which `pseudoformer.weights`
and the training outputs (safetensors, `export_hf`) read and write. Importable without torch: a missing
torch, and every BackendError, is the UsageError that the API raises and the CLI prints (exit 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import BackendError, UsageError
from pseudoformer.model import Model

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions


def to_module(model: Model, options: CompileOptions | None = None, **fields: Any) -> Any:
    """`model` (graph and weights) compiled to a torch.nn.Module as `options` (or its fields: opt_level,
    dtype) say; -O2 by default."""
    from pseudoformer.backends.options import CompileOptions

    options = (options or CompileOptions(backend="torch", opt_level=2)).with_fields(fields)
    try:
        from pseudoformer.backends.torch.compile import to_torch

        return to_torch(model.graph, model.weights, options)
    except BackendError as e:
        raise UsageError(str(e)) from None


def our_weights(module: Any) -> dict[str, np.ndarray]:
    """A compiled module's parameters as numpy arrays under our names (state_dict's, names.py's spelling
    undone): what `pseudoformer.weights` and the HF writer take."""
    from pseudoformer.backends.torch.names import our_name

    return {our_name(k): v.detach().cpu().numpy() for k, v in module.state_dict().items()}


def load_ours(module: Any, weights: Mapping[str, np.ndarray]) -> None:
    """Set a compiled module's parameters from arrays under our names (a checkpoint of ours)."""
    import torch

    from pseudoformer.backends.torch.names import torch_name

    module.load_state_dict({torch_name(k): torch.from_numpy(np.asarray(v)) for k, v in weights.items()})
