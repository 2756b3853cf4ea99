"""pseudoformer: compile transformer architectures written as in Formal Algorithms for Transformers."""

from pseudoformer.version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> object:
    # The API is imported on first use, so `pseudoformer --version` stays instant.
    if name in ("compile", "CompiledModel"):
        from pseudoformer import deploy

        return getattr(deploy, name)
    if name in ("load", "check", "Model"):
        from pseudoformer import model as model_api

        return getattr(model_api, name)
    if name == "QuantizeOptions":
        from pseudoformer.passes.quantize import QuantizeOptions

        return QuantizeOptions
    if name in ("train", "TrainResult"):
        from pseudoformer.training import loop

        return getattr(loop, name)
    if name == "generate":
        from pseudoformer.generation.api import generate

        return generate
    raise AttributeError(f"module 'pseudoformer' has no attribute {name!r}")
