"""Generation (the paper's Algorithms 14 and 15) over a decoder with a compiler-derived key/value cache."""

from importlib import import_module as _import_module

# Imported on first use: the command line builds its `generate` parser from generation.cli, and
# `pseudoformer --version` must not wait for the generator (the frontend, the passes, numpy) to load.
_NAMES = {"BACKENDS": ".generator", "Generation": ".generator", "Generator": ".generator",
          "Sampling": ".sampling", "SamplingError": ".sampling"}

__all__ = ["BACKENDS", "Generation", "Generator", "Sampling", "SamplingError"]


def __getattr__(name: str) -> object:
    if name in _NAMES:
        return getattr(_import_module(_NAMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
