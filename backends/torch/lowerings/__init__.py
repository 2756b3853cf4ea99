"""One torch lowering per IR op (registry.py); importing this package imports every module in it, and each
family module registers its lowerings."""

from pseudoformer.base.submodules import import_submodules

import_submodules(__name__, __path__)

from pseudoformer.backends.torch.lowerings.registry import LOWERINGS, accepts  # noqa: E402

__all__ = ["LOWERINGS", "accepts"]
