"""pseudoformer: compile transformer architectures written as in Formal Algorithms for Transformers.

The Python API (docs/api.md):

- ``load(path, weights=..., seed=...)`` -> a ``Model``: checked, elaborated, weights bound
  (``.weights`` by name, ``.graph``, ``.run(x=...)`` on the numpy reference interpreter);
- ``compile(path, backend="onnx"|"tvm", quantize="int4"|...)`` -> a ``CompiledModel`` that ``.save``\\ s
  and ``.run``\\ s;
- ``generate(path, prompt_ids, max_new_tokens=...)`` -> token ids, by the file's Algorithm 14 or 15;
- ``check(path)`` -> the names of the algorithms checked;
- ``train(path, data, ...)`` -> a ``TrainResult``: a loss algorithm or Algorithms 11-13 trained by gradient
  steps (SGD, AdamW) on a compiled training step (docs/training.md);
- ``QuantizeOptions``: how ``quantize`` quantizes, where a string ("int4", "int8") is not enough.
"""

from pseudoformer.base.lazy_names import lazy_names
from pseudoformer.version import __version__

# Each name of the API and the module it lives in. They are imported on first use, so that
# `import pseudoformer` (and `pseudoformer --version`) reads neither numpy nor onnx.
_API = {
    "load": "pseudoformer.model",
    "check": "pseudoformer.model",
    "Model": "pseudoformer.model",
    "compile": "pseudoformer.deploy",
    "CompiledModel": "pseudoformer.deploy",
    "generate": "pseudoformer.generation.api",
    "QuantizeOptions": "pseudoformer.passes.quantize",
    "train": "pseudoformer.training.loop",
    "TrainResult": "pseudoformer.training.loop",
}

__all__ = ["__version__", *_API]
__getattr__, __dir__ = lazy_names(__name__, _API, globals())
